"""The device a measurement folder was taken on travels with it: a CPU dry run (``ddpsim measure
--cpu-slots``) checks the harness, not a GPU, so nothing fitted, re-centred or validated may come from it,
whatever the flags (``--allow-other-gpu`` lets a calibration drive another GPU kind; a CPU is no GPU kind).

A folder says it is a dry run in two places: its ``plan.json`` (``cpu_dry_run: true``) and every record's
``fingerprint.gpu_name`` (``cpu``). Either is enough. The harness's other record files (``launches.jsonl``,
``profile_failures.jsonl``) are read here too: a folder with one of them damaged is a damaged copy, refused
naming the file rather than fitted as if whole.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from ddpsim.errors import ScenarioError
from ddpsim.fitting.measurements import read_jsonl
from ddpsim.jsonfile import data_name, open_data

DRY_RUN = ("a CPU dry run (ddpsim measure --cpu-slots), which checks the harness, not a GPU: ddpsim fits and "
           "predicts the GPUs of its catalog; measure on a GPU host to calibrate or validate")
# the harness's record files that no fit reads but that a whole folder holds readable
_RECORD_FILES = ("launches.jsonl", "profile_failures.jsonl")
_FINGERPRINTED = ("allreduce.jsonl", "ddp_runs.jsonl", "netprobe.jsonl", "microbench.jsonl", "fsdp_runs.jsonl")


def refuse_dry_runs(folders: Sequence[str], option: str = "data_dir") -> None:
    """ScenarioError naming the first file under ``folders`` that says it was measured on CPU slots, or
    a harness record file that is not readable JSON lines; nothing otherwise."""
    for folder in folders:
        if not os.path.isdir(folder):
            continue  # the readers say "not found" in their own words
        for root, _dirs, files in sorted(os.walk(folder)):
            for name in sorted({data_name(name) for name in files}):  # a committed record file may be .gz
                path = os.path.join(root, name)
                if name == "plan.json":
                    _check_plan(path, option)
                elif name in _RECORD_FILES:
                    read_jsonl(path)  # a damaged file: one line naming it (ScenarioError)
                elif name in _FINGERPRINTED:
                    _check_records(path)


def _check_plan(path: str, option: str) -> None:
    try:
        with open(path, encoding="utf-8") as handle:
            plan = json.load(handle)
    except (OSError, UnicodeDecodeError, ValueError):
        raise ScenarioError("not readable JSON (the measurement's plan)", file=path, field=option) from None
    if isinstance(plan, dict) and plan.get("cpu_dry_run") is True:
        raise ScenarioError(f"the folder is {DRY_RUN}", file=path, field="cpu_dry_run")


def _check_records(path: str) -> None:
    try:
        with open_data(path) as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError, EOFError):
        return  # the file's own reader names it
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line) if line.strip() else None
        except ValueError:
            continue  # the file's own reader names a bad line
        fingerprint = record.get("fingerprint") if isinstance(record, dict) else None
        gpu = fingerprint.get("gpu_name") if isinstance(fingerprint, dict) else None
        if isinstance(gpu, str) and gpu.strip().lower() == "cpu":
            raise ScenarioError(f"measured on {DRY_RUN}", file=path, field=f"line {number}.fingerprint.gpu_name")
