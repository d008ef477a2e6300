"""The overhead fit recovers the behaviour of known parameters from runs generated with them."""

import json
import os
from dataclasses import replace

import pytest

from ddpsim.calibration.file import read_calibration
from ddpsim.calibration.fit import fit_links, fit_overheads, write_calibration
from ddpsim.calibration.measured_scenarios import run_scenario
from ddpsim.calibration.measurements import Profiles, read_harness_allreduce
from ddpsim.simulation import prepare, simulate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "validation", "data", "h200x4-2026-11-26")
PROFILES = {m: os.path.join(DATA, "profiles", f"{m}.json") for m in ("resnet50", "gpt2-124m")}
TRUE = {
    "bucket_launch_s": 20e-6,
    "compute_slowdown": 1.15,
    "comm_slowdown": 4.0,
    "max_inflight_buckets": None,
    "buffer_sync_s": 1e-3,
    "bucket_cpu_s": 10e-6,
}


def _run(model, cap):
    with open(PROFILES[model]) as handle:
        profile = json.load(handle)
    return {
        "model": model,
        "batch_size": profile["batch_size"],
        "precision": profile["precision"],
        "bucket_cap_mb": cap,
        "world_size": 2,
        "transport": "nvlink",
        "fingerprint": {"gpu_name": "NVIDIA H200", "hostname_count": 1},
        "_source": os.path.join(DATA, "ddp_runs.jsonl"),  # its campaign, whose profiles it is predicted from
    }


def _simulated(run, calibration, params):
    prep = prepare(run_scenario(run, PROFILES[run["model"]], calibration))
    overheads = replace(prep.scenario.overheads, **params)
    return simulate(replace(prep, scenario=replace(prep.scenario, overheads=overheads))).step_time_s


@pytest.fixture(scope="module")
def links(tmp_path_factory):
    samples = [s for s in read_harness_allreduce(os.path.join(DATA, "allreduce.jsonl")) if s.link_class == "nvlink"]
    path = str(tmp_path_factory.mktemp("cal") / "links.json")
    write_calibration(path, fit_links(samples), {}, {})
    return read_calibration(path)


def test_fit_reproduces_runs_generated_with_known_overheads(links):
    runs = {(m, c): _run(m, c) for m in PROFILES for c in (1, 5, 25, 50)}
    for run in runs.values():
        run["step_s_median"] = _simulated(run, links, TRUE)
    calibration_runs = [runs[(m, c)] for m in PROFILES for c in (5, 50)]
    fitted = fit_overheads(calibration_runs, Profiles.from_paths(list(PROFILES.values())), links)
    assert fitted["calibration_mape_pct"] < 0.5
    params = {k: fitted[k] for k in TRUE}
    for (model, cap), run in runs.items():
        if cap in (1, 25):  # held out of the fit
            assert _simulated(run, links, params) == pytest.approx(run["step_s_median"], rel=0.03), (model, cap)
