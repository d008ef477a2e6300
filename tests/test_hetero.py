"""Uneven clusters (``cluster.node_groups``): nodes of different GPU counts, GPU kinds and NICs.

Expected values: NCCL's ring over uneven nodes written out by hand (each node's own channel order,
chained node to node as ``connectRings`` does), transfer times from the links the flows cross, and the
slowest kind setting the step (every all-reduce waits for the last rank to join it)."""

from __future__ import annotations

import os
import textwrap
from typing import Any

import pytest

import ddpsim.simulation as simulation
from ddpsim.cli import main
from ddpsim.collectives import CollectiveModel, ProtocolTable, build_schedule
from ddpsim.ddp.fold import plan_ranks
from ddpsim.loader import scenario_from_dict
from ddpsim.scenario.schema import ClusterSpec, InterNodeSpec, IntraNodeSpec, NodeGroupSpec, Scenario
from ddpsim.topology import build_topology
from tests.test_collectives import detailed_s

S = 2**28


def _scenario(groups: list[dict[str, Any]], mode: str = "fast", algorithm: str = "auto", **simulation_spec: Any
              ) -> Scenario:
    return scenario_from_dict({
        "workload": {"model": "mlp", "batch_size": 64},
        "cluster": {"gpu": "H100-SXM", "node_groups": groups,
                    "intra_node": {"type": "nvswitch", "bandwidth": "200GB/s", "latency": "3us"},
                    "inter_node": {"type": "rail-fat-tree", "nic_bandwidth": "100Gbps", "latency": "5us"}},
        "ddp": {"bucket_cap_mb": 1},
        "collective": {"algorithm": algorithm},
        "simulation": {"mode": mode, **simulation_spec},
    })


THREE_AND_ONE = [{"count": 3, "gpus_per_node": 8}, {"count": 1, "gpus_per_node": 4}]


def test_schema_reads_groups_in_rank_order() -> None:
    scenario = _scenario([{"count": 2, "gpus_per_node": 4, "gpu": "A100", "nic_bandwidth": "200Gbps"},
                          {"count": 1, "gpus_per_node": 2}])
    cluster = scenario.cluster
    assert cluster.node_sizes == (4, 4, 2) and cluster.world_size == 10 and cluster.nodes == 3
    assert cluster.rank_gpus == ("A100",) * 8 + ("H100",) * 2  # a group without gpu takes cluster.gpu
    assert [g.nic_bandwidth_Bps for g in cluster.node_groups or ()] == [25e9, 12.5e9]
    assert not cluster.uniform


def test_ring_over_uneven_nodes_chains_each_nodes_channel_order() -> None:
    one = build_schedule("ring", 5, 2, S, channels=1, node_sizes=[2, 3])[0]
    assert {(t.src_rank, t.dst_rank) for t in one.transfers} == {(0, 1), (1, 2), (2, 3), (3, 4), (4, 0)}
    assert {t.nbytes for t in one.transfers} == {S / 5} and one.repeat == 8
    # two channels on nodes of 4 and 2: channel 0 runs 0,1,2,3 | 4,5 and channel 1 starts halfway round each
    # node, 2,3,0,1 | 5,4; node to node, each channel's last GPU sends to the next node's first of that channel
    two = build_schedule("ring", 6, 4, S, channels=2, node_sizes=[4, 2])[0]
    across = {(t.src_rank, t.dst_rank) for t in two.transfers if (t.src_rank < 4) != (t.dst_rank < 4)}
    assert across == {(3, 4), (5, 0), (1, 5), (4, 2)}


def test_tree_over_uneven_nodes_chains_each_node_under_its_head() -> None:
    (phase,) = build_schedule("tree", 5, 2, S, channels=1, node_sizes=[2, 3])
    flows = {(t.src_rank, t.dst_rank): t.count for t in phase.transfers}
    # node 0 chains 0-1, node 1 chains 2-3-4, each edge both ways once per tree (two trees); NCCL's two trees
    # over two nodes are 1 -> 0 and 0 -> 1, so the heads 0 and 2 exchange once per tree each way
    assert flows == {(1, 0): 2, (0, 1): 2, (3, 2): 2, (2, 3): 2, (4, 3): 2, (3, 4): 2, (0, 2): 2, (2, 0): 2}


