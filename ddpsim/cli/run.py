"""``ddpsim run``: simulate one scenario and print (or write) its report."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ddpsim.cli.args import add_command, add_scenario_args
from ddpsim.results import Result


def register(sub: Any) -> None:
    run = add_command(sub, "run", "simulate one DDP training step", (
        "ddpsim run scenarios/quickstart.yaml",
        "ddpsim run scenarios/h100-2x8-ib400-gpt2.yaml --set ddp.bucket_cap_mb=100 --out reports/gpt2",
    ))
    add_scenario_args(run)
    run.add_argument("--json", action="store_true", help="print one JSON object on stdout, nothing else")
    run.add_argument("--trace", metavar="PATH", help=(
        "write a trace in torch.profiler's shape: FILE, every rank in one (Perfetto); DIR/ or an existing "
        "folder, one file per rank (Holistic Trace Analysis' trace_dir)"))
    run.add_argument("--out", metavar="DIR", help="write result.json, timeline.png and summary.md")
    run.set_defaults(handler=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    from ddpsim.loader import load_scenario
    from ddpsim.report.tables import bucket_table, summary_table
    from ddpsim.simulation import communication_bound, prepare, simulate

    prepared = prepare(load_scenario(args.scenario, args.overrides, args.allow_other_gpu))
    result = simulate(prepared, progress=sys.stderr)
    # which links bound the all-reduce: why a faster network changes nothing (a what-if's answer); a line
    # of the report, not a field of result.json
    bound = communication_bound(prepared)
    traces: list[str] = []
    if args.trace:
        from ddpsim.report.trace import write_trace

        traces = write_trace(result, args.trace)
    if args.out:
        _write_run_dir(result, args.out, bound)
    if args.json:
        print(result.to_json())
        return 0
    print(summary_table(result))
    print()
    print(collective_table(result) if result.collectives else bucket_table(result))
    for warning in result.warnings:
        print(f"warning: {warning}")
    if bound:
        print(f"communication: {bound}")
    if args.out:
        print(f"\nwrote {os.path.join(args.out, 'result.json')}, timeline.png, summary.md")
    if traces and os.path.isdir(args.trace):
        print(f"wrote {len(traces)} rank trace(s) into {args.trace} (HTA's trace_dir)")
    return 0


def collective_table(result: Result, markdown: bool = False) -> str:
    """A sharded step's collectives by kind: how many, their bytes and their time (rank 0)."""
    from ddpsim.report.tables import format_bytes, format_time, table

    kinds: dict[str, list[float]] = {}
    for c in result.collectives:
        count_bytes_time = kinds.setdefault(c.kind, [0, 0.0, 0.0])
        count_bytes_time[0] += 1
        count_bytes_time[1] += c.bytes
        count_bytes_time[2] += c.end_s - c.start_s
    rows = [(kind, int(n), format_bytes(b), format_time(t)) for kind, (n, b, t) in kinds.items()]
    return table(("collective", "calls", "bytes", "time"), rows, markdown)


def _write_run_dir(result: Result, out: str, bound: str = "") -> None:
    from ddpsim.outdir import atomic_dir
    from ddpsim.report.plots import timeline_png
    from ddpsim.report.tables import bucket_table, summary_table

    with atomic_dir(out) as staging:
        with open(os.path.join(staging, "result.json"), "w", encoding="utf-8") as handle:
            handle.write(result.to_json())
        timeline_png(result, os.path.join(staging, "timeline.png"))
        warnings = "".join(f"\n> **warning:** {w}\n" for w in result.warnings)
        text = (
            f"# ddpsim: {result.model} on {result.world_size} x {result.gpu}\n\n"
            f"Scenario: `{result.scenario}`\n{warnings}\n## Summary\n\n{summary_table(result, markdown=True)}\n\n"
            + (f"## Collectives (rank 0)\n\n{collective_table(result, markdown=True)}\n\n" if result.collectives else
               f"## Buckets (launch order)\n\n{bucket_table(result, markdown=True)}\n\n")
            + (f"Communication: {bound}\n\n" if bound else "")
            + "![timeline](timeline.png)\n"
        )
        with open(os.path.join(staging, "summary.md"), "w", encoding="utf-8") as handle:
            handle.write(text)


