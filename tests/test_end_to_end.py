"""Every shipped scenario runs; the CLI's --json, --out and --trace contracts; core properties."""

import glob
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddpsim import load_scenario, simulate
from ddpsim.cli import main
from ddpsim.loader import scenario_from_dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS = sorted(glob.glob(os.path.join(ROOT, "scenarios", "*.yaml")))


# parameter counts as their authors publish them: torchvision resnet50, Hugging Face GPT2Model and
# BertForPreTraining (bert-large-uncased, MLM and NSP heads), Llama 2 7B
PUBLISHED_PARAMS = {"resnet50": 25_557_032, "gpt2-124m": 124_439_808, "bert-large": 336_226_108,
                    "llama-7b": 6_738_415_616}


@pytest.mark.parametrize("path", SCENARIOS, ids=os.path.basename)
def test_every_shipped_scenario_runs(path):
    """What each shipped scenario's result must say, worked out from its YAML and published model sizes."""
    import yaml

    with open(path, encoding="utf-8") as handle:
        spec = yaml.safe_load(handle)
    workload, cluster, ddp = spec["workload"], spec["cluster"], spec.get("ddp", {})
    gpus = cluster["nodes"] * cluster["gpus_per_node"]
    micro_steps = ddp.get("grad_accumulation_steps", 1)
    result = simulate(load_scenario(path))
    assert (result.world_size, result.nodes, result.gpus_per_node) == (gpus, cluster["nodes"], cluster["gpus_per_node"])
    params = PUBLISHED_PARAMS[workload["model"]]
    if spec.get("parallel", {}).get("strategy", "ddp") in ("zero2", "zero3"):
        # FSDP2: fp32 gradients sharded over every GPU, no DDP buckets; each unit's gradients reduce-scattered once.
        # The breakdown is the peak's: at the start of backward no gradient exists yet (zero_grad sets them to None),
        # at its end the sharded fp32 gradients do
        assert result.memory_bytes["gradients"] in (0.0, pytest.approx(4 * params / gpus))
        assert "ddp_buckets" not in result.memory_bytes and not result.buckets
        reduce_bytes = {"fp32": 4, "bf16": 2}[spec["parallel"].get("reduce_dtype", "fp32")]
        assert sum(c.bytes for c in result.collectives if c.kind == "reduce-scatter") == reduce_bytes * params
        assert result.fits_in_memory and result.step_time_s >= result.compute_only_s * (1 - 1e-9)
        return
    assert result.bucket_cap_mb == ddp["bucket_cap_mb"]
    # fp32 gradients (AMP keeps fp32 master weights and gradients), and DDP's buckets hold a second copy
    assert result.memory_bytes["gradients"] == 4 * params
    assert result.memory_bytes["ddp_buckets"] == (0 if ddp.get("gradient_as_bucket_view") else 4 * params)
    assert sum(b.grad_bytes for b in result.buckets) == 4 * params
    samples_per_step = workload["batch_size"] * micro_steps * gpus
    assert result.samples_per_s == pytest.approx(samples_per_step / result.step_time_s, rel=1e-12)
    if "seq_len" in workload:
        assert result.tokens_per_s == pytest.approx(samples_per_step * workload["seq_len"] / result.step_time_s,
                                                    rel=1e-12)
    # communication only adds: a step is never shorter than its compute alone
    assert result.step_time_s >= result.compute_only_s * (1 - 1e-9)
    if "llama7b" in path:
        # weights, gradients and buckets (4 + 4 + 4 bytes) and Adam's two moments (8): 20 bytes x 6.74e9 = 135 GB
        # against the H100's 80 GB, before any activation
        assert 20 * params > 80e9
        assert not result.fits_in_memory and any("does not fit" in w for w in result.warnings)


