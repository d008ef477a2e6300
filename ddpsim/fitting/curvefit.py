"""Fit NCCL-style all-reduce cost curves to measured times.

For one link class and protocol p, a ring all-reduce of S bytes on n GPUs costs
    T_p = base_p + steps(n) * hop_p + S * 2(n-1)/n / busbw_p,      steps(n) = 2(n-1),
(a reduce-scatter or an all-gather is one pass of that ring, not two: steps(n) = n-1, S (n-1)/n bytes
through each link, ``passes=1``),
and NCCL runs whichever protocol is fastest, so the kernel time is the lower envelope min_p T_p.
A call timed from the host side never takes less than a fixed floor (PyTorch's and NCCL's launch
path, a few tens of microseconds), so the measured curve is max(floor, min_p T_p). The fit
minimises the squared log error of that curve (4 KiB and 1 GiB weigh the same) over the ten
parameters, in log space so every parameter stays positive, with scipy's Nelder-Mead
started from per-size-range linear fits and restarted from its own best until it stops improving.
The three curves are named LL, LL128, Simple in order of bandwidth, as NCCL's protocols are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ddpsim.collectives.curves import ProtocolFit
from ddpsim.errors import ScenarioError

PROTOCOL_NAMES = ("ll", "ll128", "simple")
# size ranges where NCCL usually runs each protocol: only the starting point of the fit
_INITIAL_SPLIT_BYTES = (64 * 1024, 4 * 1024 * 1024)
UNBOUNDED_BPS = 1e15  # a bandwidth the rows do not bound (finite, so that JSON can hold it)
_FLOOR_S = 1e-9  # smallest latency the fit may use (log space needs a positive number)
# bounds of (base s, hop s, s per byte): 1 ns .. 1 s latencies, 100 kB/s .. 100 TB/s bandwidths
_LOG_LOW = np.log(np.array([1e-9, 1e-9, 1e-14]))
_LOG_HIGH = np.log(np.array([1.0, 1.0, 1e-5]))


CALIBRATE_EXTRA = "pip install 'ddpsim[calibrate]'"


def scipy_optimize() -> Any:
    """scipy.optimize, which only fitting needs: it is an extra (139 MB of an install that runs,
    sweeps and tunes without it), so its absence is one line naming the extra, not a traceback."""
    try:
        from scipy import optimize
    except ImportError:
        raise ScenarioError(f"fitting measurements needs scipy, which is not installed: {CALIBRATE_EXTRA}") from None
    return optimize


def _nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, step: float, iterations: int) -> np.ndarray:
    minimize = scipy_optimize().minimize

    simplex = np.vstack([x0] + [x0 + step * np.eye(len(x0))[i] for i in range(len(x0))])
    options = {"maxiter": iterations, "initial_simplex": simplex, "xatol": 1e-8, "fatol": 1e-12}
    return np.asarray(minimize(f, x0, method="Nelder-Mead", options=options).x)


def _linear_start(sizes: np.ndarray, worlds: np.ndarray, times: np.ndarray, chosen: np.ndarray,
                  passes: int) -> tuple[float, float]:
    """(base_s, busbw_Bps) of a least-squares line through the chosen samples (positive by clipping)."""
    x = sizes[chosen] * passes * (worlds[chosen] - 1) / worlds[chosen]
    y = times[chosen]
    if chosen.sum() < 2 or np.ptp(x) == 0:
        return float(max(np.min(times), _FLOOR_S)), float(np.max(sizes / times) * 2)
    slope, intercept = np.polyfit(x, y, 1)
    busbw = 1.0 / slope if slope > 0 else float(np.max(x / y)) * 4
    return float(max(intercept, _FLOOR_S)), float(busbw)


def _starts(sizes: np.ndarray, worlds: np.ndarray, times: np.ndarray, steps: np.ndarray, passes: int) -> list[np.ndarray]:
    """Starting points: lines through NCCL's usual protocol ranges, and a floor-plus-large-sizes line."""
    hop_scale = max(float(steps.max()), 1.0)
    band = np.digitize(sizes, _INITIAL_SPLIT_BYTES)
    by_band = []
    for index in range(3):
        base, busbw = _linear_start(sizes, worlds, times, band == index, passes)
        by_band += [np.log(base * 0.8), np.log(max(base * 0.2 / hop_scale, _FLOOR_S)), np.log(1.0 / busbw)]
    by_band.append(np.log(np.min(times) * 0.9))
    largest = sizes >= np.sort(sizes)[-min(len(sizes), 8)]
    base, busbw = _linear_start(sizes, worlds, times, largest, passes)
    floor = float(np.median(times[sizes <= np.median(sizes)]))
    floor_first = []
    for base_scale, bw_scale in ((0.25, 0.5), (0.5, 0.9), (1.0, 1.0)):
        protocol_base = max(base * base_scale, _FLOOR_S)
        floor_first += [np.log(protocol_base), np.log(max(protocol_base * 0.1 / hop_scale, _FLOOR_S)),
                        np.log(1.0 / (busbw * bw_scale))]
    floor_first.append(np.log(floor))
    return [np.array(by_band), np.array(floor_first)]


