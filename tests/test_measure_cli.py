"""`ddpsim measure` and the harness's commands fail cleanly: bad options and paths are refused in one line
(exit 2) before any GPU work, Ctrl-C ends the campaign and its launch (exit 130), and every command's
``--help`` works on a host without torch, saying what to install for the rest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# sitecustomize runs at every interpreter's start (children too): a finder that refuses torch, as a host
# without torch would
_NO_TORCH = textwrap.dedent(
    """
    import importlib.abc, sys
    class _RefuseTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, _RefuseTorch())
    """
)
HARNESS_COMMANDS = ("ddpsim.measure", "ddpsim.measure.campaign", "ddpsim.measure.worker", "ddpsim.measure.fsdp",
                    "ddpsim.measure.trace")


def _run(args: list[str], cwd: Path, without_torch: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "0"}
    if without_torch:
        site = cwd / "_no_torch"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(_NO_TORCH)
        env["PYTHONPATH"] = f"{site}{os.pathsep}{ROOT}"
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


def _one_error_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    return lines[0]


def test_the_blocker_blocks_torch(tmp_path):
    done = _run(["-c", "import torch"], tmp_path, without_torch=True)
    assert done.returncode == 1 and "No module named 'torch'" in done.stderr


@pytest.mark.parametrize("module", HARNESS_COMMANDS)
def test_every_harness_command_has_help_without_torch(module, tmp_path):
    done = _run(["-m", module, "--help"], tmp_path, without_torch=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout and done.stderr == ""
    assert [p.name for p in tmp_path.iterdir()] == ["_no_torch"]


@pytest.mark.parametrize("module", ["ddpsim.measure.worker", "ddpsim.measure.fsdp", "ddpsim.measure.trace"])
def test_a_harness_command_without_torch_says_what_to_install(module, tmp_path):
    done = _run(["-m", module, "--out", "x"], tmp_path, without_torch=True)
    assert done.returncode == 2
    line = _one_error_line(done)
    assert module in line and "pip install torch" in line
    assert not (tmp_path / "x").exists()


def test_measure_without_torch_refuses_in_one_line_and_writes_nothing(tmp_path):
    done = _run(["-m", "ddpsim", "measure", "--out", "m", "--cpu-slots", "2"], tmp_path, without_torch=True)
    assert done.returncode == 2
    assert "pip install torch" in _one_error_line(done)
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("out, says", [("afile", "afile: is a file, not a folder"),
                                       ("afile/sub", "afile is a file, not a folder")])
def test_measure_refuses_an_out_that_is_or_lies_under_a_file(out, says, tmp_path):
    (tmp_path / "afile").write_text("mine\n")
    done = _run(["-m", "ddpsim", "measure", "--out", out, "--cpu-slots", "2"], tmp_path)
    assert done.returncode == 2
    line = _one_error_line(done)
    assert f"--out {out}" in line and says in line
    assert (tmp_path / "afile").read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_measure_checks_a_model_option_before_looking_for_gpus(tmp_path):
    # no --cpu-slots: on this GPU-less host the answer used to be "no GPU found"
    done = _run(["-m", "ddpsim", "measure", "--out", "m", "--model", "hf:GPT2Config@seq=abc"], tmp_path)
    assert done.returncode == 2
    line = _one_error_line(done)
    assert "seq must be a positive integer, got 'abc'" in line and "GPU" not in line
    assert not (tmp_path / "m").exists()


def test_measure_refuses_a_missing_config_file_at_once(tmp_path):
    # a path is never looked up on the hub (without network that retried for about 27 s)
    env_free = time.perf_counter()
    done = _run(["-m", "ddpsim", "measure", "--out", "m", "--cpu-slots", "2", "--model", "hf:missing_config.json"],
                tmp_path)
    assert done.returncode == 2
    assert "hf:missing_config.json: no such file" in _one_error_line(done)
    assert time.perf_counter() - env_free < 20  # the interpreter and torch's import; no retries
    assert not (tmp_path / "m").exists()


def _processes_naming(text: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline and int(pid) != os.getpid():
                found.append(int(pid))
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to find the launch's processes")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_measure_ends_its_launch_and_exits_130(sig, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / f"run-{sig.name}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, "-m", "ddpsim", "measure", "--out", str(out), "--cpu-slots", "2",
                               "--plan", "quick", "--model", "tiny-mlp", "--link-classes", "socket"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    try:
        deadline = time.monotonic() + 240
        # a launch runs in its own session: the terminal's Ctrl-C reaches the parent only
        while not [p for p in _processes_naming(str(out)) if p != parent.pid] and time.monotonic() < deadline:
            assert parent.poll() is None, parent.communicate()[1][-2000:]
            time.sleep(0.2)
        assert [p for p in _processes_naming(str(out)) if p != parent.pid], "no launch started"
        parent.send_signal(sig)
        _stdout, stderr = parent.communicate(timeout=60)
    finally:
        if parent.poll() is None:
            parent.kill()
    assert parent.returncode == 130, stderr[-2000:]
    lines = stderr.strip().splitlines()
    assert lines == ["ddpsim: measure: interrupted (the same command resumes)"], stderr[-2000:]
    assert _processes_naming(str(out)) == []


def _private_torch_uses(source: str) -> list[str]:
    """``torch.x._y`` attribute chains and ``from torch._x import`` / ``import torch._x`` in a module."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            chain, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id == "torch" and chain[0].startswith("_") \
                    and not chain[0].startswith("__"):
                found.append(".".join(["torch", *reversed(chain)]))
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            found += [n for n in names if n.split(".")[0] == "torch" and any(p.startswith("_") for p in n.split("."))]
    return found


def test_the_harness_uses_no_private_torch_api():
    assert sorted(_private_torch_uses("import torch\ntorch.cuda._sleep(10)\nfrom torch.utils._pytree import x\n")) == [
        "torch.cuda._sleep", "torch.utils._pytree"]
    uses = {p.name: _private_torch_uses(p.read_text()) for p in (ROOT / "ddpsim" / "measure").glob("*.py")}
    assert not {name: found for name, found in uses.items() if found}


def test_a_stream_hold_queues_enough_gate_kernels():
    pytest.importorskip("torch")
    from ddpsim.measure.common import gate_launches, hold_stream

    assert gate_launches(0.02, 0.0003) == 67  # ceil(66.7)
    assert gate_launches(0.02, 0.02) == 1 and gate_launches(1e-6, 0.001) == 1
    import torch

    hold_stream(torch.device("cpu"), 0.02)  # nothing to hold on the CPU: returns at once
