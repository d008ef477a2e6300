"""What a validation says, as text (terminal or Markdown), JSON and a report folder with figures.

``ddpsim validate`` prints and writes these; anything else holding a ``Validation`` (the evidence
pipeline) can write the same report by calling ``write_validation_dir``.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from ddpsim.fitting.measured_scenarios import JITTER_STEPS
from ddpsim.fitting.validate import RunRow, Validation, launch_spread_pct, option_effects, peak_summary
from ddpsim.report.tables import table


def validation_dict(v: Validation) -> dict[str, Any]:
    """The ``validation`` document (ddpsim/schemas/validation.schema.json)."""
    from ddpsim.schemas import document

    return document("validation", {
        "passed": v.passed,
        "failures": v.failures,
        "cross": v.cross,
        "jitter_from_profile": v.jitter_from_profile,
        "folds": v.folds,
        "fingerprints": v.fingerprints,
        "calibration_subset": v.calibration_subset,
        "summary": _summary_rows(v),
        "by_option": _option_rows(v),
        "noise": v.noise,
        "profile_warnings": v.profile_warnings,
        "launch_drift": v.launch_drift,
        "skipped": [{"run": run, "reason": reason} for run, reason in v.skipped],
        "runs": [{**r.__dict__, "error_pct": r.error_pct} for r in v.rows],
        "allreduce": [{**r.__dict__, "error_pct": r.error_pct} for r in v.allreduce],
        "recommendation": v.recommendation,
        "layouts_checked": v.layouts_checked,
        "layout_mismatches": v.layout_mismatches,
    })


def _error_stats(rows: Sequence[RunRow]) -> tuple[float, float, float]:
    errors = [r.error_pct for r in rows]
    return sum(abs(e) for e in errors) / len(errors), max(abs(e) for e in errors), sum(errors) / len(errors)


def _summary_rows(v: Validation) -> list[dict[str, Any]]:
    out = []
    for group, rows in v.by_transport().items():
        link_class = rows[0].link_class
        mape, worst, bias = _error_stats(rows)
        ar = [abs(r.error_pct) for r in v.allreduce if r.link_class == group]
        out.append(
            {
                "transport": group,
                "held_out_runs": len(rows),
                "mape_pct": mape,
                "max_error_pct": worst,
                "mean_signed_error_pct": bias,
                "launch_spread_pct": launch_spread_pct(v.noise, link_class),
                "allreduce_max_error_pct": max(ar) if ar else None,
                # how many measured steps fall inside the predicted p10..p90 (80% if the interval is honest)
                "inside_interval": sum(1 for r in rows if r.inside_interval),
                "with_interval": sum(1 for r in rows if r.inside_interval is not None),
            }
        )
    return out


def _option_rows(v: Validation) -> list[dict[str, Any]]:
    """Per DDP option and link class: the step-time error, and the option's effect (its step over the
    same model's plain step at the same cap, launch and class) measured and predicted."""
    out = []
    for (option, link_class), rows in v.by_option().items():
        mape, worst, bias = _error_stats(rows)
        effects = [(r.model, measured, predicted) for r, measured, predicted in option_effects(v.rows)
                   if r.option == option and r.link_class == link_class and r.held_out]
        out.append({"option": option, "transport": link_class, "runs": len(rows), "mape_pct": mape,
                    "max_error_pct": worst, "mean_signed_error_pct": bias,
                    "effects": [{"model": m, "measured_ratio": a, "predicted_ratio": b} for m, a, b in effects]})
    return out


def validation_text(v: Validation, markdown: bool = False) -> str:
    """The report: every held-out run, the error per link class and per DDP option, the verdicts on cap
    advice and bucket layouts, what was not predicted and why, warnings, and PASSED or FAILED."""
    lines = [*_heading(v), _runs_table(v, markdown), "", *_summary(v, markdown), *_options_table(v, markdown),
             *_verdicts(v), *_warnings(v)]
    levels = sorted({(r.launch, r.launch_level) for r in v.rows if r.launch_level != 1.0})
    if levels:
        lines.append("measured steps normalised by launch level (reference configuration): "
                     + ", ".join(f"{launch} /{level:.3f}" for launch, level in levels))
    if peak_summary(v):
        lines.append(peak_summary(v))
    lines.append("measured on: " + "; ".join(v.fingerprints))
    lines.append("PASSED" if v.passed else "FAILED: " + "; ".join(v.failures))
    return "\n".join(lines)


