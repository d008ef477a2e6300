"""Faults end cleanly: Ctrl-C of a cross-validation running its folds in worker processes stops
within 2 s (it took 22.5 s waiting for the folds in progress), with exit 130 and one line, and
takes its workers with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = [os.path.join(ROOT, "validation", "data", name) for name in ("h100x2-2026-11-26", "h200x2-2026-11-26")]
CLI = [sys.executable, "-c", "import sys; from ddpsim.cli import main; sys.exit(main())"]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _children(pid: int) -> set[int]:
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
                out.add(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.parametrize("group", [True, False], ids=["terminal", "kill-INT-of-the-command"])
def test_ctrl_c_stops_a_cross_validation_with_worker_processes_within_2_s(group):
    argv = [*CLI, "validate", *DATA, "--cross", "host", "--jobs", "2"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _interrupt_and_check(proc, group)
    finally:
        if proc.poll() is None:  # a failed check must not leave the command running
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _interrupt_and_check(proc: subprocess.Popen, group: bool) -> None:
    deadline = time.monotonic() + 120
    workers: set[int] = set()
    while len(workers) < 2 and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        workers = _children(proc.pid)
        time.sleep(0.1)
    assert len(workers) >= 2, "the folds started no worker processes"
    time.sleep(3.0)  # inside the folds' fits now (each takes tens of seconds)
    assert proc.poll() is None
    sent = time.monotonic()
    if group:
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole process group
    else:
        os.kill(proc.pid, signal.SIGINT)  # a script's `kill -INT` reaches the command alone
    code = proc.wait(timeout=60)
    elapsed = time.monotonic() - sent
    _out, err = proc.communicate()
    assert code == 130, err
    assert elapsed < 2.0, elapsed
    lines = [line for line in err.splitlines() if line.startswith("ddpsim:")]
    assert lines == ["ddpsim: interrupted"] and "Traceback" not in err, err
    stop = time.monotonic() + 2.0
    while any(_alive(w) for w in workers) and time.monotonic() < stop:
        time.sleep(0.05)
    assert not any(_alive(w) for w in workers)