def test_uneven_rails_change_rail_through_the_spine_only_where_a_node_lacks_the_rail() -> None:
    topo = build_topology(_scenario(THREE_AND_ONE).cluster)
    assert topo.node_sizes == (8, 8, 8, 4) and topo.nics_per_node == 4 and topo.node_of(27) == 3
    names = topo.link_names
    # rank 27 is GPU 3 of the four-GPU node: it has no GPU on rail 6, so it leaves on rail 3 and changes rail above
    assert names(topo.route(27, 6).link_ids) == ["n3.g3->rail3.leaf", "rail3.leaf->spine", "spine->rail6.leaf",
                                                 "rail6.leaf->n0.g6"]
    # the other way a GPU on rail 3 exists at the source: PXN, never the spine
    assert "spine" not in " ".join(names(topo.route(6, 27).link_ids))
    # rail 6's leaf holds the three eight-GPU nodes' NICs only: its spine uplink is theirs (oversubscription 1)
    assert topo.graph.edges["rail6.leaf", "spine"]["bandwidth_Bps"] == pytest.approx(3 * 12.5e9)
    assert topo.graph.edges["rail3.leaf", "spine"]["bandwidth_Bps"] == pytest.approx(4 * 12.5e9)


def test_memory_is_checked_on_the_kind_with_the_least() -> None:
    result = simulation.simulate(_scenario([{"count": 1, "gpus_per_node": 2},
                                            {"count": 1, "gpus_per_node": 2, "gpu": "A100-40GB"}]))
    assert result.gpu_memory_bytes == 40 * 2**30


def test_uneven_nodes_and_a_slower_nic_price_the_ring_by_hand() -> None:
    cluster = ClusterSpec(
        gpu="H100", nodes=2, gpus_per_node=2,
        intra_node=IntraNodeSpec("nvswitch", 450e9, 3e-6),
        inter_node=InterNodeSpec("rail-fat-tree", 12.5e9, 5e-6),
        node_groups=(NodeGroupSpec(1, 2, nic_bandwidth_Bps=12.5e9), NodeGroupSpec(1, 1, nic_bandwidth_Bps=6.25e9)),
    )
    model = CollectiveModel(build_topology(cluster))
    assert model.channels == 1  # NCCL keeps the fewest channels any rank found: the one-GPU node's one NIC
    # ring 0 -> 1 -> 2 -> 0, 2(n-1) = 4 steps of S/3 per flow; 1 -> 2 leaves through GPU 0's NIC (PXN) into
    # the second node's 50 Gb/s NIC, 2 -> 0 leaves through it: each flow alone on that NIC
    expected_s = 4 * (S / 3) / (6.25e9 * ProtocolTable().efficiency("simple", "net"))
    for fast in (True, False):
        def time_s(size: float, fast: bool = fast) -> float:
            return model.allreduce_time_s(size, "ring", "simple") if fast else detailed_s(model, size, "ring", "simple")
        assert time_s(2 * S) - time_s(S) == pytest.approx(expected_s, rel=1e-9)


def test_a_group_with_slower_gpu_links_prices_the_ring_from_them() -> None:
    cluster = ClusterSpec(
        gpu="H100", nodes=2, gpus_per_node=2,
        intra_node=IntraNodeSpec("nvswitch", 450e9, 3e-6),
        inter_node=InterNodeSpec("rail-fat-tree", 12.5e9, 5e-6),
        node_groups=(NodeGroupSpec(1, 2, intra_bandwidth_Bps=1e9), NodeGroupSpec(1, 2)),
    )
    topo = build_topology(cluster)
    assert topo.graph.edges["n0.g0", "n0.nvsw"]["bandwidth_Bps"] == 1e9
    assert topo.graph.edges["n1.g0", "n1.nvsw"]["bandwidth_Bps"] == 450e9
    model = CollectiveModel(topo)
    # two channels, orders 0,1 and 1,0 on each node. In the slow node, GPU 0's link to the switch carries
    # channel 0's hop 0 -> 1 (NVLink, efficiency 0.79) and channel 1's exit 0 -> 1 -> rail 1 (PXN, a network
    # flow, 0.94); both start together and the link stays full until both end: each of the 2(n-1) = 6 steps
    # lasts the two flows' wire bytes (S/(n c) each) over 1 GB/s
    table = ProtocolTable()
    wire = S / 8 * (1 / table.efficiency("simple", "nvlink") + 1 / table.efficiency("simple", "net"))
    expected_s = 6 * wire / 1e9
    for fast in (True, False):
        def time_s(size: float, fast: bool = fast) -> float:
            return model.allreduce_time_s(size, "ring", "simple") if fast else detailed_s(model, size, "ring", "simple")
        assert time_s(2 * S) - time_s(S) == pytest.approx(expected_s, rel=1e-9)


