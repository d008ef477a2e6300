"""Topology presets and custom graphs: structure, routes, validation, scale."""

from __future__ import annotations

import time

import networkx as nx
import numpy as np
import pytest

from ddpsim.errors import ScenarioError
from ddpsim.scenario.schema import (
    ClusterSpec,
    CustomTopologySpec,
    InterNodeSpec,
    IntraNodeSpec,
    TopologyLink,
)
from ddpsim.topology import Topology, build_topology


def cluster(nodes: int, gpus: int, intra: str = "nvswitch", inter: str = "rail-fat-tree", *,
            intra_Bps: float = 400e9, intra_s: float = 2e-6, nic_Bps: float = 50e9, nic_s: float = 6e-6,
            oversubscription: float = 1.0, nics_per_node: int | None = None) -> ClusterSpec:
    return ClusterSpec(
        gpu="h100", nodes=nodes, gpus_per_node=gpus,
        intra_node=IntraNodeSpec(intra, intra_Bps, intra_s),
        inter_node=InterNodeSpec(inter, nic_Bps, nic_s, oversubscription, nics_per_node),
    )


def names(topo: Topology, src: int, dst: int) -> list[str]:
    return topo.link_names(topo.route(src, dst).link_ids)


def test_nvswitch_node_is_a_star_of_duplex_links() -> None:
    topo = build_topology(cluster(1, 8))
    assert isinstance(topo.graph, nx.DiGraph)
    assert topo.gpu_vertices == tuple(f"n0.g{i}" for i in range(8))
    assert (topo.nodes, topo.gpus_per_node, topo.world_size) == (1, 8, 8)
    assert topo.n_links == 16 and len(topo.capacity_Bps) == 16
    assert np.all(topo.capacity_Bps == 400e9)
    edge = topo.graph.edges["n0.g3", "n0.nvsw"]
    assert edge["bandwidth_Bps"] == 400e9 and edge["link_class"] == "intra"
    back = topo.graph.edges["n0.nvsw", "n0.g3"]
    assert back["link_id"] != edge["link_id"]  # each direction is its own capacity
    route = topo.route(0, 5)
    assert names(topo, 0, 5) == ["n0.g0->n0.nvsw", "n0.nvsw->n0.g5"]
    assert route.latency_s == 2e-6  # one GPU-to-GPU hop costs the configured latency once
    assert topo.route(3, 3).link_ids == ()
    assert topo.transport(0, 5) == "nvlink"


def test_rail_fat_tree_keeps_same_rail_traffic_below_the_spine() -> None:
    topo = build_topology(cluster(4, 8, oversubscription=2.0))
    assert names(topo, 3, 8 + 3) == ["n0.g3->rail3.leaf", "rail3.leaf->n1.g3"]
    # another rail: over NVLink to the GPU on the destination's rail, then that rail (NCCL's PXN),
    # never through the spine; the route costs the network latency alone (NCCL's NET hop)
    assert names(topo, 7, 8) == ["n0.g7->n0.nvsw", "n0.nvsw->n0.g0", "n0.g0->rail0.leaf", "rail0.leaf->n1.g0"]
    assert topo.route(7, 8).latency_s == pytest.approx(6e-6, rel=1e-15)
    assert topo.transport(7, 8) == "net"
    assert not any(topo.graph.edges[u, v]["link_class"] == "inter" and "spine" in u + v
                   for a in range(32) for b in range(32) if a // 8 != b // 8
                   for u, v in (topo.link_endpoints(i) for i in topo.route(a, b).link_ids))
    up = topo.graph.edges["rail7.leaf", "spine"]["link_id"]
    assert topo.capacity_Bps[up] == 4 * 50e9 / 2.0  # rail leaf uplink: its ports' sum / oversubscription
    assert topo.link_class[up] == "inter"
    assert topo.nic_uplink(0) == topo.route(0, 8).link_ids[0]


def test_fat_tree_and_ethernet_share_nics() -> None:
    fat = build_topology(cluster(3, 4, inter="fat-tree", nics_per_node=2))
    assert names(fat, 1, 4) == ["n0.g1->n0.nic0", "n0.nic0->leaf0", "leaf0->spine", "spine->leaf1",
                                "leaf1->n1.nic0", "n1.nic0->n1.g0"]
    assert names(fat, 2, 4)[0] == "n0.g2->n0.nic1"
    eth = build_topology(cluster(2, 4, inter="ethernet"))
    assert {names(eth, i, 4)[1] for i in range(4)} == {"n0.nic0->leaf0"}  # one NIC per node
    direct = build_topology(cluster(2, 4, inter="fat-tree"))
    assert names(direct, 0, 4)[0] == "n0.g0->leaf0"  # a NIC per GPU: no shared NIC vertex
    grouped = build_topology(cluster(4, 2, inter="fat-tree"), nodes_per_leaf=2)
    assert names(grouped, 0, 2) == ["n0.g0->leaf0", "leaf0->n1.g0"]
    assert "spine" in names(grouped, 0, 4)[1]


