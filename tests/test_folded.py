"""Folding a uniform rail-optimised cluster's network (``collectives.folded``) prices every all-reduce
as pricing every rank's flows does: the oracle is ``CollectiveModel`` on ``build_topology`` of the
whole cluster, and ``simulate`` of ``prepare(fold=False)``."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest

from ddpsim.collectives import CollectiveModel
from ddpsim.collectives.folded import (
    FoldedCollectiveModel,
    FoldedTopology,
    _double_tree,
    _RailNetwork,
    _tree_depth,
    fold_problem,
)
from ddpsim.collectives.nvls import nvls_of
from ddpsim.collectives.schedules import _head_tree_pairs, double_binary_tree, tree_depth
from ddpsim.ddp.fold import draw_factors
from ddpsim.loader import scenario_from_dict
from ddpsim.scenario.schema import Scenario
from ddpsim.simulation import prepare, simulate
from ddpsim.topology import build_topology


def _scenario(nodes: int, gpus: int = 8, per_leaf: int | None = None, oversubscription: float = 1.0,
              intra: str = "nvswitch", duplex: float = 1.0, model: str = "gpt2-124m", per_spine: int | None = None,
              spine_oversubscription: float = 1.0, **extra: object) -> Scenario:
    inter: dict[str, object] = {"type": "rail-fat-tree", "nic_bandwidth": "400Gbps", "latency": "5us",
                                "oversubscription": oversubscription, "duplex_factor": duplex,
                                "spine_oversubscription": spine_oversubscription}
    if per_leaf is not None:
        inter["nodes_per_leaf"] = per_leaf
    if per_spine is not None:
        inter["leaves_per_spine"] = per_spine
    document: dict[str, object] = {
        "workload": {"model": model, "batch_size": 4, "precision": "bf16-amp"},
        "cluster": {"gpu": "H100-SXM", "nodes": nodes, "gpus_per_node": gpus,
                    "intra_node": {"type": intra, "bandwidth": "450GB/s", "latency": "3us"}, "inter_node": inter},
        "ddp": {"bucket_cap_mb": 25},
        "simulation": {"mode": "fast"},
    }
    for section, values in extra.items():
        document[section] = {**document.get(section, {}), **values}  # type: ignore[dict-item]
    return scenario_from_dict(document)


SHAPES = [  # nodes, GPUs per node, nodes per leaf, oversubscription, intra-node type, duplex factor[, tier 3]
    (8, 8, None, 1.0, "nvswitch", 1.0),
    (16, 4, 2, 1.5, "nvswitch", 1.0, 2, 3.0),  # spine groups of 2 leaves (4 nodes) under a 3:1 core
    (24, 2, 1, 1.0, "nvswitch", 0.7, 3, 2.0),
    (18, 4, 3, 2.0, "nvlink-ring", 1.0, 2, 1.0),
    (12, 4, 3, 2.0, "nvswitch", 1.0),
    (16, 8, 4, 3.0, "nvlink-ring", 0.6),
    (6, 2, 2, 1.0, "pcie", 1.0),
    (9, 4, None, 1.0, "nvswitch", 0.7),
    (5, 4, 1, 2.0, "nvswitch", 1.0),  # every node its own leaf: every flow between nodes through the spine
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_prices_equal_every_rank(shape: tuple) -> None:
    nodes, gpus, per_leaf, over, intra, duplex = shape[:6]
    per_spine, spine_over = shape[6:] or (None, 1.0)
    cluster = _scenario(nodes, gpus, per_leaf, over, intra, duplex, per_spine=per_spine,
                        spine_oversubscription=spine_over).cluster
    assert fold_problem(cluster) is None
    full = CollectiveModel(build_topology(cluster), nvls=nvls_of(cluster))
    folded = FoldedCollectiveModel(cluster, nvls=nvls_of(cluster))
    algorithms = ["ring", "tree", "hierarchical"] + (["nvls"] if full.nvls is not None else [])
    for algorithm in algorithms:
        for protocol in ["simple"] if algorithm == "nvls" else ["ll", "ll128", "simple"]:
            for nbytes in (0.0, 1e3, 1e6, 3e7, 1e9):
                assert folded.allreduce_time_s(nbytes, algorithm, protocol) == pytest.approx(
                    full.allreduce_time_s(nbytes, algorithm, protocol), rel=1e-9, abs=0)
                assert folded.tuning_time_s(nbytes, algorithm, protocol) == pytest.approx(
                    full.tuning_time_s(nbytes, algorithm, protocol), rel=1e-9, abs=0)
    for nbytes in (1e3, 1e6, 1e8):
        assert folded.choose(nbytes) == full.choose(nbytes)


def test_what_does_not_fold() -> None:
    assert fold_problem(_scenario(10, 8, 4).cluster) == "10 nodes do not fill leaves of 4"
    assert fold_problem(_scenario(2).cluster) is not None  # no more nodes than the representative has
    assert fold_problem(_scenario(8, 1).cluster) == "one GPU per node"
    fat = _scenario(8).cluster
    assert fold_problem(replace(fat, inter_node=replace(fat.inter_node, type="fat-tree"))) is not None
    # a degraded link and DETAILED mode price every rank
    assert not isinstance(prepare(_scenario(8, simulation={"degraded_link_factor": 0.5})).topology, FoldedTopology)
    assert not isinstance(prepare(_scenario(8, simulation={"mode": "detailed"})).topology, FoldedTopology)
    assert isinstance(prepare(_scenario(8)).topology, FoldedTopology)


@pytest.mark.parametrize("per_leaf, per_spine", [(None, None), (2, None), (1, 2), (2, 2)])
@pytest.mark.parametrize("duplex", [1.0, 0.6])
def test_rail_network_is_the_built_one(per_leaf: int | None, per_spine: int | None, duplex: float) -> None:
    cluster = _scenario(8, 1, per_leaf, 2.0, duplex=duplex, per_spine=per_spine, spine_oversubscription=3.0).cluster
    built = build_topology(cluster)
    rail = _RailNetwork(cluster, per_leaf, per_spine)
    network = [i for i in range(built.n_links) if built.link_class[i] == "inter"]
    assert sorted(rail.link_names(range(rail.n_links))) == sorted(built.link_names(network))
    by_name = dict(zip(built.link_names(range(built.n_links)), range(built.n_links), strict=True))
    mine = [by_name[name] for name in rail.link_names(range(rail.n_links))]
    assert rail.capacity_Bps.tolist() == built.capacity_Bps[mine].tolist()
    assert rail.latency_s.tolist() == built.latency_s[mine].tolist()
    # the tree's flows (schedules' pairs, routed on the built cluster) load its links as tree_loads says
    carried = np.zeros(built.n_links)
    for (a, b), count in _head_tree_pairs([[v] for v in range(8)]).items():
        carried[list(built.route(a, b).link_ids)] += count
    assert rail.tree_loads().tolist() == carried[mine].tolist()
    assert carried.sum() == rail.tree_loads().sum()


@pytest.mark.parametrize("n", [*range(1, 40), 1000, 1001, 4096])
def test_tree_arrays_are_the_schedules_trees(n: int) -> None:
    first, second = double_binary_tree(n)
    arrays = _double_tree(n)
    assert arrays[0].tolist() == first and arrays[1].tolist() == second
    assert _tree_depth(n) == tree_depth(n)


def _python_draws(world: int, iterations: int, seed: int, cv: float) -> np.ndarray:
    """The per-rank draws as the step processes made them, one ``random.gauss`` at a time."""
    sigma = math.sqrt(math.log1p(cv**2))
    rng = random.Random(seed)
    factors = np.ones((world, iterations))
    for step in range(iterations):
        factors[:, step] = [math.exp(rng.gauss(-sigma * sigma / 2, sigma)) for _ in range(world)]
    return factors


@pytest.mark.parametrize("world, iterations", [(1, 1), (3, 3), (5, 2), (64, 4), (1001, 3)])
def test_vectorised_jitter_draws_are_pythons(world: int, iterations: int) -> None:
    np.testing.assert_allclose(draw_factors(world, iterations, 11, 0.1, None, 1.0),
                               _python_draws(world, iterations, 11, 0.1), rtol=1e-14, atol=0)


@pytest.mark.parametrize("strategy", ["ddp", "zero3"])
@pytest.mark.parametrize("shape", [(16, 8, 4, 2.0, None), (12, 4, None, 1.0, None), (16, 4, 2, 1.0, 2)],
                         ids=["leaves-of-4", "one-leaf", "three-tiers"])
def test_step_equals_every_rank(strategy: str, shape: tuple) -> None:
    nodes, gpus, per_leaf, over, per_spine = shape
    # the sharded step takes no jitter or straggler (sharded_simulation refuses them)
    perturbed = {"jitter_cv": 0.08, "straggler_rank": 7, "straggler_slowdown": 1.4} if strategy == "ddp" else {}
    scenario = _scenario(nodes, gpus, per_leaf, over, per_spine=per_spine, spine_oversubscription=4.0,
                         parallel={"strategy": strategy},
                         simulation={**perturbed, "iterations": 3})
    folded, full = prepare(scenario), prepare(scenario, fold=False)
    assert isinstance(folded.topology, FoldedTopology) and not isinstance(full.topology, FoldedTopology)
    a, b = simulate(folded), simulate(full)
    assert a.step_times_s == pytest.approx(b.step_times_s, rel=1e-9, abs=0)
    parts = ("forward_s", "backward_s", "comm_time_s", "exposed_comm_s", "comm_wait_s", "copy_out_s")
    assert [getattr(a, p) for p in parts] == pytest.approx([getattr(b, p) for p in parts], rel=1e-9, abs=1e-15)
    assert [t for c in a.collectives for t in (c.start_s, c.end_s)] == pytest.approx(
        [t for c in b.collectives for t in (c.start_s, c.end_s)], rel=1e-9, abs=1e-15)
    assert a.critical_rank == b.critical_rank and a.algorithm == b.algorithm and a.protocol == b.protocol
    if strategy == "ddp":
        # every link the folded run names is that link of the whole cluster, with its busy time
        busy = {link.link: link.busy_s for link in b.links}
        assert a.links[0].busy_s == pytest.approx(b.links[0].busy_s, rel=1e-9)
        for link in a.links:
            if link.link in busy:
                assert link.busy_s == pytest.approx(busy[link.link], rel=1e-9)


def test_link_busy_mixes_algorithms_as_every_rank() -> None:
    """Buckets priced with ring and tree load the same NICs: a folded link sums both, as the whole does."""
    scenario = _scenario(16, 8, 4, 2.0, ddp={"bucket_cap_mb": 0.05})
    full_prep = prepare(scenario, fold=False)
    a = simulate(prepare(scenario))
    picked = {full_prep.collectives.choose(bucket.wire_bytes)[0] for bucket in full_prep.buckets}
    assert len(picked) > 1, picked
    names = full_prep.topology.link_names(range(full_prep.topology.n_links))
    from ddpsim.simulation import _priced_busy_s

    every = dict(zip(names, _priced_busy_s(full_prep, 1).tolist(), strict=True))
    for link in a.links:
        assert link.busy_s == pytest.approx(every[link.link], rel=1e-9)
    assert a.links[0].busy_s == pytest.approx(max(every.values()), rel=1e-9)


@pytest.mark.parametrize("per_leaf, duplex, per_spine", [(None, 1.0, None), (2, 0.6, None), (1, 1.0, None),
                                                         (1, 0.6, 4), (2, 1.0, 2)])
def test_rail_link_names_read_back(per_leaf: int | None, duplex: float, per_spine: int | None) -> None:
    cluster = _scenario(8, 1, per_leaf, 2.0, duplex=duplex, per_spine=per_spine).cluster
    rail = _RailNetwork(cluster, per_leaf, per_spine)
    assert [rail.link_id(name) for name in rail.link_names(range(rail.n_links))] == list(range(rail.n_links))
    assert rail.link_id("n0.g1->rail1.leaf") is None and rail.link_id("n99.g0->rail0.leaf") is None


def test_a_sweeps_points_share_the_folded_network() -> None:
    first = prepare(_scenario(8, ddp={"bucket_cap_mb": 5}))
    again = prepare(_scenario(8, ddp={"bucket_cap_mb": 50}))
    other = prepare(_scenario(8, oversubscription=2.0, per_leaf=2))
    assert again.collectives is first.collectives and other.collectives is not first.collectives
