"""find_unused_parameters / static_graph: node counts against torch, constants against the committed
measurement they cite, where the costs land in a step, and the advisor's error-aware verdict."""

from __future__ import annotations

import dataclasses
import json
import os
import statistics

import pytest

from ddpsim.ddp import options
from ddpsim.jsonfile import open_data
from ddpsim.loader import scenario_from_dict
from ddpsim.planning.advisor import judge
from ddpsim.planning.option_errors import OPTION_ERRORS
from ddpsim.simulation import simulate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H100 = os.path.join(ROOT, options.MEASUREMENT)
PROFILES = os.path.join(ROOT, "validation/data/h200x4-options-2026-11-26/profiles")


def test_importer_counts_the_nodes_the_walk_visits():
    torch = pytest.importorskip("torch")
    import fixtures_models as fm

    from ddpsim.workload.torch_import import import_torch_model

    w = import_torch_model("fixtures_models:tiny_mlp", 4, "fp32")
    # By hand: each Linear is AddmmBackward0 -> (AccumulateGrad bias, TBackward0 -> AccumulateGrad
    # weight) = 4 nodes, each ReLU one ReluBackward0; the input needs no grad: 3 x 4 + 2 = 14.
    assert w.autograd_nodes == 14
    # and real torch on real tensors agrees (the walk of reducer.cpp search_unused_parameters)
    out = fm.tiny_mlp()(torch.randn(4, 16))
    seen = {out.grad_fn}
    queue = [out.grad_fn]
    while queue:
        for nxt, _ in queue.pop().next_functions:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    assert len(seen) == 14
    assert w.output_bytes == 4 * 8 * 4


def test_constants_rederive_from_the_committed_h100_measurement():
    rec = json.load(open(H100))
    assert rec["fingerprint"]["gpu_name"].startswith("NVIDIA H100")
    graph = [g for g in rec["graph"] if g["status"] == "ok"]
    assert len(graph) == 5
    walk = statistics.median(g["walk_us"] / g["nodes"] for g in graph) * 1e-6
    assert options.WALK_S_PER_NODE == pytest.approx(walk, rel=0.01)
    ratio = statistics.median(g["nodes"] / g["param_tensors"] for g in graph)
    assert options.NODES_PER_PARAM_TENSOR == pytest.approx(ratio, rel=0.01)
    chain = rec["chain"]
    sizes = chain["sizes"]

    def slope(ys):
        mx, my = statistics.fmean(sizes), statistics.fmean(ys)
        return sum((x - mx) * (y - my) for x, y in zip(sizes, ys, strict=True)) / sum((x - mx) ** 2 for x in sizes)

    bwd = chain["backward_us"]
    per_param = (slope(bwd["find_unused"]) - slope(bwd["none"])) * 1e-6
    assert options.FIND_UNUSED_PER_PARAM_S == pytest.approx(per_param, rel=0.05)
    static = (slope(bwd["static_graph"]) - slope(bwd["none"])) * 1e-6
    assert options.STATIC_GRAPH_PER_PARAM_S == pytest.approx(static, rel=0.05)
    residual = [(f - n) * 1e-6 - options.FIND_UNUSED_PER_PARAM_S * size
                for f, n, size in zip(bwd["find_unused"], bwd["none"], sizes, strict=True)]
    assert options.FIND_UNUSED_END_OF_BACKWARD_S == pytest.approx(statistics.median(residual), rel=0.05)
    fwd = chain["forward_us"]
    # a chain of N parameters has 2N nodes (MulBackward0 + AccumulateGrad each); sizes 100 and 200 only
    sink = [(f - n) * 1e-6 - options.WALK_S_PER_NODE * 2 * size
            for f, n, size in zip(fwd["find_unused"], fwd["none"], sizes, strict=True) if size <= 200]
    assert options.SINK_FORWARD_S == pytest.approx(statistics.fmean(sink), rel=0.05)


