"""A probe's few DDP steps re-centre a pooled calibration's DDP overhead terms (issue #39).

The all-reduce sweeps of a probe re-centre the link classes (``pool.recentre``); they cannot see the
allocation's compute and host inside a DDP step: on four fresh 2 x H200 allocations GPT-2 and a
LLaMA-style decoder over NVLink came out 9 to 24% too fast on three and 0 to 15% too slow on the fourth,
while the probe's NVLink sweeps agreed with the pool within 2.5%. The probe plan now also runs a few DDP
steps of each model at one bucket cap; this module scales the pooled overhead terms of each (overhead
class, world size) those runs touched by one factor, the **overhead level**, chosen so that the probe's
runs are predicted without bias (mean ln(measured / predicted) = 0).

One factor, not a refit: two models at one cap cannot determine six terms (the pooled fit needed about
thirty runs per class), but they do determine how much slower or faster this allocation's step runs
than the pool's at the same links. The factor multiplies the host times (``bucket_launch_s``,
``bucket_cpu_s``) and the in-step slowdowns (``compute_slowdown``, ``allreduce_stretch``; these are
factors >= 1, so they stop at 1: an allocation faster than the pool at no overhead is said so, see
``OverheadLevel.clipped``).
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ddpsim.calibration.file import calibration_from_dict
from ddpsim.fitting.calibrate import Measurements, is_plain, timing_instrumented
from ddpsim.fitting.measured_scenarios import run_nodes
from ddpsim.fitting.overheads import FITTED_TERMS
from ddpsim.fitting.validate import predict_run
from ddpsim.scenario.link_kinds import INTER_NODE_LINK_CLASS

TIME_TERMS = ("bucket_launch_s", "bucket_cpu_s")  # host time per bucket: scaled as they are
FACTOR_TERMS = ("compute_slowdown", "allreduce_stretch")  # factors >= 1: scaled, floored at 1
# the level's search range: a factor of 3 either way is past every allocation offset measured (18% max)
LEVEL_RANGE = (1.0 / 3.0, 3.0)
BISECTIONS = 12  # ln(9) / 2**12: the level to 0.05%


@dataclass(frozen=True)
class OverheadLevel:
    """What the probe's DDP runs of one (overhead class, world size) said."""

    overhead_class: str
    world_size: int
    level: float  # the factor applied to the pooled terms
    runs: int
    log_error_before: float  # mean ln(measured / predicted) with the pooled terms
    log_error_after: float  # the same at ``level`` (0 unless clipped)
    log_error_sd_after: float | None  # spread of the probe's runs around it (None: one run)
    clipped: bool  # the level stopped at its range or every term at its floor: the bias is not removed


def overhead_class_of(run: dict[str, Any], overheads: dict[str, Any]) -> str:
    """The overheads entry a run's prediction uses (``apply_calibration``): the network's across nodes
    when the calibration has one, else the run's link class."""
    if run_nodes(run) > 1 and INTER_NODE_LINK_CLASS in overheads:
        return INTER_NODE_LINK_CLASS
    return str(run["transport"])


def scaled_terms(entry: dict[str, Any], level: float) -> dict[str, Any]:
    """``entry`` (one overheads entry, no sub-entries) with its host times and slowdowns times ``level``."""
    out = copy.deepcopy(entry)
    for name in TIME_TERMS:
        if isinstance(out.get(name), int | float):
            out[name] = float(out[name]) * level
    for name in FACTOR_TERMS:
        if isinstance(out.get(name), int | float):
            out[name] = min(max(float(out[name]) * level, 1.0), FITTED_TERMS[name][1])
    return out


def with_level(data: dict[str, Any], overhead_class: str, world_size: int, level: float,
               pooled: dict[str, Any] | None = None) -> dict[str, Any]:
    """``data`` with the overheads of ``overhead_class`` at ``world_size`` set to ``pooled``'s times
    ``level`` (``pooled``: the calibration the level is relative to, default ``data``)."""
    source = pooled if pooled is not None else data
    entry = source["overheads"][overhead_class]
    base = (entry.get("by_world_size") or {}).get(str(world_size))
    if base is None:  # one entry for every world size: the probed world size gets its own
        base = {k: v for k, v in entry.items() if k != "by_world_size"}
    out = copy.deepcopy(data)
    target = out["overheads"][overhead_class]
    target.setdefault("by_world_size", {})[str(world_size)] = scaled_terms(base, level)
    return out


