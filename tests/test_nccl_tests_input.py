"""nccl-tests `all_reduce_perf` text as calibration input: the committed text files hold the same
measurements as the harness's JSON, so both readers must agree; the CLI calibrates from text alone."""

import json
import os

import pytest

from ddpsim.calibration.measurements import read_harness_allreduce, read_nccl_tests
from ddpsim.cli import main
from ddpsim.errors import ScenarioError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "validation", "data", "h200x4-2026-11-26")


@pytest.mark.parametrize("transport, world", [("nvlink", 2), ("shm", 4), ("socket", 4)])
def test_text_and_json_agree(transport, world):
    text = read_nccl_tests(os.path.join(DATA, f"allreduce_{transport}_w{world}.txt"), transport, world)
    from_json = [
        s for s in read_harness_allreduce(os.path.join(DATA, "allreduce.jsonl"))
        if s.link_class == transport and s.world_size == world
    ]
    assert [s.bytes for s in text] == [s.bytes for s in from_json]
    for a, b in zip(text, from_json, strict=True):
        assert a.time_s == pytest.approx(b.time_s, rel=0.01)  # the text keeps 2 decimals of microseconds


def test_calibrate_from_nccl_tests_text(tmp_path, capsys):
    out = tmp_path / "cal.json"
    specs = [f"{os.path.join(DATA, f'allreduce_nvlink_w{w}.txt')}:nvlink:{w}" for w in (2, 4)]
    args = ["calibrate", "--links-only", "--out", str(out)]
    for spec in specs:
        args += ["--nccl-tests", spec]
    assert main(args) == 0
    calibration = json.loads(out.read_text())
    nvlink = calibration["link_classes"]["nvlink"]
    # 1 GiB on 4 GPUs measured 356.6 GB/s bus bandwidth: the fitted curve's largest busbw is near it
    assert 300e9 < nvlink["bandwidth_Bps"] < 420e9
    assert nvlink["fit_mean_error_pct"] < 15


def test_bad_nccl_tests_file(tmp_path):
    bad = tmp_path / "perf.txt"
    bad.write_text("# nothing here\n")
    with pytest.raises(ScenarioError, match="no all_reduce_perf rows"):
        read_nccl_tests(str(bad), "nvlink", 2)
    assert main(["calibrate", "--nccl-tests", f"{bad}:nvlink", "--out", str(tmp_path / "c.json")]) == 2
    assert not (tmp_path / "c.json").exists()
