"""The inter-node network is fitted apart from the intra-node classes, and it reaches the scenario."""

from __future__ import annotations

import os
import shutil

import pytest

from ddpsim import load_scenario, simulate
from ddpsim.calibration.apply import apply_calibration
from ddpsim.calibration.file import SCHEMA, calibration_from_dict
from ddpsim.collectives.curves import ProtocolFit, envelope_s
from ddpsim.fitting.fit import fit_links
from ddpsim.fitting.measurements import AllReduceSample

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# a network far slower than NVLink: per-hop latency dominates small sizes, bandwidth large ones
NET = {
    "ll": ProtocolFit(20e-6, 6e-6, 2e9),
    "ll128": ProtocolFit(30e-6, 8e-6, 9e9),
    "simple": ProtocolFit(60e-6, 12e-6, 11e9),
}
NVLINK = {
    "ll": ProtocolFit(10e-6, 0.6e-6, 90e9),
    "ll128": ProtocolFit(14e-6, 1.9e-6, 220e9),
    "simple": ProtocolFit(25e-6, 3.4e-6, 350e9),
}
SIZES = [2**k for k in range(12, 31)]


def _sweep(curve, world, nodes, link_class="nvlink"):
    return [AllReduceSample(link_class, world, nodes, s, envelope_s(curve, s, world)[0], "synthetic") for s in SIZES]


def test_sweeps_across_nodes_fit_the_network_class_and_transfer_to_another_shape():
    # fitted on 2x1 and 4x1 (every hop crosses the network), checked on 8x1 which was never fitted
    fitted = fit_links(_sweep(NVLINK, 2, 1) + _sweep(NVLINK, 4, 1) + _sweep(NET, 2, 2) + _sweep(NET, 4, 4))
    assert set(fitted) == {"nvlink", "net"}
    net = fitted["net"]
    assert net["shapes"] == ["2x1", "4x1"]
    fits = {p: ProtocolFit(f["base_latency_s"], f["hop_latency_s"], f["bus_bandwidth_Bps"])
            for p, f in net["protocol_fits"].items() if f["selected"]}
    for size in SIZES[4:]:
        assert envelope_s(fits, size, 8)[0] == pytest.approx(envelope_s(NET, size, 8)[0], rel=0.05), size
    # the intra-node class never sees a cross-node sample
    assert fitted["nvlink"]["world_sizes"] == [2, 4]
    assert net["bandwidth_Bps"] < fitted["nvlink"]["bandwidth_Bps"] / 10


def _scenario(tmp_path, calibration_data, nodes=2, latency="5us"):
    cal = calibration_from_dict(calibration_data, str(tmp_path / "cal.json"))
    path = tmp_path / "s.yaml"
    path.write_text(
        "workload: {model: gpt2-124m, batch_size: 4}\n"
        f"cluster: {{gpu: H100-SXM, nodes: {nodes}, gpus_per_node: 2, intra_node: {{type: nvswitch}},\n"
        f"  inter_node: {{type: rail-fat-tree, nic_bandwidth: 400Gbps, latency: {latency}}}}}\n"
    )
    from dataclasses import replace

    return replace(load_scenario(str(path)), calibration=cal)


def test_a_network_fit_sets_the_inter_node_values_and_says_so(tmp_path):
    links = fit_links(_sweep(NVLINK, 2, 1) + _sweep(NET, 4, 2))
    calibrated = apply_calibration(_scenario(tmp_path, {"schema": SCHEMA, "link_classes": links}))
    inter = calibrated.scenario.cluster.inter_node
    assert inter.nic_bandwidth_Bps == pytest.approx(links["net"]["bandwidth_Bps"])
    assert "link_classes.net" in calibrated.sources["inter_node_network"]
    assert "link_classes.nvlink" in calibrated.sources["intra_node_link"]


def test_without_a_network_fit_the_scenario_network_stays_in_force_and_matters(tmp_path):
    links = fit_links(_sweep(NVLINK, 2, 1))
    data = {"schema": SCHEMA, "link_classes": links}
    calibrated = apply_calibration(_scenario(tmp_path, data))
    assert "has no 'net' fit" in calibrated.sources["inter_node_network"]
    fast = simulate(_scenario(tmp_path, data, latency="5us")).step_time_s
    slow = simulate(_scenario(tmp_path, data, latency="5ms")).step_time_s
    assert slow > fast * 1.05


