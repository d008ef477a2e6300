"""Sharded data parallel (FSDP2 / ZeRO) on GPUs: measured step and peak memory against ddpsim's prediction.

Run: ``python -m validation.evidence --stage fsdp-h200x2`` (output in validation/reports/fsdp-h200x2/output.md).
Data: validation/data/h200x2-fsdp-2026-11-27 (two launches on one 2 x H200 allocation). FSDP2's host work per
parameter tensor (``parallel.forward_host_per_tensor``, ``parallel.regather_host_per_tensor``) is derived from
the first launch's records (``fsdp_nvlink``, ``fsdp_socket``: ``host_terms_us``) and the second launch's runs
(``fsdp_nvlink_1``, ``fsdp_shm_1``; shared memory never seen) are the held-out ones. Nothing else is fitted:
compute is estimated from the models' FLOPs (no profile), links and overheads are ddpsim's defaults. The
strategy check compares, per model, link class and launch, the fastest strategy measured with the fastest
predicted, where the measured steps of the two differ by more than 10%.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from ddpsim.fitting.sharded_validate import FsdpComparison, compare_fsdp_runs, read_fsdp_runs

DATA = "validation/data/h200x2-fsdp-2026-11-27"
DERIVED_FROM = ("fsdp_nvlink", "fsdp_socket")


def host_terms_us(runs: list[dict], launches: tuple[str, ...] = DERIVED_FROM) -> tuple[float, float]:
    """FSDP2's host work per parameter tensor (us), from records alone: the median over FSDP runs of
    (forward - the same launch's DDP forward of the model) / tensors, and over ZeRO-3 runs of (backward - ZeRO-2's
    backward) / tensors. A unit's tensors are what FSDP2 unshards one by one; the model's tensor count is the
    count of its parameters (the harness's own model, built on the meta device)."""
    ok = [r for r in runs if r.get("status") == "ok" and r.get("launch_id") in launches]

    def twin(r: dict, strategy: str) -> dict:
        return next(x for x in ok if x["launch_id"] == r["launch_id"] and x["model"] == r["model"]
                    and x["strategy"] == strategy)

    counts: dict[str, int] = {}

    def tensors(r: dict) -> int:
        from ddpsim.measure.fsdp import resolve_model

        if r["model"] not in counts:
            counts[r["model"]] = len(list(resolve_model(r["model"]).build_on("meta").parameters()))
        return counts[r["model"]]

    forward = [(r["forward_s_median"] - twin(r, "ddp")["forward_s_median"]) / tensors(r) for r in ok
               if r["strategy"] in ("zero2", "zero3")]
    regather = [(r["backward_s_median"] - twin(r, "zero2")["backward_s_median"]) / tensors(r) for r in ok
                if r["strategy"] == "zero3"]
    return 1e6 * statistics.median(forward), 1e6 * statistics.median(regather)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def run() -> str:
    return _report(DATA, derive=True)


FRESH = "validation/data/h200x2-fsdp-2026-11-27b"


def run_fresh() -> str:
    """A fresh allocation measured with ``ddpsim measure --plan sharded`` after the host terms were fixed: its
    compute from the models' world-size-1 profiles beside the records, nothing else measured there."""
    return _report(FRESH, derive=False)


def _report(data: str, derive: bool) -> str:
    runs = read_fsdp_runs(data)
    rows = compare_fsdp_runs(runs)  # one row per run (read_fsdp_runs keeps the runs that ended ok)
    launches = [str(run.get("launch_id")) for run in runs]
    lines = ["| run | launch | measured step | predicted | error | peak measured | peak predicted | error |",
             "|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str], list[FsdpComparison]] = defaultdict(list)
    for run, launch, r in zip(runs, launches, rows, strict=True):
        lines.append(f"| {r.label} | {launch} | {1e3 * r.measured_step_s:.1f} ms | {1e3 * r.predicted_step_s:.1f} ms | "
                     f"{_pct(r.step_error)} | {(r.measured_peak_bytes or 0) / 2**30:.2f} GiB | "
                     f"{r.predicted_peak_bytes / 2**30:.2f} GiB | {_pct(r.peak_error)} |")
        groups[(f"{run['model']}/{run['transport']}", launch)].append(r)
    lines.append("")
    for strategy in ("ddp", "zero2", "zero3"):
        errors = [abs(r.step_error) for r in rows if r.strategy == strategy]
        peaks = [abs(r.peak_error) for r in rows if r.strategy == strategy and r.peak_error is not None]
        if errors:
            lines.append(f"- {strategy}: step error mean {100 * sum(errors) / len(errors):.1f}%, max "
                         f"{100 * max(errors):.1f}%; peak memory mean {100 * sum(peaks) / max(len(peaks), 1):.1f}%, "
                         f"max {100 * max(peaks, default=0):.1f}% ({len(errors)} runs)")
    right = counted = 0
    for (group, launch), members in sorted(groups.items()):
        fastest = min(members, key=lambda r: r.measured_step_s)
        picked = min(members, key=lambda r: r.predicted_step_s)
        second = sorted(r.measured_step_s for r in members)[1] if len(members) > 1 else None
        if second is None or second < 1.1 * fastest.measured_step_s:
            continue
        counted += 1
        right += picked.strategy == fastest.strategy
        lines.append(f"- fastest on {group} ({launch}): measured {fastest.strategy}, predicted {picked.strategy}")
    lines.append(f"- the fastest strategy predicted right in {right} of {counted} groups whose measured steps differ "
                 "by more than 10%")
    if not derive:
        return "\n".join(lines) + "\n"
    forward_us, regather_us = host_terms_us(runs)
    held = [r for launch, r in zip(launches, rows, strict=True) if launch not in DERIVED_FROM]
    lines.append(f"- FSDP2's host work per parameter tensor from launches {', '.join(DERIVED_FROM)}: "
                 f"{forward_us:.0f} us before a unit's forward, {regather_us:.0f} us before a ZeRO-3 re-gather")
    for strategy in ("ddp", "zero2", "zero3"):
        errors = [abs(r.step_error) for r in held if r.strategy == strategy]
        if errors:
            lines.append(f"- held out (the other launch): {strategy} step error mean "
                         f"{100 * sum(errors) / len(errors):.1f}%, max {100 * max(errors):.1f}% ({len(errors)} runs)")
    return "\n".join(lines) + "\n"


X4_FRESH = "validation/data/h200x4-fresh-2026-11-28/fsdp"


def run_x4_fresh() -> str:
    """FSDP2 on 4 GPUs of a fresh allocation (``ddpsim measure --plan sharded``): the host terms were derived on
    2 GPUs, so this is the first check of them at another world size."""
    return _report(X4_FRESH, derive=False)
