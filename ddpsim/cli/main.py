"""The ``ddpsim`` command. Thin: each subcommand parses arguments and calls the library."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ddpsim.cli import plan, run, validate
from ddpsim.errors import ScenarioError

EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ddpsim", description="Predict PyTorch DDP step time on a cluster.")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (run, plan, validate):
        module.register(sub)
    return parser


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
