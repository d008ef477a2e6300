"""The option-error table is package data: it loads, has the shape the advisor reads, and a wheel carries it."""

from __future__ import annotations

import fnmatch
import json
import math
import pathlib
import tomllib

import pytest

from ddpsim.planning import option_errors
from ddpsim.planning.advisor import judge
from ddpsim.planning.option_errors import DATA_FILE, OPTION_ERRORS, SOURCE, format_table, parse_table

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA_PATH = ROOT / "ddpsim" / "planning" / DATA_FILE
# the option names advisor.alternatives() passes to judge() (its add(..., option) calls)
ADVISOR_OPTIONS = {"gbv", "bf16", "fp16", "find_unused"}


def test_the_data_file_is_plain_json_beside_the_module():
    assert DATA_PATH.is_file()
    assert DATA_PATH.parent == pathlib.Path(option_errors.__file__).parent / "data"
    raw = json.loads(DATA_PATH.read_text())
    assert raw["source"] == SOURCE and set(raw["options"]) == set(OPTION_ERRORS)
    # the Python module holds no rows any more
    assert len(pathlib.Path(option_errors.__file__).read_text().splitlines()) < 150


def test_every_option_the_advisor_judges_has_an_entry_of_the_right_shape():
    assert ADVISOR_OPTIONS <= set(OPTION_ERRORS)
    for option, entry in OPTION_ERRORS.items():
        runs = entry["runs"]
        assert entry["n"] == len(runs) > 0, option
        assert isinstance(entry["rms_error"], float) and 0 < entry["rms_error"] < 1
        noises = sorted(r["repeat_noise"] for r in runs if r["repeat_noise"] is not None)
        # the median as benchmarks/option_effects.py takes it: the upper middle element
        assert entry["median_repeat_noise"] == pytest.approx(noises[len(noises) // 2], abs=1e-4)
        for run in runs:
            assert isinstance(run["campaign"], str) and isinstance(run["launch_id"], str)
            assert isinstance(run["model"], str) and run["transport"] in {"nvlink", "socket", "shm", "pcie"}
            assert isinstance(run["world_size"], int) and run["world_size"] >= 2
            assert math.isfinite(run["measured_ratio"]) and run["measured_ratio"] > 0
            assert math.isfinite(run["predicted_ratio"]) and run["predicted_ratio"] > 0
        # the advisor quotes this entry's error and run count
        assert f"over {entry['n']} runs" in judge(0.0, option)[1]


def test_the_writer_writes_back_the_shipped_file_byte_for_byte():
    text = DATA_PATH.read_text()
    source, table = parse_table(text)
    raw = json.loads(text)
    assert format_table(source, raw["calibration"], table) == text


def test_a_missing_field_is_named():
    raw = json.loads(DATA_PATH.read_text())
    del raw["options"]["bf16"]["runs"][3]["measured_ratio"]
    with pytest.raises(ValueError, match=r"options\.bf16\.runs\[3\]\.measured_ratio missing"):
        parse_table(json.dumps(raw))
    raw = json.loads(DATA_PATH.read_text())
    del raw["options"]["fp16"]["rms_error"]
    with pytest.raises(ValueError, match=r"options\.fp16\.rms_error missing"):
        parse_table(json.dumps(raw))


def test_the_wheel_carries_the_data_file():
    # the package list is setup.py's; tests/test_packaging.py builds the wheel and finds this file in it
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = config["package-data"]["ddpsim"]
    relative = DATA_PATH.relative_to(ROOT / "ddpsim").as_posix()
    assert any(fnmatch.fnmatch(relative, pattern) for pattern in patterns), (relative, patterns)
