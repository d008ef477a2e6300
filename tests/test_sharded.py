"""Sharded data parallelism: units, memory per strategy, all-gather / reduce-scatter prices and the step.

Expected values are derived here by hand: the ZeRO paper's bytes per parameter, LLaMA-7B's configuration,
ring all-gather's (n-1)/n x S / bandwidth, and a step timeline worked out on paper.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace

import pytest
import simpy

from ddpsim.collectives import CollectiveModel
from ddpsim.collectives.protocols import ProtocolTable
from ddpsim.errors import ScenarioError
from ddpsim.jsonfile import open_data
from ddpsim.loader import load_scenario, scenario_from_dict
from ddpsim.sharded.collectives import Price, half_ring_price
from ddpsim.sharded.memory import Precision, memory_by_strategy, recommend_strategy, resolve_precision
from ddpsim.sharded.step import ShardedCosts, SharedWire, simulate_step
from ddpsim.sharded.units import ROOT, shard_units
from ddpsim.simulation import simulate
from ddpsim.topology import build_topology
from ddpsim.workload.model import Layer, ParamTensor, Workload
from ddpsim.workload.zoo import zoo_workload

BLOCK, ROOT_NUMEL, N_BLOCKS, ACT = 1_000_000, 300_000, 4, 5e8


def toy(precision: str = "bf16-amp") -> Workload:
    layers = [Layer("embed", (ParamTensor("embed.weight", ROOT_NUMEL // 2),))]
    layers += [Layer(f"layers.{i}.mlp", (ParamTensor(f"layers.{i}.mlp.weight", BLOCK),)) for i in range(N_BLOCKS)]
    layers += [Layer("head", (ParamTensor("head.weight", ROOT_NUMEL // 2),))]
    return Workload("toy", tuple(layers), batch_size=1, precision=precision, seq_len=8, activation_bytes=ACT)


def test_auto_units_are_the_numbered_blocks_and_the_rest_is_the_root():
    units = shard_units(toy())
    assert [u.name for u in units] == [ROOT] + [f"layers.{i}" for i in range(N_BLOCKS)]
    assert units[0].numel == ROOT_NUMEL and all(u.numel == BLOCK for u in units[1:])


def test_llama7b_units_match_its_configuration():
    # LLaMA-7B: hidden 4096, MLP 11008, vocabulary 32000, 32 blocks, untied head
    h, f, v = 4096, 11008, 32000
    units = shard_units(zoo_workload("llama-7b", 1, "bf16-amp"))
    assert len(units) == 33
    assert units[0].numel == 2 * v * h + h  # embeddings, lm_head, final norm
    assert {u.numel for u in units[1:]} == {4 * h * h + 3 * h * f + 2 * h}


def test_unit_pattern_and_its_errors():
    units = shard_units(toy(), r"layers\.[0-1]")
    assert [u.name for u in units] == [ROOT, "layers.0", "layers.1"]
    with pytest.raises(ScenarioError, match="matches no module"):
        shard_units(toy(), "nothing-here")
    with pytest.raises(ScenarioError) as err:
        shard_units(toy(), "(")
    assert err.value.field == "parallel.unit"


def test_memory_closed_forms_per_strategy():
    w, n = toy(), 8
    p = ROOT_NUMEL + N_BLOCKS * BLOCK
    units = shard_units(w)
    m = memory_by_strategy(w, n, n, units, Precision("bf16", "fp32"))
    # AMP keeps fp32 parameters and gradients; AdamW two fp32 states: 4 + 4 + 8 = the paper's 16 bytes/param
    autocast = 2 * p
    assert m["ddp"]["total"] == pytest.approx(16 * p + 4 * p + ACT + autocast)  # + DDP's bucket copy
    assert m["zero1"]["total"] == pytest.approx(4 * p + 4 * p + 8 * p / n + 4 * p + ACT + autocast)
    # FSDP2: 16 bytes/param sharded n ways (ZeRO-3's 16P/n), plus what is gathered in bf16. At the start of
    # backward, the peak with the activations, no sharded gradient exists yet (zero_grad(set_to_none=True) freed
    # them): 12 of the 16 bytes
    grads_live = 2 * ROOT_NUMEL + BLOCK * (2 + 4)  # root's grads, one block's bf16 grads and their fp32 copy
    assert m["zero3"]["total"] == pytest.approx(12 * p / n + 2 * (ROOT_NUMEL + 2 * BLOCK) + grads_live + ACT)
    assert m["zero2"]["total"] == pytest.approx(12 * p / n + 2 * p + grads_live + ACT)
    assert m["zero3"]["optimizer_states"] == pytest.approx(8 * p / n)


def test_hsdp_shards_over_a_node_only():
    w = toy()
    m = memory_by_strategy(w, 64, 8, shard_units(w), Precision("bf16", "bf16"), shard_group="node")
    p = ROOT_NUMEL + N_BLOCKS * BLOCK
    assert m["zero3"]["parameters"] == pytest.approx(4 * p / 8)


def test_the_cheapest_strategy_that_fits_is_recommended():
    w = toy()
    m = memory_by_strategy(w, 8, 8, shard_units(w), Precision("bf16", "fp32"))
    totals = [m[s]["total"] for s in ("ddp", "zero1", "zero2", "zero3")]
    assert totals == sorted(totals, reverse=True)
    assert recommend_strategy(m, totals[0]) == "ddp"
    assert recommend_strategy(m, totals[1]) == "zero1"
    assert recommend_strategy(m, (totals[2] + totals[3]) / 2) == "zero3"
    assert recommend_strategy(m, totals[3] - 1) is None


def test_auto_precision_follows_autocast_and_fsdp2():
    assert resolve_precision("auto", "auto", "bf16-amp") == Precision("bf16", "bf16")
    assert resolve_precision("auto", "fp32", "bf16-amp") == Precision("bf16", "fp32")
    assert resolve_precision("auto", "auto", "fp32") == Precision("fp32", "fp32")


def _node(n: int, bandwidth: str = "100GB/s") -> CollectiveModel:
    sc = scenario_from_dict({"workload": {"model": "mlp", "batch_size": 1},
                             "cluster": {"gpu": "H100-SXM", "nodes": 1, "gpus_per_node": n,
                                         "intra_node": {"type": "nvswitch", "bandwidth": bandwidth,
                                                        "latency": "0us"}}})
    return CollectiveModel(build_topology(sc.cluster), ProtocolTable.ideal())


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_all_gather_moves_n_minus_1_over_n_of_the_buffer(n: int):
    size = 256e6
    price = half_ring_price(_node(n), size, "simple")
    assert price.seconds == pytest.approx((n - 1) / n * size / 100e9, rel=1e-9)


def test_shared_wire_shares_equally_and_conserves_work():
    env = simpy.Environment()
    wire = SharedWire(env)
    ends = {}

    def one(name: str, start: float, solo: float):
        yield env.timeout(start)
        yield wire.transfer(solo)
        ends[name] = env.now

    env.process(one("a", 0.0, 1.0))
    env.process(one("b", 0.0, 3.0))
    env.process(one("c", 0.5, 0.5))
    env.run()
    # a and b share until 0.5 (0.25 done each); three share at 1/3: c's 0.5 ends at 2.0, a has 0.25 left,
    # b 2.25; a and b at 1/2: a ends at 2.5, b has 2.0 left alone: 4.5 = all the work (1 + 3 + 0.5)
    assert ends["c"] == pytest.approx(2.0) and ends["a"] == pytest.approx(2.5) and ends["b"] == pytest.approx(4.5)


def _two_unit_costs(strategy: str, backward_s: float = 0.0, forward_root_s: float = 0.0,
                    slowdown: float = 0.0, forward_host_s: tuple[float, float] = (0.0, 0.0),
                    regather_host_s: tuple[float, float] = (0.0, 0.0)) -> tuple[ShardedCosts, list]:
    w = Workload("t", (Layer("embed", (ParamTensor("e", 10),)), Layer("layers.0.x", (ParamTensor("x", 10),))), 1)
    units = tuple(shard_units(w))
    costs = ShardedCosts(strategy, units, (0, 1), (forward_root_s, 0.0), (0.0, backward_s),
                         all_gather=(Price(0, 1.0, "simple"), Price(0, 2.0, "simple")),
                         reduce_scatter=(Price(0, 4.0, "simple"), Price(0, 3.0, "simple")),
                         replica_allreduce=(Price(0, 0, "none"),) * 2, copy_out_s=(0.0, 0.0), rs_copy_in_s=(0.0, 0.0),
                         forward_host_s=forward_host_s, regather_host_s=regather_host_s,
                         optimizer_s=0.0, compute_slowdown=slowdown)
    return costs, [(1.0, 1.0, 0.0)] * 2


def test_fsdp_host_work_holds_up_compute_where_nothing_hides_it():
    # forward host work: root 0.5 (hidden: the block's all-gather, issued at 1, ends at 3), block 0.25 (after
    # its gather: on the path); zero3's re-gather host work before the block's backward 0.125 (on the path),
    # the root is never gathered again: 12 + 0.25 + 0.125 (zero3), 10 + 0.25 (zero2)
    costs, nbytes = _two_unit_costs("zero3", forward_host_s=(0.5, 0.25), regather_host_s=(1.0, 0.125))
    assert simulate_step(costs, nbytes).step_end_s == pytest.approx(12.375)
    costs2, _ = _two_unit_costs("zero2", forward_host_s=(0.5, 0.25), regather_host_s=(1.0, 0.125))
    assert simulate_step(costs2, nbytes).step_end_s == pytest.approx(10.25)


def test_zero_compute_step_is_the_sum_of_its_collectives():
    costs, nbytes = _two_unit_costs("zero3")
    trace = simulate_step(costs, nbytes)
    # AG root 1, AG block 2, AG block again for backward 2, RS block 3, RS root 4: one after another
    assert trace.step_end_s == pytest.approx(12.0)
    assert [c.kind for c in trace.collectives] == ["all-gather (forward)"] * 2 + ["all-gather (backward)"] + [
        "reduce-scatter"] * 2
    costs2, _ = _two_unit_costs("zero2")
    assert simulate_step(costs2, nbytes).step_end_s == pytest.approx(10.0)  # no backward all-gather


def test_reduce_scatter_overlaps_the_backward_that_follows():
    costs, nbytes = _two_unit_costs("zero2", backward_s=5.0)
    # forward: AG root [0,1], AG block [1,3]; backward of the block [3,8]; RS block [8,11], root's
    # backward is empty so its RS queues behind: [11,15]
    assert simulate_step(costs, nbytes).step_end_s == pytest.approx(15.0)


@pytest.mark.parametrize(("slowdown", "end"), [(0.0, 10.0), (1.0, 11.0)])
def test_compute_slows_while_a_collective_is_in_flight(slowdown: float, end: float):
    costs, nbytes = _two_unit_costs("zero2", forward_root_s=2.0, slowdown=slowdown)
    # AG root [0,1]; root's forward from 1 beside the block's AG [1,3]: at half speed 1 s of its 2 s is done
    # by 3, the rest alone -> 4 (3 without the slowdown); then RS block 3 s and RS root 4 s
    assert simulate_step(costs, nbytes).step_end_s == pytest.approx(end)


def test_zero3_moves_three_times_the_parameters_less_the_roots_regather():
    sc = load_scenario("scenarios/h100-16x8-ib400-llama7b.yaml",
                       ["parallel.strategy=zero3", "parallel.param_dtype=fp32", "parallel.reduce_dtype=fp32"])
    result = simulate(sc)
    w = zoo_workload("llama-7b", 1, "bf16-amp", 2048)
    param_bytes = 4 * w.n_params
    root_bytes = 4 * shard_units(w)[0].numel
    assert sum(c.bytes for c in result.collectives) == 3 * param_bytes - root_bytes
    ddp = simulate(load_scenario("scenarios/h100-16x8-ib400-llama7b.yaml"))
    assert sum(b.bytes for b in ddp.buckets) == param_bytes  # DDP all-reduces each gradient byte once (x2 on wire)


def test_ddp_json_has_no_sharded_fields_and_zero_strategies_do():
    sc = load_scenario("scenarios/quickstart.yaml")
    data = simulate(sc).to_dict()
    assert "strategy" not in data and "collectives" not in data
    z = simulate(replace(sc, parallel=replace(sc.parallel, strategy="zero2"))).to_dict()
    assert z["strategy"] == "zero2" and z["collectives"] and "unsharded_params" in z["memory_bytes"]


def test_llama7b_does_not_fit_ddp_and_the_warning_names_a_strategy_that_does():
    result = simulate(load_scenario("scenarios/h100-16x8-ib400-llama7b.yaml"))
    assert not result.fits_in_memory
    assert result.recommended_strategy in ("zero2", "zero3")
    assert f"parallel.strategy={result.recommended_strategy}" in result.warnings[0]
    zero3 = simulate(load_scenario("scenarios/h100-16x8-ib400-llama7b.yaml", ["parallel.strategy=zero3"]))
    assert zero3.fits_in_memory and not zero3.warnings
    assert math.isfinite(zero3.step_time_s) and zero3.step_time_s > zero3.compute_only_s * 0.99


def test_cli_json_and_bad_strategy():
    ok = subprocess.run([sys.executable, "-m", "ddpsim", "run", "scenarios/quickstart.yaml", "--set",
                         "parallel.strategy=zero3", "--json"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["strategy"] == "zero3"
    bad = subprocess.run([sys.executable, "-m", "ddpsim", "run", "scenarios/quickstart.yaml", "--set",
                          "parallel.strategy=zero4"], capture_output=True, text=True)
    assert bad.returncode == 2 and "parallel.strategy" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_tune_strategy_picks_the_fastest_that_fits():
    from ddpsim.planning.strategy import advise_strategy

    advice = advise_strategy(load_scenario("scenarios/h100-16x8-ib400-llama7b-zero3.yaml"))
    by_name = {o.strategy: o for o in advice.options}
    assert not by_name["ddp"].fits and advice.recommended in ("zero2", "zero3")
    fitting = [o for o in advice.options if o.fits]
    assert by_name[advice.recommended].step_time_s == min(o.step_time_s for o in fitting)


def test_hsdp_adds_an_all_reduce_across_the_replicas():
    sc = load_scenario("scenarios/h100-16x8-ib400-llama7b-zero3.yaml", ["parallel.shard_group=node"])
    result = simulate(sc)
    replicas = [c for c in result.collectives if c.kind == "all-reduce (replicas)"]
    assert len(replicas) == 33
    # each replica all-reduce carries the node's shard of the unit's fp32 gradients: 1/8 of its reduce-scatter
    scatters = {c.unit: c.bytes for c in result.collectives if c.kind == "reduce-scatter"}
    assert all(c.bytes == pytest.approx(scatters[c.unit] / 8) for c in replicas)


def test_sweep_takes_the_strategy_as_an_axis(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ddpsim", "sweep", "scenarios/quickstart.yaml", "--grid",
                           "parallel.strategy=ddp,zero2,zero3", "--out", str(tmp_path / "s"), "--workers", "1"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rows = (tmp_path / "s" / "sweep.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["ddp", "zero2", "zero3"]
    assert all(",ok," in r for r in rows[1:])


def test_the_fsdp_host_terms_are_what_the_first_launch_measured():
    # the defaults are a measurement: recomputed from the committed records (launches fsdp_nvlink and
    # fsdp_socket of validation/data/h200x2-fsdp-2026-11-27), rounded to 10 us as written in the schema
    pytest.importorskip("torch")
    from ddpsim.scenario.schema import ParallelSpec
    from validation.evidence.stages.fsdp import DATA, host_terms_us

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    runs = [json.loads(line) for line in open_data(os.path.join(root, DATA, "fsdp_runs.jsonl"))]
    forward_us, regather_us = host_terms_us(runs)
    assert round(forward_us, -1) == pytest.approx(1e6 * ParallelSpec().forward_host_per_tensor_s)
    assert round(regather_us, -1) == pytest.approx(1e6 * ParallelSpec().regather_host_per_tensor_s)
