"""What a user installs: scipy only with the calibrate extra (everything but fitting runs without it),
the example scenarios inside the wheel and runnable by name, SPDX license metadata."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NCCL_TESTS = ROOT / "validation" / "data" / "h200x4-2026-11-26" / "allreduce_nvlink_w2.txt"

# A finder ahead of every other that refuses scipy, as an environment without it would.
_NO_SCIPY = textwrap.dedent(
    """
    import importlib.abc, sys
    class _RefuseScipy(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "scipy" or name.startswith("scipy."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, _RefuseScipy())
    """
)


def _without_scipy(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-c", _NO_SCIPY + textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)


def test_run_sweep_scale_and_tune_work_without_scipy(tmp_path):
    done = _without_scipy(
        """
        from ddpsim.cli import main
        try:
            import scipy
        except ModuleNotFoundError:
            pass
        else:
            raise SystemExit("the finder did not block scipy")
        # the demo (make demo), by the bundled scenario's name
        assert main(["run", "quickstart", "--out", "demo"]) == 0
        assert main(["tune-buckets", "quickstart", "--candidates", "5,25,default"]) == 0
        assert main(["tune-strategy", "quickstart"]) == 0
        assert main(["scale", "quickstart", "--nodes", "1,2"]) == 0
        assert main(["variability", "quickstart", "--iterations", "3", "--jitter-cv", "0.05"]) == 0
        assert main(["sweep", "quickstart", "--grid", "ddp.bucket_cap_mb=5,25", "--out", "sweep", "--workers", "1"]) == 0
        assert not [m for m in sys.modules if m.split(".")[0] == "scipy"]
        """, tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (tmp_path / "demo" / "result.json").is_file() and (tmp_path / "sweep" / "sweep.csv").is_file()


def test_calibrate_without_scipy_names_the_extra_in_one_line(tmp_path):
    done = _without_scipy(
        f"""
        from ddpsim.cli import main
        rc = main(["calibrate", "--nccl-tests", {str(NCCL_TESTS) + ":nvlink:2"!r}, "--links-only", "--out", "c.json"])
        raise SystemExit(rc)
        """, tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "scipy" in lines[0] and "pip install 'ddpsim[calibrate]'" in lines[0], done.stderr
    assert not (tmp_path / "c.json").exists()


def test_scipy_is_an_extra_not_a_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("scipy")]
    extras = project["optional-dependencies"]
    assert any(d.startswith("scipy") for d in extras["calibrate"]) and any(d.startswith("scipy") for d in extras["test"])


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """A wheel built from a copy of the sources, so the checkout gets no build/ or egg-info, with the
    installed setuptools (the one pyproject's build-system names; the test extra installs it)."""
    source = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("ddpsim", "scenarios"):
        shutil.copytree(ROOT / folder, source / folder, ignore=ignore)
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(out), str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (path,) = out.glob("ddpsim-*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_carries_every_scenario_and_the_harness(wheel):
    names = set(wheel.namelist())
    scenarios = sorted(p.name for p in (ROOT / "scenarios").glob("*.yaml"))
    assert scenarios and {f"ddpsim/scenarios/{s}" for s in scenarios} <= names
    for s in scenarios:  # the files themselves, not empty stand-ins
        assert wheel.read(f"ddpsim/scenarios/{s}") == (ROOT / "scenarios" / s).read_bytes()
    # every module of the source tree, the GPU harness included
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "ddpsim").rglob("*.py")}
    assert {"ddpsim/measure/cli.py", "ddpsim/measure/hf.py", "ddpsim/measure/worker.py"} <= modules
    assert modules <= names, sorted(modules - names)[:5]
    assert {"ddpsim/py.typed", "ddpsim/planning/data/option_errors.json"} <= names
    # the shipped calibrations, byte for byte; and nothing of the research (validation/, benchmarks/)
    shipped = sorted((ROOT / "ddpsim" / "calibration" / "shipped").glob("*.json"))
    assert len(shipped) >= 7
    for path in shipped:
        assert wheel.read(path.relative_to(ROOT).as_posix()) == path.read_bytes()
    assert not [n for n in names if n.startswith(("validation/", "benchmarks/"))]
    for moved in ("ddpsim/fitting/pool.py", "ddpsim/measure/hook_mechanism.py", "ddpsim/measure/option_cost.py"):
        assert moved not in names


def test_the_wheel_has_spdx_license_metadata(wheel):
    (meta,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    text = wheel.read(meta).decode()
    assert "License-Expression: Apache-2.0" in text.splitlines()
    assert "License-File: LICENSE" in text.splitlines()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in wheel.namelist())
    assert "Classifier: Typing :: Typed" in text and "Requires-Dist: scipy" in text and 'extra == "calibrate"' in text
    assert not [line for line in text.splitlines() if line.startswith("Requires-Dist: scipy") and "extra" not in line]


def test_a_bundled_scenario_runs_from_an_installed_wheel(wheel, tmp_path):
    # the package as a wheel installs it (no source tree beside it): `ddpsim run quickstart` finds the file
    site = tmp_path / "site"
    wheel.extractall(site)
    env = {**os.environ, "PYTHONPATH": str(site), "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "-c", "from ddpsim.cli.args import scenario_path; print(scenario_path('quickstart'))"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == site / "ddpsim" / "scenarios" / "quickstart.yaml"


def test_a_file_in_the_current_folder_wins_over_a_bundled_name(tmp_path, monkeypatch):
    from ddpsim.cli.args import bundled_scenarios, scenario_path

    monkeypatch.chdir(tmp_path)
    assert scenario_path("quickstart") == str(bundled_scenarios() / "quickstart.yaml")  # type: ignore[operator]
    assert scenario_path("quickstart.yaml") == str(bundled_scenarios() / "quickstart.yaml")  # type: ignore[operator]
    (tmp_path / "quickstart").write_text("workload: {}\n")
    assert scenario_path("quickstart") == "quickstart"
    assert scenario_path("elsewhere/missing.yaml") == "elsewhere/missing.yaml"  # a path: the loader names it


def test_an_unknown_bare_name_lists_the_bundled_ones(tmp_path, monkeypatch, capsys):
    from ddpsim.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["run", "quickstat"]) == 2
    err = capsys.readouterr().err
    assert "quickstat" in err and "quickstart" in err and "h100-2x8-ib400-gpt2" in err


# ---- the README's commands from a plain install of the wheel ----

def _readme_commands() -> list[str]:
    """Every command line of the README's fenced blocks that starts with ``ddpsim``."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```\n(.*?)^```", text, flags=re.S | re.M)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()
            if line.startswith("ddpsim ")]


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed offline (no index: pip --no-deps), its dependencies taken from the
    running interpreter's site-packages through a .pth line (a directory a .pth names is not itself scanned
    for .pth files, so the checkout's editable install there does not reach this venv)."""
    import site
    import sysconfig
    import venv

    root = tmp_path_factory.mktemp("venv")
    venv.create(root, with_pip=False)
    python = root / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    deps = sysconfig.get_paths()["purelib"]
    assert deps in site.getsitepackages()
    Path(purelib, "deps-from-the-test-venv.pth").write_text(deps + "\n")
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index",
                           "--no-deps", wheel.filename], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return root


