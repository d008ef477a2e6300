"""Scenario and calibration files that say one thing twice, or something ddpsim would not use.

Each refusal beside its control: the same file without the fault loads, so the refusal is the fault's.
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from ddpsim.cli.main import main
from ddpsim.errors import ScenarioError
from ddpsim.loader import load_scenario

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CALIBRATION = os.path.join(ROOT, "ddpsim", "calibration", "shipped", "x2-h100.json")
TOPOLOGY = textwrap.dedent(
    """
    workload: {model: mlp, batch_size: 4}
    cluster:
      gpu: H100-SXM
      topology:
        gpus: [a, b, c, d]
        links: [{a: a, b: s, bandwidth: 100GB/s}, {a: b, b: s, bandwidth: 100GB/s},
                {a: c, b: s, bandwidth: 100GB/s}, {a: d, b: s, bandwidth: 100GB/s}]
    """
)


def _write(tmp_path, text: str, name: str = "s.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_a_key_written_twice_names_both_lines(tmp_path):
    path = _write(tmp_path, """\
        workload:
          model: mlp
          batch_size: 64
          batch_size: 2
        cluster: {gpu: H100-SXM, nodes: 1, gpus_per_node: 2}
        """)
    with pytest.raises(ScenarioError, match=r"lines 3 and 4") as err:
        load_scenario(path)
    assert err.value.field == "workload.batch_size" and err.value.file == path
    # the control: written once, it loads with the value written
    fixed = _write(tmp_path, open(path).read().replace("  batch_size: 2\n", ""), "fixed.yaml")
    assert load_scenario(fixed).workload.batch_size == 64


def test_a_yaml_merge_is_not_a_duplicate(tmp_path):
    # `<<: *anchor` then a key that overrides the merged one is YAML's own way of writing defaults
    path = _write(tmp_path, """\
        defaults: &link {type: nvswitch, bandwidth: 450GB/s}
        workload: {model: mlp, batch_size: 4}
        cluster:
          gpu: H100-SXM
          gpus_per_node: 2
          intra_node:
            <<: *link
            bandwidth: 300GB/s
        """)
    with pytest.raises(ScenarioError) as err:  # `defaults` itself is not a scenario field
        load_scenario(path)
    assert err.value.field == "defaults"
    text = open(path).read().replace("defaults: &link", "description: &link")
    # a mapping as the description is refused as well; the merge itself is not the error
    with pytest.raises(ScenarioError, match="expected text") as err:
        load_scenario(_write(tmp_path, text, "d.yaml"))
    assert err.value.field == "description"


def test_a_custom_topology_without_gpus_per_node_is_one_node(tmp_path):
    # the README's default for cluster.topology.gpus_per_node: "all of them"
    scenario = load_scenario(_write(tmp_path, TOPOLOGY))
    assert (scenario.cluster.nodes, scenario.cluster.gpus_per_node) == (1, 4)
    assert "cluster.topology.gpus_per_node" in scenario.defaulted_fields
    split = TOPOLOGY.replace("gpus: [a, b, c, d]", "gpus: [a, b, c, d]\n    gpus_per_node: 2")
    assert load_scenario(_write(tmp_path, split, "split.yaml")).cluster.nodes == 2


@pytest.mark.parametrize("key, value", [("nodes", 4), ("nodes", 1), ("gpus_per_node", 4)])
def test_numbers_beside_a_custom_topology_are_refused(tmp_path, key, value):
    path = _write(tmp_path, TOPOLOGY.replace("  gpu: H100-SXM\n", f"  gpu: H100-SXM\n  {key}: {value}\n"))
    with pytest.raises(ScenarioError, match="set by cluster.topology") as err:
        load_scenario(path)
    assert err.value.field == f"cluster.{key}"


def _calibration(tmp_path, change) -> str:
    with open(CALIBRATION, encoding="utf-8") as handle:
        data = json.load(handle)
    change(data)
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(data))
    return str(path)


def _misspell(data):
    entry = data["overheads"]["nvlink"]
    entry["bucket_lauch_s"] = entry.pop("bucket_launch_s")


@pytest.mark.parametrize("change, field", [
    (lambda d: d.update(tensor_parallel=2), "tensor_parallel"),
    (_misspell, "overheads.nvlink.bucket_lauch_s"),
    (lambda d: d["overheads"]["nvlink"].update(copy_bandwith_Bps=0), "overheads.nvlink.copy_bandwith_Bps"),
    (lambda d: d["overheads"]["nvlink"].update(bucket_launch_s=float("nan")), "overheads.nvlink.bucket_launch_s"),
])
def test_calibration_files_with_unknown_or_broken_fields_are_refused(tmp_path, capsys, change, field):
    path = _calibration(tmp_path, change)
    scenario = _write(tmp_path, f"""\
        workload: {{model: mlp, batch_size: 4}}
        cluster: {{gpu: H100-SXM, nodes: 1, gpus_per_node: 2, intra_node: {{type: nvswitch}}}}
        calibration: {path}
        """)
    before = sorted(os.listdir(tmp_path))
    assert main(["run", scenario, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and path in err and field in err, err
    assert sorted(os.listdir(tmp_path)) == before
    assert main(["validate", str(tmp_path), "--calibration", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and path in err and field in err, err


def test_the_committed_calibration_loads(tmp_path, capsys):
    # the control of the cases above: the file unchanged runs
    path = _calibration(tmp_path, lambda d: None)
    scenario = _write(tmp_path, f"""\
        workload: {{model: mlp, batch_size: 4}}
        cluster: {{gpu: H100-SXM, nodes: 1, gpus_per_node: 2, intra_node: {{type: nvswitch}}}}
        calibration: {path}
        """)
    assert main(["run", scenario]) == 0, capsys.readouterr().err


def test_a_calibration_key_written_twice_is_refused(tmp_path, capsys):
    with open(CALIBRATION, encoding="utf-8") as handle:
        text = handle.read()
    path = tmp_path / "cal.json"
    # a second "noise" object at the end: JSON parsers keep the last one silently
    path.write_text(text.rstrip().rstrip("}") + ',\n  "noise": {}\n}\n')
    assert main(["validate", str(tmp_path), "--calibration", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "noise: written twice" in err, err
