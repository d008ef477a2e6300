"""`ddpsim calibrate DIR --recentre POOLED`: a pooled calibration re-centred on a fresh allocation's probe."""

import json
import os

import pytest

from ddpsim.calibration.file import read_calibration
from ddpsim.cli.main import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POOLED = os.path.join(ROOT, "ddpsim", "calibration", "shipped", "pooled-h200.json")
PROBE = os.path.join(ROOT, "validation", "data", "h200x2-measure-2026-11-27b")


def test_recentre_takes_the_probe_sweeps_and_keeps_the_pooled_overheads(tmp_path, capsys):
    out = tmp_path / "probed.json"
    assert main(["calibrate", PROBE, "--recentre", POOLED, "--out", str(out)]) == 0
    written, pooled = json.loads(out.read_text()), json.loads(open(POOLED).read())
    assert written["probed_from"]["folders"] == ["h200x2-measure-2026-11-27b"]
    # the folder's plain DDP runs set one overhead level per class (issue #39): the host times scale by it,
    # the other terms stay the pooled ones
    levels = {x["overhead_class"]: x["level"] for x in written["probed_from"]["overheads"]}
    assert set(levels) == {"nvlink", "shm", "socket"}
    for link_class, level in levels.items():
        entry, base = (d["overheads"][link_class] for d in (written, pooled))
        scaled, before = entry["by_world_size"]["2"], (base.get("by_world_size") or {}).get("2", base)
        assert scaled["bucket_cpu_s"] == pytest.approx(before["bucket_cpu_s"] * level)
        assert scaled["comm_slowdown"] == before["comm_slowdown"] and scaled["buffer_sync_s"] == before["buffer_sync_s"]
    assert written["overheads"]["net"] == pooled["overheads"]["net"]  # no run across nodes in the folder
    assert written["link_classes"]["socket"] != pooled["link_classes"]["socket"]
    read_calibration(str(out))  # what was written reads back
    assert "net: not in the probe" in capsys.readouterr().err


@pytest.mark.parametrize("extra, field", [(["--links-only"], "--links-only"),
                                          (["--calibration-caps", "5"], "--calibration-caps")])
def test_recentre_refuses_what_it_would_ignore(tmp_path, capsys, extra, field):
    out = tmp_path / "probed.json"
    assert main(["calibrate", PROBE, "--recentre", POOLED, "--out", str(out), *extra]) == 2
    assert field in capsys.readouterr().err and not out.exists()


def test_recentre_needs_a_probe_with_sweeps(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["calibrate", str(empty), "--recentre", POOLED, "--out", str(tmp_path / "p.json")]) == 2
    assert "no ddp_runs.jsonl or allreduce.jsonl under this folder" in capsys.readouterr().err
