"""The probe's DDP steps re-centre the pooled DDP overhead terms (issue #39; fitting/probe_overheads.py).

Real data: the probe of allocation PL (validation/data/h200x2-probe-2026-11-28, 2 x H200) and the shipped
pooled H200 calibration. The expected numbers are the measured steps in the probe's records, read here from
the file, and the scaled terms worked out by hand."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from ddpsim.calibration.file import calibration_from_dict
from ddpsim.fitting.calibrate import load_measurements
from ddpsim.fitting.probe_overheads import probe_runs, scaled_terms
from ddpsim.fitting.recentre import probe_calibration
from ddpsim.fitting.validate import predict_run
from ddpsim.jsonfile import data_path, open_data, read_json_object

PROBE = "validation/data/h200x2-probe-2026-11-28"
POOLED = "ddpsim/calibration/shipped/pooled-h200.json"


def test_the_level_scales_host_times_and_floors_the_slowdowns_at_one():
    entry = {"bucket_launch_s": 2e-4, "bucket_cpu_s": 1e-4, "compute_slowdown": 1.2, "allreduce_stretch": 1.05,
             "buffer_sync_s": 1e-3}
    half = scaled_terms(entry, 0.5)
    assert half["bucket_launch_s"] == pytest.approx(1e-4) and half["bucket_cpu_s"] == pytest.approx(5e-5)
    assert half["compute_slowdown"] == 1.0 and half["allreduce_stretch"] == 1.0  # 0.6 and 0.525: floored
    assert half["buffer_sync_s"] == 1e-3  # not a host-per-bucket time: untouched
    double = scaled_terms(entry, 2.0)
    assert double["compute_slowdown"] == pytest.approx(2.4) and double["allreduce_stretch"] == pytest.approx(2.1)
    assert scaled_terms(entry, 3.0)["compute_slowdown"] == 3.0  # 3.6 past the fitted range's top (3)
    assert scaled_terms(entry, 1.0) == entry


def _probe_copy(tmp_path, scale_socket: float = 1.0, runs: bool = True) -> str:
    folder = tmp_path / "probe"
    shutil.copytree(PROBE, folder)
    # the committed runs are compressed; the copy keeps the plain file only, edited or removed below
    stored = data_path(str(folder / "ddp_runs.jsonl"))
    text = open_data(str(folder / "ddp_runs.jsonl")).read()
    if stored and stored.endswith(".gz"):
        os.unlink(stored)
    lines = []
    for line in text.splitlines():
        run = json.loads(line)
        if run.get("transport") == "socket" and run.get("status") == "ok" and run.get("nodes", 1) == 1:
            for key in ("step_s_median", "step_s_p10", "step_s_p90"):
                if isinstance(run.get(key), float):
                    run[key] *= scale_socket
        lines.append(json.dumps(run))
    if runs:
        (folder / "ddp_runs.jsonl").write_text("\n".join(lines) + "\n")
    return str(folder)


def _socket_run(folder: str) -> tuple[object, dict]:
    measured = load_measurements([folder])
    (run,) = [r for r in probe_runs(measured) if r["transport"] == "socket"]
    return measured, run


@pytest.mark.parametrize("scale", [1.0, 1.1])
def test_the_probes_socket_step_is_predicted_as_measured_after_recentring(tmp_path, scale):
    base = read_json_object(POOLED, "calibration", field="calibration")
    folder = _probe_copy(tmp_path, scale_socket=scale)
    out, _notes = probe_calibration(base, [folder])
    measured, run = _socket_run(folder)
    with open_data(f"{PROBE}/ddp_runs.jsonl") as f:
        expected_s = scale * next(r["step_s_median"] for r in map(json.loads, f)
                                  if r.get("transport") == "socket" and r.get("status") == "ok")
    predicted = predict_run(measured, run, calibration_from_dict(out, "<probed>")).predicted_s
    assert predicted == pytest.approx(expected_s, rel=0.005)
    levels = {x["overhead_class"]: x for x in out["probed_from"]["overheads"]}
    assert set(levels) == {"shm", "socket"}  # the classes the probe ran DDP steps of; NVLink's launch skipped
    assert out["overheads"]["nvlink"] == base["overheads"]["nvlink"]
    # 10% slower measured than the unscaled probe: a higher level (the level at 1.0 is about 1.13)
    assert (levels["socket"]["level"] > 1.2) == (scale > 1.0)


def test_a_probe_without_ddp_steps_keeps_the_pooled_overheads(tmp_path):
    base = read_json_object(POOLED, "calibration", field="calibration")
    out, _notes = probe_calibration(base, [_probe_copy(tmp_path, runs=False)])
    assert out["overheads"] == base["overheads"] and "overheads" not in out["probed_from"]
