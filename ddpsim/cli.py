"""The ``ddpsim`` command. Thin: each subcommand parses arguments and calls the library."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from ddpsim.errors import ScenarioError

EXIT_BAD_INPUT = 2


def add_scenario_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario YAML file")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
        help="override a scenario field, e.g. --set ddp.bucket_cap_mb=5 (repeatable)",
    )


def _cmd_run(args: argparse.Namespace) -> int:
    from ddpsim.report.tables import bucket_table, summary_table
    from ddpsim.scenario import load_scenario
    from ddpsim.simulation import simulate

    result = simulate(load_scenario(args.scenario, args.overrides))
    if args.trace:
        from ddpsim.outdir import atomic_write_text

        atomic_write_text(args.trace, json.dumps(result.chrome_trace()))
    if args.out:
        _write_run_dir(result, args.out)
    if args.json:
        print(result.to_json())
        return 0
    print(summary_table(result))
    print()
    print(bucket_table(result))
    for warning in result.warnings:
        print(f"warning: {warning}")
    if args.out:
        print(f"\nwrote {os.path.join(args.out, 'result.json')}, timeline.png, summary.md")
    return 0


def _write_run_dir(result, out: str) -> None:
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
            f"## Buckets (launch order)\n\n{bucket_table(result, markdown=True)}\n\n"
            "![timeline](timeline.png)\n"
        )
        with open(os.path.join(staging, "summary.md"), "w", encoding="utf-8") as handle:
            handle.write(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ddpsim", description="Predict PyTorch DDP step time on a cluster.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="simulate one DDP training step")
    add_scenario_args(run)
    run.add_argument("--json", action="store_true", help="print one JSON object on stdout, nothing else")
    run.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace of every rank")
    run.add_argument("--out", metavar="DIR", help="write result.json, timeline.png and summary.md")
    run.set_defaults(handler=_cmd_run)

    for register in _extra_commands():
        register(sub)
    return parser


def _extra_commands():
    """Subcommands owned by other modules, each registering its own parser."""
    registers = []
    for module_name in ("ddpsim.cli_plan", "ddpsim.cli_validate"):
        try:
            module = __import__(module_name, fromlist=["register"])
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        registers.append(module.register)
    return registers


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except ScenarioError as exc:
        print(f"ddpsim: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        # an output path that cannot be written (a file where a folder should be, no permission)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"ddpsim: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
