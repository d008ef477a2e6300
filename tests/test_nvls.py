"""NVLink SHARP (NVLS, NVLS tree): NCCL's bandwidth formula derived by hand, when NCCL runs it, and
the scenario field that turns it off.

NCCL's NVLS bus bandwidth, by hand (src/graph/search.cc, src/graph/tuning.cc / src/tuning/nvls.cc):
the NVLS graph search gives each of a node's g GPUs one channel it heads; on every GPU's switch
link the channel's head takes twice a channel's bandwidth b, every other GPU once, so (g+1)·b fills
the link bandwidth B. The tuning model then rates the all-reduce bus bandwidth at
g · b · e · (g-1)/g · 2 (e = nvlsEfficiency, (g-1)/g its channel factor, 2 for the all-reduce's two
passes through the switch), and nccl-tests' busbw equals it (algbw = busBw · n / (2(n-1))). So
busbw = 2(g-1)/(g+1) · B · e.
"""

from __future__ import annotations

import pytest
import simpy

from ddpsim.collectives import CollectiveModel, ProtocolTable
from ddpsim.collectives.nvls import nvls_of
from ddpsim.errors import ScenarioError
from ddpsim.loader import scenario_from_dict
from ddpsim.network import FlowNetwork
from ddpsim.scenario.schema import ClusterSpec
from ddpsim.topology import build_topology
from validation.closed_forms import model_closed_form_s

GIB = 2**30


def spec(gpu: str, nodes: int, gpus: int, intra: dict, inter: dict | None = None) -> ClusterSpec:
    cluster = {"gpu": gpu, "nodes": nodes, "gpus_per_node": gpus, "intra_node": intra}
    if inter is not None:
        cluster["inter_node"] = inter
    return scenario_from_dict({"workload": {"model": "mlp", "batch_size": 1}, "cluster": cluster}).cluster


def model_of(cluster: ClusterSpec, table: ProtocolTable | None = None) -> CollectiveModel:
    return CollectiveModel(build_topology(cluster), table, nvls=nvls_of(cluster))


def asymptotic_busbw(model: CollectiveModel, algorithm: str) -> float:
    """Bus bandwidth of the size-proportional part (two sizes: the latency cancels)."""
    n = model.topology.world_size
    small, large = 4 * GIB, 8 * GIB
    dt = model.allreduce_time_s(large, algorithm, "simple") - model.allreduce_time_s(small, algorithm, "simple")
    return (large - small) / dt * 2 * (n - 1) / n


@pytest.mark.parametrize(("gpu", "gpus", "bandwidth_Bps", "efficiency"),
                         [("H100", 8, 450e9, 0.85), ("H100", 4, 450e9, 0.85), ("B200", 8, 900e9, 0.74)])
def test_nvls_bus_bandwidth_is_nccls_formula(gpu: str, gpus: int, bandwidth_Bps: float, efficiency: float) -> None:
    model = model_of(spec(gpu, 1, gpus, {"type": "nvswitch", "bandwidth": bandwidth_Bps}), ProtocolTable.ideal())
    per_channel = bandwidth_Bps / (gpus + 1)  # head twice, the others once, on every GPU's switch link
    nccl_bus = gpus * per_channel * efficiency * (gpus - 1) / gpus * 2
    assert asymptotic_busbw(model, "nvls") == pytest.approx(nccl_bus, rel=1e-9)


def test_nvls_on_8_h100_at_default_efficiencies() -> None:
    # the default tables: NVLink at 0.79 of its 450 GB/s datasheet rate (our own H200 ring runs), NVLS at
    # 0.85 of that: 2 * 7/9 * 450 * 0.79 * 0.85 = 470 GB/s, against the 469-480 GB/s nccl-tests measure
    model = model_of(spec("H100", 1, 8, {"type": "nvswitch"}))
    assert asymptotic_busbw(model, "nvls") == pytest.approx(2 * 7 / 9 * 450e9 * 0.79 * 0.85, rel=1e-6)


def test_nvls_tree_on_two_nodes_is_bound_by_the_heads_nics() -> None:
    # 2 nodes, 8 heads (one per NIC): each node is the child in one tree and the parent in the other,
    # so each NIC sends S/(2c) up one tree and S/(2c) down the other: S/c per direction, c = 8
    nic_Bps = 25e9
    model = model_of(spec("H100", 2, 8, {"type": "nvswitch"}, {"type": "rail-fat-tree", "nic_bandwidth": nic_Bps}),
                     ProtocolTable.ideal())
    n, c = 16, 8
    assert asymptotic_busbw(model, "nvls") == pytest.approx(2 * (n - 1) / n * c * nic_Bps, rel=1e-9)
    # a ring reaches only the NICs' c x 25 GB/s: the NVLS tree's busbw is higher on two nodes
    assert asymptotic_busbw(model, "ring") < asymptotic_busbw(model, "nvls")