def test_nvlink_ring_routes_the_short_way_round() -> None:
    topo = build_topology(cluster(1, 8, intra="nvlink-ring"))
    assert names(topo, 0, 2) == ["n0.g0->n0.g1", "n0.g1->n0.g2"]
    assert names(topo, 0, 7) == ["n0.g0->n0.g7"]
    assert names(topo, 1, 6) == ["n0.g1->n0.g0", "n0.g0->n0.g7", "n0.g7->n0.g6"]
    assert topo.route(0, 2).latency_s == pytest.approx(4e-6)
    pair = build_topology(cluster(1, 2, intra="nvlink-ring"))
    assert pair.n_links == 2 and names(pair, 1, 0) == ["n0.g1->n0.g0"]


@pytest.mark.parametrize("kind, hub, transport", [("pcie", "pcie", "pci"), ("shm", "host", "shm"),
                                                   ("socket", "host", "net")])
def test_host_mediated_nodes(kind: str, hub: str, transport: str) -> None:
    topo = build_topology(cluster(1, 4, intra=kind, intra_Bps=28e9))
    assert names(topo, 0, 1) == [f"n0.g0->n0.{hub}", f"n0.{hub}->n0.g1"]
    assert topo.capacity_Bps[topo.route(0, 1).link_ids[0]] == 28e9
    assert topo.intra_transport == transport


def test_validation_names_the_field() -> None:
    with pytest.raises(ScenarioError, match=r"cluster.topology.*n0.g0.*n1.g0"):
        build_topology(cluster(2, 2, inter="none"))
    with pytest.raises(ScenarioError) as err:
        build_topology(cluster(1, 2, intra_Bps=0.0))
    assert err.value.field == "cluster.intra_node.bandwidth"
    with pytest.raises(ScenarioError) as err:
        build_topology(cluster(2, 2, nic_s=-1e-6))
    assert err.value.field == "cluster.inter_node.latency"
    with pytest.raises(ScenarioError) as err:
        build_topology(cluster(1, 2, intra="magic"))
    assert err.value.field == "cluster.intra_node.type"
    build_topology(cluster(1, 4, inter="none"))  # one node needs no network


def custom(links: list[TopologyLink], gpus: tuple[str, ...] = ("a", "b", "c", "d"), per_node: int = 2) -> ClusterSpec:
    spec = CustomTopologySpec(gpus=gpus, links=tuple(links), gpus_per_node=per_node)
    base = cluster(len(gpus) // per_node, per_node)
    return ClusterSpec(base.gpu, base.nodes, base.gpus_per_node, base.intra_node, base.inter_node, spec)


def test_custom_graph_routes_by_hops_and_classifies_links() -> None:
    links = [TopologyLink("a", "b", 100e9, 1e-6), TopologyLink("c", "d", 100e9, 1e-6),
             TopologyLink("a", "sw", 10e9, 2e-6), TopologyLink("sw", "c", 10e9, 2e-6),
             TopologyLink("b", "d", 5e9, 3e-6)]
    topo = build_topology(custom(links))
    assert topo.gpu_vertices == ("a", "b", "c", "d") and topo.nodes == 2
    assert names(topo, 0, 2) == ["a->sw", "sw->c"]
    assert topo.route(0, 2).latency_s == pytest.approx(4e-6)
    assert names(topo, 1, 3) == ["b->d"]
    assert names(topo, 0, 1) == ["a->b"]
    classes = {name: topo.link_class[i] for i, name in enumerate(topo.link_names(range(topo.n_links)))}
    assert classes["a->b"] == "intra" and classes["b->d"] == "inter" and classes["sw->c"] == "inter"
    assert topo.capacity_Bps[topo.route(1, 3).link_ids[0]] == 5e9


def test_custom_graph_validation() -> None:
    with pytest.raises(ScenarioError, match=r"'a' \(rank 0\) cannot reach GPU 'c' \(rank 2\)") as err:
        build_topology(custom([TopologyLink("a", "b", 1e9, 0.0), TopologyLink("c", "d", 1e9, 0.0)]))
    assert err.value.field == "cluster.topology"
    with pytest.raises(ScenarioError) as err:
        build_topology(custom([TopologyLink("a", "b", 1e9, 0.0), TopologyLink("b", "c", -1.0, 0.0)]))
    assert err.value.field == "cluster.topology.links[1].bandwidth"
    with pytest.raises(ScenarioError, match="duplicate"):
        build_topology(custom([TopologyLink("a", "b", 1e9, 0.0), TopologyLink("b", "a", 1e9, 0.0)]))


def test_with_capacity_degrades_one_link_and_keeps_routes() -> None:
    topo = build_topology(cluster(2, 4))
    link = topo.nic_uplink(0)
    assert link is not None
    capacity = topo.capacity_Bps.copy()
    capacity[link] *= 0.5
    slow = topo.with_capacity(capacity)
    assert slow.capacity_Bps[link] == 25e9 and topo.capacity_Bps[link] == 50e9
    assert slow.route(0, 4) == topo.route(0, 4)
    u, v = slow.link_endpoints(link)
    assert slow.graph.edges[u, v]["bandwidth_Bps"] == 25e9


def test_16384_gpus_build_and_route_fast() -> None:
    start = time.perf_counter()
    topo = build_topology(cluster(2048, 8))
    for rank in range(topo.world_size):
        topo.route(rank, (rank + 1) % topo.world_size)
    elapsed = time.perf_counter() - start
    assert topo.world_size == 16384
    assert elapsed < 5.0