def test_json_contract(capsys):
    assert main(["run", os.path.join(ROOT, "scenarios", "quickstart.yaml"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("schema_version", "step_time_s", "forward_s", "backward_s", "optimizer_s", "comm_time_s",
                "exposed_comm_s", "world_size", "algorithm", "buckets"):
        assert key in data
    starts = [b["start_s"] for b in data["buckets"]]
    assert [b["index"] for b in data["buckets"]] == list(range(len(data["buckets"])))
    assert starts == sorted(starts)
    for bucket in data["buckets"]:
        assert {"index", "bytes", "n_params", "ready_s", "start_s", "end_s"} <= set(bucket)
        assert bucket["ready_s"] <= bucket["start_s"] <= bucket["end_s"]


def test_out_and_trace(tmp_path, capsys):
    out = tmp_path / "report"
    trace = tmp_path / "step.json"
    args = ["run", os.path.join(ROOT, "scenarios", "quickstart.yaml"), "--out", str(out), "--trace", str(trace)]
    assert main(args + ["--set", "cluster.nodes=1"]) == 0
    assert sorted(os.listdir(out)) == ["result.json", "summary.md", "timeline.png"]
    events = json.loads(trace.read_text())["traceEvents"]
    processes = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert processes == {f"rank {r} {side}" for r in range(8) for side in ("host", "GPU")}  # every rank of the node
    assert any(e["name"].startswith("ncclDevKernel_AllReduce") for e in events)


def _scenario(bandwidth="100GB/s", nodes=2, gpus_per_node=2, model="mlp", cap=5, nic="100Gbps", mode="detailed",
              inter="rail-fat-tree"):
    return scenario_from_dict(
        {
            "workload": {"model": model, "batch_size": 8},
            "cluster": {
                "gpu": "H100-SXM",
                "nodes": nodes,
                "gpus_per_node": gpus_per_node,
                "intra_node": {"type": "nvswitch", "bandwidth": bandwidth, "latency": "3us"},
                "inter_node": {"type": inter, "nic_bandwidth": nic, "latency": "5us"},
            },
            "ddp": {"bucket_cap_mb": cap},
            "simulation": {"mode": mode},
        }
    )


def test_world_size_one_has_no_communication():
    result = simulate(_scenario(nodes=1, gpus_per_node=1))
    assert result.comm_time_s == 0 and result.exposed_comm_s == 0
    assert result.step_time_s == pytest.approx(result.compute_only_s, rel=1e-12)


def test_same_seed_same_result():
    a = simulate(_scenario()).to_dict()
    b = simulate(_scenario()).to_dict()
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gbps=st.floats(min_value=1, max_value=900),
    factor=st.floats(min_value=1.01, max_value=20),
    nic=st.floats(min_value=10, max_value=800),
    cap=st.sampled_from([0.5, 1, 5, 25, 100]),
)
def test_more_bandwidth_never_slows_a_step(gbps, factor, nic, cap):
    slow = simulate(_scenario(bandwidth=f"{gbps}GB/s", nic=f"{nic}Gbps", cap=cap, mode="fast"))
    fast_intra = simulate(_scenario(bandwidth=f"{gbps * factor}GB/s", nic=f"{nic}Gbps", cap=cap, mode="fast"))
    fast_nic = simulate(_scenario(bandwidth=f"{gbps}GB/s", nic=f"{nic * factor}Gbps", cap=cap, mode="fast"))
    assert fast_intra.step_time_s <= slow.step_time_s * (1 + 1e-12)
    assert fast_nic.step_time_s <= slow.step_time_s * (1 + 1e-12)
    assert slow.step_time_s >= slow.compute_only_s * (1 - 1e-12)


def test_detailed_and_fast_modes_agree():
    for nodes, gpn in ((1, 8), (2, 4), (4, 8)):
        detailed = simulate(_scenario(nodes=nodes, gpus_per_node=gpn, mode="detailed"))
        fast = simulate(_scenario(nodes=nodes, gpus_per_node=gpn, mode="fast"))
        assert fast.step_time_s == pytest.approx(detailed.step_time_s, rel=1e-9)


def test_gradient_as_bucket_view_removes_copies_and_hooks_halve_bytes():
    base = _scenario()
    from dataclasses import replace

    view = replace(base, ddp=replace(base.ddp, gradient_as_bucket_view=True))
    hooked = replace(base, ddp=replace(base.ddp, comm_hook="bf16"))
    r_base, r_view, r_hook = simulate(base), simulate(view), simulate(hooked)
    assert r_view.copy_s == 0 and r_base.copy_s > 0
    assert sum(b.bytes for b in r_hook.buckets) * 2 == sum(b.bytes for b in r_base.buckets)


def test_grad_accumulation_adds_compute_only_micro_steps():
    from dataclasses import replace

    base = _scenario(nodes=1, gpus_per_node=1)
    accumulated = replace(base, ddp=replace(base.ddp, grad_accumulation_steps=4))
    one, four = simulate(base), simulate(accumulated)
    micro = one.compute_only_s - one.optimizer_s
    assert four.step_time_s == pytest.approx(one.step_time_s + 3 * micro, rel=1e-9)
    assert four.compute_only_s == pytest.approx(4 * micro + one.optimizer_s, rel=1e-12)


def test_grad_accumulation_with_communication_adds_only_compute():
    from dataclasses import replace

    base = _scenario(nodes=1, gpus_per_node=4)
    accumulated = replace(base, ddp=replace(base.ddp, grad_accumulation_steps=3))
    one, three = simulate(base), simulate(accumulated)
    # no_sync micro-steps: plain forward + backward, no copies, hooks, communication or slowdown
    micro = one.compute_only_s - one.optimizer_s
    assert three.step_time_s == pytest.approx(one.step_time_s + 2 * micro, rel=1e-6)
    assert three.comm_time_s == pytest.approx(one.comm_time_s, rel=1e-9)


def test_link_busy_time_is_bytes_over_bandwidth_on_a_two_gpu_ring():
    from ddpsim.collectives import ProtocolTable

    scenario = _scenario(nodes=1, gpus_per_node=2, mode="fast")
    from dataclasses import replace

    scenario = replace(scenario, collective=replace(scenario.collective, algorithm="ring", protocol="simple"))
    result = simulate(scenario)
    # a 2-GPU ring sends 2(n-1)/n = 1 x the bucket over each GPU's link to the switch, each way
    efficiency = ProtocolTable().efficiency("simple", "nvlink")
    expected = sum(b.bytes for b in result.buckets) / (100e9 * efficiency)
    for link in result.links:
        assert link.busy_s == pytest.approx(expected, rel=1e-9)


def test_link_busy_time_agrees_between_modes_and_with_bytes_over_bandwidth():
    # a fat tree: on a rail fabric the ring's PXN hops keep NVLink links active but unsaturated
    # after their NVLink-bound flows end, so busy time there exceeds bytes over bandwidth
    detailed = simulate(_scenario(nodes=2, gpus_per_node=4, mode="detailed", inter="fat-tree"))
    fast = simulate(_scenario(nodes=2, gpus_per_node=4, mode="fast", inter="fat-tree"))
    assert detailed.links and [link.link for link in detailed.links] == [link.link for link in fast.links]
    for a, b in zip(detailed.links, fast.links, strict=True):
        assert b.busy_s == pytest.approx(a.busy_s, rel=1e-9)
    # no link can be busy longer than the step, and the busiest carries at least one bucket's ring share
    assert all(0 < link.busy_s <= detailed.step_time_s for link in detailed.links)
