"""``ddpsim calibrate`` and ``ddpsim validate``: fit from measurements, then prove the predictions."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict

from ddpsim.calibration.measured_scenarios import JITTER_STEPS
from ddpsim.errors import ScenarioError

EXIT_FAILED_VALIDATION = 1


def _parse_caps(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ScenarioError(f"expected comma-separated numbers, got {text!r}", field="--calibration-caps") from None


def _nccl_tests_arg(spec: str):
    from ddpsim.calibration.measurements import read_nccl_tests

    parts = spec.split(":")
    if len(parts) not in (3, 4):
        raise ScenarioError("expected FILE:LINK_CLASS:WORLD_SIZE[:NODES]", field="--nccl-tests", file=spec)
    try:
        world, nodes = int(parts[2]), int(parts[3]) if len(parts) == 4 else 1
    except ValueError:
        raise ScenarioError("world size and nodes must be integers", field="--nccl-tests", file=spec) from None
    return read_nccl_tests(parts[0], parts[1], world, nodes)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from ddpsim.calibration.calibrate import calibrate, fit_warnings, load_measurements, noise_runs
    from ddpsim.calibration.fit import fit_noise, write_calibration
    from ddpsim.calibration.measurements import Profiles

    other_runs = noise_runs(args.noise_from) if args.noise_from else []  # a bad folder stops before any fitting
    measured = load_measurements([args.data_dir]) if args.data_dir else None
    samples = list(measured.samples) if measured else []
    for spec in args.nccl_tests:
        samples.extend(_nccl_tests_arg(spec))
    if not samples:
        raise ScenarioError("no all-reduce measurements found (harness allreduce.jsonl or --nccl-tests)", file=args.data_dir)
    caps = None if args.calibration_caps == "all" else _parse_caps(args.calibration_caps)
    data = calibrate(
        samples,
        measured.runs if measured else [],
        measured.profiles if measured else Profiles(),
        caps,
        links_only=args.links_only,
        log=lambda line: print(line, file=sys.stderr),
        timing_runs=measured.timing_runs if measured else (),
        fix_measured_stretch=args.fix_measured_stretch,
        idle_start_wait=args.idle_start_wait,
        prune_undetermined=args.prune_undetermined,
        comm_terms_fitted_models_only=args.comm_terms_fitted_models_only,
        compute_slowdowns=measured.compute_slowdowns if measured else (),
        net_probes=measured.net_probes if measured else (),
    )
    noise_source = (f"{args.data_dir}: every DDP run (p10/p90 over steps; repeat launches of the same configuration)"
                    if args.data_dir else None)
    if args.noise_from:
        # the spread between machine allocations, measured where the same plan ran on several of them
        data["noise"] = fit_noise(other_runs)
        noise_source = (", ".join(args.noise_from) + ": every DDP run (p10/p90 over steps; the same configuration "
                        "in other launches and campaigns)")
    meta = {
        "calibration_subset": data["calibration_subset"],
        "noise": data["noise"],
        "measured_overheads": data["measured_overheads"],
        "noise_source": noise_source,
        "data_dir": os.path.relpath(args.data_dir, os.path.dirname(os.path.abspath(args.out))) if args.data_dir else None,
        "nccl_tests": list(args.nccl_tests),
    }
    write_calibration(args.out, data["link_classes"], data["overheads"], meta)
    _print_calibration(data["link_classes"], data["overheads"])
    how = {"allreduce_stretch": "last bucket of {} per-bucket traces",
           "compute_slowdown": "{} micro-benchmarks, GEMM and convolution beside all-reduces"}
    for link_class, entry in sorted(data["measured_overheads"].items()):
        for term, measured_term in sorted(entry.items()):
            fitted = data["overheads"].get(link_class, {}).get(term)
            fixed = args.fix_measured_stretch and term == "allreduce_stretch"
            print(f"{link_class}: {term} measured {measured_term['value']:.2f} ({how[term].format(measured_term['runs'])})"
                  + (f", {'fixed' if fixed else 'fitted'} {fitted:.2f}" if fitted is not None else ""))
    for warning in fit_warnings(data):
        print(f"warning: {warning}", file=sys.stderr)
    print(f"\nwrote {args.out}")
    return 0


def _print_calibration(links: dict, overheads: dict) -> None:
    from ddpsim.report.tables import table

    rows: list[tuple[object, ...]] = []
    for link_class, entry in links.items():
        fits = [("all", entry)] + sorted(entry.get("by_world_size", {}).items())
        for world, fit_entry in fits:
            for protocol, fit in fit_entry["protocol_fits"].items():
                if not fit.get("selected", True):
                    continue  # never the fastest on the measured sizes
                rows.append(
                    (
                        link_class,
                        world,
                        protocol,
                        f"{fit['base_latency_s'] * 1e6:.1f}",
                        f"{fit['hop_latency_s'] * 1e6:.2f}",
                        f"{fit['bus_bandwidth_Bps'] / 1e9:.1f}",
                        f"{fit_entry.get('call_floor_s', 0.0) * 1e6:.0f}",
                        f"{fit_entry['fit_mean_error_pct']:.1f} / {fit_entry['fit_max_error_pct']:.1f}",
                    )
                )
    print("All-reduce fit per link class: max(floor, min over protocols of base + 2(n-1) x hop + bytes x 2(n-1)/n / busbw)")
    headers: tuple[str, ...] = ("link class", "GPUs", "protocol", "base us", "per-hop us", "busbw GB/s", "floor us", "fit err mean/max %")
    print(table(headers, rows))
    for link_class, entry in links.items():
        if entry.get("protocols_from", "").startswith("no NCCL log"):
            print(f"{link_class}: {entry['protocols_from']}")
        if "duplex_factor" in entry:
            # the net rows' busbw is the endpoint's one-way rate; both ways it gets this fraction each way
            print(f"{link_class}: endpoint duplex factor {entry['duplex_factor']:.2f}, {entry.get('duplex_source', '')}")
        tree = entry.get("tree_fit")
        if isinstance(tree, dict) and not tree.get("fitted", True):
            print(f"{link_class}: {tree['note']}")  # the tree then runs on the ring's network numbers
    if overheads:
        print("\nDDP overheads (fitted on the calibration subset only)")
        rows.clear()
        for link_class, entry in overheads.items():
            for world, o in [("all", entry)] + sorted(entry.get("by_world_size", {}).items()):
                rows.append(
                    (
                        link_class,
                        world,
                        f"{o['bucket_launch_s'] * 1e6:.0f}",
                        f"{o['compute_slowdown']:.2f}",
                        f"{o['comm_slowdown']:.1f}",
                        f"{o.get('allreduce_stretch', 1.0):.2f}",
                        f"{o.get('idle_start_wait_s', 0.0) * 1e6:.0f}",
                        f"{o.get('bucket_cpu_s', 0.0) * 1e6:.0f}",
                        str(o["max_inflight_buckets"]),
                        f"{o['buffer_sync_s'] * 1e3:.1f}",
                        f"{o['calibration_mape_pct']:.1f}",
                        o["calibration_runs"],
                    )
                )
        headers = ("link class", "GPUs", "launch us", "compute slowdown", "comm slowdown", "all-reduce stretch",
                   "idle-start wait us", "bucket cpu us", "max in flight", "buffer sync ms", "calib MAPE %", "runs")
        print(table(headers, rows))


def _cmd_validate(args: argparse.Namespace) -> int:
    from ddpsim.calibration.file import read_calibration
    from ddpsim.calibration.validate import cross_validate, validate
    from ddpsim.report.tables import table

    tolerances = {
        "max_mape_pct": args.max_mape,
        "max_error_pct": args.max_error,
        "max_allreduce_error_pct": args.max_allreduce_error,
        "min_recommendation_share": args.min_recommendation_share,
    }
    if args.cross:
        if args.calibration:
            raise ScenarioError("--cross builds its own calibrations from the other parts; drop --calibration",
                                field="--calibration")
        caps = None if args.calibration_caps == "all" else _parse_caps(args.calibration_caps)
        if not 1 <= args.jobs <= 1024:
            raise ScenarioError(f"expected 1 to 1024 processes, got {args.jobs}", field="--jobs")
        v = cross_validate(args.data_dir, args.cross, caps, log=lambda line: print(line, file=sys.stderr),
                           jobs=args.jobs, fix_measured_stretch=args.fix_measured_stretch,
                           idle_start_wait=args.idle_start_wait, jitter_from_profile=args.jitter_from_profile,
                           normalise_launches=args.normalise_launches, prune_undetermined=args.prune_undetermined,
                           comm_terms_fitted_models_only=args.comm_terms_fitted_models_only, **tolerances)
    else:
        v = validate(args.data_dir, read_calibration(args.calibration) if args.calibration else None,
                     normalise_launches=args.normalise_launches, jitter_from_profile=args.jitter_from_profile,
                     **tolerances)
    if args.json:
        print(json.dumps(_validation_dict(v), indent=2))
    else:
        print(_validation_text(v, table))
    if args.out:
        _write_validation_dir(v, args.out, table)
        if not args.json:
            print(f"\nwrote {args.out}/validation.md, validation.json, predicted_vs_measured.png, bucket_cap_curves.png")
    return 0 if v.passed else EXIT_FAILED_VALIDATION


def _validation_dict(v) -> dict:
    return {
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
    }


def _error_stats(rows) -> tuple[float, float, float]:
    errors = [r.error_pct for r in rows]
    return sum(abs(e) for e in errors) / len(errors), max(abs(e) for e in errors), sum(errors) / len(errors)


def _summary_rows(v) -> list[dict]:
    from ddpsim.calibration.validate import launch_spread_pct

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


def _option_rows(v) -> list[dict]:
    """Per DDP option and link class: the step-time error, and the option's effect (its step over the
    same model's plain step at the same cap, launch and class) measured and predicted."""
    from ddpsim.calibration.validate import option_effects

    out = []
    for (option, link_class), rows in v.by_option().items():
        mape, worst, bias = _error_stats(rows)
        effects = [(r.model, measured, predicted) for r, measured, predicted in option_effects(v.rows)
                   if r.option == option and r.link_class == link_class and r.held_out]
        out.append({"option": option, "transport": link_class, "runs": len(rows), "mape_pct": mape,
                    "max_error_pct": worst, "mean_signed_error_pct": bias,
                    "effects": [{"model": m, "measured_ratio": a, "predicted_ratio": b} for m, a, b in effects]})
    return out


