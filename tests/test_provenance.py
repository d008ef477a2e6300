"""`ddpsim run` says which values the scenario wrote and which were ddpsim's defaults (nothing silent)."""

from __future__ import annotations

import json
import subprocess
import sys

from ddpsim.loader import load_scenario
from ddpsim.simulation import prepare

HALF_WRITTEN = """\
workload: {model: mlp, batch_size: 8}
cluster:
  gpu: H100-SXM
  nodes: 2
  gpus_per_node: 4
  intra_node: {type: nvswitch, bandwidth: 300GB/s}
  inter_node: {nic_bandwidth: 200Gbps}
"""

ALL_WRITTEN = """\
workload: {model: mlp, batch_size: 8, compute_efficiency: 0.4}
cluster:
  gpu: H100-SXM
  nodes: 2
  gpus_per_node: 4
  intra_node: {type: nvswitch, bandwidth: 300GB/s, latency: 2us}
  inter_node: {type: fat-tree, nic_bandwidth: 200Gbps, latency: 7us, oversubscription: 2, nics_per_node: 4,
               duplex_factor: 0.9, nodes_per_leaf: 2,
               leaves_per_spine: 2, spine_oversubscription: 1}
overheads: {bucket_launch: 30us, copy_bandwidth: 1TB/s, compute_slowdown: 1.1, comm_slowdown: 1.2,
            allreduce_stretch: 1.3, idle_start_wait: 0us, max_inflight_buckets: 4, bucket_cpu: 5us, hook_cpu: 100us,
            buffer_sync: 0ms}
"""


def _sources(tmp_path, text, *overrides):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return prepare(load_scenario(str(path), overrides)).sources


def test_defaults_are_named_with_their_values_and_written_values_are_not(tmp_path):
    sources = _sources(tmp_path, HALF_WRITTEN)
    network = sources["inter_node_network"]
    # the file wrote the NIC speed, not the latency, fabric type or NIC count
    assert "except ddpsim's defaults" in network
    assert "latency 5.0 us" in network and "type rail-fat-tree" in network and "nics_per_node one per GPU" in network
    assert "nic_bandwidth" not in network
    assert "duplex_factor 1" in network  # the endpoint taken as full duplex is named as a default too
    assert "nodes_per_leaf one leaf per rail" in network
    intra = sources["intra_node_link"]
    assert "latency 3.0 us" in intra and "bandwidth" not in intra.split("defaults")[1]
    overheads = sources["ddp_overheads"]
    assert overheads.startswith("ddpsim's defaults") and "bucket_launch (40.0 us, fitted on 4 x H200 NVLink)" in overheads
    assert "copy_bandwidth (70% of the GPU's memory bandwidth)" in overheads and "comm_slowdown (1, no effect)" in overheads
    # no compute_efficiency written: the per-kernel-class fit prices the model, naming its values and interval
    assert "per-class efficiencies (tensor cores and memory: conv " in sources["compute"] and "us per module call, fitted on" in sources["compute"]
    assert "(p10..p90)" in sources["compute"]


def test_a_scenario_that_writes_everything_is_cited_alone(tmp_path):
    sources = _sources(tmp_path, ALL_WRITTEN)
    path = str(tmp_path / "s.yaml")
    for name in ("intra_node_link", "inter_node_network", "ddp_overheads"):
        assert sources[name] == f"scenario {path}", name
    assert "compute_efficiency 0.4, scenario" in sources["compute"]


def test_a_set_override_counts_as_written(tmp_path):
    sources = _sources(tmp_path, HALF_WRITTEN, "cluster.inter_node.latency=9us")
    assert "latency" not in sources["inter_node_network"]
    assert "type rail-fat-tree" in sources["inter_node_network"]


def test_run_prints_the_defaults_in_text_and_json(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(HALF_WRITTEN)
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "ddpsim", "run", str(path), "--out", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "from: inter node network" in run.stdout and "ddpsim's defaults" in run.stdout
    # wrapped under its row, never wider than the table's value column
    assert max(len(line) for line in run.stdout.splitlines() if line.startswith("from: ")) < 140
    result = json.loads((out / "result.json").read_text())
    assert "latency 5.0 us" in json.dumps(result)
