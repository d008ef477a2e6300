"""Multi-tier rails: a leaf per rail per group of ``nodes_per_leaf`` nodes, a spine above whose uplinks
carry 1/oversubscription of what a leaf's ports inject. Expected times are derived by hand below."""

from __future__ import annotations

import pytest

from ddpsim.collectives import CollectiveModel, ProtocolTable
from ddpsim.loader import scenario_from_dict
from ddpsim.scenario.schema import ClusterSpec, InterNodeSpec, IntraNodeSpec
from ddpsim.topology import build_topology
from tests.test_collectives import detailed_s

NIC_BPS = 12.5e9  # 100 Gb/s
S = 2**30  # bytes all-reduced: large enough that latency is a rounding error beside the transfer


def rails(nodes: int, gpus: int, *, nodes_per_leaf: int | None, oversubscription: float) -> ClusterSpec:
    return ClusterSpec(
        gpu="h100", nodes=nodes, gpus_per_node=gpus,
        intra_node=IntraNodeSpec("nvswitch", 450e9, 3e-6),
        inter_node=InterNodeSpec("rail-fat-tree", NIC_BPS, 5e-6, oversubscription, None,
                                 nodes_per_leaf=nodes_per_leaf),
    )


def transfer_s(model: CollectiveModel, fast: bool = True) -> float:
    """The bandwidth part of a ring Simple all-reduce of S bytes: T(2S) - T(S) (the latency terms,
    plateau included, are the same at both sizes)."""
    def time_s(size: float) -> float:
        return model.allreduce_time_s(size, "ring", "simple") if fast else detailed_s(model, size, "ring", "simple")
    return time_s(2 * S) - time_s(S)


def test_leaves_and_spine_are_built_per_rail_and_group() -> None:
    topo = build_topology(rails(4, 2, nodes_per_leaf=2, oversubscription=2.0))
    names = topo.link_names(topo.route(1, 2 * 2 + 1).link_ids)  # n0.g1 -> n2.g1: same rail, other leaf
    assert names == ["n0.g1->rail1.leaf0", "rail1.leaf0->spine", "spine->rail1.leaf1", "rail1.leaf1->n2.g1"]
    up = topo.graph.edges["rail1.leaf0", "spine"]["bandwidth_Bps"]
    assert up == pytest.approx(2 * NIC_BPS / 2.0)  # two nodes' NICs on rail 1, halved
    assert topo.link_names(topo.route(1, 3).link_ids) == ["n0.g1->rail1.leaf0", "rail1.leaf0->n1.g1"]
    # another rail and another leaf: PXN to the source node's GPU on the destination's rail, then up
    assert topo.link_names(topo.route(0, 2 * 2 + 1).link_ids)[:2] == ["n0.g0->n0.nvsw", "n0.nvsw->n0.g1"]


def test_oversubscribed_spine_slows_the_ring_to_the_closed_form() -> None:
    n, channels = 8, 2  # 4 nodes x 2 GPUs; NCCL spreads one ring per NIC (rail)
    efficiency = ProtocolTable().efficiency("simple", "net")
    # each of the 2(n-1) ring steps moves S/(n*channels) per flow; a node-to-node hop of channel k runs on
    # rail k (PXN), one flow per direction per rail per node boundary
    one_leaf_s = 2 * (n - 1) * S / (n * channels) / (NIC_BPS * efficiency)
    # every node its own leaf per rail at 2:1: each boundary-crossing flow climbs to the spine through an
    # uplink of NIC/2, alone on it
    crossing_s = 2 * (n - 1) * S / (n * channels) / (NIC_BPS / 2 * efficiency)

    flat = CollectiveModel(build_topology(rails(4, 2, nodes_per_leaf=None, oversubscription=2.0)))
    one_leaf = CollectiveModel(build_topology(rails(4, 2, nodes_per_leaf=8, oversubscription=2.0)))
    # two nodes a leaf: a rail's leaf sends one ring flow up and takes one down, within its uplink of 2 NICs / 2
    paired = CollectiveModel(build_topology(rails(4, 2, nodes_per_leaf=2, oversubscription=2.0)))
    alone = CollectiveModel(build_topology(rails(4, 2, nodes_per_leaf=1, oversubscription=2.0)))
    for model in (flat, one_leaf, paired):
        assert transfer_s(model) == pytest.approx(one_leaf_s, rel=1e-9)
    assert transfer_s(alone) == pytest.approx(crossing_s, rel=1e-9)
    assert transfer_s(alone, fast=False) == pytest.approx(crossing_s, rel=1e-9)
    # nccl-tests' bus bandwidth at 1 GiB follows (latency under 0.1% of the time)
    bus = alone.bus_bandwidth_Bps(S, "ring", "simple")
    assert bus == pytest.approx(S / crossing_s * 2 * (n - 1) / n, rel=2e-3)
    assert bus < 0.51 * one_leaf.bus_bandwidth_Bps(S, "ring", "simple")


def test_scenario_fields_reach_the_builder() -> None:
    scenario = scenario_from_dict({
        "workload": {"model": "mlp", "batch_size": 8},
        "cluster": {"gpu": "H100-SXM", "nodes": 4, "gpus_per_node": 2,
                    "inter_node": {"type": "rail-fat-tree", "nodes_per_leaf": 2, "oversubscription": 4}},
    })
    assert scenario.cluster.inter_node.nodes_per_leaf == 2
    topo = build_topology(scenario.cluster)
    assert topo.graph.edges["rail0.leaf1", "spine"]["bandwidth_Bps"] == pytest.approx(2 * 400e9 / 8 / 4)