def _heading(v: Validation) -> list[str]:
    if v.cross:
        lines = [f"Leave-one-{v.cross}-out: each {v.cross}'s runs predicted by a calibration fitted without it "
                 f"(DDP overheads on plain runs at caps {v.calibration_subset.get('bucket_cap_mb')})"
                 + ("; its communication terms kept for the models it was fitted on "
                    "(comm_terms_fitted_models_only, not the default: docs/model.md)"
                    if v.comm_terms_fitted_models_only else "")]
    else:
        lines = [f"Held-out runs (calibration subset: {v.calibration_subset})"]
    if v.jitter_from_profile:
        lines.append("predicted with each rank's compute varying step to step as its profile measured (the step's "
                     f"p10..p90), the median of {JITTER_STEPS} simulated steps")
    return lines


def _runs_table(v: Validation, markdown: bool) -> str:
    held = v.held_out()
    # every campaign names its launches alike ("nvlink_w4_0"): with several, the campaign says which
    several = len({r.host for r in held}) > 1
    rows = [
        (
            r.model,
            r.option,
            r.link_class if r.nodes == 1 else f"{r.transport}, {r.nodes} nodes",
            r.world_size,
            f"{r.bucket_cap_mb:g}",
            r.fold or (r.launch if several else r.launch_id),
            f"{r.measured_s * 1e3:.2f}",
            f"{r.predicted_s * 1e3:.2f}",
            f"{r.error_pct:+.1f}",
        )
        for r in sorted(held, key=lambda r: (r.model, r.option, r.transport, r.nodes, r.world_size, r.bucket_cap_mb))
    ]
    return table(("model", "option", "link", "GPUs", "cap MB", "fold" if v.cross else "launch",
                  "measured ms", "predicted ms", "error %"), rows, markdown)


def _summary(v: Validation, markdown: bool) -> list[str]:
    summary_rows = _summary_rows(v)
    summary = [
        (
            s["transport"],
            s["held_out_runs"],
            f"{s['mape_pct']:.1f}",
            f"{s['max_error_pct']:.1f}",
            f"{s['mean_signed_error_pct']:+.1f}",
            "-" if s["launch_spread_pct"] is None else f"{s['launch_spread_pct']:.1f}",
            "-" if s["allreduce_max_error_pct"] is None else f"{s['allreduce_max_error_pct']:.1f}",
        )
        for s in summary_rows
    ]
    lines = [table(("link class", "runs", "mean abs err %", "max abs err %", "mean err %",
                    "launch-to-launch % (measured)", "all-reduce max err % (64KiB-1GiB)"), summary, markdown)]
    intervals = [s for s in summary_rows if s["with_interval"]]
    if intervals:
        lines.append("measured inside the predicted p10..p90 (the calibration's noise; 80% if it is honest): "
                     + ", ".join(f"{s['transport']} {s['inside_interval']} of {s['with_interval']}" for s in intervals))
    return lines


def _options_table(v: Validation, markdown: bool) -> list[str]:
    options = _option_rows(v)
    if not any(o["option"] != "none" for o in options):
        return []
    return ["", table(
        ("option", "link class", "runs", "mean abs err %", "max abs err %", "effect measured / predicted (per model)"),
        [(o["option"], o["transport"], o["runs"], f"{o['mape_pct']:.1f}", f"{o['max_error_pct']:.1f}",
          " ".join(f"{e['model']} {e['measured_ratio']:.2f}/{e['predicted_ratio']:.2f}" for e in o["effects"]) or "-")
         for o in options],
        markdown,
    )]