def _validation_text(v, table, markdown: bool = False) -> str:
    lines = []
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
    if v.cross:
        lines.append(f"Leave-one-{v.cross}-out: each {v.cross}'s runs predicted by a calibration fitted without it "
                     f"(DDP overheads on plain runs at caps {v.calibration_subset.get('bucket_cap_mb')})"
                     + ("; its communication terms kept for the models it was fitted on "
                        "(--comm-terms-fitted-models-only)" if v.comm_terms_fitted_models_only else ""))
    else:
        lines.append(f"Held-out runs (calibration subset: {v.calibration_subset})")
    if v.jitter_from_profile:
        lines.append("predicted with each rank's compute varying step to step as its profile measured (the step's "
                     f"p10..p90), the median of {JITTER_STEPS} simulated steps")
    lines.append(table(("model", "option", "link", "GPUs", "cap MB", "fold" if v.cross else "launch",
                        "measured ms", "predicted ms", "error %"), rows, markdown))
    lines.append("")
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
    lines.append(table(("link class", "runs", "mean abs err %", "max abs err %", "mean err %",
                        "launch-to-launch % (measured)", "all-reduce max err % (64KiB-1GiB)"), summary, markdown))
    intervals = [s for s in summary_rows if s["with_interval"]]
    if intervals:
        lines.append("measured inside the predicted p10..p90 (the calibration's noise; 80% if it is honest): "
                     + ", ".join(f"{s['transport']} {s['inside_interval']} of {s['with_interval']}" for s in intervals))
    options = _option_rows(v)
    if any(o["option"] != "none" for o in options):
        lines.append("")
        lines.append(table(
            ("option", "link class", "runs", "mean abs err %", "max abs err %", "effect measured / predicted (per model)"),
            [(o["option"], o["transport"], o["runs"], f"{o['mape_pct']:.1f}", f"{o['max_error_pct']:.1f}",
              " ".join(f"{e['model']} {e['measured_ratio']:.2f}/{e['predicted_ratio']:.2f}" for e in o["effects"]) or "-")
             for o in options],
            markdown,
        ))
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
    for mismatch in v.layout_mismatches[:5]:
        lines.append(f"  {mismatch}")
    if v.skipped:
        reasons: dict[str, int] = defaultdict(int)
        for _run, reason in v.skipped:
            reasons[reason] += 1
        lines.append(f"not predicted: {len(v.skipped)} records")
        for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {count} x {reason}")
    for warning in v.profile_warnings:
        lines.append(f"warning: {warning}")
    for d in v.launch_drift:
        if d["drifted"]:
            lines.append(f"warning: launch {d['launch']}: the reference {d['reference']} moved {d['drift_pct']:+.1f}% "
                         f"from its start to its end, past the launch's round-to-round spread "
                         f"({d['round_spread_pct']:.1f}%): its runs carry more than their own noise")
    for fold in v.folds:
        for warning in fold.get("warnings", []):
            lines.append(f"warning (fold {fold['held_out']}): {warning}")
    levels = sorted({(r.launch, r.launch_level) for r in v.rows if r.launch_level != 1.0})
    if levels:
        lines.append("measured steps normalised by launch level (reference configuration): "
                     + ", ".join(f"{launch} /{level:.3f}" for launch, level in levels))
    lines.append("measured on: " + "; ".join(v.fingerprints))
    lines.append("PASSED" if v.passed else "FAILED: " + "; ".join(v.failures))
    return "\n".join(lines)


