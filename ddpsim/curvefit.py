"""Fit NCCL-style all-reduce cost curves to measured times.

For one link class and protocol p, a ring all-reduce of S bytes on n GPUs costs
    T = base_p + steps(n) * hop_p + S * 2(n-1)/n / busbw_p,      steps(n) = 2(n-1),
which is linear in (base_p, hop_p, 1/busbw_p). NCCL runs whichever protocol is fastest, so the
measured curve is the lower envelope of three such lines. The fit alternates: assign each sample
to the protocol predicting the lowest time, then refit each protocol by least squares on relative
error (so 4 KiB and 1 GiB weigh the same).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PROTOCOL_NAMES = ("ll", "ll128", "simple")
# where NCCL usually switches protocol on one node; only the starting point of the fit
_INITIAL_SPLIT_BYTES = (64 * 1024, 4 * 1024 * 1024)


@dataclass(frozen=True)
class ProtocolFit:
    base_s: float
    hop_s: float
    busbw_Bps: float

    def time_s(self, n_bytes: float, world_size: int) -> float:
        steps = 2 * (world_size - 1)
        return self.base_s + steps * self.hop_s + n_bytes * steps / world_size / self.busbw_Bps


def envelope_s(fits: dict[str, ProtocolFit], n_bytes: float, world_size: int) -> tuple[float, str]:
    best = min(fits, key=lambda p: fits[p].time_s(n_bytes, world_size))
    return fits[best].time_s(n_bytes, world_size), best


def _solve(rows: np.ndarray, measured: np.ndarray, vary_hops: bool) -> np.ndarray:
    """Non-negative least squares on relative error, by dropping negative coefficients and refitting."""
    active = [0, 1, 2] if vary_hops else [0, 2]
    weights = 1.0 / measured
    while True:
        a = rows[:, active] * weights[:, None]
        b = measured * weights
        coef, *_ = np.linalg.lstsq(a, b, rcond=None)
        if (coef >= 0).all() or len(active) == 1:
            full = np.zeros(3)
            full[active] = np.maximum(coef, 0.0)
            return full
        active = [col for col, value in zip(active, coef, strict=True) if value > 0 or col == 2]
        if len(active) == len(coef):
            full = np.zeros(3)
            full[active] = np.maximum(coef, 0.0)
            return full


def fit_protocols(
    sizes_bytes: Sequence[float], world_sizes: Sequence[int], times_s: Sequence[float], iterations: int = 20
) -> dict[str, ProtocolFit]:
    """Fit base, per-hop latency and bus bandwidth of LL, LL128 and Simple to one link class's samples."""
    sizes = np.asarray(sizes_bytes, dtype=float)
    worlds = np.asarray(world_sizes, dtype=float)
    times = np.asarray(times_s, dtype=float)
    if len(sizes) < 3:
        raise ValueError("need at least three measured sizes to fit")
    steps = 2 * (worlds - 1)
    rows = np.stack([np.ones_like(sizes), steps, sizes * steps / worlds], axis=1)
    vary_hops = len(set(world_sizes)) > 1
    assign = np.digitize(sizes, _INITIAL_SPLIT_BYTES)
    fits: dict[str, ProtocolFit] = {}
    for _ in range(iterations):
        new_fits = {}
        for index, name in enumerate(PROTOCOL_NAMES):
            chosen = assign == index
            if chosen.sum() < 2:
                if name in fits:
                    new_fits[name] = fits[name]
                continue
            coef = _solve(rows[chosen], times[chosen], vary_hops)
            inverse_bw = max(coef[2], 1e-15)
            new_fits[name] = ProtocolFit(base_s=float(coef[0]), hop_s=float(coef[1]), busbw_Bps=float(1.0 / inverse_bw))
        fits = new_fits
        predicted = np.array([[fits[p].time_s(s, int(w)) if p in fits else np.inf for p in PROTOCOL_NAMES]
                              for s, w in zip(sizes, worlds, strict=True)])
        new_assign = predicted.argmin(axis=1)
        if (new_assign == assign).all():
            break
        assign = new_assign
    return fits