def _in_venv(root: Path, command: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(MPLBACKEND="Agg", PATH=f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    return subprocess.run(command, shell=True, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def test_the_readme_commands_work_from_a_plain_install(installed, tmp_path):
    # the installed package is the wheel's, not this checkout's
    where = _in_venv(installed, "python -c 'import ddpsim; print(ddpsim.__file__)'", tmp_path)
    assert where.returncode == 0 and str(installed) in where.stdout, where.stdout + where.stderr
    commands = _readme_commands()
    probe = [c for c in commands if c.startswith("ddpsim measure --plan probe")]
    recentre = [c for c in commands if "--recentre pooled:H200" in c]
    run = [c for c in commands if c.startswith("ddpsim run") and "runs/probe/calibration.json" in c]
    assert len(probe) == len(recentre) == len(run) == 1, commands
    # measure needs a GPU host: its help, as printed there; the probe it writes is a committed one
    helped = _in_venv(installed, "ddpsim measure --help", tmp_path)
    assert helped.returncode == 0 and "--plan" in helped.stdout, helped.stderr
    (tmp_path / "runs").mkdir()
    shutil.copytree(ROOT / "validation" / "data" / "h200x2-measure-2026-11-27", tmp_path / "runs" / "probe")
    done = _in_venv(installed, recentre[0], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads((tmp_path / "runs" / "probe" / "calibration.json").read_text())
    assert written["measured_on"]["gpu"] == "H200" and written["probed_from"]["base"] == "pooled:H200"
    done = _in_venv(installed, run[0], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    # the path typed in --set is the current folder's, the fitted network in force
    flat = " ".join(done.stdout.split())  # the table wraps long values
    assert f"from: inter node network calibration {tmp_path}/runs/probe/calibration.json link_classes.net" in flat, flat
    # a shipped calibration by name in a scenario file, and its refusal on another GPU kind
    (tmp_path / "h200.yaml").write_text("workload: {model: resnet50, batch_size: 32}\n"
                                        "cluster: {gpu: H200, gpus_per_node: 2, intra_node: {type: nvswitch}}\n"
                                        "calibration: pooled:H200\n")
    done = _in_venv(installed, "ddpsim run h200.yaml", tmp_path)
    assert done.returncode == 0 and "calibration pooled:H200 link_classes.nvlink" in " ".join(done.stdout.split())
    done = _in_venv(installed, "ddpsim run h200.yaml --set cluster.gpu=H100", tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "--set calibration=pooled:H100" in done.stderr


# ---- the README's GPU-host install: the wheel with --no-deps, beside the host's torch only ----

_TORCH_ONLY = textwrap.dedent(
    """
    import importlib.abc, sys
    REFUSED = {"simpy", "numpy", "networkx", "matplotlib", "yaml", "scipy"}  # ddpsim's dependencies (torch runs without numpy)
    class _TorchOnly(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in REFUSED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, _TorchOnly())
    """
)


def _install_block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```\n(.*?)^```", text, flags=re.S | re.M)
    (block,) = [b for b in blocks if "pip install --no-deps" in b]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def test_the_readme_gpu_host_install_works_without_an_index(wheel, tmp_path):
    build, copy, install = _install_block()
    assert build.startswith("python -m pip wheel --no-deps -w dist") and copy.startswith("scp dist/ddpsim-")
    assert install == "pip install --no-deps ddpsim-*.whl"
    # the install line as written, offline, into a fresh venv that sees nothing but its own site-packages
    import venv

    root = tmp_path / "gpuhost"
    venv.create(root, with_pip=False)
    shutil.copy(wheel.filename, tmp_path)
    args = install.split()[1:-1] + [str(tmp_path / Path(wheel.filename).name)]
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), *args,
                           "--no-index", "-q"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not list((root / "lib").glob("python*/site-packages/simpy"))  # --no-deps: nothing else came
    # measure there, with torch and the standard library only: the harness's modules import, and the command
    # goes as far as a CPU host can (no GPU: one line, exit 2)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(next((root / "lib").glob("python*/site-packages")))
    code = _TORCH_ONLY + textwrap.dedent(
        """
        import importlib
        for name in ("cli", "campaign", "worker", "runner", "profile", "models", "fsdp", "selfcheck"):
            importlib.import_module("ddpsim.measure." + name)
        from ddpsim.cli.main import main
        sys.exit(main(["measure", "--model", "tiny-mlp", "--out", "runs/host1"]))
        """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=300)
    assert "site-packages" in subprocess.run([sys.executable, "-c", "import ddpsim; print(ddpsim.__file__)"],
                                             capture_output=True, text=True, cwd=tmp_path, env=env).stdout
    if "no GPU found" not in done.stderr:  # a GPU host: the plan ran
        assert done.returncode in (0, 1), done.stderr[-2000:]
    else:
        # torch itself warns that numpy, refused here, is absent; ddpsim says one line
        ours = [line for line in done.stderr.splitlines() if line.startswith("ddpsim")]
        assert done.returncode == 2 and len(ours) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]


def test_the_readme_examples_output_folder_is_ignored():
    assert "/runs/" in (ROOT / ".gitignore").read_text().split()