def _write_validation_dir(v, out: str, table) -> None:
    from ddpsim.outdir import atomic_dir
    from ddpsim.report.plots import scatter_plot

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
            handle.write("# ddpsim validation\n\n" + _validation_text(v, table, markdown=True) + "\n")
        with open(os.path.join(staging, "validation.json"), "w", encoding="utf-8") as handle:
            json.dump(_validation_dict(v), handle, indent=2)


def _cap_curves(v, path: str) -> None:
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


def _add_fit_flags(parser: argparse.ArgumentParser, prefix: str) -> None:
    """How the DDP overhead terms are fitted: how an all-reduce inside DDP is priced beyond its time alone
    (the wait replaces the stretch, so those two flags exclude each other: asking for both is a usage
    error, exit 2), and whether undetermined terms are dropped."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--fix-measured-stretch", action="store_true",
                       help=f"{prefix}take the all-reduce stretch measured from per-bucket traces instead of fitting it")
    group.add_argument("--idle-start-wait", action="store_true",
                       help=f"{prefix}fit a wait per all-reduce started on an idle NCCL stream instead of the "
                            "all-reduce stretch")
    parser.add_argument("--prune-undetermined", action="store_true",
                        help=f"{prefix}drop, one at a time, the DDP overhead terms whose effect is smaller than their "
                             "standard error (and those that fit to no effect), refitting the rest")
    parser.add_argument("--comm-terms-fitted-models-only", action="store_true",
                        help=f"{prefix}keep the fitted communication terms (all-reduce stretch, comm slowdown, "
                             "idle-start wait) for the models they were fitted on; any other model gets them at no "
                             "effect (not the default: docs/model.md)")


def register(sub) -> None:
    cal = sub.add_parser("calibrate", help="fit link and DDP overhead parameters from measurements")
    cal.add_argument("data_dir", nargs="?", help="folder with the harness's allreduce.jsonl, ddp_runs.jsonl, profiles/")
    cal.add_argument("--nccl-tests", action="append", default=[], metavar="FILE:LINK_CLASS:WORLD[:NODES]",
                     help="nccl-tests all_reduce_perf output to fit as well (repeatable)")
    cal.add_argument("--calibration-caps", default="5,50",
                     help="bucket caps (MB) whose DDP runs may be used for fitting, or 'all'; the rest stay held out")
    cal.add_argument("--links-only", action="store_true", help="fit only the link classes")
    cal.add_argument("--noise-from", action="append", default=[], metavar="DIR",
                     help="campaign folders whose DDP runs give the step's measured spread (p10/p90 of 'ddpsim run') "
                          "instead of DATA_DIR's: e.g. the same plan on several allocations (repeatable)")
    _add_fit_flags(cal, "")
    cal.add_argument("--out", required=True, help="calibration JSON to write")
    cal.set_defaults(handler=_cmd_calibrate)

    val = sub.add_parser("validate", help="predict held-out measured runs and fail beyond tolerance")
    val.add_argument("data_dir", nargs="+", help="campaign folders (several: one report over all of them)")
    val.add_argument("--calibration", help="calibration JSON (omit: the scenario defaults, uncalibrated)")
    val.add_argument("--cross", choices=("model", "launch", "host"),
                     help="leave one model, launch or host out: each predicted by a calibration fitted on the rest")
    val.add_argument("--calibration-caps", default="5,50",
                     help="with --cross: bucket caps (MB) of the plain runs the overheads are fitted on, or 'all'")
    val.add_argument("--jobs", type=int, default=1, help="with --cross: folds fitted in parallel processes")
    _add_fit_flags(val, "with --cross: each fold: ")
    val.add_argument("--jitter-from-profile", action="store_true",
                     help="every rank's compute varies step to step as its profile measured (its step p10..p90), "
                          f"and the median of {JITTER_STEPS} simulated steps is compared; the calibration is fitted "
                          "without it")
    val.add_argument("--normalise-launches", action="store_true",
                     help="divide each launch's measured steps by its level against other launches of the same "
                          "reference configuration (the harness's --reference)")
    val.add_argument("--max-mape", type=float, default=5.0, help="max mean absolute %% error per transport")
    val.add_argument("--max-error", type=float, default=15.0, help="max %% error of any held-out run")
    val.add_argument("--max-allreduce-error", type=float, default=10.0)
    val.add_argument("--min-recommendation-share", type=float, default=0.9)
    val.add_argument("--json", action="store_true")
    val.add_argument("--out", metavar="DIR")
    val.set_defaults(handler=_cmd_validate)
