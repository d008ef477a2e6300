"""Output paths: a failed write names the path the user typed and leaves no folder behind."""

from __future__ import annotations

import errno
import os
import tempfile

from ddpsim.cli.main import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIO = os.path.join(ROOT, "scenarios", "quickstart.yaml")


def _listing(folder) -> set[str]:
    return {os.path.relpath(os.path.join(root, name), folder)
            for root, dirs, files in os.walk(folder) for name in dirs + files}


def test_a_full_disk_in_a_sweep_names_the_point_file_and_leaves_no_empty_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    real_mkstemp = tempfile.mkstemp

    def full_disk(*args, **kwargs):
        fd, name = real_mkstemp(*args, **kwargs)
        os.close(fd)
        os.remove(name)
        raise OSError(errno.ENOSPC, "No space left on device", name)  # as the kernel reports it: the temp file

    monkeypatch.setattr("ddpsim.outdir.tempfile.mkstemp", full_disk)
    out = tmp_path / "sweep"
    code = main(["sweep", SCENARIO, "--grid", "ddp.bucket_cap_mb=5,25", "--out", str(out), "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "No space left on device" in err
    assert f"{out}{os.sep}points{os.sep}" in err and ".ddpsim-" not in err, err
    assert _listing(tmp_path) == set()  # neither sweep/ nor sweep/points/


def test_a_sweep_that_fails_keeps_the_points_it_saved(tmp_path, monkeypatch, capsys):
    # the control: folders holding finished points stay, for the resume
    real = "ddpsim.planning.sweep.write_summary"

    def no_summary(outcome):
        raise OSError(errno.ENOSPC, "No space left on device", os.path.join(outcome.out, "sweep.csv"))

    monkeypatch.setattr(real, no_summary)
    out = tmp_path / "sweep"
    assert main(["sweep", SCENARIO, "--grid", "ddp.bucket_cap_mb=5,25", "--out", str(out), "--workers", "1"]) == 2
    assert len(os.listdir(out / "points")) == 2


def test_an_output_blocked_by_a_folder_names_the_users_path(tmp_path, capsys):
    out = tmp_path / "report"
    (out / "timeline.png").mkdir(parents=True)  # a folder where run writes its plot
    code = main(["run", SCENARIO, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and str(out / "timeline.png") in err and ".ddpsim-" not in err, err
    assert _listing(tmp_path) == {"report", os.path.join("report", "timeline.png")}