def test_nvls_tree_at_most_nccls_channel_ceiling() -> None:
    # 8 nodes on 800 Gb/s NICs: the flow model would let the tree run at the switch's rate, NCCL's model
    # caps an NVLS tree channel at 45.5 GB/s on Hopper from 3 nodes: 8 heads x 45.5 = 364 GB/s busbw
    model = model_of(spec("H100", 8, 8, {"type": "nvswitch"}, {"type": "rail-fat-tree", "nic_bandwidth": "800Gbps"}),
                     ProtocolTable.ideal())
    assert asymptotic_busbw(model, "nvls") == pytest.approx(8 * 45.5e9, rel=1e-9)


@pytest.mark.parametrize("nodes", [1, 2, 3, 8])
def test_fast_equals_detailed_and_the_closed_form(nodes: int) -> None:
    inter = {"type": "rail-fat-tree", "nic_bandwidth": "800Gbps" if nodes == 8 else "200Gbps"} if nodes > 1 else None
    model = model_of(spec("H100", nodes, 8, {"type": "nvswitch"}, inter))
    for nbytes in (1 << 20, 256 << 20):
        fast = model.allreduce_time_s(nbytes, "nvls", "simple")
        env = simpy.Environment()
        env.process(model.allreduce_process(env, FlowNetwork(env, model.topology.capacity_Bps), nbytes, "nvls", "simple"))
        env.run()
        assert env.now == pytest.approx(fast, rel=1e-9)
        assert model_closed_form_s(model, nbytes, "nvls") == pytest.approx(fast, rel=1e-9)


def test_auto_picks_nvls_on_an_h100_nvswitch_node_only() -> None:
    h100 = model_of(spec("H100", 1, 8, {"type": "nvswitch"}))
    assert h100.choose(GIB) == ("nvls", "simple")
    assert h100.choose(4 * 1024)[0] != "nvls"  # small sizes: NVLS's 25 us switch hop loses to LL rings
    a100 = model_of(spec("A100", 1, 8, {"type": "nvswitch", "bandwidth": "300GB/s"}))
    assert a100.nvls_efficiency is None and a100.choose(GIB)[0] == "ring"
    off = model_of(spec("H100", 1, 8, {"type": "nvswitch", "nvls": "off"}))
    assert off.nvls_efficiency is None and off.choose(GIB)[0] == "ring"
    two_nodes = model_of(spec("H100", 2, 8, {"type": "nvswitch"}, {"type": "rail-fat-tree", "nic_bandwidth": "200Gbps"}))
    assert two_nodes.choose(GIB) == ("nvls", "simple")


def test_nvls_is_a_simple_protocol_algorithm_where_the_node_has_it() -> None:
    h100 = model_of(spec("H100", 1, 8, {"type": "nvswitch"}))
    assert h100.choose(GIB, "nvls") == ("nvls", "simple")
    with pytest.raises(ValueError, match="simple protocol only"):
        h100.allreduce_time_s(GIB, "nvls", "ll")
    a100 = model_of(spec("A100", 1, 8, {"type": "nvswitch"}))
    with pytest.raises(ValueError, match="NVLink SHARP"):
        a100.allreduce_time_s(GIB, "nvls", "simple")


def test_the_scenario_field_says_where_nvls_runs() -> None:
    assert nvls_of(spec("H200", 1, 8, {"type": "nvswitch"})) == (0.85, (57.7e9, 45.5e9))
    assert nvls_of(spec("B200", 1, 8, {"type": "nvswitch", "nvls": "on"})) == (0.74, (96e9, 80e9))
    assert nvls_of(spec("H100-PCIe", 1, 2, {"type": "pcie"})) is None
    assert nvls_of(spec("H100", 1, 8, {"type": "nvlink-ring"})) is None
    with pytest.raises(ScenarioError, match="cluster.intra_node.nvls: nvls is on, but A100 has no NVLink SHARP"):
        nvls_of(spec("A100", 1, 8, {"type": "nvswitch", "nvls": "on"}))
    with pytest.raises(ScenarioError, match="cluster.intra_node.nvls"):
        spec("H100", 1, 8, {"type": "nvswitch", "nvls": "maybe"})
