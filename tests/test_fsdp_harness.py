"""The FSDP2 harness (ddpsim/measure/fsdp.py) on CPU with gloo, two ranks: it runs every strategy, writes
fsdp_runs.jsonl records with ddp_runs.jsonl's shape and fingerprint fields, and the units real
``fully_shard`` made are the units ddpsim's ``parallel.unit: auto`` assumes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from ddpsim.measure.fsdp import plan, resolve_model  # noqa: E402
from ddpsim.scenario.schema import WorkloadSpec  # noqa: E402
from ddpsim.sharded.units import shard_units  # noqa: E402
from ddpsim.workload.resolve import load_workload  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FACTORIES = {"llama-tiny": "ddpsim.measure.llama:llama_tiny_meta", "gpt-tiny": "ddpsim.measure.models:gpt_tiny"}


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> list[dict]:
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    if torchrun is None:
        pytest.skip("torchrun not installed")
    out = tmp_path_factory.mktemp("fsdp")
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    proc = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "-m", "ddpsim.measure.fsdp",
                           "--out", str(out), "--models", "llama-tiny,gpt-tiny", "--strategies", "ddp,zero2,zero3",
                           "--param-dtypes", "bf16,fp32", "--transport", "cpu", "--warmup", "1", "--steps", "2"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / "fsdp_runs.jsonl", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def test_every_planned_run_is_recorded_ok(records):
    planned = plan(["llama-tiny", "gpt-tiny"], ["ddp", "zero2", "zero3"], ["bf16", "fp32"])
    assert [(r["model"], r["strategy"], r["param_dtype"] or "fp32") for r in records] == planned
    assert all(r["status"] == "ok" and r["schema"] == "ddpsim.fsdp_run/1" for r in records)
    for r in records:
        assert r["world_size"] == 2 and r["nodes"] == 1 and r["gpus_per_node"] == 2 and not r["nodes_emulated"]
        assert {"gpu_name", "torch", "nccl", "transport", "hostname_count"} <= set(r["fingerprint"])
        assert r["step_s_median"] > 0 and len(r["step_times_s"]) == 2
        assert r["peak_memory_bytes"] is None  # CPU: no CUDA allocator to ask
        assert r["reshard_after_forward"] == {"ddp": None, "zero2": False, "zero3": True}[r["strategy"]]


def test_fully_shards_units_are_ddpsims_units(records):
    for name, factory in FACTORIES.items():
        real = next(r["units"] for r in records if r["model"] == name and r["strategy"] == "zero3")
        spec = resolve_model(name)
        workload = load_workload(WorkloadSpec(model=f"torch:{factory}",
                                              batch_size=spec.batch_size, seq_len=spec.seq_len), ROOT)
        simulated = [(u.name, u.numel) for u in shard_units(workload)]
        assert sorted((u["name"], u["numel"]) for u in real) == sorted(simulated), name


def test_bad_strategy_is_refused_before_any_process_group():
    proc = subprocess.run([sys.executable, "-m", "ddpsim.measure.fsdp", "--out", "/nonexistent-never-written",
                           "--strategies", "zero4"], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 2 and "zero4" in proc.stderr
    assert not os.path.exists("/nonexistent-never-written")
