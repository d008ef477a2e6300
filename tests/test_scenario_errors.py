"""Bad input: one line naming the file and the field, exit code 2, no traceback, nothing written."""

import os
import textwrap

import pytest

from ddpsim.cli import main
from ddpsim.errors import ScenarioError
from ddpsim.loader import load_scenario

GOOD = """
workload: {model: mlp, batch_size: 8}
cluster:
  gpu: H100-SXM
  nodes: 1
  gpus_per_node: 2
  intra_node: {type: nvswitch, bandwidth: 450GB/s, latency: 3us}
"""


def _write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_good_scenario_parses_units(tmp_path):
    scenario = load_scenario(_write(tmp_path, GOOD))
    assert scenario.cluster.intra_node.bandwidth_Bps == 450e9
    assert scenario.cluster.intra_node.latency_s == pytest.approx(3e-6)
    assert scenario.ddp.bucket_cap_mb is None and scenario.ddp.first_bucket_cap_bytes == 1024 * 1024


def test_overrides_apply(tmp_path):
    scenario = load_scenario(_write(tmp_path, GOOD), ["ddp.bucket_cap_mb=5", "cluster.nodes=4"])
    assert scenario.ddp.bucket_cap_bytes == 5 * 1024 * 1024 and scenario.ddp.first_bucket_cap_bytes == 5 * 1024 * 1024
    assert scenario.cluster.world_size == 8


@pytest.mark.parametrize(
    "override, field, words",
    [
        ("cluster.gpus_per_nod=4", "cluster.gpus_per_nod", "did you mean 'gpus_per_node'"),
        ("cluster.intra_node.bandwidth=450GX/s", "cluster.intra_node.bandwidth", "450GX/s"),
        ("cluster.intra_node.bandwidth=0GB/s", "cluster.intra_node.bandwidth", "positive"),
        ("cluster.intra_node.bandwidth=-5GB/s", "cluster.intra_node.bandwidth", ""),
        ("cluster.gpus_per_node=0", "cluster.gpus_per_node", "at least 1"),
        ("cluster.nodes=0", "cluster.nodes", "at least 1"),
        ("workload.precision=fp8", "workload.precision", "fp32"),
        ("collective.algorithm=rign", "collective.algorithm", "did you mean 'ring'"),
        ("ddp.bucket_cap_mb=-1", "ddp.bucket_cap_mb", ""),
        ("ddp.comm_hook=powersgd", "ddp.comm_hook", "none"),
        ("simulation.straggler_rank=7", "simulation.straggler_rank", "world size"),
        ("workloads.model=mlp", "workloads", "did you mean 'workload'"),
    ],
)
def test_bad_fields_name_file_and_field(tmp_path, override, field, words):
    path = _write(tmp_path, GOOD)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, [override])
    message = str(info.value)
    assert path in message and field in message and words in message
    assert "\n" not in message


def test_cli_bad_input_exits_2_with_one_line(tmp_path, capsys):
    path = _write(tmp_path, GOOD)
    out_dir = tmp_path / "out"
    code = main(["run", path, "--set", "cluster.intra_node.bandwidth=fast", "--out", str(out_dir)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.count("\n") == 1 and "cluster.intra_node.bandwidth" in captured.err
    assert "Traceback" not in captured.err
    assert not out_dir.exists()


def test_missing_file_and_bad_yaml(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml" in capsys.readouterr().err
    bad = _write(tmp_path, "workload: [unclosed\n")
    assert main(["run", bad]) == 2
    assert "not valid YAML" in capsys.readouterr().err


def test_missing_section(tmp_path):
    with pytest.raises(ScenarioError, match="cluster"):
        load_scenario(_write(tmp_path, "workload: {model: mlp, batch_size: 1}\n"))


def test_custom_topology_parses(tmp_path):
    text = """
    workload: {model: mlp, batch_size: 8}
    cluster:
      gpu: H100-SXM
      topology:
        gpus: [a, b, c]
        gpus_per_node: 3
        links:
          - {a: a, b: sw, bandwidth: 100GB/s, latency: 1us}
          - {a: b, b: sw, bandwidth: 100GB/s, latency: 1us}
          - {a: c, b: sw, bandwidth: 50GB/s}
    """
    scenario = load_scenario(_write(tmp_path, text))
    assert scenario.cluster.world_size == 3
    assert scenario.cluster.topology.links[2].bandwidth_Bps == 50e9
    assert os.path.isabs(scenario.base_dir)
