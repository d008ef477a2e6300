"""The all-reduce curve fit recovers known parameters from a synthetic lower envelope."""

import pytest

from ddpsim.collectives.curves import ProtocolFit, envelope_s
from ddpsim.fitting.curvefit import fit_protocols


def test_recovers_three_protocol_envelope_exactly():
    true = {
        "ll": ProtocolFit(10e-6, 0.6e-6, 90e9),
        "ll128": ProtocolFit(14e-6, 1.9e-6, 220e9),
        "simple": ProtocolFit(25e-6, 3.4e-6, 350e9),
    }
    sizes, worlds, times = [], [], []
    for world in (2, 4):
        for k in range(12, 31):
            sizes.append(2**k)
            worlds.append(world)
            times.append(envelope_s(true, 2**k, world)[0])
    fits = fit_protocols(sizes, worlds, times)
    for name, fit in true.items():
        assert fits[name].busbw_Bps == pytest.approx(fit.busbw_Bps, rel=1e-6)
        assert fits[name].base_s == pytest.approx(fit.base_s, rel=1e-6)
        assert fits[name].hop_s == pytest.approx(fit.hop_s, rel=1e-6)


def test_single_line_is_fitted_from_one_world_size():
    true = ProtocolFit(20e-6, 0.0, 28e9)
    sizes = [2**k for k in range(12, 31)]
    fits = fit_protocols(sizes, [2] * len(sizes), [true.time_s(s, 2) for s in sizes])
    for size in sizes:
        assert envelope_s(fits, size, 2)[0] == pytest.approx(true.time_s(size, 2), rel=1e-6)