@pytest.mark.parametrize("algorithm", ["auto", "ring", "tree"])
def test_three_nodes_of_eight_and_one_of_four_fast_equals_detailed(algorithm: str) -> None:
    fast = simulation.simulate(_scenario(THREE_AND_ONE, "fast", algorithm))
    detailed = simulation.simulate(_scenario(THREE_AND_ONE, "detailed", algorithm))
    assert fast.world_size == 28
    assert fast.step_time_s == pytest.approx(detailed.step_time_s, rel=1e-9)
    assert [b.end_s for b in fast.buckets] == pytest.approx([b.end_s for b in detailed.buckets], rel=1e-9)


def test_uneven_nodes_fold_as_even_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    # every rank waits for the same all-reduce end, whatever its node: folding by jitter alone stays exact
    jittered = {"jitter_cv": 0.05, "iterations": 3, "seed": 3}
    folded = simulation.simulate(_scenario(THREE_AND_ONE, "detailed", **jittered))
    with monkeypatch.context() as patch:
        patch.setattr(simulation, "plan_ranks", lambda factors, **_: plan_ranks(factors, fold=False))
        every = simulation.simulate(_scenario(THREE_AND_ONE, "detailed", **jittered))
    assert every.simulated_ranks == 28 and folded.simulated_ranks < 28
    assert folded.step_times_s == pytest.approx(every.step_times_s, rel=1e-12)
    assert folded.critical_rank == every.critical_rank


MIXED = [{"count": 1, "gpus_per_node": 4}, {"count": 1, "gpus_per_node": 4, "gpu": "A100"}]


def test_mixed_kinds_fold_equals_every_rank_and_fast_equals_detailed(monkeypatch: pytest.MonkeyPatch) -> None:
    jittered = {"jitter_cv": 0.05, "iterations": 3, "seed": 7}
    folded = simulation.simulate(_scenario(MIXED, "detailed", **jittered))
    with monkeypatch.context() as patch:
        patch.setattr(simulation, "plan_ranks", lambda factors, **_: plan_ranks(factors, fold=False))
        every = simulation.simulate(_scenario(MIXED, "detailed", **jittered))
    assert every.simulated_ranks == 8 and folded.simulated_ranks < 8
    assert folded.step_times_s == pytest.approx(every.step_times_s, rel=1e-12)
    assert folded.critical_rank == every.critical_rank
    fast = simulation.simulate(_scenario(MIXED, "fast", **jittered))
    assert fast.step_times_s == pytest.approx(folded.step_times_s, rel=1e-9)
    # without jitter one representative per kind
    assert simulation.simulate(_scenario(MIXED, "fast")).simulated_ranks == 2


def test_the_slowest_kind_sets_the_step() -> None:
    mixed = simulation.simulate(_scenario(MIXED))
    slow = simulation.simulate(_scenario([{"count": 2, "gpus_per_node": 4, "gpu": "A100"}]))
    quick = simulation.simulate(_scenario([{"count": 2, "gpus_per_node": 4, "gpu": "H100"}]))
    # every A100 cost is at least its H100 cost, so the A100 ranks join every bucket last and end last:
    # the mixed cluster steps exactly as an all-A100 one
    assert mixed.step_time_s == pytest.approx(slow.step_time_s, rel=1e-12)
    assert mixed.step_time_s > quick.step_time_s
    assert mixed.critical_rank >= 4 and mixed.gpu == "H100+A100"


def test_uniform_groups_match_nodes_and_gpus_per_node() -> None:
    grouped = simulation.simulate(_scenario([{"count": 2, "gpus_per_node": 4}]))
    plain = simulation.simulate(scenario_from_dict({
        "workload": {"model": "mlp", "batch_size": 64},
        "cluster": {"gpu": "H100-SXM", "nodes": 2, "gpus_per_node": 4,
                    "intra_node": {"type": "nvswitch", "bandwidth": "200GB/s", "latency": "3us"},
                    "inter_node": {"type": "rail-fat-tree", "nic_bandwidth": "100Gbps", "latency": "5us"}},
        "ddp": {"bucket_cap_mb": 1},
    }))
    assert grouped.step_time_s == pytest.approx(plain.step_time_s, rel=1e-12)


