"""Arguments every scenario-taking subcommand shares, and the one way a subcommand is declared."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any


def add_command(sub: Any, name: str, summary: str, examples: tuple[str, str]) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` ends with two command lines a reader can paste and adapt."""
    epilog = "examples:\n" + "\n".join(f"  {line}" for line in examples)
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=summary, description=summary[:1].upper() + summary[1:] + ".", epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def add_scenario_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario YAML file")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
        help="override a scenario field, e.g. --set ddp.bucket_cap_mb=5 (repeatable)",
    )


def finite_float(text: str) -> float:
    """An argparse type: a float that is a number (``nan`` and ``inf`` parse as floats but mean nothing here)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def nonnegative_float(text: str) -> float:
    """An argparse type: a finite number of 0 or more (a tolerance in percent)."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {text!r}")
    return value


def share(text: str) -> float:
    """An argparse type: a fraction from 0 to 1."""
    value = finite_float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a share from 0 to 1, got {text!r}")
    return value


def print_json(data: Any) -> None:
    """A ``--json`` answer: one JSON object on stdout and nothing else."""
    print(json.dumps(data, indent=2))


def write_json(path: str, data: Any) -> None:
    """A JSON document into a file of an ``--out`` folder's staging (the folder appears whole or not at all)."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(data, indent=2) + "\n")