def test_shipped_calibration_has_no_network_and_a_multi_node_scenario_says_so(tmp_path):
    shutil.copy(os.path.join(REPO, "ddpsim", "calibration", "shipped", "x4-h200.json"), tmp_path / "cal.json")
    (tmp_path / "s.yaml").write_text(
        "workload: {model: mlp, batch_size: 8}\n"
        "cluster: {gpu: H200, nodes: 2, gpus_per_node: 2, intra_node: {type: nvswitch}}\n"
        "calibration: cal.json\n"
    )
    sources = apply_calibration(load_scenario(str(tmp_path / "s.yaml"))).sources
    # nothing in the file and nothing fitted: the line says the network is ddpsim's default
    assert sources["inter_node_network"].startswith("ddpsim's defaults") and "no 'net' fit" in sources["inter_node_network"]
    assert "nic_bandwidth 400 Gbps" in sources["inter_node_network"]


# NCCL-structured synthetic campaign: one-node rings (1x2, 1x4), and on 2x2 a forced Ring and a forced
# Tree whose network hop and bandwidth differ from the ring's, as measured on the sockets network
BASE_S, INTRA_HOP_S, INTRA_BUS_BPS = 30e-6, 1e-6, 300e9
RING_NET_HOP_S, RING_NET_BUS_BPS = 50e-6, 5e9
TREE_NET_HOP_S, TREE_NIC_BPS = 15e-6, 3e9
NET_SIZES = [2**k for k in range(16, 31)]


def _one_node_rows():
    return [AllReduceSample("nvlink", n, 1, s, BASE_S + 2 * (n - 1) * INTRA_HOP_S + s * 2 * (n - 1) / n / INTRA_BUS_BPS,
                            "synthetic", "ring", nccl_protocol="simple") for n in (2, 4) for s in NET_SIZES]


def _ring_2x2_rows():
    # a chunk's 2(n-1) = 6 hops on 2 nodes of 2 GPUs alternate node and network: 3 of each
    return [AllReduceSample("nvlink", 4, 2, s, BASE_S + 3 * INTRA_HOP_S + 3 * RING_NET_HOP_S + s * 1.5 / RING_NET_BUS_BPS,
                            "synthetic", "ring", nccl_protocol="simple") for s in NET_SIZES]


def _tree_2x2_rows():
    # NCCL's tree on 2 nodes: a 1-hop chain per node, depth 1 across nodes, up and back down; both
    # trees' edges join the same two nodes, so each node's NIC carries 2 x S/2 per direction
    return [AllReduceSample("nvlink", 4, 2, s, BASE_S + 2 * (INTRA_HOP_S + TREE_NET_HOP_S) + s / TREE_NIC_BPS,
                            "synthetic", "tree", nccl_protocol="simple") for s in NET_SIZES]


def _model_2x2(fitted):
    from dataclasses import replace

    from ddpsim.collectives import CollectiveModel
    from ddpsim.loader import scenario_from_dict
    from ddpsim.topology import build_topology

    scenario = scenario_from_dict({
        "workload": {"model": "mlp", "batch_size": 1},
        "cluster": {"gpu": "H200", "nodes": 2, "gpus_per_node": 2, "intra_node": {"type": "nvswitch"},
                    "inter_node": {"type": "fat-tree", "nics_per_node": 1}},
    })
    cal = calibration_from_dict({"schema": SCHEMA, "link_classes": fitted}, "synthetic")
    calibrated = apply_calibration(replace(scenario, calibration=cal))
    return CollectiveModel(build_topology(calibrated.scenario.cluster), calibrated.protocol_table)


def test_forced_tree_rows_fit_the_trees_own_network_hop_and_bandwidth():
    fitted = fit_links(_one_node_rows() + _ring_2x2_rows() + _tree_2x2_rows())
    tree = fitted["net"]["tree_fit"]
    assert tree["fitted"]
    assert tree["hop_latency_s"]["simple"] == pytest.approx(TREE_NET_HOP_S, rel=0.02)
    assert tree["nic_Bps_per_direction"]["simple"] == pytest.approx(TREE_NIC_BPS, rel=0.02)
    model = _model_2x2(fitted)
    for row in _tree_2x2_rows():
        assert model.allreduce_time_s(row.bytes, "tree", "simple") == pytest.approx(row.time_s, rel=0.03), row.bytes
    for row in _ring_2x2_rows():
        assert model.allreduce_time_s(row.bytes, "ring", "simple") == pytest.approx(row.time_s, rel=0.03), row.bytes


def test_without_tree_sweeps_the_network_entry_says_the_tree_is_not_measured():
    fitted = fit_links(_one_node_rows() + _ring_2x2_rows())
    assert fitted["net"]["tree_fit"]["fitted"] is False
    assert "no forced-Tree sweeps" in fitted["net"]["tree_fit"]["note"]
    # the tree then keeps the ring's network hop, not a measured one of its own
    table = fitted["net"]["protocol_table"]["hop_latency_s"]
    assert table["net/tree/simple"] == table["net/ring/simple"]
