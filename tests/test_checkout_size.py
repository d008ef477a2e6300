"""A plain checkout fits what a GPU host takes (the device tool carries at most 64 MiB of working tree; the
project keeps the tracked tree at 40 MB so that `make gpu-check` runs from a checkout with room for a campaign's
output), and measured data is committed compressed, read back through ddpsim.jsonfile.open_data."""

from __future__ import annotations

import gzip
import os
import subprocess

import pytest

from ddpsim.jsonfile import data_path, glob_data, has_data, open_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACKED_LIMIT_BYTES = 40 * 1000 * 1000
# a JSONL or log file above this is committed as .gz (text measurement data compresses about 7x)
PLAIN_LIMIT_BYTES = 256 * 1024


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [name for name in out.decode().split("\0") if name]


def test_the_tracked_tree_is_at_most_40_mb():
    files = [os.path.join(ROOT, name) for name in _tracked()]
    total = sum(os.path.getsize(path) for path in files if os.path.isfile(path))
    assert total <= TRACKED_LIMIT_BYTES, f"tracked tree {total / 1e6:.1f} MB"


def test_large_measurement_text_is_committed_compressed():
    plain = [name for name in _tracked() if name.startswith("validation/data/") and name.endswith((".jsonl", ".log"))
             and os.path.getsize(os.path.join(ROOT, name)) > PLAIN_LIMIT_BYTES]
    assert not plain, plain


def test_a_compressed_file_reads_as_its_plain_name(tmp_path):
    text = '{"a": 1}\n{"b": 2}\n'
    with gzip.open(tmp_path / "runs.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.write(text)
    plain = str(tmp_path / "runs.jsonl")
    assert has_data(plain) and data_path(plain) == plain + ".gz"
    with open_data(plain) as handle:
        assert handle.read() == text
    assert glob_data(str(tmp_path / "*.jsonl")) == [plain]
    # the plain file, where both exist, is the one read (a campaign's copy being edited)
    (tmp_path / "runs.jsonl").write_text("plain\n")
    with open_data(plain) as handle:
        assert handle.read() == "plain\n"
    assert not has_data(str(tmp_path / "absent.jsonl"))
    with pytest.raises(FileNotFoundError):
        open_data(str(tmp_path / "absent.jsonl"))


def test_a_compressed_cpu_dry_run_is_refused_as_the_plain_one(tmp_path):
    from ddpsim.errors import ScenarioError
    from ddpsim.fitting.device import refuse_dry_runs

    record = '{"schema": "ddpsim.ddp_run/1", "status": "ok", "fingerprint": {"gpu_name": "cpu"}}\n'
    with gzip.open(tmp_path / "ddp_runs.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.write(record)
    with pytest.raises(ScenarioError, match="gpu_name"):
        refuse_dry_runs([str(tmp_path)])
