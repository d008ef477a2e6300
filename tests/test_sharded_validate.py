"""fsdp_runs.jsonl read back and compared: the scenario a run describes is the one written by hand, and bad
files fail on one line naming the file and field."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ddpsim.errors import ScenarioError
from ddpsim.fitting.sharded_validate import (
    compare_fsdp_runs,
    fsdp_run_scenario,
    measured_profile,
    read_fsdp_runs,
)
from ddpsim.loader import scenario_from_dict
from ddpsim.simulation import simulate


def _run(**changes) -> dict:
    run = {"schema": "ddpsim.fsdp_run/1", "model": "gpt2-124m", "batch_size": 8, "precision": "bf16-amp",
           "seq_len": 512, "strategy": "zero3", "param_dtype": "bf16", "reduce_dtype": "fp32", "world_size": 2,
           "transport": "nvlink", "nodes": 1, "gpus_per_node": 2, "status": "ok", "step_s_median": 0.05,
           "peak_memory_bytes": 4e9, "peak_memory_bytes_per_rank": [4e9, 5e9],
           "fingerprint": {"gpu_name": "NVIDIA H100 80GB HBM3"}}
    run.update(changes)
    return run


def _write(path, runs) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    return str(path)


def test_a_run_is_simulated_as_the_scenario_it_describes(tmp_path):
    file = _write(tmp_path / "fsdp_runs.jsonl", [_run(), _run(strategy="ddp", param_dtype=None, reduce_dtype=None),
                                                 _run(status="failed")])
    runs = read_fsdp_runs(str(tmp_path))
    assert len(runs) == 2  # the failed run is not compared
    rows = compare_fsdp_runs(runs)
    by_hand = scenario_from_dict({
        "workload": {"model": "gpt2-124m", "batch_size": 8, "precision": "bf16-amp", "seq_len": 512},
        "cluster": {"gpu": "H100-SXM", "nodes": 1, "gpus_per_node": 2, "intra_node": {"type": "nvswitch"}},
        "parallel": {"strategy": "zero3", "param_dtype": "bf16", "reduce_dtype": "fp32"},
        "simulation": {"mode": "fast"}})
    expected = simulate(by_hand)
    assert rows[0].predicted_step_s == pytest.approx(expected.step_time_s)
    assert rows[0].step_error == pytest.approx(expected.step_time_s / 0.05 - 1)
    # the peak is the largest rank's
    assert rows[0].peak_error == pytest.approx(expected.memory_bytes["total"] / 5e9 - 1)
    assert rows[1].strategy == "ddp" and file.endswith("fsdp_runs.jsonl")


@pytest.mark.parametrize(("record", "field"), [
    ({"schema": "ddpsim.ddp_run/1"}, "line 1.schema"),
    ({"model": "no-such-model"}, "line 1.model"),
    ({"transport": "carrier-pigeon"}, "line 1.transport"),
    ({"fingerprint": {}}, "line 1.fingerprint.gpu_name"),  # the GPU is not guessed
])
def test_bad_records_name_the_line_and_field(tmp_path, record, field):
    runs = read_fsdp_runs(_write(tmp_path / "r.jsonl", [_run(**record)])) if "schema" not in record else None
    with pytest.raises(ScenarioError) as err:
        if runs is None:
            read_fsdp_runs(_write(tmp_path / "r.jsonl", [_run(**record)]))
        else:
            compare_fsdp_runs(runs)
    assert err.value.field is not None and err.value.field.endswith(field)


def test_cli_missing_file_is_one_line_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ddpsim", "validate-fsdp", str(tmp_path / "nothing")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "fsdp_runs" in proc.stderr


def test_an_hsdp_run_is_simulated_as_hsdp(tmp_path):
    runs = read_fsdp_runs(_write(tmp_path / "r.jsonl", [_run(world_size=4, nodes=2, gpus_per_node=2,
                                                              shard_group="node")]))
    from ddpsim.fitting.sharded_validate import fsdp_run_scenario

    scenario = fsdp_run_scenario(runs[0])
    assert scenario.parallel.shard_group == "node" and scenario.cluster.nodes == 2
    assert any(c.kind == "all-reduce (replicas)" for c in simulate(scenario).collectives)


def test_a_profile_beside_the_records_times_the_step_and_the_structure_gives_the_memory(tmp_path):
    # the committed FW2 profile of gpt2-124m (batch 8, seq 512, bf16) beside a record of the same run
    import shutil

    source = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "validation", "data",
                          "h200x2-fsdp-2026-11-27b", "profiles", "gpt2-124m.json")
    (tmp_path / "profiles").mkdir()
    shutil.copy(source, tmp_path / "profiles" / "gpt2-124m.json")
    _write(tmp_path / "fsdp_runs.jsonl", [_run(), _run(seq_len=1024)])
    runs = read_fsdp_runs(str(tmp_path))
    assert measured_profile(runs[0]) == str(tmp_path / "profiles" / "gpt2-124m.json")
    assert measured_profile(runs[1]) is None  # another sequence length is other compute
    rows = compare_fsdp_runs(runs)
    profiled = simulate(fsdp_run_scenario(runs[0]))
    structural = simulate(fsdp_run_scenario(runs[0], use_profile=False))
    assert fsdp_run_scenario(runs[0]).workload.model == f"profile:{tmp_path / 'profiles' / 'gpt2-124m.json'}"
    assert rows[0].predicted_step_s == pytest.approx(profiled.step_time_s)
    assert rows[0].predicted_peak_bytes == pytest.approx(structural.memory_bytes["total"])
    assert profiled.step_time_s != pytest.approx(structural.step_time_s)  # the profile did change the compute
    assert rows[0].compute_from.startswith("profile:") and rows[1].compute_from.startswith("estimated from")


def test_the_record_contracts_memory_object_and_optimizer_are_read_and_the_peak_tolerance_fails(tmp_path):
    contract = {"peak_allocated_bytes": 6e9, "peak_reserved_bytes": 7e9,
                "per_rank": [{"peak_allocated_bytes": 6e9}, {"peak_allocated_bytes": 6.5e9}]}
    run = _run(memory=contract, optimizer="sgd")
    del run["peak_memory_bytes"], run["peak_memory_bytes_per_rank"]
    _write(tmp_path / "fsdp_runs.jsonl", [run])
    rows = compare_fsdp_runs(read_fsdp_runs(str(tmp_path)))
    by_hand = scenario_from_dict({
        "workload": {"model": "gpt2-124m", "batch_size": 8, "precision": "bf16-amp", "seq_len": 512,
                     "optimizer": "sgd_momentum"},
        "cluster": {"gpu": "H100-SXM", "nodes": 1, "gpus_per_node": 2, "intra_node": {"type": "nvswitch"}},
        "parallel": {"strategy": "zero3", "param_dtype": "bf16", "reduce_dtype": "fp32"},
        "simulation": {"mode": "fast"}})
    predicted = simulate(by_hand).memory_bytes["total"]
    assert rows[0].measured_peak_bytes == 6.5e9  # the largest rank's
    assert rows[0].predicted_peak_bytes == pytest.approx(predicted)
    error = abs(predicted / 6.5e9 - 1) * 100
    cmd = [sys.executable, "-m", "ddpsim", "validate-fsdp", str(tmp_path)]
    loose = subprocess.run(cmd + ["--max-peak-error", f"{error + 1:.3f}"], capture_output=True, text=True)
    tight = subprocess.run(cmd + ["--max-peak-error", f"{max(error - 1, 0):.3f}"], capture_output=True, text=True)
    assert loose.returncode == 0, loose.stdout + loose.stderr
    assert tight.returncode == 1 and "peak memory error" in tight.stdout
