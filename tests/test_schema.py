"""The schema is declared once: every field's key, kind, default, bounds and doc live on the dataclass."""

from __future__ import annotations

import dataclasses
import math
import os
import textwrap

import pytest

from ddpsim.errors import ScenarioError
from ddpsim.loader import load_scenario, scenario_from_dict
from ddpsim.scenario import fields_markdown
from ddpsim.scenario.link_kinds import INTRA_NODE_TYPES
from ddpsim.scenario.schema import (
    ALGORITHMS,
    COMM_HOOKS,
    META,
    MODES,
    PRECISIONS,
    PROTOCOLS,
    ClusterSpec,
    CollectiveSpec,
    DDPSpec,
    InterNodeSpec,
    IntraNodeSpec,
    OverheadSpec,
    Scenario,
    SimulationSpec,
    TopologyLink,
    WorkloadSpec,
    field_specs,
)

README = os.path.join(os.path.dirname(__file__), "..", "README.md")
MINIMAL = {"workload": {"model": "mlp", "batch_size": 8}, "cluster": {"gpu": "H100-SXM"}}
# fields that are not YAML fields: the value read from `calibration`, and where the file came from
INTERNAL = {"calibration", "source", "base_dir", "defaulted_fields"}


def _readme_table() -> str:
    text = open(README, encoding="utf-8").read()
    section = text.split("## The scenario file\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return "\n".join(rows)


def test_readme_table_is_the_generated_one():
    assert _readme_table() == fields_markdown()


@pytest.mark.parametrize(
    "cls",
    [WorkloadSpec, ClusterSpec, IntraNodeSpec, InterNodeSpec, TopologyLink, DDPSpec, CollectiveSpec, OverheadSpec,
     SimulationSpec, Scenario],
)
def test_every_field_declares_key_kind_and_doc(cls):
    for f in dataclasses.fields(cls):
        if f.name in INTERNAL:
            continue
        spec = f.metadata.get(META)
        assert spec is not None, f"{cls.__name__}.{f.name} has no FieldSpec"
        assert spec.key and spec.doc and spec.kind


def test_each_vocabulary_is_the_one_the_field_checks():
    choices = {(cls.__name__, name): fs.choices for cls in (WorkloadSpec, IntraNodeSpec, DDPSpec, CollectiveSpec,
                                                            SimulationSpec) for name, fs in field_specs(cls)}
    assert choices[("WorkloadSpec", "precision")] is PRECISIONS
    assert choices[("IntraNodeSpec", "type")] is INTRA_NODE_TYPES
    assert choices[("DDPSpec", "comm_hook")] is COMM_HOOKS
    assert choices[("CollectiveSpec", "algorithm")] is ALGORITHMS
    assert choices[("CollectiveSpec", "protocol")] is PROTOCOLS
    assert choices[("SimulationSpec", "mode")] is MODES


def test_defaults_of_a_minimal_scenario():
    scenario = scenario_from_dict(MINIMAL)
    assert scenario.cluster.nodes == 1 and scenario.cluster.gpus_per_node == 8
    assert scenario.cluster.intra_node.bandwidth_Bps == 450e9
    assert scenario.cluster.intra_node.latency_s == pytest.approx(3e-6)
    assert scenario.cluster.inter_node.nic_bandwidth_Bps == 50e9  # 400 Gbit/s
    assert scenario.cluster.inter_node.latency_s == pytest.approx(5e-6)
    assert scenario.overheads.bucket_launch_s == pytest.approx(40e-6)
    assert scenario.overheads.compute_slowdown == 2.0
    assert scenario.ddp.bucket_cap_mb is None and scenario.ddp.grad_accumulation_steps == 1
    assert scenario.simulation == SimulationSpec()  # the Python defaults are the YAML defaults
    assert scenario.overheads == OverheadSpec()


@pytest.mark.parametrize("kind, bandwidth, latency", [("pcie", 32e9, 5e-6), ("socket", 4e9, 30e-6)])
def test_intra_node_defaults_follow_the_link_type(kind, bandwidth, latency):
    data = {**MINIMAL, "cluster": {"gpu": "H100-SXM", "intra_node": {"type": kind}}}
    intra = scenario_from_dict(data).cluster.intra_node
    assert intra.bandwidth_Bps == bandwidth and intra.latency_s == pytest.approx(latency)


@pytest.mark.parametrize(
    "section, key, value, words",
    [
        ("overheads", "bucket_launch", math.nan, "finite"),
        ("overheads", "compute_slowdown", math.nan, "finite"),
        ("overheads", "compute_slowdown", math.inf, "finite"),
        ("overheads", "compute_slowdown", 0.5, "factor >= 1"),
        ("overheads", "comm_slowdown", 0.0, "factor >= 1"),
        ("simulation", "straggler_slowdown", 1e9, "at most 1,000"),
        ("ddp", "bucket_cap_mb", "nan", "finite"),
        ("ddp", "bucket_cap_mb", "inf", "finite"),
        ("ddp", "bucket_cap_mb", math.inf, "finite"),
        ("cluster", "nodes", 10**9, "at most 1,048,576"),
        ("cluster", "gpus_per_node", 100_000, "at most 1,024"),
    ],
)
def test_out_of_range_values_are_rejected(section, key, value, words):
    data = {k: dict(v) for k, v in MINIMAL.items()}
    data.setdefault(section, {})[key] = value
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(data, file="s.yaml")
    assert info.value.field == f"{section}.{key}" and words in str(info.value)


def test_world_size_limit_is_checked_across_fields():
    data = {**MINIMAL, "cluster": {"gpu": "H100-SXM", "nodes": 2048, "gpus_per_node": 1024}}
    with pytest.raises(ScenarioError, match="2,097,152 GPUs"):
        scenario_from_dict(data)


def test_every_rank_simulated_is_limited():
    # detailed mode runs every rank's flows; FAST mode folds ranks, so jitter is limited only by the
    # ranks x steps of factors it draws
    data = {**MINIMAL, "cluster": {"gpu": "H100-SXM", "nodes": 4096, "gpus_per_node": 8},
            "simulation": {"mode": "detailed"}}
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(data)
    assert info.value.field == "simulation.mode"
    scenario_from_dict({**data, "simulation": {"jitter_cv": 0.1}})
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict({**data, "simulation": {"jitter_cv": 0.1, "iterations": 100}})
    assert info.value.field == "simulation.iterations"


def test_null_means_unset_only_where_unset_is_the_default(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent("""
        workload: {model: mlp, batch_size: 8}
        cluster: {gpu: H100-SXM, nodes: 1, gpus_per_node: 2}
        simulation: {straggler_rank: null}
    """))
    assert load_scenario(str(path)).simulation.straggler_rank is None
    with pytest.raises(ScenarioError, match="empty value"):
        load_scenario(str(path), ["simulation.iterations=null"])
    with pytest.raises(ScenarioError, match="empty value") as info:
        load_scenario(str(path), ["cluster.nodes="])
    assert info.value.field == "cluster.nodes"