def _scenario(**ddp):
    data = {
        "workload": {"model": f"profile:{PROFILES}/mlp-ln-64.json", "batch_size": 256, "precision": "fp32"},
        "cluster": {"gpu": "H100", "nodes": 1, "gpus_per_node": 4, "intra_node": {"type": "nvswitch"}},
        "ddp": {"bucket_cap_mb": 25, **ddp},
        "simulation": {"mode": "fast"},
    }
    return scenario_from_dict(data, file="<test>")


def test_options_cost_in_the_step_and_say_where_the_node_count_came_from():
    none = simulate(_scenario())
    unused = simulate(_scenario(find_unused_parameters=True))
    static = simulate(_scenario(static_graph=True))
    # static_graph keeps only finalize's per-parameter reads: cheaper than find_unused, never free
    assert none.step_time_s < static.step_time_s < unused.step_time_s
    # find_unused's host work is at least its graph walk and one used-map write per gradient
    n = 258
    walk = options.WALK_S_PER_NODE * round(options.NODES_PER_PARAM_TENSOR * n)
    assert unused.step_time_s - none.step_time_s >= walk + n * options.FIND_UNUSED_PER_PARAM_S
    # the profile has no count: the estimate is named, with its source
    nodes = unused.value_sources["autograd_nodes"]
    assert "estimated" in nodes and nodes.startswith(f"{round(options.NODES_PER_PARAM_TENSOR * n)} nodes")
    assert "not priced" in unused.value_sources["ddp_sink_output_clone"]
    assert "autograd_nodes" not in none.value_sources


def test_a_profile_that_carries_the_count_is_used(tmp_path):
    data = json.load(open(f"{PROFILES}/mlp-ln-64.json"))
    data.update(autograd_nodes=516, output_bytes=1 << 20)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    scenario = _scenario(find_unused_parameters=True)
    scenario = dataclasses.replace(scenario, workload=dataclasses.replace(scenario.workload, model=f"profile:{path}"))
    result = simulate(scenario)
    nodes = result.value_sources["autograd_nodes"]
    assert nodes.startswith("516 nodes") and str(path) in nodes
    assert "ddp_sink_output_clone" not in result.value_sources


def test_advice_needs_a_gain_beyond_the_measured_error():
    error = OPTION_ERRORS["bf16"]["rms_error"]
    assert 0.01 < error < 0.5
    assert judge(0.5 * error, "bf16")[0] is False
    helps, how = judge(1.5 * error, "bf16")
    assert helps and how.startswith("likely")
    helps, how = judge(2.5 * error, "bf16")
    assert helps and how.startswith("sure")
    assert judge(0.2, "never-measured")[1].startswith("not sure")


def test_error_table_matches_the_campaigns_it_cites():
    # every row's measured ratio is its campaign's own step_s_median ratio, read here independently
    step = {}
    for campaign in {row["campaign"] for entry in OPTION_ERRORS.values() for row in entry["runs"]}:
        for line in open_data(os.path.join(ROOT, "validation/data", campaign, "ddp_runs.jsonl")):
            r = json.loads(line)
            if r.get("status") == "ok" and r["bucket_cap_mb"] == 25:
                key = (campaign, r["launch_id"], r["model"], r["transport"], r["world_size"], r["variant"])
                step[key] = r["step_s_median"]
    for option, entry in OPTION_ERRORS.items():
        for row in entry["runs"]:
            # an option and its plain run come from the same launch
            key = (row["campaign"], row["launch_id"], row["model"], row["transport"], row["world_size"])
            expected = step[(*key, option)] / step[(*key, "none")]
            assert row["measured_ratio"] == pytest.approx(expected, abs=1e-4)
        rms = (sum((r["predicted_ratio"] - r["measured_ratio"]) ** 2 for r in entry["runs"]) / len(entry["runs"])) ** 0.5
        assert entry["rms_error"] == pytest.approx(rms, abs=1e-3)