BAD = [
    ("node_groups: [{count: 0, gpus_per_node: 8}]", "cluster.node_groups[0].count"),
    ("node_groups: [{count: 1, gpus_per_node: 8}, {count: 1, gpus_per_node: 4, gpu: Z100}]",
     "cluster.node_groups[1].gpu"),
    ("nodes: 2\n  node_groups: [{count: 1, gpus_per_node: 8}]", "cluster.nodes"),
    ("node_groups: []", "cluster.node_groups"),
    ("node_groups: [{count: 1}]", "cluster.node_groups[0].gpus_per_node"),
    ("nodes: 2\n  inter_node: {nodes_per_leaf: 0}", "cluster.inter_node.nodes_per_leaf"),
]


@pytest.mark.parametrize(("cluster_text", "field"), BAD)
def test_bad_groups_are_one_line_naming_file_and_field(tmp_path: Any, capsys: pytest.CaptureFixture[str],
                                                       cluster_text: str, field: str) -> None:
    path = tmp_path / "uneven.yaml"
    path.write_text(textwrap.dedent("""\
        workload: {model: mlp, batch_size: 8}
        cluster:
          gpu: H100-SXM
          CLUSTER
        """).replace("CLUSTER", cluster_text))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and f"{field}:" in err and "Traceback" not in err


def test_hierarchical_needs_equal_nodes() -> None:
    with pytest.raises(Exception, match="collective.algorithm: hierarchical pairs GPU i"):
        _scenario(THREE_AND_ONE, algorithm="hierarchical")


def test_run_names_uneven_nodes_and_only_the_nic_defaults_it_used() -> None:
    from ddpsim.report.tables import summary_rows

    result = simulation.simulate(_scenario(THREE_AND_ONE))
    assert dict(summary_rows(result))["cluster"] == "4 nodes of uneven size, H100 (28 GPUs)"
    groups_rate = [{**group, "nic_bandwidth": "200Gbps"} for group in THREE_AND_ONE]
    network = dict(simulation.prepare(scenario_from_dict({
        "workload": {"model": "mlp", "batch_size": 8},
        "cluster": {"gpu": "H100-SXM", "node_groups": groups_rate}})).sources)["inter_node_network"]
    assert "nic_bandwidth" not in network  # every group wrote its own: the cluster-wide default reached no NIC
    network = dict(simulation.prepare(scenario_from_dict({
        "workload": {"model": "mlp", "batch_size": 8},
        "cluster": {"gpu": "H100-SXM", "node_groups": [groups_rate[0], THREE_AND_ONE[1]]}})).sources)["inter_node_network"]
    assert "nic_bandwidth 400 Gbps" in network


@pytest.mark.parametrize("calibration, warned", [("x4-multinode-h200.json", True),
                                                 ("x4-multinode-h100.json", False)])
def test_uneven_nodes_on_an_unprobed_network_fit_say_what_it_misses(calibration: str, warned: bool) -> None:
    # M's network was fitted without the endpoint probe (full duplex): a 3+1 ring's lone GPU sends and receives
    # across nodes at once, measured 21 to 25% slower than M predicts; U probed it (duplex 0.68) and says nothing
    path = os.path.join(os.path.dirname(__file__), "..", "ddpsim", "calibration", "shipped", calibration)
    cluster = {"gpu": "H200", "node_groups": THREE_AND_ONE_SMALL, "intra_node": {"type": "nvswitch", "nvls": "off"},
               "inter_node": {"type": "fat-tree", "nics_per_node": 1}}
    result = simulation.simulate(scenario_from_dict({"workload": {"model": "resnet50", "batch_size": 8},
                                                     "cluster": cluster, "calibration": os.path.abspath(path)},
                                                    allow_other_gpu=True))  # U is H100's, the cluster H200
    assert ("probe the network" in result.value_sources["network_endpoint_duplex"]) is warned


THREE_AND_ONE_SMALL = [{"count": 1, "gpus_per_node": 3}, {"count": 1, "gpus_per_node": 1}]
