"""Scaling efficiency, cost and memory marking (closed-form fake simulate), and variability (real)."""

from __future__ import annotations

import glob
import json
import math
import os
import statistics
import textwrap

import pytest

import ddpsim.simulation as simulate_module
from ddpsim.cli import main
from ddpsim.errors import ScenarioError
from ddpsim.loader import load_scenario
from ddpsim.planning.scaling import scaling_study, scaling_table
from ddpsim.results import Result
from ddpsim.scenario.schema import SCALE_JITTER_CV

SCENARIO = textwrap.dedent(
    """
    workload: {model: mlp, batch_size: 4}
    cluster: {gpu: H100-SXM, nodes: 1, gpus_per_node: 2}
    """
)


def fake_simulate(scenario, fits: bool = True) -> Result:
    """Step time 0.1 s + 10 ms per node; throughput = samples per step / step time."""
    world = scenario.cluster.world_size
    step = 0.1 + 0.01 * scenario.cluster.nodes
    return Result(
        scenario=scenario.source, model="fake", gpu="H100-SXM", world_size=world, nodes=scenario.cluster.nodes,
        gpus_per_node=scenario.cluster.gpus_per_node, algorithm="ring", protocol="simple", mode="detailed",
        bucket_cap_mb=None, step_time_s=step, forward_s=0.03, backward_s=0.05, optimizer_s=0.01,
        comm_time_s=0.02, exposed_comm_s=0.01 * scenario.cluster.nodes, compute_only_s=0.09, copy_s=0.0,
        buckets=[], samples_per_s=scenario.workload.batch_size * world / step,
        memory_bytes={"total": 90e9 if not fits else 10e9}, gpu_memory_bytes=80e9, fits_in_memory=fits,
    )


@pytest.fixture
def scenario_file(tmp_path):
    path = tmp_path / "mlp.yaml"
    path.write_text(SCENARIO)
    return str(path)


@pytest.fixture
def calls(monkeypatch):
    seen: list[int] = []

    def counting(scenario):
        seen.append(scenario.cluster.nodes)
        return fake_simulate(scenario)

    monkeypatch.setattr(simulate_module, "simulate", counting)
    return seen


def test_world_size_one_has_efficiency_one(tmp_path):
    path = tmp_path / "one.yaml"
    path.write_text("workload: {model: mlp, batch_size: 4}\ncluster: {gpu: H100-SXM, nodes: 1, gpus_per_node: 1}\n")
    study = scaling_study(load_scenario(str(path)), [1])
    (point,) = study.points
    assert point.gpus == 1 and point.efficiency == 1.0 and point.comm_fraction == 0.0


def test_efficiency_and_cost_by_hand(scenario_file, calls):
    study = scaling_study(load_scenario(scenario_file), [2, 4], price_per_gpu_hour=3.6)
    # the one-node baseline is simulated though not listed; every count with per-rank jitter and without
    assert sorted(calls) == [1, 1, 2, 2, 4, 4]
    two, four = study.points
    # per GPU: 4 samples / step; step 0.11 s on 1 node, 0.12 s on 2, 0.14 s on 4
    assert two.efficiency == pytest.approx(0.11 / 0.12, rel=1e-12)
    assert four.efficiency == pytest.approx(0.11 / 0.14, rel=1e-12)
    assert two.comm_fraction == pytest.approx(0.02 / 0.12, rel=1e-12)
    # 4 GPUs at $0.001/GPU-s = $0.004/s; 16 samples per 0.12 s; per 1e6 samples: 0.004 * 0.12 / 16 * 1e6
    assert two.cost_per_million == pytest.approx(30.0, rel=1e-12) and two.cost_unit == "samples"
    assert four.cost_per_million == pytest.approx(0.008 * 0.14 / 32 * 1e6, rel=1e-12)


def test_price_from_the_scenario(scenario_file, calls):
    scenario = load_scenario(scenario_file, ["price_per_gpu_hour=3.6"])
    assert scaling_study(scenario, [1]).points[0].cost_per_million == pytest.approx(0.002 * 0.11 / 8 * 1e6)
    assert scaling_study(load_scenario(scenario_file), [1]).points[0].cost_per_million is None


def test_points_that_do_not_fit_are_marked(scenario_file, monkeypatch):
    monkeypatch.setattr(simulate_module, "simulate", lambda s: fake_simulate(s, fits=False))
    study = scaling_study(load_scenario(scenario_file), [1, 2])
    assert [p.fits_in_memory for p in study.points] == [False, False]
    table = scaling_table(study)
    assert table.count("DOES NOT FIT") == 2 and len(study.warnings) == 2