def _verdicts(v: Validation) -> list[str]:
    """The whole error, the cap advice, the bucket layouts and what was not predicted."""
    lines = []
    held = v.held_out()
    if held:
        errors = [abs(r.error_pct) for r in held]
        lines.append(f"\nall held-out runs: mean abs error {sum(errors) / len(errors):.1f}%, max {max(errors):.1f}%")
    if v.recommendation:
        good = sum(r["within_5pct"] for r in v.recommendation)
        lines.append(f"bucket-cap recommendation within 5% of the measured best: {good} of {len(v.recommendation)} groups")
        for r in (r for r in v.recommendation if not r["within_5pct"]):
            lines.append(
                f"  miss: {r['model']}/{r['transport']}/w{r['world_size']} ({r['host']}): recommended {r['recommended_cap_mb']:g}, "
                f"best {r['measured_best_cap_mb']:g} ({r['recommended_vs_best_pct']:+.1f}%)"
            )
    lines.append(f"bucket layouts: {v.layouts_checked - len(v.layout_mismatches)} of {v.layouts_checked} equal the measured rebuilt layout")
    lines += [f"  {mismatch}" for mismatch in v.layout_mismatches[:5]]
    if v.skipped:
        reasons: dict[str, int] = defaultdict(int)
        for _run, reason in v.skipped:
            reasons[reason] += 1
        lines.append(f"not predicted: {len(v.skipped)} records")
        lines += [f"  {count} x {reason}" for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1])]
    return lines


def _warnings(v: Validation) -> list[str]:
    lines = [f"warning: {warning}" for warning in v.profile_warnings]
    lines += [f"warning: launch {d['launch']}: the reference {d['reference']} moved {d['drift_pct']:+.1f}% "
              f"from its start to its end, past the launch's round-to-round spread "
              f"({d['round_spread_pct']:.1f}%): its runs carry more than their own noise"
              for d in v.launch_drift if d["drifted"]]
    lines += [f"warning (fold {fold['held_out']}): {warning}" for fold in v.folds for warning in fold.get("warnings", [])]
    return lines


def write_validation_dir(v: Validation, out: str) -> None:
    from ddpsim.outdir import atomic_dir
    from ddpsim.report.plots import scatter_plot

    # the staging folder is renamed into place only when every file is written (nothing half-written)
    with atomic_dir(out) as staging:
        held = v.held_out()
        if held:
            scatter_plot(
                os.path.join(staging, "predicted_vs_measured.png"),
                [r.measured_s for r in held],
                [r.predicted_s for r in held],
                [r.link_class for r in held],
                "ddpsim: held-out DDP runs",
            )
        _cap_curves(v, os.path.join(staging, "bucket_cap_curves.png"))
        with open(os.path.join(staging, "validation.md"), "w", encoding="utf-8") as handle:
            handle.write("# ddpsim validation\n\n" + validation_text(v, markdown=True) + "\n")
        with open(os.path.join(staging, "validation.json"), "w", encoding="utf-8") as handle:
            json.dump(validation_dict(v), handle, indent=2)


def _cap_curves(v: Validation, path: str) -> None:
    from ddpsim.report.plots import cap_curves_png

    groups = defaultdict(list)
    for r in v.rows:
        groups[(r.model, r.link_class, r.world_size, r.host)].append(r)
    panels = []
    for key in sorted(groups):
        launches = defaultdict(list)
        for r in groups[key]:
            launches[r.launch_id].append(r)
        # the launch that measured every cap is the curve; other launches (repeats) are points
        main_launch = max(launches, key=lambda launch: len(launches[launch]))
        rows = sorted(launches.pop(main_launch), key=lambda r: r.bucket_cap_mb)
        repeats = [r for rs in launches.values() for r in rs]
        panels.append({
            "title": f"{key[0]} {key[1]} x{key[2]} ({key[3]})",
            "caps": [r.bucket_cap_mb for r in rows],
            "measured_s": [r.measured_s for r in rows],
            "predicted_s": [r.predicted_s for r in rows],
            "repeat_caps": [r.bucket_cap_mb for r in repeats],
            "repeat_measured_s": [r.measured_s for r in repeats],
        })
    if panels:
        cap_curves_png(path, panels)
