"""Interrupts and kills: Ctrl-C stops a sweep within 2 s with exit 130 and one line, its workers die
with it (also on kill -9), temporary files go, and a rerun resumes; every subcommand answers Ctrl-C
with one line and exit 130."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import ddpsim.cli.validate as validate_cli
from ddpsim.cli.main import STALE_STAGING_S, main, remove_stale_staging

# the engine folds identical ranks, so one point of 64 GPUs takes well under a second: the grid has
# enough points that a sweep is still running when the signal comes (100 points: about 10 s on 2 cores,
# the first saved after under 1 s; a sweep that finished first would exit 0 and fail the test, not pass it)
SLOW = textwrap.dedent(
    """
    workload: {model: resnet50, batch_size: 32}
    cluster: {gpu: H100-SXM, nodes: 8, gpus_per_node: 8}
    simulation: {mode: detailed}
    """
)
CLI = [sys.executable, "-c", "import sys; from ddpsim.cli import main; sys.exit(main())"]
GRID = ["--grid", "ddp.bucket_cap_mb=" + ",".join(str(cap) for cap in range(1, 101)), "--workers", "2"]


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has exited; only its parent's bookkeeping is left


def _wait_for_workers(proc: subprocess.Popen, count: int, timeout_s: float = 60.0) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        workers = {p for p in _descendants(proc.pid) if _alive(p)}
        if len(workers) >= count:
            return workers
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.1)
    raise AssertionError("the sweep started no workers")


def _wait_for_a_saved_point(proc: subprocess.Popen, out, timeout_s: float = 120.0) -> None:
    points = out / "points"
    deadline = time.monotonic() + timeout_s
    while not (points.exists() and any(points.iterdir())):
        assert proc.poll() is None and time.monotonic() < deadline, "no point saved"
        time.sleep(0.05)


def _hidden_leftovers(folder) -> list[str]:
    return [os.path.join(root, name) for root, dirs, files in os.walk(folder) for name in dirs + files
            if name.startswith(".ddpsim-") or name.endswith(".tmp")]


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_ctrl_c_stops_a_sweep_within_2_s_and_a_rerun_resumes(tmp_path):
    scenario = tmp_path / "slow.yaml"
    scenario.write_text(SLOW)
    out = tmp_path / "sweep"
    argv = [*CLI, "sweep", str(scenario), *GRID, "--out", str(out)]
    # a session of its own: Ctrl-C in a terminal signals the whole process group, workers included
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    workers = _wait_for_workers(proc, 2)
    _wait_for_a_saved_point(proc, out)  # the workers are inside later simulations now, however slow the machine
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    code = proc.wait(timeout=30)
    elapsed = time.monotonic() - sent
    _stdout, stderr = proc.communicate()

    assert code == 130, stderr
    assert elapsed < 2.0
    lines = [line for line in stderr.splitlines() if line.startswith("ddpsim:")]
    assert lines == [lines[0]] and lines[0].startswith("ddpsim: interrupted: ") and "rerun" in lines[0]
    assert "Traceback" not in stderr
    deadline = time.monotonic() + 2.0
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(w) for w in workers)
    assert _hidden_leftovers(tmp_path) == []

    saved = len(os.listdir(out / "points")) if (out / "points").exists() else 0
    rerun = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{saved} reused" in rerun.stdout


def test_kill_9_of_a_sweep_takes_its_workers_with_it(tmp_path):
    scenario = tmp_path / "slow.yaml"
    scenario.write_text(SLOW)
    argv = [*CLI, "sweep", str(scenario), *GRID, "--out", str(tmp_path / "sweep")]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    workers = _wait_for_workers(proc, 2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 5.0
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [w for w in workers if _alive(w)]
    for pid in left:  # do not leave them running if the test fails
        os.kill(pid, signal.SIGKILL)
    assert left == []


@pytest.mark.parametrize("command, handler, argv", [
    ("calibrate", "_cmd_calibrate", ["calibrate", "data", "--out", "cal.json"]),
    ("validate", "_cmd_validate", ["validate", "data"]),
])
def test_ctrl_c_in_calibrate_and_validate_is_one_line_and_130(monkeypatch, capsys, command, handler, argv):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(validate_cli, handler, interrupted)
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert err == "ddpsim: interrupted\n"


def test_ctrl_c_while_writing_run_output_leaves_no_staging_folder(tmp_path, monkeypatch, capsys):
    import ddpsim.report.plots as plots

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(plots, "timeline_png", interrupted)
    scenario = tmp_path / "s.yaml"
    scenario.write_text("workload: {model: mlp, batch_size: 4}\ncluster: {gpu: H100-SXM, gpus_per_node: 2}\n")
    assert main(["run", str(scenario), "--out", str(tmp_path / "out")]) == 130
    assert capsys.readouterr().err == "ddpsim: interrupted\n"
    assert sorted(os.listdir(tmp_path)) == ["s.yaml"]


def test_stale_staging_left_by_a_kill_is_removed_fresh_is_kept(tmp_path):
    old_dir, old_file, fresh = tmp_path / ".ddpsim-abc", tmp_path / ".ddpsim-tmpfile", tmp_path / ".ddpsim-now"
    old_dir.mkdir()
    (old_dir / "result.json").write_text("{}")
    old_file.write_text("half a point")
    fresh.mkdir()
    mine = tmp_path / "user.tmp"
    mine.write_text("not ddpsim's")
    long_ago = time.time() - 2 * STALE_STAGING_S
    for path in (old_dir, old_file):
        os.utime(path, (long_ago, long_ago))
    remove_stale_staging(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == [".ddpsim-now", "user.tmp"]
