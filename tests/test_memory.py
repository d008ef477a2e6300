"""Memory per GPU: the optimizer's states, activation checkpointing, measured memory records and PyTorch's
MemTracker. Expected numbers come from closed forms written here, or from real torch on the CPU
(saved_tensors_hooks), never from the code under test."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ddpsim.errors import ScenarioError
from ddpsim.hardware.catalog import get_gpu
from ddpsim.hardware.compute import memory_per_gpu, step_compute
from ddpsim.loader import scenario_from_dict
from ddpsim.sharded.checkpointing import checkpoint_every, checkpointed_activation_bytes, recomputed_layers
from ddpsim.sharded.memory import Precision, sharded_memory
from ddpsim.sharded.units import shard_units
from ddpsim.simulation import simulate
from ddpsim.workload.model import Layer, ParamTensor, Workload
from ddpsim.workload.profile import load_profile
from ddpsim.workload.zoo import zoo_workload

H200 = get_gpu("H200")


def blocks_workload() -> Workload:
    """An embedding, two blocks (norm + linear) and a head, with its per-layer activations written out."""
    def layer(name: str, numel: int, fwd_bytes: float, flops: float = 0.0) -> Layer:
        return Layer(name, (ParamTensor(f"{name}.weight", numel),), forward_flops=flops, backward_flops=2 * flops,
                     forward_bytes=fwd_bytes, backward_bytes=2 * fwd_bytes)

    layers = (layer("embed", 1000, 4000 + 2 * 800),
              layer("layers.0.norm", 10, 40 + 2 * 300), layer("layers.0.fc", 100, 400 + 2 * 300, 1e9),
              layer("layers.1.norm", 10, 40 + 2 * 300), layer("layers.1.fc", 100, 400 + 2 * 300, 1e9),
              layer("head", 500, 2000 + 2 * 300, 1e9))
    by_layer = {"embed": 50.0, "layers.0.norm": 300.0, "layers.0.fc": 700.0, "layers.1.norm": 300.0,
                "layers.1.fc": 900.0, "head": 250.0}
    return Workload("blocks", layers, batch_size=2, activation_bytes=sum(by_layer.values()),
                    activation_source="written by the test", activation_bytes_by_layer=by_layer)


def test_optimizer_states_per_parameter():
    w = zoo_workload("resnet50", 32, "fp32")
    n = w.n_params
    for name, per_param in (("sgd", 0), ("sgd_momentum", 4), ("adam", 8), ("adamw", 8), ("none", 0)):
        assert memory_per_gpu(w, name)["optimizer_states"] == per_param * n
    with pytest.raises(ScenarioError, match="unknown optimizer"):
        memory_per_gpu(w, "lion")


def test_full_and_every_k_checkpointing_keep_block_inputs_and_one_block():
    w = blocks_workload()
    units = shard_units(w)
    total = 2500.0
    block0, block1 = 300.0 + 700.0, 300.0 + 900.0
    block_input = 300.0  # the norm's forward bytes less its weights (40), halved
    assert checkpointed_activation_bytes(w, units, 0) == total
    assert checkpointed_activation_bytes(w, units, 1) == pytest.approx(
        total - block0 - block1 + 2 * block_input + max(block0, block1))
    assert checkpointed_activation_bytes(w, units, 2) == pytest.approx(total - block0 + block_input + block0)
    assert checkpoint_every("every_3") == 3 and checkpoint_every("full") == 1 and checkpoint_every("none") == 0
    with pytest.raises(ScenarioError, match="every_K"):
        checkpoint_every("every_0")


def test_checkpointing_adds_the_blocks_forward_to_backward():
    w = blocks_workload()
    units = shard_units(w)
    plain = step_compute(w, H200)
    recompute = recomputed_layers(units, 1)
    assert recompute == frozenset({1, 2, 3, 4})
    checkpointed = step_compute(w, H200, recompute=recompute)
    forward_of_blocks = step_compute(replace(w, layers=tuple(
        layer if i in recompute else replace(layer, forward_flops=0.0, forward_bytes=0.0, kernels=0)
        for i, layer in enumerate(w.layers))), H200).forward_s
    assert checkpointed.forward_s == plain.forward_s
    assert checkpointed.backward_s - plain.backward_s == pytest.approx(forward_of_blocks)


def test_sharded_strategies_take_the_optimizer_and_checkpointing():
    w = zoo_workload("llama-7b", 1, "bf16-amp", 4096)
    units = shard_units(w)
    bf16 = Precision("bf16", "fp32")
    sgd = sharded_memory(w, "zero3", 8, units, bf16, optimizer="sgd")
    adamw = sharded_memory(w, "zero3", 8, units, bf16, optimizer="adamw")
    assert adamw["optimizer_states"] - sgd["optimizer_states"] == pytest.approx(8 * w.n_params / 8)
    full = sharded_memory(w, "zero3", 8, units, bf16, optimizer="adamw", checkpoint_every=1)
    assert full["activations"] < adamw["activations"] / 5
    assert full["parameters"] == adamw["parameters"] and full["gradients"] == adamw["gradients"]


def _scenario(**workload: object) -> dict:
    return {"workload": {"model": "llama-7b", "batch_size": 1, "precision": "bf16-amp", "seq_len": 4096, **workload},
            "cluster": {"gpu": "H100-SXM", "nodes": 1, "gpus_per_node": 8},
            "parallel": {"strategy": "zero3"}, "simulation": {"iterations": 1}}


def test_the_fit_says_when_checkpointing_is_needed_and_the_step_pays_for_it():
    batch = 8  # llama-7b at 8 x 4096 tokens per GPU: no strategy fits 80 GB without checkpointing
    plain = simulate(scenario_from_dict(_scenario(batch_size=batch)))
    assert not plain.fits_in_memory
    assert any("with full activation checkpointing zero" in w for w in plain.warnings), plain.warnings
    full = simulate(scenario_from_dict(_scenario(batch_size=batch, activation_checkpointing="full")))
    assert full.fits_in_memory
    assert full.memory_bytes["total"] < plain.memory_bytes["total"]
    assert full.step_time_s > plain.step_time_s
    assert "activation checkpointing of every block" in full.value_sources["memory"]


def test_a_bad_checkpointing_value_names_the_field():
    with pytest.raises(ScenarioError, match="every_K") as err:
        simulate(scenario_from_dict(_scenario(activation_checkpointing="sometimes")))
    assert err.value.field == "workload.activation_checkpointing"


def _profile(tmp_path, memory: dict | None) -> str:
    record = {"schema": "ddpsim.profile/1", "model": "mine", "batch_size": 4, "precision": "fp32", "seq_len": None,
              "forward_s": 0.01, "backward_s": 0.02, "optimizer_s": 0.001, "optimizer": "sgd",
              "params": [{"name": "fc.weight", "numel": 1000, "grad_ready_s": 0.02, "ready_order": 0}]}
    if memory is not None:
        record["memory"] = memory
    path = tmp_path / "p.json"
    path.write_text(json.dumps(record))
    return str(path)


def test_a_profile_with_a_memory_record_carries_its_activations_and_peak(tmp_path):
    memory = {"peak_allocated_bytes": 30_000, "peak_reserved_bytes": 40_000, "parameter_bytes": 4000,
              "gradient_bytes": 4000, "optimizer_state_bytes": 4000, "buffer_bytes": 0, "activation_bytes": 15_000,
              "activation_method": "saved_tensors_hooks", "optimizer": "sgd_momentum", "precision": "fp32",
              "batch_size": 4}
    w = load_profile(_profile(tmp_path, memory))
    assert w.activation_bytes == 15_000 and "saved_tensors_hooks" in w.activation_source
    assert w.optimizer == "sgd_momentum"
    ddp = memory_per_gpu(w)
    # the measured peak plus DDP's bucket copy of the gradients, the parts adding up to it
    assert ddp["total"] == 30_000 + 4000
    assert ddp["activations"] == 15_000 and ddp["other"] == 30_000 - 4000 - 4000 - 15_000 - 4000


def test_a_profile_without_memory_says_its_activations_are_unknown(tmp_path):
    w = load_profile(_profile(tmp_path, None))
    assert w.activation_bytes == 0 and w.activation_source == ""
    assert w.optimizer == "sgd_momentum"  # the harness's sgd trains with momentum 0.9
    scenario = {"workload": {"model": f"profile:{_profile(tmp_path, None)}", "batch_size": 4},
                "cluster": {"gpu": "H200", "nodes": 1, "gpus_per_node": 1}, "simulation": {"iterations": 1}}
    result = simulate(scenario_from_dict(scenario))
    assert "activations NOT KNOWN" in result.value_sources["memory"]


def test_a_bad_memory_record_names_its_field(tmp_path):
    with pytest.raises(ScenarioError) as err:
        load_profile(_profile(tmp_path, {"peak_allocated_bytes": -1}))
    assert err.value.field == "memory.peak_allocated_bytes"


def test_ddpsim_validate_reads_a_runs_measured_peak_and_fails_beyond_tolerance():
    from ddpsim.fitting.validate import RunRow, Validation, _failures, measured_peak_bytes

    run = {"memory": {"peak_allocated_bytes": 10, "per_rank": [{"peak_allocated_bytes": 12}, {"x": 1}]}}
    assert measured_peak_bytes(run) == 12 and measured_peak_bytes({}) is None

    def row(predicted: float) -> RunRow:
        return RunRow("m", "nvlink", 2, 25.0, 1.0, None, None, 1.0, True, measured_peak_bytes=100.0,
                      predicted_peak_bytes=predicted)

    def failures(*predicted: float) -> list[str]:
        v = Validation([row(p) for p in predicted], [], [], 0, [], [], {})
        return [f for f in _failures(v, 100.0, 100.0, 100.0, 0.0) if "peak memory" in f]

    assert failures(105.0, 95.0) == []
    assert failures(130.0, 100.0, 100.0, 100.0)[0].startswith("peak memory: maximum error 30.0%")
    assert failures(115.0, 88.0)[0].startswith("peak memory: mean absolute error 13.5%")


def test_tune_strategy_names_the_strategy_and_whether_checkpointing_is_needed():
    from ddpsim.planning.strategy import advise_strategy

    advice = advise_strategy(scenario_from_dict(_scenario(batch_size=8)))
    assert advice.recommended is not None and advice.activation_checkpointing == "full"
    assert "none fits without activation checkpointing" in advice.why
    plain = advise_strategy(scenario_from_dict(_scenario(batch_size=1, seq_len=1024)))
    assert plain.recommended is not None and plain.activation_checkpointing == "none"
