"""The measured error of ddpsim's predicted effect of each DDP option, as the advisor reads it.

The rows are package data (``data/option_errors.json``), written by ``benchmarks/option_effects.py
--write`` with ``format_table`` and read once at import. Per option: every run's predicted and measured
ratio (option step / none step), the RMS of (predicted - measured) over them, and the median repeat
noise of the pairs (the larger relative gap between the two rounds of the option's and the none run).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, TypedDict

DATA_FILE = "data/option_errors.json"
_RUN_FIELDS = ("campaign", "launch_id", "measured_ratio", "model", "predicted_ratio", "repeat_noise", "transport",
               "world_size")
_OPTION_FIELDS = ("median_repeat_noise", "n", "rms_error", "runs")


class OptionRun(TypedDict):
    campaign: str
    launch_id: str
    measured_ratio: float
    model: str
    predicted_ratio: float
    repeat_noise: float | None  # None: a launch that ran out of time for a second round
    transport: str
    world_size: int


class OptionError(TypedDict):
    rms_error: float
    median_repeat_noise: float | None
    n: int
    runs: list[OptionRun]


def format_table(source: str, calibration: str, table: dict[str, OptionError]) -> str:
    """The data file's text: one run per line, so that a rewrite diffs row by row."""
    lines = ["{", f' "source": {json.dumps(source)},', f' "calibration": {json.dumps(calibration)},', ' "options": {']
    for i, (option, entry) in enumerate(sorted(table.items())):
        head = {"median_repeat_noise": entry["median_repeat_noise"], "n": entry["n"], "rms_error": entry["rms_error"]}
        lines.append(f"  {json.dumps(option)}: {json.dumps(head, sort_keys=True)[:-1]}, \"runs\": [")
        runs = [json.dumps(run, sort_keys=True) for run in entry["runs"]]
        lines += [f"   {run}," for run in runs[:-1]] + [f"   {run}" for run in runs[-1:]]
        lines.append("  ]}" + ("," if i < len(table) - 1 else ""))
    lines += [" }", "}", ""]
    return "\n".join(lines)


def parse_table(text: str, where: str = DATA_FILE) -> tuple[str, dict[str, OptionError]]:
    """(source, table) from the data file's text; a missing field names the option and the field."""
    data: dict[str, Any] = json.loads(text)
    options = data["options"]
    for option, entry in options.items():
        for name in _OPTION_FIELDS:
            if name not in entry:
                raise ValueError(f"{where}: options.{option}.{name} missing")
        for i, run in enumerate(entry["runs"]):
            missing = [name for name in _RUN_FIELDS if name not in run]
            if missing:
                raise ValueError(f"{where}: options.{option}.runs[{i}].{missing[0]} missing")
    return str(data["source"]), options


def _read() -> tuple[str, dict[str, OptionError]]:
    text = resources.files("ddpsim.planning").joinpath(DATA_FILE).read_text(encoding="utf-8")
    return parse_table(text)


# which campaigns the table was measured on, in words (the advisor quotes it)
SOURCE, OPTION_ERRORS = _read()
