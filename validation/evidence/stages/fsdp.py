"""Sharded data parallel (FSDP2 / ZeRO) on GPUs: measured step and peak memory against ddpsim's prediction.

Run: ``python -m validation.evidence --stage fsdp-h200x2`` (output in validation/reports/fsdp-h200x2/output.md).
Data: validation/data/h200x2-fsdp-2026-11-27 (two launches on one 2 x H200 allocation). Nothing is fitted:
compute is estimated from the models' FLOPs (no profile), links and overheads are ddpsim's defaults. The
strategy check compares, per model, link class and launch, the fastest strategy measured with the fastest
predicted, where the measured steps of the two differ by more than 10%.
"""

from __future__ import annotations

from collections import defaultdict

from ddpsim.sharded.validate import FsdpComparison, compare_fsdp_runs, read_fsdp_runs

DATA = "validation/data/h200x2-fsdp-2026-11-27"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def run() -> str:
    runs = read_fsdp_runs(DATA)
    rows = compare_fsdp_runs(runs)
    launches = [r.get("launch_id") for r in runs if r.get("status") == "ok"]
    lines = ["| run | launch | measured step | predicted | error | peak measured | peak predicted | error |",
             "|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str], list[FsdpComparison]] = defaultdict(list)
    for launch, r in zip(launches, rows, strict=True):
        lines.append(f"| {r.label} | {launch} | {1e3 * r.measured_step_s:.1f} ms | {1e3 * r.predicted_step_s:.1f} ms | "
                     f"{_pct(r.step_error)} | {(r.measured_peak_bytes or 0) / 2**30:.2f} GiB | "
                     f"{r.predicted_peak_bytes / 2**30:.2f} GiB | {_pct(r.peak_error)} |")
        groups[(r.label.rsplit("/", 2 if r.strategy == "ddp" else 3)[0], str(launch))].append(r)
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
    return "\n".join(lines) + "\n"
