"""The calibration is a value read once at the boundary: the simulation never touches the file."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from ddpsim import load_scenario, simulate
from ddpsim.calibration.file import SCHEMA, read_calibration
from ddpsim.errors import ScenarioError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CALIBRATION = os.path.join(REPO, "ddpsim", "calibration", "shipped", "x4-h200.json")
SCENARIO = """
workload: {model: mlp, batch_size: 8}
cluster: {gpu: H200, nodes: 1, gpus_per_node: 4, intra_node: {type: nvswitch}}
calibration: cal.json
"""


def _scenario(tmp_path):
    shutil.copy(CALIBRATION, tmp_path / "cal.json")
    (tmp_path / "s.yaml").write_text(SCENARIO)
    return load_scenario(str(tmp_path / "s.yaml"))


def test_simulate_runs_after_the_calibration_file_is_deleted(tmp_path):
    scenario = _scenario(tmp_path)
    before = simulate(scenario).step_time_s
    os.remove(tmp_path / "cal.json")
    assert simulate(scenario).step_time_s == before


def test_calibration_changes_the_prediction_by_its_terms(tmp_path):
    """The buffer broadcast before forward is serial on every rank: the calibration's buffer_sync_s is added
    to the step one for one. Two copies of the shipped calibration, every NVLink entry's buffer_sync_s at 0
    and at the file's own value; the steps differ by exactly that value."""
    with open(CALIBRATION) as handle:
        data = json.load(handle)
    sync_s = data["overheads"]["nvlink"]["buffer_sync_s"]
    assert sync_s > 1e-4  # large enough to see against float rounding
    profile = {
        "schema": "ddpsim.profile/1", "model": "tiny-bn", "batch_size": 8, "precision": "fp32", "seq_len": None,
        "fingerprint": {"gpu": "NVIDIA H200"}, "forward_s": 0.002, "backward_s": 0.004, "optimizer_s": 0.001,
        "step_s": 0.007, "iterations": 20, "buffers_bytes": 8192,
        "params": [{"name": "0.weight", "numel": 4096, "dtype": "float32", "grad_ready_s": 0.004, "ready_order": 1},
                   {"name": "1.weight", "numel": 4096, "dtype": "float32", "grad_ready_s": 0.002, "ready_order": 0}],
    }
    (tmp_path / "tiny.json").write_text(json.dumps(profile))
    steps = []
    for value in (0.0, sync_s):
        for sub in [data["overheads"]["nvlink"], *data["overheads"]["nvlink"].get("by_world_size", {}).values()]:
            sub["buffer_sync_s"] = value
        (tmp_path / "cal.json").write_text(json.dumps(data))
        (tmp_path / "s.yaml").write_text(SCENARIO.replace("{model: mlp, batch_size: 8}",
                                                          "{model: 'profile:tiny.json', batch_size: 8}"))
        steps.append(simulate(load_scenario(str(tmp_path / "s.yaml"))).step_time_s)
    assert steps[1] - steps[0] == pytest.approx(sync_s, rel=1e-9)


def test_version_1_files_store_slowdowns_as_extra_fractions(tmp_path):
    with open(CALIBRATION) as handle:
        data = json.load(handle)
    assert data["schema"] == SCHEMA
    v1 = json.loads(json.dumps(data))
    v1["schema"] = "ddpsim.calibration/1"
    for entry in v1["overheads"].values():
        for sub in [entry, *entry.get("by_world_size", {}).values()]:
            sub["compute_slowdown"] -= 1.0
            sub["comm_slowdown"] -= 1.0
    (tmp_path / "v1.json").write_text(json.dumps(v1))
    old, new = read_calibration(str(tmp_path / "v1.json")), read_calibration(CALIBRATION)
    for link_class in data["overheads"]:
        for world in (2, 4):
            assert old.overhead_values(link_class, world) == pytest.approx(new.overhead_values(link_class, world))


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d["link_classes"]["nvlink"].__setitem__("bandwidth_Bps", float("nan")), "link_classes.nvlink.bandwidth_Bps"),
        (lambda d: d["overheads"]["nvlink"].__setitem__("comm_slowdown", 0.5), "overheads.nvlink.comm_slowdown"),
        (lambda d: d.__setitem__("schema", "other"), "schema"),
    ],
)
def test_a_bad_calibration_fails_when_read_naming_the_field(tmp_path, mutate, field):
    with open(CALIBRATION) as handle:
        data = json.load(handle)
    mutate(data)
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ScenarioError) as info:
        read_calibration(str(tmp_path / "bad.json"))
    assert info.value.field == field


def test_a_calibrated_run_reports_its_measured_spread_and_sources(tmp_path):
    import math

    with open(CALIBRATION) as handle:
        noise = json.load(handle)["noise"]["nvlink"]
    result = simulate(_scenario(tmp_path))
    sigma = math.hypot(noise["step_sigma"], noise["launch_sigma"])
    assert result.step_time_p90_s / result.step_time_s == pytest.approx(math.exp(1.2815515655446004 * sigma))
    assert result.step_time_p10_s < result.step_time_s < result.step_time_p90_s
    assert "link_classes.nvlink.by_world_size.4" in result.value_sources["intra_node_link"]
    assert "overheads.nvlink" in result.value_sources["ddp_overheads"]
