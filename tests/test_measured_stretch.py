"""The all-reduce stretch inside DDP measured from per-bucket traces, beside the fitted one.

The last bucket of a step runs after backward has ended; its all-reduce (the harness's timing hook)
over the same size called alone (the campaign's sweep) is the stretch. Synthetic traces give the
expected ratio exactly; on real data the calibration reports it and, when asked, takes it unfitted.
"""

import json
import os
import shutil

import pytest

from ddpsim.fitting.calibrate import calibrate, load_measurements
from ddpsim.fitting.measurements import AllReduceSample
from ddpsim.fitting.overheads import measure_stretch
from ddpsim.jsonfile import data_path, open_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_stretch_is_the_last_buckets_time_over_the_same_size_alone(tmp_path):
    source = str(tmp_path / "camp" / "allreduce.jsonl")
    samples = [AllReduceSample("nvlink", 4, 1, 2**20 * k, 100e-6 * k, source) for k in (1, 2, 4, 8, 16)]
    def run(duration_s):
        return {"transport": "nvlink", "world_size": 4, "_source": str(tmp_path / "camp" / "ddp_runs.jsonl"),
                "per_bucket": [{"bytes": 2**20, "start_s": 0.0, "end_s": 1.0},  # overlapped: not used
                               {"bytes": 4 * 2**20, "start_s": 0.010, "end_s": 0.010 + duration_s}]}
    # 4 MiB alone: 400 us; inside DDP 600, 640 and 560 us -> median ratio 1.5
    out = measure_stretch([run(600e-6), run(640e-6), run(560e-6)], samples)
    assert out["nvlink"]["value"] == pytest.approx(1.5, rel=1e-9) and out["nvlink"]["runs"] == 3
    # between sweep sizes the time alone is interpolated in log space: 6 MiB alone is 600 us here
    between = {**run(900e-6), "per_bucket": [{"bytes": 6 * 2**20, "start_s": 0.0, "end_s": 900e-6}]}
    assert measure_stretch([between], samples)["nvlink"]["value"] == pytest.approx(1.5, rel=1e-9)
    # no sweep of that class and size: nothing measured, nothing claimed
    assert measure_stretch([{**run(600e-6), "transport": "shm"}], samples) == {}


def test_calibration_can_take_the_measured_stretch_unfitted(tmp_path):
    src = os.path.join(ROOT, "validation", "data", "h100x2-2026-11-26")
    camp = tmp_path / "camp"
    camp.mkdir()
    shutil.copytree(os.path.join(src, "profiles"), camp / "profiles")
    shutil.copy(str(data_path(os.path.join(src, "allreduce.jsonl"))), camp)
    with open_data(os.path.join(src, "ddp_runs.jsonl")) as handle:
        keep = [line for line in handle if json.loads(line)["transport"] == "nvlink" and json.loads(line)["model"] == "resnet50"]
    (camp / "ddp_runs.jsonl").write_text("".join(keep))
    measured = load_measurements([str(camp)])
    assert measured.timing_runs, "the campaign has per-bucket timing runs"
    stretch = measure_stretch(measured.timing_runs, measured.samples)["nvlink"]["value"]
    data = calibrate(measured.samples, measured.runs, measured.profiles, [5, 50], timing_runs=measured.timing_runs,
                     fix_measured_stretch=True)
    entry = data["overheads"]["nvlink"]
    assert entry["allreduce_stretch"] == stretch and "allreduce_stretch" not in entry["fitted_terms"]
    assert entry["measured_terms"] == ["allreduce_stretch"]
    assert data["measured_overheads"]["nvlink"]["allreduce_stretch"]["value"] == stretch
    # by default the stretch is fitted (it varies between machine allocations); the measurement is reported
    fitted = calibrate(measured.samples, measured.runs, measured.profiles, [5, 50], timing_runs=measured.timing_runs)
    assert "allreduce_stretch" in fitted["overheads"]["nvlink"]["fitted_terms"]
    assert "idle_start_wait_s" not in fitted["overheads"]["nvlink"]["fitted_terms"]
    # with the idle-start wait the stretch is neither fitted nor applied; the measurement is still reported
    waited = calibrate(measured.samples, measured.runs, measured.profiles, [5, 50], timing_runs=measured.timing_runs,
                       idle_start_wait=True)
    entry = waited["overheads"]["nvlink"]
    assert "allreduce_stretch" not in entry["fitted_terms"] and entry["allreduce_stretch"] == 1.0
    assert "idle_start_wait_s" in entry["fitted_terms"]
    assert waited["measured_overheads"]["nvlink"]["allreduce_stretch"]["value"] == stretch
    assert fitted["measured_overheads"]["nvlink"]["allreduce_stretch"]["value"] == stretch


def test_compute_slowdown_beside_nccl_is_reported_from_the_micro_benchmark():
    from statistics import median

    camp = os.path.join(ROOT, "validation", "data", "h200x4-options-2026-11-26")
    with open_data(os.path.join(camp, "microbench.jsonl")) as handle:
        ratios = [r["kernel_slowdown_ratio"] for r in map(json.loads, handle) if r.get("bench") == "allreduce_overlap"]
    assert len(ratios) == 6 and all(1.0 < x < 1.2 for x in ratios)
    measured = load_measurements([camp])
    data = calibrate(measured.samples, measured.runs, measured.profiles, [25], links_only=True,
                     compute_slowdowns=measured.compute_slowdowns)
    entry = data["measured_overheads"]["nvlink"]["compute_slowdown"]
    assert entry["value"] == pytest.approx(median(ratios), rel=1e-12) and entry["runs"] == 6
