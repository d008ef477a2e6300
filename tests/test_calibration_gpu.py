"""A calibration knows the GPU kind it was measured on: shipped ones go by name (``pooled:H200``), and using one
for another kind (a scenario's cluster, the runs validate reads, the probe --recentre reads) is refused in one
line with what to run instead, or allowed with --allow-other-gpu and said so in a ``from:`` row.

Expected GPU kinds are read here from the measured records' own fingerprints, never from ddpsim's output.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from ddpsim.calibration.file import read_calibration
from ddpsim.calibration.shipped import SHIPPED_DIR, shipped_names
from ddpsim.cli import main
from ddpsim.errors import ScenarioError
from ddpsim.jsonfile import has_data, open_data

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "validation" / "data"
H200_PROBE = DATA / "h200x2-measure-2026-11-27"
H100_CAMPAIGN = DATA / "h100x2-2026-11-26"
# nvidia-smi's names of the two kinds measured, and the catalog's
NVIDIA = {"NVIDIA H200": "H200", "NVIDIA H100 80GB HBM3": "H100"}


def _fingerprint_kinds(folder: Path) -> set[str]:
    kinds = set()
    for name in ("ddp_runs.jsonl", "allreduce.jsonl"):
        path = folder / name
        if has_data(path):
            for line in open_data(path).read().splitlines():
                fingerprint = json.loads(line).get("fingerprint") if line.strip() else None
                if fingerprint:  # a failed launch's record may have none
                    kinds.add(NVIDIA[fingerprint["gpu_name"]])
    return kinds


def _error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_every_shipped_calibration_reads_by_name_and_names_the_gpu_of_its_data():
    names = shipped_names()
    assert {"pooled:H200", "pooled:H100", "x2:H200", "x4:H200"} <= set(names)
    for name in names:
        calibration = read_calibration(name)
        assert calibration.source == name and calibration.measured_on is not None
        folders = json.loads((SHIPPED_DIR / f"{name.replace(':', '-').lower()}.json").read_text())[
            "calibration_subset"]["folders"]
        kinds = set().union(*(_fingerprint_kinds(DATA / f) for f in folders))
        assert kinds == {calibration.measured_on.gpu}, name
        assert set(calibration.measured_on.link_classes) == set(calibration.link_classes)
    # the short and the catalog's spelling name one file; an unknown name lists the shipped ones
    assert read_calibration("pooled:h100").digest == read_calibration("pooled:H100").digest
    with pytest.raises(ScenarioError, match="shipped: pooled:H100"):
        read_calibration("pooled:B200")


def _scenario(tmp_path: Path, gpu: str, calibration: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(f"workload: {{model: resnet50, batch_size: 32}}\n"
                    f"cluster: {{gpu: {gpu}, gpus_per_node: 2, intra_node: {{type: nvswitch}}}}\n"
                    f"calibration: {calibration}\n")
    return str(path)


def test_a_scenario_of_another_gpu_kind_is_refused_with_the_command_or_allowed_with_a_from_row(tmp_path, capsys):
    scenario = _scenario(tmp_path, "H100-SXM", "pooled:H200")
    assert main(["run", scenario]) == 2
    line = _error_line(capsys)
    assert "measured on H200" in line and "H100" in line and "--set calibration=pooled:H100" in line
    assert "--allow-other-gpu" in line
    assert main(["run", scenario, "--allow-other-gpu", "--json"]) == 0
    sources = json.loads(capsys.readouterr().out)["value_sources"]
    assert "measured on H200, used for H100-SXM (--allow-other-gpu)" in sources["calibration_gpu"]
    # the same kind: no such row
    assert main(["run", _scenario(tmp_path, "H200", "pooled:H200"), "--json"]) == 0
    assert "calibration_gpu" not in json.loads(capsys.readouterr().out)["value_sources"]


def test_validating_another_kinds_runs_is_exit_2_with_a_line(capsys):
    assert _fingerprint_kinds(H100_CAMPAIGN) == {"H100"}
    assert main(["validate", str(H100_CAMPAIGN), "--calibration", "x4:H200"]) == 2
    line = _error_line(capsys)
    assert "measured on H200" in line and "--calibration pooled:H100" in line


def _probe_copy(tmp_path: Path, source: Path, one_size: bool = False) -> Path:
    """A probe folder: the campaign's sweeps only (optionally each record cut to its first size)."""
    probe = tmp_path / source.name
    probe.mkdir()
    records = [json.loads(line) for line in open_data(str(source / "allreduce.jsonl")).read().splitlines() if line.strip()]
    if one_size:
        records = [dict(r, rows=r["rows"][:1]) for r in records]
    (probe / "allreduce.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return probe


def test_a_probe_of_another_kind_is_refused_and_allowed_with_the_flag(tmp_path, capsys):
    probe = _probe_copy(tmp_path, H100_CAMPAIGN)
    out = tmp_path / "c.json"
    assert main(["calibrate", str(probe), "--recentre", "pooled:H200", "--out", str(out)]) == 2
    line = _error_line(capsys)
    assert f"run ddpsim calibrate {probe} --recentre pooled:H100" in line and not out.exists()
    assert main(["calibrate", str(probe), "--recentre", "pooled:H200", "--out", str(out), "--allow-other-gpu"]) == 0
    assert "from: gpu" in capsys.readouterr().out
    written = json.loads(out.read_text())
    assert written["probed_from"]["other_gpu"] == ["H100"] and written["measured_on"]["gpu"] == "H200"


def test_a_probe_of_one_message_size_is_refused(tmp_path, capsys):
    probe = _probe_copy(tmp_path, H200_PROBE, one_size=True)
    out = tmp_path / "c.json"
    assert main(["calibrate", str(probe), "--recentre", "pooled:H200", "--out", str(out)]) == 2
    line = _error_line(capsys)
    assert "one message size" in line and "ddpsim measure --plan probe" in line and not out.exists()
    # the full probe of the same kind re-centres
    (tmp_path / "full").mkdir()
    full = _probe_copy(tmp_path / "full", H200_PROBE)
    assert main(["calibrate", str(full), "--recentre", "pooled:H200", "--out", str(out)]) == 0


def test_calibrate_records_the_gpu_counts_and_link_classes(tmp_path, capsys):
    folder = tmp_path / "links"
    shutil.copytree(H200_PROBE, folder)
    out = tmp_path / "links.json"
    assert main(["calibrate", str(folder), "--links-only", "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    sweeps = [json.loads(line) for line in open_data(str(folder / "allreduce.jsonl")).read().splitlines() if line.strip()]
    assert written["measured_on"] == {"gpu": "H200", "gpu_counts": sorted({r["world_size"] for r in sweeps}),
                                      "link_classes": sorted({r["transport"] for r in sweeps})}
    # a scenario reads the file back and an H100 scenario refuses it
    assert main(["run", _scenario(tmp_path, "H100", os.fspath(out))]) == 2
    assert "measured_on.gpu" in _error_line(capsys)


def test_a_sweep_takes_allow_other_gpu_to_every_point(tmp_path, capsys):
    scenario = _scenario(tmp_path, "H100-SXM", "pooled:H200")
    grid = ["--grid", "ddp.bucket_cap_mb=5,25", "--workers", "1"]
    main(["sweep", scenario, *grid, "--out", str(tmp_path / "refused"), "--json"])
    refused = json.loads(capsys.readouterr().out)
    assert [p["status"] for p in refused["points"]] == ["error", "error"]
    assert all("--allow-other-gpu" in p["error"] for p in refused["points"])
    assert main(["sweep", scenario, *grid, "--out", str(tmp_path / "allowed"), "--allow-other-gpu", "--json"]) == 0
    allowed = json.loads(capsys.readouterr().out)
    assert [p["status"] for p in allowed["points"]] == ["ok", "ok"]
    # the same points as a run with the flag: the calibration applied, not dropped
    assert main(["run", scenario, "--set", "ddp.bucket_cap_mb=5", "--allow-other-gpu", "--json"]) == 0
    run_step_s = json.loads(capsys.readouterr().out)["step_time_s"]
    assert allowed["points"][0]["metrics"]["step_time_s"] == pytest.approx(run_step_s)
