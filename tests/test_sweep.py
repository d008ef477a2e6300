"""Sweeps: grid expansion, resume, failing points, bad inputs, local processes and Dask.

``simulate`` is replaced by a closed-form fake so the expected numbers are known independently.
"""

from __future__ import annotations

import csv
import json
import os
import textwrap
import time

import pytest

import ddpsim.simulation as simulate_module
from ddpsim.cli import main
from ddpsim.errors import ScenarioError
from ddpsim.planning import sweep
from ddpsim.results import Result

SCENARIO = textwrap.dedent(
    """
    workload: {model: mlp, batch_size: 4}
    cluster: {gpu: H100-SXM, nodes: 1, gpus_per_node: 2}
    ddp: {bucket_cap_mb: 25}
    """
)


def fake_step_s(cap_mb: float, nodes: int) -> float:
    return 0.100 + 0.010 * nodes + 0.001 * cap_mb


def fake_simulate(scenario) -> Result:
    world = scenario.cluster.world_size
    step = fake_step_s(scenario.ddp.bucket_cap_mb or 25.0, scenario.cluster.nodes)
    return Result(
        scenario=scenario.source, model="fake", gpu="H100-SXM", world_size=world, nodes=scenario.cluster.nodes,
        gpus_per_node=scenario.cluster.gpus_per_node, algorithm="ring", protocol="simple", mode="detailed",
        bucket_cap_mb=scenario.ddp.bucket_cap_mb, step_time_s=step, forward_s=0.3 * step, backward_s=0.5 * step,
        optimizer_s=0.1 * step, comm_time_s=0.2 * step, exposed_comm_s=0.1 * step, compute_only_s=0.9 * step,
        copy_s=0.0, buckets=[], samples_per_s=scenario.workload.batch_size * world / step,
        memory_bytes={"total": 1e9}, gpu_memory_bytes=80e9,
    )


@pytest.fixture
def scenario_file(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(SCENARIO)
    return str(path)


@pytest.fixture
def calls(monkeypatch):
    """Counts simulate() calls made in this process (inline and Dask-thread runs)."""
    seen: list[tuple[float | None, int]] = []

    def counting(scenario):
        seen.append((scenario.ddp.bucket_cap_mb, scenario.cluster.nodes))
        return fake_simulate(scenario)

    monkeypatch.setattr(simulate_module, "simulate", counting)
    return seen


def read_csv(out) -> list[dict[str, str]]:
    with open(os.path.join(out, "sweep.csv"), encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_grid_is_the_cartesian_product():
    axes = sweep.parse_grid(["ddp.bucket_cap_mb=1,5,25", "cluster.nodes=1,2"])
    points = sweep.expand_grid({"ddp": {}, "cluster": {}}, axes, "x.yaml")
    assert len(points) == 6 == sweep.point_count(axes)
    expected = {(1, 1), (1, 2), (5, 1), (5, 2), (25, 1), (25, 2)}
    assert {(p.values["ddp.bucket_cap_mb"], p.values["cluster.nodes"]) for p in points} == expected
    assert {(p.data["ddp"]["bucket_cap_mb"], p.data["cluster"]["nodes"]) for p in points} == expected


def test_grid_values_are_yaml_scalars():
    (axis,) = sweep.parse_grid(["x.y=0.5,true,ring,400Gbps,null"])
    assert axis.values == (0.5, True, "ring", "400Gbps", None)


@pytest.mark.parametrize("spec", ["ddp.bucket_cap_mb=", "ddp.bucket_cap_mb=1,,5", "nofield", "=1,2"])
def test_bad_grid_specs(spec):
    with pytest.raises(ScenarioError):
        sweep.parse_grid([spec])


def test_sweep_writes_csv_points_and_report(scenario_file, tmp_path, calls):
    out = str(tmp_path / "out")
    outcome = sweep.run_sweep(scenario_file, ["ddp.bucket_cap_mb=1,5", "cluster.nodes=1,2"], out, workers=1)
    assert outcome.computed == 4 and outcome.failed == 0 and len(calls) == 4
    rows = read_csv(out)
    assert [(float(r["ddp.bucket_cap_mb"]), int(r["cluster.nodes"])) for r in rows] == [(1, 1), (1, 2), (5, 1), (5, 2)]
    for row in rows:
        expected = fake_step_s(float(row["ddp.bucket_cap_mb"]), int(row["cluster.nodes"]))
        assert float(row["step_time_s"]) == pytest.approx(expected, rel=1e-12)
        assert row["status"] == "ok" and row["error"] == ""
        assert float(row["samples_per_s"]) == pytest.approx(4 * 2 * int(row["cluster.nodes"]) / expected)
    assert len(os.listdir(os.path.join(out, "points"))) == 4
    assert {"sweep.csv", "report.md", "step_time.png", "breakdown.png", "points"} <= set(os.listdir(out))
    report = open(os.path.join(out, "report.md"), encoding="utf-8").read()
    assert "step_time.png" in report and "| ddp.bucket_cap_mb" in report
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".ddpsim-")]  # no staging left over


