"""Arguments every scenario-taking subcommand shares."""

from __future__ import annotations

import argparse


def add_scenario_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario YAML file")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
        help="override a scenario field, e.g. --set ddp.bucket_cap_mb=5 (repeatable)",
    )
