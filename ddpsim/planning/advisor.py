"""The bucket_cap_mb advisor: simulate a list of caps, recommend the fastest, and say why.

``prepare()`` resolves the workload, compute profile and network once; only the buckets depend on the
cap, so each candidate rebuilds just the bucket layout. Caps that give the same layout give the same
step, so each distinct layout is simulated once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ddpsim.ddp.buckets import bucket_layout
from ddpsim.planning.option_errors import OPTION_ERRORS
from ddpsim.planning.option_errors import SOURCE as OPTION_ERRORS_SOURCE
from ddpsim.planning.ties import MIN_GAIN_REL, pick_simplest
from ddpsim.results import Result
from ddpsim.scenario.schema import DEFAULT_BUCKET_CAP_MB, DDPSpec, Scenario
from ddpsim.units import format_bytes, format_time

# Log-spaced over what people actually pass (0.5 MiB .. 512 MiB), plus PyTorch's 25 passed explicitly.
DEFAULT_CANDIDATES_MB: tuple[float, ...] = (0.5, 1, 2, 4, 8, 16, 25, 32, 64, 128, 256, 512)
_WORTH_IT = 0.005  # an alternative "helps" only if it takes at least 0.5% off the step

_HOOK_PASTE = {
    "bf16": "model.register_comm_hook(None, torch.distributed.algorithms.ddp_comm_hooks.default_hooks.bf16_compress_hook)",
    "fp16": "model.register_comm_hook(None, torch.distributed.algorithms.ddp_comm_hooks.default_hooks.fp16_compress_hook)",
}


@dataclass(frozen=True)
class CapPoint:
    """One simulated cap (``None``: PyTorch's default, 25 MiB with a 1 MiB first bucket)."""

    bucket_cap_mb: float | None
    step_time_s: float
    exposed_comm_s: float
    n_buckets: int


@dataclass(frozen=True)
class Alternative:
    """Another DDP setting evaluated at the recommended cap."""

    setting: str
    step_time_s: float
    helps: bool
    note: str
    paste: str
    # the measured error of ddpsim's predicted effect of this option (RMS of predicted - measured step
    # ratio over the options campaign, ddpsim/planning/option_errors.py); None: never measured
    measured_error: float | None = None
    confidence: str = ""


@dataclass
class Recommendation:
    recommended_bucket_cap_mb: float | None
    predicted_step_time_s: float
    default_step_time_s: float
    curve: list[CapPoint]
    alternatives: list[Alternative]
    reason: str
    paste: str
    best: Result = field(repr=False)
    default: Result = field(repr=False)

    @property
    def speedup(self) -> float:
        """Default step time / recommended step time (1.0: no gain)."""
        return self.default_step_time_s / self.predicted_step_time_s

    def to_dict(self) -> dict[str, Any]:
        """The ``tune-buckets --json`` contract."""
        return {
            "recommended_bucket_cap_mb": self.recommended_bucket_cap_mb,
            "predicted_step_time_s": self.predicted_step_time_s,
            "default_step_time_s": self.default_step_time_s,
            "speedup_vs_default": self.speedup,
            "curve": [dataclasses.asdict(p) for p in self.curve],
            "alternatives": [dataclasses.asdict(a) for a in self.alternatives],
            "reason": self.reason,
            "paste": self.paste,
        }


class _Evaluator:
    """Simulates DDP variants of one prepared scenario, each distinct bucket layout once."""

    def __init__(self, scenario: Scenario) -> None:
        from ddpsim.simulation import prepare

        self.prepared = prepare(scenario)
        self.base = self.prepared.scenario  # after calibration, which prepare() applied
        self._cache: dict[Any, Result] = {}

    def run(self, ddp: DDPSpec) -> Result:
        from ddpsim.simulation import simulate

        prep = self.prepared
        buckets = tuple(bucket_layout(prep.workload.params, prep.compute.ready_order, ddp))
        layout = tuple((b.param_indices, b.wire_bytes) for b in buckets)
        # everything but the cap can change costs beyond the layout (copies, casts), so it is in the key
        key = (layout, dataclasses.replace(ddp, bucket_cap_mb=None))
        if key not in self._cache:
            scenario = dataclasses.replace(self.base, ddp=ddp)
            self._cache[key] = simulate(dataclasses.replace(prep, scenario=scenario, buckets=buckets))
        return self._cache[key]

    def at_cap(self, cap: float | None, **changes: Any) -> Result:
        return self.run(dataclasses.replace(self.base.ddp, bucket_cap_mb=cap, **changes))


def _round2(x: float) -> float:
    """Two significant digits: a cap people can type, and distinct enough from its neighbours."""
    return float(f"{x:.2g}")


def _refine(caps: Sequence[float], best: float) -> list[float]:
    """Geometric points between the best cap and its neighbours in the coarse list."""
    ordered = sorted(caps)
    i = ordered.index(best)
    low = ordered[i - 1] if i > 0 else best / 2
    high = ordered[i + 1] if i + 1 < len(ordered) else best * 2
    new = {_round2(best * (edge / best) ** f) for edge in (low, high) for f in (1 / 3, 2 / 3)}
    return sorted(c for c in new if c > 0 and c not in ordered)


def pick_cap(step_time_by_cap: dict[float | None, float], min_gain_rel: float = MIN_GAIN_REL) -> float | None:
    """The cap to recommend: among caps predicted within ``min_gain_rel`` of the fastest, the default
    (None), else the one nearest PyTorch's 25 MiB (the least surprising change)."""
    def distance(cap: float | None) -> float:
        return -1.0 if cap is None else abs(math.log(cap / DEFAULT_BUCKET_CAP_MB))

    return pick_simplest(step_time_by_cap, distance, min_gain_rel)


def _pick(points: Sequence[CapPoint]) -> CapPoint:
    chosen = pick_cap({p.bucket_cap_mb: p.step_time_s for p in points})
    return next(p for p in points if p.bucket_cap_mb == chosen)


def _point(cap: float | None, result: Result) -> CapPoint:
    return CapPoint(cap, result.step_time_s, result.exposed_comm_s, len(result.buckets))


def recommend_bucket_cap(
    scenario: Scenario,
    candidates_mb: Sequence[float | None] | None = None,
    refine: bool | None = None,
    alternatives: bool = True,
) -> Recommendation:
    """Simulate the candidate caps and recommend the one with the lowest step time.

    candidates_mb: caps in MiB to choose from (``None`` in the list stands for PyTorch's default);
      omitted: ``DEFAULT_CANDIDATES_MB`` plus the default, refined around the best.
    refine: add caps between the best and its neighbours (default: only when no list was given, so a
      restricted list is never left).
    """
    if candidates_mb is not None and not list(candidates_mb):
        raise ValueError("candidates_mb must not be empty")
    if any(c is not None and c <= 0 for c in candidates_mb or ()):
        raise ValueError(f"bucket caps must be positive, got {list(candidates_mb or ())}")
    evaluator = _Evaluator(scenario)
    default = evaluator.at_cap(None)
    if candidates_mb is None:
        pool: list[float | None] = [None, *DEFAULT_CANDIDATES_MB]
    else:
        pool = list(dict.fromkeys(candidates_mb))  # drop repeats, keep order
    points = [_point(cap, evaluator.at_cap(cap)) for cap in pool]
    numeric = [p.bucket_cap_mb for p in points if p.bucket_cap_mb is not None]
    if (candidates_mb is None if refine is None else refine) and numeric:
        coarse = _pick([p for p in points if p.bucket_cap_mb is not None])
        assert coarse.bucket_cap_mb is not None
        points += [_point(cap, evaluator.at_cap(cap)) for cap in _refine(numeric, coarse.bucket_cap_mb)]
    chosen = _pick(points)
    best = evaluator.at_cap(chosen.bucket_cap_mb)
    alts = _alternatives(evaluator, chosen.bucket_cap_mb, best) if alternatives else []
    curve = sorted((p for p in points if p.bucket_cap_mb is not None), key=lambda p: p.bucket_cap_mb or 0.0)
    return Recommendation(
        recommended_bucket_cap_mb=chosen.bucket_cap_mb,
        predicted_step_time_s=best.step_time_s,
        default_step_time_s=default.step_time_s,
        curve=curve,
        alternatives=alts,
        reason=explain(default, best, chosen.bucket_cap_mb),
        paste=paste_line(chosen.bucket_cap_mb),
        best=best,
        default=default,
    )


def paste_line(cap: float | None, **extra: Any) -> str:
    args = "".join(f", {k}={v!r}" for k, v in extra.items())
    if cap is None:
        return f"DDP(model{args})  # keep PyTorch's default bucket_cap_mb"
    return f"DDP(model, bucket_cap_mb={cap:g}{args})"


def _alternatives(evaluator: _Evaluator, cap: float | None, best: Result) -> list[Alternative]:
    """gradient_as_bucket_view and the compression hooks, each at the recommended cap."""
    ddp = evaluator.base.ddp
    if evaluator.base.cluster.world_size == 1:
        return []
    found: list[Alternative] = []

    def add(setting: str, result: Result, note: str, paste: str, option: str) -> None:
        gain = 1 - result.step_time_s / best.step_time_s
        helps, confidence = judge(gain, option)
        if helps:
            verdict = f"{100 * gain:.1f}% faster than the cap alone"
        elif gain > _WORTH_IT:
            verdict = f"predicted {100 * gain:.1f}% faster, but within this option's measured error"
        else:
            verdict = "no worthwhile gain"
        entry = OPTION_ERRORS.get(option)
        error = entry["rms_error"] if entry is not None else None
        found.append(Alternative(setting, result.step_time_s, helps, f"{verdict} ({confidence}); {note}", paste,
                                 error, confidence))

    if not ddp.gradient_as_bucket_view:
        add(
            "gradient_as_bucket_view=True",
            evaluator.at_cap(cap, gradient_as_bucket_view=True),
            "gradients alias the buckets: no copy into or out of them, and one gradient-sized buffer less",
            paste_line(cap, gradient_as_bucket_view=True),
            "gbv",
        )
    for hook in ("bf16", "fp16"):
        if ddp.comm_hook == hook:
            continue
        add(
            f"comm_hook={hook}",
            evaluator.at_cap(cap, comm_hook=hook),
            f"halves the bytes on the wire by casting fp32 gradients to {hook} (changes gradient numerics"
            + ("; bf16 needs NCCL >= 2.10" if hook == "bf16" else "; fp16 can overflow without scaling")
            + ")",
            _HOOK_PASTE[hook],
            hook,
        )
    if ddp.find_unused_parameters and not ddp.static_graph and not evaluator.prepared.workload.unused_params:
        add(
            "find_unused_parameters=False",
            evaluator.at_cap(cap, find_unused_parameters=False),
            "every parameter gets a gradient, so the per-step graph walk, used-map writes and used-map "
            "all-reduce are not needed (and DDP rebuilds its buckets in gradient order)",
            paste_line(cap, find_unused_parameters=False),
            "find_unused",
        )
    return found


def judge(gain: float, option: str) -> tuple[bool, str]:
    """Whether a predicted relative gain is worth recommending for ``option`` and how sure that is.

    It helps only when the gain is larger than both _WORTH_IT and the measured error of ddpsim's
    prediction for that option (RMS over the options campaign, ddpsim/planning/option_errors.py).
    "sure": the gain is at least twice that error; "likely": between one and two errors; "not sure":
    within one error (or the option's effect was never measured)."""
    entry = OPTION_ERRORS.get(option)
    if entry is None:
        return gain > _WORTH_IT, "not sure: this option's predicted effect was never checked against a measurement"
    error = float(entry["rms_error"])
    where = f"measured error +-{100 * error:.1f}% over {entry['n']} runs of {OPTION_ERRORS_SOURCE}"
    if gain <= max(_WORTH_IT, error):
        return False, f"not sure: {where}"
    return True, ("sure" if gain >= 2 * error else "likely") + f": {where}"


def _tail_s(result: Result) -> float:
    """How far the last all-reduce finishes after backward compute ends (the part nothing can hide)."""
    if not result.buckets:
        return 0.0
    backward_end = result.forward_s + result.backward_s
    return max(0.0, max(b.end_s for b in result.buckets) - backward_end)


def _fixed_cost_s(result: Result) -> float | None:
    """Per-all-reduce fixed cost (latency + launch), the intercept of duration = a + bytes / B fitted
    over the step's buckets; None when the buckets are too alike in size to tell a from B."""
    points = [(float(b.bytes), b.end_s - b.start_s) for b in result.buckets if b.end_s > b.start_s]
    if len(points) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    var_x = sum((x - mean_x) ** 2 for x, _ in points)
    if var_x <= (0.05 * mean_x) ** 2 * len(points):  # sizes within ~5% of each other
        return None
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / var_x
    return max(0.0, mean_y - max(slope, 0.0) * mean_x)


def _latency_share(result: Result) -> float:
    """Share of the communication time that is fixed per-call cost rather than bytes on the wire."""
    fixed = _fixed_cost_s(result)
    if fixed is None or result.comm_time_s <= 0:
        return 0.0
    return min(1.0, fixed * len(result.buckets) / result.comm_time_s)


def _cap_text(cap: float | None) -> str:
    return "PyTorch's default (25 MiB, first bucket 1 MiB)" if cap is None else f"{cap:g} MiB"


def explain(default: Result, best: Result, cap: float | None) -> str:
    """Why the default is slow (the tail after backward, or many latency-bound buckets) and what the
    recommended cap changes, in a few sentences built from the per-bucket records."""
    if default.world_size == 1:
        return "One GPU: DDP does not all-reduce, so bucket_cap_mb changes nothing."
    tail, n = _tail_s(default), len(default.buckets)
    latency = _latency_share(default)
    exposed = default.exposed_comm_s
    backward_compute = max(default.backward_s - default.copy_s, 0.0)
    parts = [
        f"With PyTorch's default (bucket_cap_mb unset: a 1 MiB first bucket, then 25 MiB) the step has {n} buckets "
        f"and {format_time(exposed)} of exposed communication"
        f" ({100 * exposed / default.step_time_s:.0f}% of the {format_time(default.step_time_s)} step)."
    ]
    if exposed <= 0.01 * default.step_time_s:
        parts.append("Communication is already hidden behind compute, so the cap matters little.")
    elif latency >= 0.5:
        fixed = _fixed_cost_s(default) or 0.0
        parts.append(
            f"The problem is latency: each all-reduce pays about {format_time(fixed)} of fixed cost (latency"
            f" and launch), {100 * latency:.0f}% of all communication time; the buckets queue behind each other"
            f" and the last one finishes {format_time(tail)} after backward compute."
        )
    elif tail >= 0.5 * exposed and default.buckets:
        last = max(default.buckets, key=lambda b: b.end_s)
        parts.append(
            f"The problem is the tail: the last bucket's all-reduce ({format_bytes(last.bytes)}) finishes"
            f" {format_time(tail)} after backward compute ends, where nothing can hide it."
        )
    elif default.comm_time_s > backward_compute:
        parts.append(
            f"Communication ({format_time(default.comm_time_s)}) takes longer than backward compute"
            f" ({format_time(backward_compute)}): no cap hides it; fewer bytes (a compression hook) or a faster"
            " network would."
        )
    else:
        parts.append("Exposed communication is spread over the step (buckets queue behind each other).")
    if not default.fits_in_memory:
        parts.append("Note: plain DDP does not fit in GPU memory here, whatever the cap (see `ddpsim run`).")
    if cap is None:
        parts.append("No other cap simulated faster: keep the default.")
        return " ".join(parts)
    gain = 1 - best.step_time_s / default.step_time_s
    how = (
        "smaller buckets start all-reducing earlier in backward and leave less after it"
        if cap < DEFAULT_BUCKET_CAP_MB
        else "fewer, larger buckets pay the per-all-reduce latency and launch cost fewer times"
        if cap > DEFAULT_BUCKET_CAP_MB
        else "an explicit 25 MiB also makes the first bucket 25 MiB instead of 1 MiB"
    )
    parts.append(
        f"At {_cap_text(cap)}: {len(best.buckets)} buckets, {format_time(best.exposed_comm_s)} exposed,"
        f" {format_time(_tail_s(best))} after backward; {how}."
    )
    if gain < _WORTH_IT:
        parts.append(f"The gain is only {100 * gain:.2f}%: the default is about as good.")
    else:
        parts.append(f"Predicted step {format_time(best.step_time_s)}, {100 * gain:.1f}% faster than the default.")
    return " ".join(parts)


def plot_curve(recommendation: Recommendation, path: str) -> None:
    """Step time relative to the default and exposed communication vs cap (log x); the recommended
    cap marked, and the band within which caps count as tied."""
    from ddpsim.report.plots import bucket_cap_png

    curve = recommendation.curve
    bucket_cap_png(
        path,
        [p.bucket_cap_mb or 0.0 for p in curve],
        [p.step_time_s for p in curve],
        [p.exposed_comm_s for p in curve],
        recommendation.default_step_time_s,
        recommendation.recommended_bucket_cap_mb,
        f"{recommendation.best.model} on {recommendation.best.world_size} x {recommendation.best.gpu}",
        MIN_GAIN_REL,
    )