def test_rerun_skips_computed_points(scenario_file, tmp_path, calls):
    out = str(tmp_path / "out")
    sweep.run_sweep(scenario_file, ["ddp.bucket_cap_mb=1,5"], out, workers=1)
    assert len(calls) == 2
    again = sweep.run_sweep(scenario_file, ["ddp.bucket_cap_mb=1,5"], out, workers=1)
    assert len(calls) == 2 and again.reused == 2 and again.computed == 0
    # a wider grid (spelled differently: 5.0 is 5 MiB) computes only the new point
    wider = sweep.run_sweep(scenario_file, ["ddp.bucket_cap_mb=1,5.0,10"], out, workers=1)
    assert calls[2:] == [(10.0, 1)] and wider.reused == 2
    assert len(read_csv(out)) == 3


def test_failing_point_is_recorded_and_others_complete(scenario_file, tmp_path, monkeypatch):
    def flaky(scenario):
        if scenario.cluster.nodes == 2:
            raise RuntimeError("boom on two nodes")
        return fake_simulate(scenario)

    monkeypatch.setattr(simulate_module, "simulate", flaky)
    out = str(tmp_path / "out")
    outcome = sweep.run_sweep(scenario_file, ["cluster.nodes=1,2,4"], out, workers=1)
    rows = {r["cluster.nodes"]: r for r in read_csv(out)}
    assert rows["2"]["status"] == "error" and "boom on two nodes" in rows["2"]["error"]
    assert rows["2"]["step_time_s"] == ""
    assert rows["1"]["status"] == rows["4"]["status"] == "ok"
    assert outcome.failed == 1
    # the failure is retried on the next run, the successes are not
    monkeypatch.setattr(simulate_module, "simulate", fake_simulate)
    assert sweep.run_sweep(scenario_file, ["cluster.nodes=1,2,4"], out, workers=1).computed == 1


def test_invalid_value_is_a_failed_point_not_a_failed_sweep(scenario_file, tmp_path, calls):
    out = str(tmp_path / "out")
    outcome = sweep.run_sweep(scenario_file, ["cluster.nodes=1,0"], out, workers=1)
    assert [o.status for o in outcome.outcomes] == ["ok", "invalid"]
    assert "at least 1" in outcome.outcomes[1].error and len(calls) == 1


@pytest.mark.parametrize(
    "grid",
    [
        ["ddp.bucket_cap=1,5"],  # unknown field
        ["ddpp.bucket_cap_mb=1"],  # unknown section
        ["cluster.nodes="],  # empty value list
        ["ddp.bucket_cap_mb=" + ",".join(str(i) for i in range(1, 40)), "cluster.nodes=" + ",".join(map(str, range(1, 30)))],
    ],
    ids=["unknown-field", "unknown-section", "empty-values", "too-many-points"],
)
def test_bad_inputs_exit_2_and_write_nothing(scenario_file, tmp_path, calls, capsys, grid):
    out = tmp_path / "out"
    argv = ["sweep", scenario_file, "--out", str(out)] + [a for g in grid for a in ("--grid", g)]
    assert main(argv) == 2
    assert not out.exists() and not calls
    err = capsys.readouterr().err.strip()
    assert err.startswith("ddpsim: error:") and "\n" not in err
    # an existing folder is left exactly as it was
    out.mkdir()
    (out / "keep.txt").write_text("x")
    assert main(argv) == 2
    assert os.listdir(out) == ["keep.txt"]


