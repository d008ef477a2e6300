"""Capacity-planning subcommands: ``sweep``, ``tune-buckets``, ``scale`` and ``variability``.

``ddpsim.cli.main`` calls ``register``; each handler only parses arguments, calls the
library (sweep, advisor, scaling) and prints. A ``ScenarioError`` reaches ``cli.main``, which prints
one line and exits 2.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

from ddpsim.cli.args import (
    add_command,
    add_scenario_args,
    finite_float,
    nonnegative_float,
    print_json,
    write_json,
)
from ddpsim.errors import ScenarioError
from ddpsim.scenario.schema import DDPSpec, field_specs
from ddpsim.schemas import document

EXIT_POINTS_FAILED = 1
# --candidates obeys the same bounds as the scenario's ddp.bucket_cap_mb
_CAP = dict(field_specs(DDPSpec))["bucket_cap_mb"]


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    return values


def _cap_list(text: str) -> list[float | None]:
    values: list[float | None] = []
    for part in (p.strip() for p in text.split(",")):
        if part == "default":
            values.append(None)
            continue
        try:
            value = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected MiB numbers or 'default', got {part!r}") from None
        assert _CAP.minimum is not None and _CAP.maximum is not None
        if not math.isfinite(value) or not _CAP.minimum <= value <= _CAP.maximum:
            raise argparse.ArgumentTypeError(
                f"expected caps from {_CAP.minimum:g} to {_CAP.maximum:g} MiB (or 'default'), got {part!r}"
            )
        values.append(value)
    return values


def register(subparsers: Any) -> None:
    sweep = add_command(subparsers, "sweep", "run a grid of scenarios (resumable, parallel)", (
        "ddpsim sweep scenarios/quickstart.yaml --grid ddp.bucket_cap_mb=5,25,100 --out reports/caps",
        "ddpsim sweep scenarios/h100-2x8-ib400-gpt2.yaml --grid cluster.nodes=1,2,4 "
        "--grid ddp.bucket_cap_mb=25,100 --out reports/grid --workers 4",
    ))
    add_scenario_args(sweep)
    sweep.add_argument(
        "--grid", action="append", default=[], metavar="FIELD=V1,V2,...", required=True,
        help="a scenario field and its values (YAML scalars); repeat for a cartesian product",
    )
    sweep.add_argument("--out", required=True, metavar="DIR",
                       help="sweep.csv, sweep.json (sweep.parquet with pyarrow), report.md, report.html, points/")
    sweep.add_argument("--json", action="store_true", help="print one JSON object (sweep.json) on stdout, nothing else")
    sweep.add_argument("--html", metavar="FILE", help="also write the self-contained HTML report (plots inline) here")
    sweep.add_argument("--workers", type=int, metavar="N", help="local processes (default: all CPUs)")
    sweep.add_argument("--dask", metavar="ADDRESS", help="run the points on a Dask scheduler, e.g. tcp://host:8786")
    sweep.add_argument("--yes", action="store_true", help="allow more than 1000 points")
    sweep.set_defaults(handler=cmd_sweep)

    tune = add_command(subparsers, "tune-buckets", "recommend bucket_cap_mb (and say why)", (
        "ddpsim tune-buckets scenarios/h100-2x8-ib400-gpt2.yaml",
        "ddpsim tune-buckets scenarios/quickstart.yaml --candidates 5,25,100,default --out reports/caps",
    ))
    add_scenario_args(tune)
    tune.add_argument("--candidates", type=_cap_list, metavar="MB,MB,...", help="only choose among these caps")
    tune.add_argument("--json", action="store_true", help="print one JSON object on stdout, nothing else")
    tune.add_argument("--out", metavar="DIR", help="write bucket_cap.png and recommendation.json here")
    tune.set_defaults(handler=cmd_tune_buckets)

    strategy = add_command(subparsers, "tune-strategy", "recommend DDP, ZeRO-1, -2 or -3 (the fastest that fits)", (
        "ddpsim tune-strategy scenarios/h100-16x8-ib400-llama7b.yaml",
        "ddpsim tune-strategy scenarios/h100-2x8-ib400-gpt2.yaml --json",
    ))
    add_scenario_args(strategy)
    strategy.add_argument("--json", action="store_true", help="print one JSON object on stdout, nothing else")
    strategy.set_defaults(handler=cmd_tune_strategy)

    check = add_command(subparsers, "validate-fsdp", "predicted against measured FSDP2 / DDP steps and peak memory", (
        "ddpsim validate-fsdp runs/fsdp-h100x2",
        "ddpsim validate-fsdp runs/fsdp-h100x2/fsdp_runs.jsonl --calibration x2:H100 --json",
    ))
    check.add_argument("runs", help="fsdp_runs.jsonl from python -m ddpsim.measure.fsdp, or its folder")
    check.add_argument("--calibration", metavar="FILE", help="a calibration fitted on other runs (none: defaults)")
    check.add_argument("--json", action="store_true", help="print one JSON object on stdout, nothing else")
    check.add_argument("--max-peak-error", type=nonnegative_float, default=25.0, metavar="PCT",
                       help="exit 1 where a run's predicted peak memory is off by more (default 25)")
    check.set_defaults(handler=cmd_validate_fsdp)

    scale = add_command(subparsers, "scale", "step time, efficiency and cost vs node count", (
        "ddpsim scale scenarios/h100-2x8-ib400-gpt2.yaml --nodes 1,2,4,8,16 --price-per-gpu-hour 2.5",
        "ddpsim scale scenarios/a100-4x8-eth100-bert-large.yaml --nodes 1,2,4 --out reports/bert-scale",
    ))
    add_scenario_args(scale)
    scale.add_argument("--nodes", type=_int_list, required=True, metavar="N,N,...", help="e.g. 1,2,4,8,16")
    scale.add_argument("--price-per-gpu-hour", type=finite_float, metavar="PRICE", help="default: the scenario's")
    scale.add_argument("--json", action="store_true", help="print one JSON object on stdout, nothing else")
    scale.add_argument("--out", metavar="DIR",
                       help="write scaling.json, scaling.md, report.html, scaling_efficiency.png")
    scale.add_argument("--html", metavar="FILE", help="write the self-contained HTML report (plot inline) here")
    scale.set_defaults(handler=cmd_scale)

    var = add_command(subparsers, "variability", "step-time percentiles under jitter, stragglers, bad links", (
        "ddpsim variability scenarios/quickstart.yaml --iterations 50 --jitter-cv 0.05",
        "ddpsim variability scenarios/h100-2x8-ib400-gpt2.yaml --iterations 20 --straggler-rank 3 "
        "--straggler-slowdown 1.2 --out reports/straggler",
    ))
    add_scenario_args(var)
    var.add_argument("--iterations", type=int, required=True, metavar="K", help="steps to simulate")
    var.add_argument("--json", action="store_true", help="print one JSON object on stdout, nothing else")
    var.add_argument("--out", metavar="DIR", help="write variability.json and step_time_histogram.png")
    # each is also a scenario field (simulation.*): the flags only spare typing --set
    what = var.add_argument_group("what varies (the scenario's simulation section otherwise)")
    what.add_argument("--jitter-cv", type=finite_float, metavar="CV",
                      help="per-rank compute-time coefficient of variation")
    what.add_argument("--straggler-rank", type=int, metavar="R")
    what.add_argument("--straggler-slowdown", type=finite_float, metavar="F", help="e.g. 1.2 = 20%% slower compute")
    what.add_argument("--degraded-link-factor", type=finite_float, metavar="F",
                      help="fraction of bandwidth rank 0's link keeps")
    what.add_argument("--seed", type=int)
    var.set_defaults(handler=cmd_variability)


def cmd_sweep(args: argparse.Namespace) -> int:
    from ddpsim.planning.sweep import run_sweep

    if args.workers is not None and args.workers < 1:
        raise ScenarioError(f"must be at least 1, got {args.workers}", field="--workers")
    if args.dask and args.workers is not None:
        raise ScenarioError("--workers is for local processes; the Dask cluster has its own", field="--workers")
    try:
        outcome = run_sweep(
            args.scenario, args.grid, args.out, args.overrides, args.workers, args.dask, args.yes, sys.stderr,
            allow_other_gpu=args.allow_other_gpu,
        )
    except KeyboardInterrupt:
        # cli.main prints it on one line and exits 130
        raise KeyboardInterrupt(
            f"finished points are in {os.path.join(args.out, 'points')}; rerun the same command to resume"
        ) from None
    if args.html:
        from ddpsim.outdir import atomic_write_text

        with open(os.path.join(args.out, "report.html"), encoding="utf-8") as handle:
            atomic_write_text(args.html, handle.read())
    # a sweep with failed points is not an answer for every point: scripts must be able to tell
    status = EXIT_POINTS_FAILED if outcome.failed else 0
    if args.json:
        print_json(outcome.to_dict())
        return status
    print(
        f"{len(outcome.outcomes)} points: {outcome.computed} simulated, {outcome.reused} reused, "
        f"{outcome.failed} failed"
    )
    for o in outcome.outcomes:
        if o.status != "ok":
            values = ", ".join(f"{k}={v}" for k, v in o.point.values.items())
            print(f"  {o.status}: {values}: {o.error}")
    print(f"wrote {os.path.join(args.out, 'sweep.csv')}, sweep.json, report.md, report.html, points/"
          + (f"; {args.html}" if args.html else ""))
    return status


def cmd_tune_buckets(args: argparse.Namespace) -> int:
    from ddpsim.loader import load_scenario
    from ddpsim.planning.advisor import plot_curve, recommend_bucket_cap
    from ddpsim.units import format_time

    scenario = load_scenario(args.scenario, args.overrides, args.allow_other_gpu)
    if args.candidates is not None and not args.candidates:
        raise ScenarioError("expected positive caps in MiB (or 'default')", file=args.scenario, field="--candidates")
    rec = recommend_bucket_cap(scenario, args.candidates)
    data = document("tune-buckets", rec.to_dict(), scenario)
    if args.out:
        from ddpsim.outdir import atomic_dir

        with atomic_dir(args.out) as staging:
            plot_curve(rec, os.path.join(staging, "bucket_cap.png"))
            write_json(os.path.join(staging, "recommendation.json"), data)
    if args.json:
        print_json(data)
        return 0
    cap = "PyTorch's default" if rec.recommended_bucket_cap_mb is None else f"{rec.recommended_bucket_cap_mb:g} MiB"
    print(f"recommended bucket_cap_mb: {cap}")
    print(
        f"predicted step time: {format_time(rec.predicted_step_time_s)} "
        f"(PyTorch default: {format_time(rec.default_step_time_s)}, {rec.speedup:.3f}x)"
    )
    print(f"\nwhy: {rec.reason}")
    written = scenario.ddp.bucket_cap_mb
    mine = next((p for p in rec.curve if written is not None and p.bucket_cap_mb == written), None)
    if mine is not None:  # `ddpsim run` reports the scenario's own cap: say how it differs from the default
        print(f"your scenario's bucket_cap_mb: {written:g} (passed explicitly, so no 1 MiB first bucket): "
              f"{mine.n_buckets} buckets, {format_time(mine.step_time_s)}, as `ddpsim run` reports")
    print("\npaste:")
    print(f"    {rec.paste}")
    if rec.alternatives:
        print("\nat this cap, would these help more?")
        for alt in rec.alternatives:
            print(f"  {alt.setting:<30} {format_time(alt.step_time_s):>10}  {'yes' if alt.helps else 'no '}  {alt.note}")
            if alt.helps:
                print(f"      {alt.paste}")
    _say_where_plot(args.out, "bucket_cap.png")
    return 0


def cmd_tune_strategy(args: argparse.Namespace) -> int:
    from ddpsim.loader import load_scenario
    from ddpsim.planning.strategy import advise_strategy
    from ddpsim.report.tables import format_time, table

    scenario = load_scenario(args.scenario, args.overrides, args.allow_other_gpu)
    advice = advise_strategy(scenario)
    if args.json:
        print_json(document("tune-strategy", advice.to_dict(), scenario))
        return 0
    rows = [(o.strategy, format_time(o.step_time_s), f"{o.memory_bytes / 2**30:.1f} GiB",
             "yes" if o.fits else "NO", format_time(o.exposed_comm_s)) for o in advice.options]
    print(table(("strategy", "step", "memory per GPU", "fits", "exposed comm"), rows, False))
    print(f"\nrecommended: {advice.recommended or 'none'}: {advice.why}")
    return 0


def cmd_validate_fsdp(args: argparse.Namespace) -> int:
    from ddpsim.fitting.sharded_validate import compare_fsdp_runs, read_fsdp_runs
    from ddpsim.report.tables import format_time, table

    calibration = None
    if args.calibration:
        from ddpsim.calibration.file import read_calibration

        calibration = read_calibration(args.calibration)
    rows = compare_fsdp_runs(read_fsdp_runs(args.runs), calibration)
    if args.json:
        print_json(document("validate-fsdp", {
            "runs_file": args.runs, "calibration": args.calibration,
            "runs": [dict(vars(r), step_error=r.step_error, peak_error=r.peak_error) for r in rows]}))
        return 0

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{100 * value:+.1f}%"

    print(table(("run", "measured", "predicted", "error", "peak measured", "peak predicted", "error"), [
        (r.label, format_time(r.measured_step_s), format_time(r.predicted_step_s), pct(r.step_error),
         "-" if r.measured_peak_bytes is None else f"{r.measured_peak_bytes / 2**30:.2f} GiB",
         f"{r.predicted_peak_bytes / 2**30:.2f} GiB", pct(r.peak_error)) for r in rows], False))
    for strategy in sorted({r.strategy for r in rows}):
        errors = [abs(r.step_error) for r in rows if r.strategy == strategy]
        print(f"{strategy}: step error mean {100 * sum(errors) / len(errors):.1f}%, max {100 * max(errors):.1f}% "
              f"over {len(errors)} runs")
    # where each run's compute came from: a measured profile, or an estimate the user should know about
    for source in sorted({r.compute_from for r in rows}):
        print(f"compute of {sum(r.compute_from == source for r in rows)} runs: {source}")
    peaks = [abs(r.peak_error) for r in rows if r.peak_error is not None]
    if peaks:
        mean, worst = 100 * sum(peaks) / len(peaks), 100 * max(peaks)
        print(f"peak memory: mean |error| {mean:.1f}%, max {worst:.1f}% over {len(peaks)} runs "
              f"(tolerance --max-peak-error {args.max_peak_error:g}%)")
        if worst > args.max_peak_error:
            print(f"FAILED: a peak memory error of {worst:.1f}% > {args.max_peak_error:g}%")
            return 1
    return 0


def cmd_scale(args: argparse.Namespace) -> int:
    from ddpsim.loader import load_scenario
    from ddpsim.planning.scaling import plot_scaling, scaling_study, scaling_table

    scenario = load_scenario(args.scenario, args.overrides, args.allow_other_gpu)
    study = scaling_study(scenario, args.nodes, args.price_per_gpu_hour)
    data = document("scale", study.to_dict(), scenario)
    if args.out:
        from ddpsim.outdir import atomic_dir

        with atomic_dir(args.out) as staging:
            plot_scaling(study, os.path.join(staging, "scaling_efficiency.png"))
            write_json(os.path.join(staging, "scaling.json"), data)
            with open(os.path.join(staging, "report.html"), "w", encoding="utf-8") as handle:
                handle.write(_scale_html(study, args.scenario, os.path.join(staging, "scaling_efficiency.png")))
            with open(os.path.join(staging, "scaling.md"), "w", encoding="utf-8") as handle:
                handle.write(
                    f"# ddpsim scale: `{args.scenario}`\n\n{scaling_table(study, markdown=True)}\n\n"
                    "Efficiency: throughput per GPU relative to one node. Exposed comm: share of the step.\n"
                    f"Per-rank compute jitter: cv {study.jitter_cv:g} ({study.jitter_source}).\n\n"
                    "![scaling efficiency](scaling_efficiency.png)\n"
                )
    if args.html:
        _write_scale_html(study, args.scenario, args.html)
    if args.json:
        print_json(data)
        return 0
    print(scaling_table(study))
    print(f"per-rank compute jitter: cv {study.jitter_cv:g} ({study.jitter_source})")
    for warning in study.warnings:
        print(f"warning: {warning}")
    if study.price_per_gpu_hour is None:
        print("(no price: pass --price-per-gpu-hour or set price_per_gpu_hour in the scenario for cost)")
    _say_where_plot(args.out, "scaling_efficiency.png")
    return 0


def _scale_html(study: Any, scenario_path: str, png: str) -> str:
    from ddpsim.planning.scaling import scaling_table
    from ddpsim.report.html import report_html
    from ddpsim.schemas import ddpsim_version

    notes = ["Efficiency: throughput per GPU relative to one node. Exposed comm: share of the step."]
    notes += [f"warning: {w}" for w in study.warnings]
    return report_html(f"ddpsim scale: {scenario_path}", notes, scaling_table(study, markdown=True),
                       [(png, "Scaling efficiency")], meta=f"ddpsim {ddpsim_version()}")


def _write_scale_html(study: Any, scenario_path: str, path: str) -> None:
    import tempfile

    from ddpsim.outdir import atomic_write_text
    from ddpsim.planning.scaling import plot_scaling

    with tempfile.TemporaryDirectory(prefix="ddpsim-scale-") as folder:
        png = os.path.join(folder, "scaling_efficiency.png")
        plot_scaling(study, png)
        atomic_write_text(path, _scale_html(study, scenario_path, png))


def cmd_variability(args: argparse.Namespace) -> int:
    from ddpsim.loader import load_scenario
    from ddpsim.planning.scaling import (
        plot_variability,
        variability_overrides,
        variability_study,
        variability_table,
    )

    if args.iterations < 1:
        raise ScenarioError(f"must be at least 1, got {args.iterations}", file=args.scenario, field="--iterations")
    extra = variability_overrides(
        args.iterations, args.jitter_cv, args.straggler_rank, args.straggler_slowdown,
        args.degraded_link_factor, args.seed,
    )
    scenario = load_scenario(args.scenario, [*args.overrides, *extra], args.allow_other_gpu)
    study = variability_study(scenario, sys.stderr)
    data = document("variability", study.to_dict(), scenario)
    if args.out:
        from ddpsim.outdir import atomic_dir

        with atomic_dir(args.out) as staging:
            plot_variability(study, os.path.join(staging, "step_time_histogram.png"))
            write_json(os.path.join(staging, "variability.json"), data)
    if args.json:
        print_json(data)
        return 0
    print(variability_table(study, scenario))
    _say_where_plot(args.out, "step_time_histogram.png")
    return 0


def _say_where_plot(out: str | None, name: str) -> None:
    # without --out nothing is written: a command run in any folder leaves that folder as it was
    print(f"\nplot: {os.path.join(out, name)}" if out else f"\n(plot: pass --out DIR to write {name})")
