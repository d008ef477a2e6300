"""A third tier: leaves in spine groups of ``leaves_per_spine`` (on a rail-optimised fabric, the leaves of
every rail of those nodes), spine groups joined by a core whose uplinks carry 1/spine_oversubscription of
what a group's leaves send up. Expected times are derived by hand below."""

from __future__ import annotations

import pytest

from ddpsim.collectives import CollectiveModel, ProtocolTable
from ddpsim.errors import ScenarioError
from ddpsim.loader import scenario_from_dict
from ddpsim.scenario.schema import ClusterSpec, InterNodeSpec, IntraNodeSpec
from ddpsim.topology import build_topology
from tests.test_collectives import detailed_s

NIC_BPS = 12.5e9  # 100 Gb/s
S = 2**30


def tiers(nodes: int, gpus: int, per_leaf: int | None, oversubscription: float, per_spine: int | None,
          spine_oversubscription: float) -> ClusterSpec:
    return ClusterSpec(
        gpu="h100", nodes=nodes, gpus_per_node=gpus,
        intra_node=IntraNodeSpec("nvswitch", 450e9, 3e-6),
        inter_node=InterNodeSpec("rail-fat-tree", NIC_BPS, 5e-6, oversubscription, None, nodes_per_leaf=per_leaf,
                                 leaves_per_spine=per_spine, spine_oversubscription=spine_oversubscription),
    )


def ring_transfer_s(model: CollectiveModel, fast: bool = True) -> float:
    """The bandwidth part of a ring Simple all-reduce of S bytes: T(2S) - T(S)."""
    def time_s(size: float) -> float:
        return model.allreduce_time_s(size, "ring", "simple") if fast else detailed_s(model, size, "ring", "simple")
    return time_s(2 * S) - time_s(S)


def test_routes_climb_to_the_core_between_spine_groups() -> None:
    # 8 nodes x 2 GPUs, a leaf per rail per node, 2 leaves per spine group: groups of nodes {0,1}, {2,3}, ...
    topo = build_topology(tiers(8, 2, 1, 1.0, 2, 4.0))
    same_group = topo.link_names(topo.route(1, 1 * 2 + 1).link_ids)  # n0.g1 -> n1.g1
    assert same_group == ["n0.g1->rail1.leaf0", "rail1.leaf0->spine0", "spine0->rail1.leaf1", "rail1.leaf1->n1.g1"]
    across = topo.link_names(topo.route(1, 2 * 2 + 1).link_ids)  # n0.g1 -> n2.g1
    assert across == ["n0.g1->rail1.leaf0", "rail1.leaf0->spine0", "spine0->core", "core->spine1",
                      "spine1->rail1.leaf2", "rail1.leaf2->n2.g1"]
    # a group's uplink: its 2 leaves of each of 2 rails, each sending up one NIC (1:1), over 4
    assert topo.graph.edges["spine0", "core"]["bandwidth_Bps"] == pytest.approx(2 * 2 * NIC_BPS / 4)
    # a route costs the network latency once, whatever tiers it crosses
    assert topo.route(1, 2 * 2 + 1).latency_s == pytest.approx(5e-6)


def test_oversubscribed_core_slows_the_ring_to_the_closed_form() -> None:
    n, channels = 16, 2  # 8 nodes x 2 GPUs: one ring per rail (PXN), one flow per rail at each node boundary
    efficiency = ProtocolTable().efficiency("simple", "net")
    nic_bound_s = 2 * (n - 1) * S / (n * channels) / (NIC_BPS * efficiency)
    # a spine group's core uplink (2 leaves x 2 rails x NIC / spine_oversubscription) carries the 2 rails'
    # flows leaving the group: NIC each at 2:1 (no slower than a NIC), NIC/2 each at 4:1
    core_bound_s = 2 * (n - 1) * S / (n * channels) / (NIC_BPS / 2 * efficiency)
    for spine_over, expected_s in ((1.0, nic_bound_s), (2.0, nic_bound_s), (4.0, core_bound_s)):
        model = CollectiveModel(build_topology(tiers(8, 2, 1, 1.0, 2, spine_over)))
        assert ring_transfer_s(model) == pytest.approx(expected_s, rel=1e-9)
    slow = CollectiveModel(build_topology(tiers(8, 2, 1, 1.0, 2, 4.0)))
    assert ring_transfer_s(slow, fast=False) == pytest.approx(core_bound_s, rel=1e-9)
    # one spine group holding every leaf: no core, the 4:1 is never crossed
    flat = CollectiveModel(build_topology(tiers(8, 2, 1, 1.0, 8, 4.0)))
    assert ring_transfer_s(flat) == pytest.approx(nic_bound_s, rel=1e-9)


def test_both_tiers_bind_where_they_are_narrowest() -> None:
    # leaves of 2 nodes at 2:1 (uplink = 2 NICs / 2 = one NIC for the one crossing flow per rail: not binding),
    # groups of 2 leaves at 8:1: core uplink = 2 leaves x 2 rails x NIC / 8 = NIC/2, for 2 flows: NIC/4
    n, channels = 16, 2
    efficiency = ProtocolTable().efficiency("simple", "net")
    expected_s = 2 * (n - 1) * S / (n * channels) / (NIC_BPS / 4 * efficiency)
    model = CollectiveModel(build_topology(tiers(8, 2, 2, 2.0, 2, 8.0)))
    assert ring_transfer_s(model) == pytest.approx(expected_s, rel=1e-9)


def _scenario(**inter: object) -> dict:
    return {"workload": {"model": "mlp", "batch_size": 8},
            "cluster": {"gpu": "H100-SXM", "nodes": 8, "gpus_per_node": 2,
                        "inter_node": {"type": "rail-fat-tree", **inter}}}


def test_scenario_fields_reach_the_builder_and_bad_ones_name_theirs() -> None:
    scenario = scenario_from_dict(_scenario(nodes_per_leaf=2, leaves_per_spine=2, spine_oversubscription=3))
    topo = build_topology(scenario.cluster)
    assert topo.graph.edges["spine1", "core"]["bandwidth_Bps"] == pytest.approx(2 * 2 * 2 * 400e9 / 8 / 3)
    for field, value in (("leaves_per_spine", 0), ("spine_oversubscription", 0.5)):
        with pytest.raises(ScenarioError) as caught:
            scenario_from_dict(_scenario(**{field: value}))
        assert caught.value.field == f"cluster.inter_node.{field}"