def test_scale_jitters_ranks_by_default_with_the_steady_curve_beside(scenario_file, monkeypatch):
    seen: list[tuple[int, float, int]] = []

    def recording(scenario):
        sim = scenario.simulation
        seen.append((scenario.cluster.nodes, sim.jitter_cv, sim.iterations))
        return fake_simulate(scenario)

    monkeypatch.setattr(simulate_module, "simulate", recording)
    study = scaling_study(load_scenario(scenario_file), [2])
    assert study.jitter_cv == SCALE_JITTER_CV and "validation/data" in study.jitter_source
    assert sorted(seen) == [(1, 0.0, 1), (1, SCALE_JITTER_CV, 5), (2, 0.0, 1), (2, SCALE_JITTER_CV, 5)]
    assert [p.nodes for p in study.no_jitter] == [2] and "no jitter" in scaling_table(study)
    # the scenario's own jitter wins, and an explicit 0 leaves one curve
    seen.clear()
    own = scaling_study(load_scenario(scenario_file, ["simulation.jitter_cv=0.2"]), [2])
    assert own.jitter_cv == 0.2 and {cv for _n, cv, _i in seen} == {0.0, 0.2}
    none = scaling_study(load_scenario(scenario_file, ["simulation.jitter_cv=0"]), [2])
    assert none.jitter_cv == 0.0 and none.no_jitter == [] and "no jitter" not in scaling_table(none)


def test_default_jitter_is_the_median_spread_of_the_measured_profiles():
    # each profile's step p10..p90 read as a lognormal: sigma = ln(p90 / p10) / (2 z90), cv = sqrt(e^sigma^2 - 1)
    z90 = statistics.NormalDist().inv_cdf(0.9)
    cvs = []
    for path in glob.glob(os.path.join(os.path.dirname(__file__), "..", "validation", "data", "*", "profiles",
                                       "*.json")):
        with open(path, encoding="utf-8") as handle:
            profile = json.load(handle)
        # the quick campaigns' 5-iteration profiles came after the default was set from the others
        if profile.get("step_s_p10") and profile.get("step_s_p90") and profile.get("iterations", 10) >= 10:
            sigma = math.log(profile["step_s_p90"] / profile["step_s_p10"]) / (2 * z90)
            cvs.append(math.sqrt(math.exp(sigma**2) - 1))
    assert len(cvs) >= 176  # as the field's doc counts them (more may be added later)
    assert statistics.median(cvs) == pytest.approx(SCALE_JITTER_CV, abs=0.005)


def test_jitter_costs_efficiency_on_more_ranks(scenario_file):
    study = scaling_study(load_scenario(scenario_file, ["workload.batch_size=64"]), [4])
    (jittered,), (steady,) = study.points, study.no_jitter
    # the slowest of 8 ranks is slower than the slowest of 2: jitter only takes efficiency away
    assert jittered.efficiency < steady.efficiency <= 1.0


def test_custom_topology_cannot_scale(tmp_path):
    path = tmp_path / "custom.yaml"
    path.write_text(textwrap.dedent(
        """
        workload: {model: mlp, batch_size: 4}
        cluster:
          gpu: H100-SXM
          topology: {gpus: [g0, g1], links: [{a: g0, b: g1, bandwidth: 100GB/s}]}
        """
    ))
    with pytest.raises(ScenarioError, match="topology"):
        scaling_study(load_scenario(str(path)), [1, 2])


def test_cli_scale_json_and_bad_nodes(scenario_file, tmp_path, calls, capsys):
    out = tmp_path / "sc"
    assert main(["scale", scenario_file, "--nodes", "1,2", "--price-per-gpu-hour", "2.5", "--json", "--out", str(out)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["nodes"] for p in data["points"]] == [1, 2] and data["points"][0]["efficiency"] == 1.0
    assert {"scaling.json", "scaling.md", "scaling_efficiency.png"} <= {p.name for p in out.iterdir()}
    assert main(["scale", scenario_file, "--nodes", "0,2"]) == 2
    assert "--nodes" in capsys.readouterr().err


def test_variability_percentiles_and_determinism(scenario_file, capsys):
    argv = ["variability", scenario_file, "--iterations", "30", "--jitter-cv", "0.1", "--seed", "3", "--json"]
    assert main(argv + ["--out", str(scenario_file) + ".var"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["iterations"] == len(first["step_times_s"]) == 30
    assert first["min_s"] <= first["p50_s"] <= first["p95_s"] <= first["p99_s"] <= first["max_s"]
    assert first["max_s"] > first["min_s"]  # jitter did something
    assert main(argv + ["--out", str(scenario_file) + ".var2"]) == 0
    assert json.loads(capsys.readouterr().out)["step_times_s"] == first["step_times_s"]


def test_variability_straggler_is_the_critical_rank(scenario_file, capsys):
    argv = ["variability", scenario_file, "--iterations", "3", "--straggler-rank", "1", "--straggler-slowdown", "1.5",
            "--json", "--out", str(scenario_file) + ".var"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["critical_rank"] == 1


def test_variability_bad_straggler_exits_2(scenario_file, capsys):
    assert main(["variability", scenario_file, "--iterations", "3", "--straggler-rank", "5"]) == 2
    assert "straggler_rank" in capsys.readouterr().err