def test_many_points_with_yes_pass_the_check(scenario_file):
    grid = ["ddp.bucket_cap_mb=" + ",".join(str(i) for i in range(1, 40)), "cluster.nodes=" + ",".join(map(str, range(1, 30)))]
    _, points, _, _, _ = sweep.prepare_sweep(scenario_file, grid, yes=True)
    assert len(points) == 39 * 29


def test_cli_sweep_prints_summary(scenario_file, tmp_path, calls, capsys):
    out = tmp_path / "out"
    assert main(["sweep", scenario_file, "--grid", "ddp.bucket_cap_mb=1,5", "--out", str(out), "--workers", "1"]) == 0
    captured = capsys.readouterr()
    assert "2 points: 2 simulated, 0 reused, 0 failed" in captured.out
    assert "2/2 points" in captured.err  # the progress bar


def test_process_pool(scenario_file, tmp_path, monkeypatch):
    monkeypatch.setattr(simulate_module, "simulate", fake_simulate)  # forked workers inherit the fake
    out = str(tmp_path / "out")
    outcome = sweep.run_sweep(scenario_file, ["ddp.bucket_cap_mb=1,2,3,4"], out, workers=2)
    assert outcome.computed == 4
    steps = [float(r["step_time_s"]) for r in read_csv(out)]
    assert steps == pytest.approx([fake_step_s(c, 1) for c in (1, 2, 3, 4)], rel=1e-12)


def test_dask_local_cluster(scenario_file, tmp_path, calls):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        out = str(tmp_path / "out")
        outcome = sweep.run_sweep(scenario_file, ["cluster.nodes=1,2,3"], out, dask_address=cluster.scheduler_address)
    assert outcome.computed == 3 and sorted(n for _, n in calls) == [1, 2, 3]
    steps = {int(r["cluster.nodes"]): float(r["step_time_s"]) for r in read_csv(out)}
    assert steps == pytest.approx({n: fake_step_s(25, n) for n in (1, 2, 3)}, rel=1e-12)
    with open(os.path.join(out, "points", outcome.outcomes[0].point.hash + ".json"), encoding="utf-8") as handle:
        assert json.load(handle)["status"] == "ok"