def probe_runs(probe: Measurements) -> list[dict[str, Any]]:
    """The probe's runs that re-centre overheads: plain DDP runs (no option, no timing hook)."""
    return [r for r in probe.runs if is_plain(r) and not timing_instrumented(r)]


def _mean_log_error(probe: Measurements, runs: Sequence[dict[str, Any]], data: dict[str, Any]) -> list[float]:
    calibration = calibration_from_dict(data, "<probe level>")
    return [math.log(float(r["step_s_median"]) / predict_run(probe, r, calibration).predicted_s) for r in runs]


def fit_level(probe: Measurements, runs: Sequence[dict[str, Any]], data: dict[str, Any], overhead_class: str,
              world_size: int) -> tuple[dict[str, Any], OverheadLevel]:
    """The level that predicts ``runs`` without bias (bisection on ln(level): the predicted step grows
    with every scaled term), and ``data`` re-centred on it."""

    def errors(level: float) -> list[float]:
        return _mean_log_error(probe, runs, with_level(data, overhead_class, world_size, level))

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    before = errors(1.0)
    low, high = math.log(LEVEL_RANGE[0]), math.log(LEVEL_RANGE[1])
    at_low, at_high = mean(errors(math.exp(low))), mean(errors(math.exp(high)))
    if at_low <= 0.0:  # runs faster than the pool predicts even at the lowest level
        best, after = low, errors(math.exp(low))
    elif at_high >= 0.0:
        best, after = high, errors(math.exp(high))
    else:
        for _ in range(BISECTIONS):
            middle = 0.5 * (low + high)
            if mean(errors(math.exp(middle))) > 0.0:  # measured slower than predicted: raise the level
                low = middle
            else:
                high = middle
        best = 0.5 * (low + high)
        after = errors(math.exp(best))
    level = math.exp(best)
    sd = (math.sqrt(sum((e - mean(after)) ** 2 for e in after) / (len(after) - 1)) if len(after) > 1 else None)
    clipped = abs(mean(after)) > 0.005  # half a percent: the bisection's own tolerance is far below
    result = OverheadLevel(overhead_class, world_size, level, len(runs), mean(before), mean(after), sd, clipped)
    return with_level(data, overhead_class, world_size, level), result


def recentre_overheads(data: dict[str, Any], probe: Measurements,
                       log: Callable[[str], None] | None = None) -> tuple[dict[str, Any], list[OverheadLevel]]:
    """``data`` (a calibration, its links already re-centred on the probe's sweeps) with the overheads
    of every (overhead class, world size) the probe ran DDP steps of scaled to the probe's level.

    The allocation spread stays the link probe's: how far such a level carries to other caps and models
    is measured on held-out runs (docs/fresh-allocation.md), not known from the probe."""
    overheads = data.get("overheads") or {}
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for run in probe_runs(probe):
        cls = overhead_class_of(run, overheads)
        if cls in overheads:
            groups[(cls, int(run["world_size"]))].append(run)
    out = data
    levels: list[OverheadLevel] = []
    for (cls, world), runs in sorted(groups.items()):
        out, level = fit_level(probe, runs, out, cls, world)
        levels.append(level)
        if log is not None:
            log(f"overheads {cls} at {world} GPUs: level {level.level:.3f} from {level.runs} probe runs "
                f"(mean error before {100 * math.expm1(-level.log_error_before):+.1f}%"
                + (", clipped" if level.clipped else "") + ")")
    return out, levels


def levels_record(levels: Sequence[OverheadLevel]) -> list[dict[str, Any]]:
    """The levels as the calibration file records them (``probed_from.overheads``)."""
    return [asdict(level) for level in levels]
