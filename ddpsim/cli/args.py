"""Arguments every scenario-taking subcommand shares, and the one way a subcommand is declared."""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any

SCENARIO_SUFFIX = ".yaml"


def add_command(sub: Any, name: str, summary: str, examples: tuple[str, str]) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` ends with two command lines a reader can paste and adapt."""
    epilog = "examples:\n" + "\n".join(f"  {line}" for line in examples)
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=summary, description=summary[:1].upper() + summary[1:] + ".", epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def add_scenario_args(parser: argparse.ArgumentParser, allow_other_gpu: bool = True) -> None:
    parser.add_argument("scenario", type=scenario_path,
                        help="scenario YAML file, or the name of a bundled example (quickstart, ...)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
        help="override a scenario field, e.g. --set ddp.bucket_cap_mb=5 (repeatable; a calibration path given "
             "here is relative to the current folder)",
    )
    if allow_other_gpu:
        add_allow_other_gpu(parser)


def add_allow_other_gpu(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-other-gpu", action="store_true",
                        help="use a calibration measured on another GPU kind than the cluster's or the data's "
                             "(refused otherwise; the output says so in a from: row)")


def bundled_scenarios() -> Path | None:
    """The example scenarios' folder: ``ddpsim/scenarios`` in an installed wheel (pyproject maps the
    repository's ``scenarios/`` there), ``scenarios/`` beside the package in a source checkout."""
    package = Path(__file__).resolve().parent.parent
    return next((folder for folder in (package / "scenarios", package.parent / "scenarios") if folder.is_dir()), None)


def scenario_path(text: str) -> str:
    """An argparse type: a path as given, or a bare name (``quickstart``) of a bundled example when no
    such file exists here. A file of that name in the current folder wins over the example."""
    if os.path.exists(text) or os.sep in text or "/" in text:
        return text
    folder = bundled_scenarios()
    stem = text.removesuffix(SCENARIO_SUFFIX)
    if folder is not None and (folder / (stem + SCENARIO_SUFFIX)).is_file():
        return str(folder / (stem + SCENARIO_SUFFIX))
    if text.endswith((".yaml", ".yml")):
        return text  # a missing file: the loader names it
    names = sorted(p.name.removesuffix(SCENARIO_SUFFIX) for p in folder.glob("*" + SCENARIO_SUFFIX)) if folder else []
    raise argparse.ArgumentTypeError(f"no file {text!r} and no bundled scenario of that name "
                                     f"(bundled: {', '.join(names) or 'none'})")


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
