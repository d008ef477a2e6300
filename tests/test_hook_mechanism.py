"""The compress hooks' cost on the backward thread: the constants are the committed measurement, the
hypotheses the model leaves out are ruled out by it, the simulator charges it per bucket, and the
harness script that measured it runs (one gloo rank on CPU)."""

from __future__ import annotations

import json
import os
from statistics import median

import pytest

from ddpsim import simulate
from ddpsim.ddp import hooks
from ddpsim.loader import scenario_from_dict
from ddpsim.simulation import prepare

ROOT = os.path.join(os.path.dirname(__file__), "..")


def _records() -> dict[tuple[str, str], dict]:
    with open(os.path.join(ROOT, hooks.MEASUREMENT), encoding="utf-8") as handle:
        data = json.load(handle)
    return {(r["model"], r["variant"]): r for r in data["records"]}


def _thread_s_per_bucket(records: dict, model: str, variant: str, baseline: str) -> float:
    """Growth of the backward thread's time per bucket, variant against baseline, from the medians."""
    buckets = records[(model, variant)]["hook_calls_per_step"]
    grown = records[(model, variant)]["backward_cpu_s"]["median"] - records[(model, baseline)]["backward_cpu_s"]["median"]
    return grown / buckets


def _host_bound(records: dict) -> list[str]:
    """Models whose compute stream is busy at most 2/3 of the plain step: the thread is the bottleneck."""
    models = sorted({m for m, _ in records})
    return [m for m in models if records[(m, "none")]["profile"]["compute_stream_busy_us_per_step"] * 1e-6
            <= 2 / 3 * records[(m, "none")]["step_s"]["median"]]


def test_the_constants_are_the_measurement():
    records = _records()
    models = _host_bound(records)
    assert models == ["gpt2-124m", "mlp-ln-64", "vit-b16"]
    for model in models:
        for hook in hooks.COMPRESS_HOOKS:
            assert hooks.COMPRESS_HOOK_THREAD_S[(model, hook)] == pytest.approx(
                _thread_s_per_bucket(records, model, hook, "none"), abs=1e-6)
        assert hooks.PYTHON_HOOK_THREAD_S[model] == pytest.approx(
            _thread_s_per_bucket(records, model, "py_allreduce", "cpp_allreduce"), abs=1e-6)
    compress = median(_thread_s_per_bucket(records, m, h, "none") for m in models for h in hooks.COMPRESS_HOOKS)
    python = median(_thread_s_per_bucket(records, m, "py_allreduce", "cpp_allreduce") for m in models)
    assert hooks.COMPRESS_HOOK_EXTRA_S == pytest.approx(compress - python, abs=2e-6)


def test_the_gpu_side_hypotheses_are_ruled_out_by_the_measurement():
    with open(os.path.join(ROOT, hooks.MEASUREMENT), encoding="utf-8") as handle:
        data = json.load(handle)
    records = _records()
    # one cudaMalloc in all timed rounds of all variants (the allocator is not the cost)
    mallocs = [delta["num_device_alloc"] for r in data["records"] for delta in r["allocator_deltas_per_round"]]
    assert len(mallocs) == 80 and sum(mallocs) == 1
    # NCCL moves 16-bit bytes as fast as fp32 bytes: same bytes, same time within 10%
    by = {(a["dtype"], a["bytes"]): a["time_s"]["median"] for a in data["allreduce_dtypes"]}
    for nbytes in (3276800, 6553600, 13107200):
        for dtype in ("float16", "bfloat16"):
            assert by[(dtype, nbytes)] == pytest.approx(by[("float32", nbytes)], rel=0.10)
    # the compute stream's kernel time per step does not grow with a hook (no contention with backward)
    for model in sorted({m for m, _ in records}):
        plain = records[(model, "none")]["profile"]["compute_stream_busy_us_per_step"]
        for hook in hooks.COMPRESS_HOOKS:
            assert records[(model, hook)]["profile"]["compute_stream_busy_us_per_step"] == pytest.approx(plain, rel=0.05)


def _prepared(hook: str):
    return prepare(scenario_from_dict({
        "workload": {"model": "gpt2-124m", "batch_size": 4},
        "cluster": {"gpu": "H100-SXM", "nodes": 1, "gpus_per_node": 4, "intra_node": {"type": "nvswitch"}},
        "ddp": {"bucket_cap_mb": 5, "comm_hook": hook},
        "overheads": {"hook_cpu": "0us"},
    }))


def test_a_compress_hook_charges_its_extra_once_per_bucket(monkeypatch):
    prep = _prepared("fp16")
    charged = simulate(prep).step_time_s
    monkeypatch.setattr("ddpsim.simulation.compress_hook_extra_s", lambda hook: 0.0)
    free = simulate(prep).step_time_s
    assert charged > free
    assert charged - free <= len(prep.buckets) * hooks.COMPRESS_HOOK_EXTRA_S + 1e-12


def _step_s(hook: str, hook_cpu: str) -> float:
    return simulate(scenario_from_dict({
        "workload": {"model": "gpt2-124m", "batch_size": 4},
        "cluster": {"gpu": "H100-SXM", "nodes": 1, "gpus_per_node": 4, "intra_node": {"type": "nvswitch"}},
        "ddp": {"bucket_cap_mb": 5, "comm_hook": hook},
        "overheads": {"hook_cpu": hook_cpu},
    })).step_time_s


def test_no_hook_no_extra():
    # without a registered hook DDP calls no Python on the backward thread: a huge per-call cost must not
    # move the step by a single bit; with a hook the same cost must move it
    assert _step_s("none", "20ms") == _step_s("none", "0us")
    assert _step_s("bf16", "20ms") > _step_s("bf16", "0us") + 20e-3


def test_the_harness_script_records_every_variant(gloo_world1, tmp_path):
    pytest.importorskip("torch")
    from validation.experiments import hook_mechanism

    assert hook_mechanism.main(["--out", str(tmp_path), "--models", "tiny-mlp", "--warmup", "2", "--steps", "2",
                                "--profile-steps", "0"]) == 0
    with open(tmp_path / "hook_mechanism.json", encoding="utf-8") as handle:
        data = json.load(handle)
    variants = [r["variant"] for r in data["records"]]
    assert variants == list(hook_mechanism.VARIANTS)
    for r in data["records"]:
        assert r["step_s"]["n"] == 4  # two rounds of two timed steps
        hooked = r["variant"] not in ("none", "cpp_allreduce")
        assert (r["hook_calls_per_step"] > 0) == hooked
