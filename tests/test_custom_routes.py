"""Custom graphs route on demand: the same paths networkx's breadth-first search picks, ties included."""

from __future__ import annotations

import random

import networkx as nx
import pytest

import ddpsim.topology.build as build_module
from ddpsim.scenario.schema import ClusterSpec, CustomTopologySpec, InterNodeSpec, IntraNodeSpec, TopologyLink
from ddpsim.topology import Topology, build_topology
from ddpsim.topology.build import _GraphRouter


def custom_cluster(gpus: list[str], links: list[tuple[str, str]], per_node: int) -> ClusterSpec:
    spec = CustomTopologySpec(gpus=tuple(gpus), links=tuple(TopologyLink(a, b, 1e9, 1e-6) for a, b in links),
                              gpus_per_node=per_node)
    return ClusterSpec("h100", len(gpus) // per_node, per_node, IntraNodeSpec("nvswitch", 1e9, 1e-6),
                       InterNodeSpec("rail-fat-tree", 1e9, 1e-6), spec)


def networkx_route(topo: Topology, src: int, dst: int) -> tuple[int, ...]:
    """The route as the router before on-demand search found it: every path from the source at once."""
    path = nx.single_source_shortest_path(topo.graph, topo.gpu_vertices[src])[topo.gpu_vertices[dst]]
    return tuple(topo.graph.edges[u, v]["link_id"] for u, v in zip(path, path[1:], strict=False))


def fat_tree(rng: random.Random) -> tuple[list[str], list[tuple[str, str]], int]:
    """Nodes with a hub, GPUs on leaves, every leaf on every spine: many equal-length paths."""
    nodes, per_node, leaves, spines = rng.randint(2, 5), rng.randint(1, 4), rng.randint(1, 4), rng.randint(1, 3)
    gpus = [f"n{n}.g{i}" for n in range(nodes) for i in range(per_node)]
    links = [(g, f"n{g.split('.')[0][1:]}.hub") for g in gpus]
    links += [(g, f"leaf{rng.randrange(leaves)}") for g in gpus]
    links += [(f"leaf{k}", f"spine{s}") for k in range(leaves) for s in range(spines)]
    rng.shuffle(links)  # adjacency order (link order) decides ties
    return gpus, links, per_node


def random_graph(rng: random.Random) -> tuple[list[str], list[tuple[str, str]], int]:
    """A connected random graph over GPUs and switches (a spanning tree plus extra edges)."""
    n_gpus, n_switches = rng.choice([2, 4, 6, 8]), rng.randint(0, 6)
    vertices = [f"g{i}" for i in range(n_gpus)] + [f"s{i}" for i in range(n_switches)]
    rng.shuffle(vertices)
    pairs = {frozenset((vertices[i], vertices[rng.randrange(i)])) for i in range(1, len(vertices))}
    for _ in range(rng.randint(0, 2 * len(vertices))):
        a, b = rng.sample(vertices, 2)
        pairs.add(frozenset((a, b)))
    links = [tuple(rng.sample(sorted(p), 2)) for p in pairs]
    rng.shuffle(links)
    gpus = [v for v in vertices if v.startswith("g")]
    return gpus, links, rng.choice([1, 2])  # type: ignore[return-value]


def without_dead_ends(make):  # type: ignore[no-untyped-def]
    """``make``'s graph less its switches of one link (a dead end, which a scenario refuses as a misspelt
    name), pruned until none is left."""
    def made(rng: random.Random) -> tuple[list[str], list[tuple[str, str]], int]:
        gpus, links, per_node = make(rng)
        while True:
            degree: dict[str, int] = {}
            for a, b in links:
                degree[a], degree[b] = degree.get(a, 0) + 1, degree.get(b, 0) + 1
            kept = [(a, b) for a, b in links if all(v in gpus or degree[v] > 1 for v in (a, b))]
            if kept == links:
                return gpus, links, per_node
            links = kept
    made.__name__ = make.__name__
    return made


@pytest.mark.parametrize("make", [without_dead_ends(fat_tree), without_dead_ends(random_graph)])
@pytest.mark.parametrize("small_level", [0, 10**9], ids=["array-levels", "loop-levels"])
def test_on_demand_routes_equal_networkx_paths_for_every_pair(make, small_level: int,  # type: ignore[no-untyped-def]
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # every level searched with the array passes, then every level with the plain loop
    monkeypatch.setattr(build_module, "_SMALL_LEVEL", small_level)
    rng = random.Random(29)
    for _ in range(60):
        gpus, links, per_node = make(rng)
        topo = build_topology(custom_cluster(gpus, links, per_node))
        pairs = [(s, d) for s in range(topo.world_size) for d in range(topo.world_size)]
        rng.shuffle(pairs)  # searches resumed and restarted in any order give the same paths
        for src, dst in pairs:
            expected = networkx_route(topo, src, dst) if src != dst else ()
            assert topo.route(src, dst).link_ids == expected, (gpus, links, src, dst)


def test_a_bounded_router_forgets_sources_and_finds_the_same_paths() -> None:
    rng = random.Random(7)
    gpus, links, per_node = without_dead_ends(fat_tree)(rng)
    topo = build_topology(custom_cluster(gpus, links, per_node))
    small = _GraphRouter(topo.graph, topo.gpu_vertices, max_sources=1)
    for src in range(topo.world_size):
        for dst in range(topo.world_size):
            if src != dst:
                assert small(src, dst) == networkx_route(topo, src, dst)
    assert len(small._searches) == 1