def fit_protocols(
    sizes_bytes: Sequence[float],
    world_sizes: Sequence[int],
    times_s: Sequence[float],
    iterations: int = 3000,
    with_floor: bool = False,
    passes: int = 2,
) -> dict[str, ProtocolFit]:
    """Fit base, per-hop latency and bus bandwidth of LL, LL128 and Simple to one link class's samples.

    With ``with_floor`` the result also has a "floor" entry whose ``base_s`` is the fitted floor.
    ``passes``: 2 for all-reduce samples, 1 for reduce-scatter or all-gather samples.
    """
    sizes = np.asarray(sizes_bytes, dtype=float)
    worlds = np.asarray(world_sizes, dtype=float)
    times = np.asarray(times_s, dtype=float)
    if len(sizes) < 3:
        raise ValueError("need at least three measured sizes to fit")
    steps = passes * (worlds - 1)
    volume = sizes * steps / worlds
    log_times = np.log(times)
    vary_hops = len(set(world_sizes)) > 1

    def unpack(x: np.ndarray) -> tuple[np.ndarray, float]:
        # rows: protocols; columns: base, hop, 1/busbw; clipped to physical ranges so that a
        # protocol the data never selects drifts to "never chosen", not to overflow
        params = np.exp(np.clip(x[:9].reshape(3, 3), _LOG_LOW, _LOG_HIGH))
        if not vary_hops:
            params[:, 1] = 0.0  # one world size cannot tell hop latency from base latency
        return params, float(np.exp(min(x[9], 0.0))) if with_floor else 0.0

    def loss(x: np.ndarray) -> float:
        params, floor = unpack(x)
        predicted = params[:, 0:1] + params[:, 1:2] * steps + params[:, 2:3] * volume
        curve = np.maximum(predicted.min(axis=0), floor)
        return float(np.sum((np.log(curve) - log_times) ** 2))

    finishes = []
    for start in _starts(sizes, worlds, times, steps, passes):
        point, point_loss = start, loss(start)
        for _ in range(8):
            candidate = _nelder_mead(loss, point, step=0.7, iterations=iterations)
            candidate_loss = loss(candidate)
            if candidate_loss >= point_loss * (1 - 1e-9):
                break
            point, point_loss = candidate, candidate_loss
        finishes.append((point_loss, point))
    best = min(finishes, key=lambda pair: pair[0])[1]
    params, floor = unpack(best)
    # The envelope does not say which curve is which protocol; NCCL's protocols are ordered by
    # bandwidth (LL moves 8 bytes per 16, LL128 120 per 128, Simple all of them), so the curves are
    # named in that order. Otherwise a forced Tree, which NCCL runs with Simple at large sizes, could
    # be priced on a curve fitted to 4 KiB calls (0.3 GB/s where the network gave 5).
    order = np.argsort(params[:, 2])[::-1]  # seconds per byte, largest first: LL, LL128, Simple
    fits = {
        name: ProtocolFit(base_s=float(params[i, 0]), hop_s=float(params[i, 1]), busbw_Bps=float(1.0 / params[i, 2]),
                          passes=passes)
        for name, i in zip(PROTOCOL_NAMES, order, strict=True)
    }
    if with_floor:
        fits["floor"] = ProtocolFit(base_s=floor, hop_s=0.0, busbw_Bps=float("inf"), passes=passes)
    return fits


def fit_nonnegative(columns: Sequence[np.ndarray], fixed_s: np.ndarray, times_s: np.ndarray) -> np.ndarray:
    """Coefficients x >= 0 of times ~ fixed + sum_k x_k * column_k, least squares of the relative
    error (each row divided by its measured time, so 4 KiB and 1 GiB weigh the same, as the
    envelope fit's log error does). Linear in x, so scipy's NNLS solves it exactly: no start, no
    restarts. Used where NCCL's log names each row's protocol, so each curve is fitted alone."""
    nnls = scipy_optimize().nnls

    times = np.asarray(times_s, dtype=float)
    matrix = np.column_stack([np.asarray(c, dtype=float) / times for c in columns])
    target = (times - np.asarray(fixed_s, dtype=float)) / times
    solution, _residual = nnls(matrix, target)
    return np.asarray(solution)


def fit_protocol_rows(sizes_bytes: Sequence[float], world_sizes: Sequence[int],
                      times_s: Sequence[float]) -> ProtocolFit:
    """One protocol's ring curve T = base + 2(n-1) hop + S 2(n-1)/n / busbw from the rows NCCL's log
    says ran that protocol. Hop latency needs two world sizes to be told from the base (one world
    size: hop 0, the base holds it all). Rows that never leave the latency leave the bandwidth
    unbounded: reported as ``UNBOUNDED_BPS``."""
    sizes = np.asarray(sizes_bytes, dtype=float)
    worlds = np.asarray(world_sizes, dtype=float)
    times = np.asarray(times_s, dtype=float)
    steps = 2 * (worlds - 1)
    columns = [np.ones_like(sizes), steps, sizes * steps / worlds]
    vary_hops = len(set(world_sizes)) > 1
    if not vary_hops:
        columns.pop(1)
    x = fit_nonnegative(columns, np.zeros_like(times), times)
    base, hop, per_byte = (x[0], x[1], x[2]) if vary_hops else (x[0], 0.0, x[1])
    return ProtocolFit(base_s=float(base), hop_s=float(hop), busbw_Bps=float(1.0 / per_byte) if per_byte > 0 else UNBOUNDED_BPS)