def test_unreachable_dask_scheduler_exits_2(scenario_file, tmp_path, calls, capsys, monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setattr(sweep, "DASK_CONNECT_TIMEOUT_S", 1)
    out = tmp_path / "out"
    argv = ["sweep", scenario_file, "--grid", "cluster.nodes=1,2", "--out", str(out), "--dask", "tcp://127.0.0.1:9"]
    assert main(argv) == 2
    assert "Dask scheduler" in capsys.readouterr().err and not out.exists() and not calls


def test_two_spellings_of_one_scenario_are_one_point(scenario_file, tmp_path, calls):
    out = str(tmp_path / "out")
    outcome = sweep.run_sweep(scenario_file, ["cluster.inter_node.nic_bandwidth=400Gbps,50GB/s"], out, workers=1)
    assert len(calls) == 1 and outcome.computed == 1 and outcome.reused == 1
    assert len(read_csv(out)) == 2 and len(os.listdir(os.path.join(out, "points"))) == 1


def test_failed_points_make_the_sweep_exit_1(scenario_file, tmp_path, calls, capsys):
    argv = ["sweep", scenario_file, "--grid", "cluster.nodes=1,0", "--out", str(tmp_path / "out"), "--workers", "1"]
    assert main(argv) == 1
    assert "1 failed" in capsys.readouterr().out


def test_dask_with_no_worker_left_fails_the_points_instead_of_waiting(scenario_file, tmp_path, calls, monkeypatch):
    distributed = pytest.importorskip("distributed")
    import functools
    import io

    # a 2 s wait in place of DASK_NO_WORKERS_S (30 s): _run_dask's default is bound when it is defined,
    # so patching the constant would not shorten it; run_sweep looks _run_dask up when it calls it
    monkeypatch.setattr(sweep, "_run_dask", functools.partial(sweep._run_dask, no_workers_s=2))
    out = str(tmp_path / "out")
    log = io.StringIO()
    with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        with distributed.Client(cluster.scheduler_address) as client:
            client.retire_workers()  # every worker gone, as after a crash of all of them
        start = time.monotonic()
        outcome = sweep.run_sweep(scenario_file, ["cluster.nodes=1,2"], out, dask_address=cluster.scheduler_address,
                                  progress=log)
        elapsed = time.monotonic() - start
    assert elapsed < 60
    assert elapsed < sweep.DASK_NO_WORKERS_S  # the 2 s wait given, not the default
    assert outcome.failed == 2 and all("no Dask worker" in o.error for o in outcome.outcomes)
    assert not calls


def _torch_scenario(folder, module: str) -> str:
    path = folder / "s.yaml"
    path.write_text(f"workload: {{model: 'torch:{module}:build', batch_size: 2}}\ncluster: {{gpu: H100-SXM}}\n")
    return str(path)


@pytest.mark.parametrize("module, file", [("my_net", "my_net.py"), ("pkg.nets", "pkg/nets.py")])
def test_editing_the_factory_module_changes_the_point_hash(tmp_path, module, file):
    from ddpsim.loader import load_scenario

    source = tmp_path / file
    source.parent.mkdir(exist_ok=True)
    if "/" in file:
        (source.parent / "__init__.py").write_text("")
    source.write_text("def build():\n    return 1\n")
    path = _torch_scenario(tmp_path, module)
    first = sweep.scenario_hash(load_scenario(path))
    assert sweep.scenario_hash(load_scenario(path)) == first  # nothing changed: the point is reused
    source.write_text("def build():\n    return 2\n")
    assert sweep.scenario_hash(load_scenario(path)) != first


def test_dask_worker_loss_is_reported_and_the_sweep_finishes(scenario_file, tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")
    import io
    import threading

    # every point after the first waits until a worker is gone: the sweep cannot finish before it sees the loss,
    # however the machine's load orders the threads (CI once finished all 8 points before the retirement landed)
    worker_gone = threading.Event()
    calls = []

    def slow_fake(scenario):
        calls.append(scenario)
        if len(calls) > 1:
            worker_gone.wait(60)
        time.sleep(0.05)
        return fake_simulate(scenario)

    monkeypatch.setattr(simulate_module, "simulate", slow_fake)
    log = io.StringIO()
    with (distributed.LocalCluster(n_workers=2, processes=False, threads_per_worker=1, dashboard_address=None) as cluster,
          distributed.Client(cluster.scheduler_address) as killer):
        # the retiring client is made here, not in the thread: a client created in another thread while the
        # sweep's client waits raced inside distributed on a loaded machine ("bound to a different event loop")
        workers = list(killer.scheduler_info()["workers"])
        points = tmp_path / "out" / "points"

        def lose_one_worker() -> None:
            # after the first point is saved, not after a fixed time: the sweep has counted both workers by
            # then, however slow the machine (a fixed 0.5 s could retire one before the sweep connected)
            deadline = time.monotonic() + 120
            while not (points.exists() and any(points.iterdir())) and time.monotonic() < deadline:
                time.sleep(0.02)
            killer.retire_workers(workers[:1])
            while len(killer.scheduler_info()["workers"]) > 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            worker_gone.set()

        thread = threading.Thread(target=lose_one_worker)
        thread.start()
        outcome = sweep.run_sweep(scenario_file, ["ddp.bucket_cap_mb=1,2,3,4,5,6,7,8"], str(tmp_path / "out"),
                                  dask_address=cluster.scheduler_address, progress=log)
        thread.join()
    assert "Dask lost 1 worker(s); 1 left" in log.getvalue()
    assert outcome.computed == 8  # the other worker finished every point
