"""The inter-node network is fitted apart from the intra-node classes, and it reaches the scenario."""

from __future__ import annotations

import os
import shutil

import pytest

from ddpsim import load_scenario, simulate
from ddpsim.calibration.curvefit import ProtocolFit, envelope_s
from ddpsim.calibration.file import SCHEMA, apply_calibration, calibration_from_dict
from ddpsim.calibration.fit import fit_links
from ddpsim.calibration.measurements import AllReduceSample

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
    assert "link_classes.net" in calibrated.sources["inter-node network"]
    assert "link_classes.nvlink" in calibrated.sources["intra-node link"]


def test_without_a_network_fit_the_scenario_network_stays_in_force_and_matters(tmp_path):
    links = fit_links(_sweep(NVLINK, 2, 1))
    data = {"schema": SCHEMA, "link_classes": links}
    calibrated = apply_calibration(_scenario(tmp_path, data))
    assert "has no 'net' fit" in calibrated.sources["inter-node network"]
    fast = simulate(_scenario(tmp_path, data, latency="5us")).step_time_s
    slow = simulate(_scenario(tmp_path, data, latency="5ms")).step_time_s
    assert slow > fast * 1.05


def test_shipped_calibration_has_no_network_and_a_multi_node_scenario_says_so(tmp_path):
    shutil.copy(os.path.join(REPO, "validation", "calibration-h200x4.json"), tmp_path / "cal.json")
    (tmp_path / "s.yaml").write_text(
        "workload: {model: mlp, batch_size: 8}\n"
        "cluster: {gpu: H200, nodes: 2, gpus_per_node: 2, intra_node: {type: nvswitch}}\n"
        "calibration: cal.json\n"
    )
    sources = apply_calibration(load_scenario(str(tmp_path / "s.yaml"))).sources
    # nothing in the file and nothing fitted: the line says the network is ddpsim's default
    assert sources["inter-node network"].startswith("ddpsim's defaults") and "no 'net' fit" in sources["inter-node network"]
    assert "nic_bandwidth 400 Gbps" in sources["inter-node network"]
