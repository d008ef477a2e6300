"""Arguments every scenario-taking subcommand shares."""

from __future__ import annotations

import argparse
import math


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
