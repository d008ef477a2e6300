"""Reduce-scatter and all-gather sweeps (nccl-tests' reduce_scatter_perf, all_gather_perf) fitted as their own curves.

Sharded data parallel (``ddpsim/sharded``) runs these two, not all-reduces. A ring reduce-scatter or
all-gather of an S-byte buffer on n GPUs is n-1 steps of S/n bytes, one pass of the all-reduce's ring:
    T_p = base_p + (n-1) hop_p + S (n-1)/n / busbw_p,
curvefit's curve with ``passes=1``. Read as all-reduces (2(n-1) steps, 2(n-1)/n of S per link) the same
times would give twice the bus bandwidth the links carried.

The file's ``collectives`` section holds one entry per link class, collective and measured shape
(``"1x4"``: nodes x GPUs per node), fitted on that shape's rows alone: one world size cannot tell the hop
latency from the base, so the base holds both, as in the all-reduce fit of one world size.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from ddpsim.calibration.file import SHARDED_COLLECTIVES
from ddpsim.collectives.curves import envelope_s
from ddpsim.errors import ScenarioError
from ddpsim.fitting.curvefit import fit_protocols
from ddpsim.fitting.fit import MIN_BANDWIDTH_SPAN, MIN_FIT_BYTES, shape_key
from ddpsim.fitting.nccl_tests import NcclTestsSweep
from ddpsim.sharded.collectives import measured_price


def curve_time_s(entry: dict[str, Any], nbytes: float, world_size: int) -> float:
    """Seconds of one reduce-scatter or all-gather of an ``nbytes`` (unsharded) buffer on a fitted entry's curve."""
    return measured_price(entry, nbytes, world_size).seconds


def fit_sharded_collectives(sweeps: Sequence[NcclTestsSweep]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{link_class: {collective: {shape: entry}}}`` from reduce-scatter and all-gather sweeps."""
    groups: dict[tuple[str, str, str], list[NcclTestsSweep]] = defaultdict(list)
    for sweep in sweeps:
        if sweep.collective not in SHARDED_COLLECTIVES:
            raise ScenarioError(f"{sweep.collective}_perf output is not a reduce-scatter or all-gather sweep",
                                file=sweep.source, field="collective")
        groups[(sweep.link_class, sweep.collective, shape_key(sweep.nodes, sweep.world_size))].append(sweep)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (link_class, collective, shape), group in sorted(groups.items()):
        out.setdefault(link_class, {}).setdefault(collective, {})[shape] = _fit_group(group)
    return out


def _fit_group(sweeps: Sequence[NcclTestsSweep]) -> dict[str, Any]:
    kinds = {(s.data_type, s.redop) for s in sweeps}
    if len(kinds) > 1:
        # one curve per element type: a half reduce-scatter is not a float one
        raise ScenarioError(f"{sweeps[0].collective} sweeps of one link class and shape in {len(kinds)} data types "
                            f"({', '.join(sorted(t for t, _ in kinds))}): give one", file=sweeps[-1].source, field="type")
    rows = [(size, time_s, s.world_size) for s in sweeps for size, time_s in zip(s.sizes_bytes, s.times_s, strict=True)
            if size >= MIN_FIT_BYTES]
    if len({size for size, _, _ in rows}) < 3:
        raise ScenarioError(f"fewer than three {sweeps[0].collective} sizes of {MIN_FIT_BYTES} bytes or more to fit",
                            file=sweeps[0].source, field="size")
    for sweep in sweeps:
        used = [(b, t) for b, t in zip(sweep.sizes_bytes, sweep.times_s, strict=True) if b >= MIN_FIT_BYTES]
        smallest, largest = min(used), max(used)
        if largest[1] < MIN_BANDWIDTH_SPAN * smallest[1]:
            raise ScenarioError(f"the sweep stops at {largest[0]} bytes, still on its latency floor "
                                f"({largest[1] * 1e6:.1f} us vs {smallest[1] * 1e6:.1f} us at {smallest[0]} bytes): "
                                "no bandwidth can be fitted (a truncated run?)", file=sweep.source, field="size")
    sizes, times, worlds = [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
    fits = fit_protocols(sizes, worlds, times, with_floor=True, passes=1)
    floor_s = fits.pop("floor").base_s
    chosen = {envelope_s(fits, size, world)[1] for size, world in zip(sizes, worlds, strict=True)}
    errors = [abs(envelope_s(fits, size, world, floor_s)[0] / t - 1) * 100
              for size, t, world in zip(sizes, times, worlds, strict=True)]
    return {
        "bandwidth_Bps": max(fits[p].busbw_Bps for p in chosen),
        "call_floor_s": floor_s,
        "protocol_fits": {
            p: {"base_latency_s": f.base_s, "hop_latency_s": f.hop_s, "bus_bandwidth_Bps": f.busbw_Bps,
                "selected": p in chosen}
            for p, f in fits.items()
        },
        "curve": "base + (n-1) hop + S (n-1)/n / bus bandwidth, S the whole (unsharded) buffer; lower envelope "
                 "of three curves, floored",
        "data_type": sweeps[0].data_type,
        "samples": len(rows),
        "sources": sorted({os.path.basename(s.source) for s in sweeps}),
        "fit_mean_error_pct": sum(errors) / len(errors),
        "fit_max_error_pct": max(errors),
    }
