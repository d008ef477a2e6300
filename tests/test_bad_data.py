"""Bad measured data never becomes a calibration or a report (tests/bad_inputs/data_corpus.yaml).

Each case edits one record of a small real campaign (cut from validation/data/h100x2-2026-11-26) and
runs ``calibrate`` and ``validate`` on it in-process: exit code 2, one line on stderr naming the
file and the field, no traceback, nothing written. The unedited campaign calibrates and validates
with exit 0, so that every refusal below is the edit's doing.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
import yaml

from ddpsim.cli.main import main
from ddpsim.jsonfile import data_path, open_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "validation", "data", "h100x2-2026-11-26")
PROBES = os.path.join(ROOT, "validation", "data", "h100x4-multinode-2026-11-27", "netprobe.jsonl")
CORPUS = yaml.safe_load(open(os.path.join(os.path.dirname(__file__), "bad_inputs", "data_corpus.yaml"), encoding="utf-8"))
LOOSE = ["--max-mape", "100", "--max-error", "100", "--max-allreduce-error", "100", "--min-recommendation-share", "0"]


def _lines(path: str) -> list[str]:
    with open_data(path) as handle:
        return handle.read().splitlines()


def make_campaign(folder: str, profiles: bool = True) -> str:
    """mlp-heavy over NVLink on 2 x H100: its sweep, its 7 DDP runs, its profile, two network probes."""
    os.makedirs(os.path.join(folder, "logs"))
    sweeps = [line for line in _lines(os.path.join(SOURCE, "allreduce.jsonl")) if '"transport": "nvlink"' in line]
    runs = [line for line in _lines(os.path.join(SOURCE, "ddp_runs.jsonl"))
            if '"model": "mlp-heavy"' in line and '"transport": "nvlink"' in line]
    assert len(sweeps) == 1 and len(runs) == 7
    with open(os.path.join(folder, "allreduce.jsonl"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(sweeps) + "\n")
    with open(os.path.join(folder, "ddp_runs.jsonl"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(runs) + "\n")
    with open(os.path.join(folder, "netprobe.jsonl"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(_lines(PROBES)[:2]) + "\n")
    shutil.copy(str(data_path(os.path.join(SOURCE, "logs", "nvlink_w2_0.log"))), os.path.join(folder, "logs"))
    if profiles:
        os.makedirs(os.path.join(folder, "profiles"))
        shutil.copy(os.path.join(SOURCE, "profiles", "mlp-heavy.json"), os.path.join(folder, "profiles"))
    return folder


def _set(record: dict, dotted: str, value: object) -> None:
    *parents, last = dotted.split(".")
    target = record
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if value == "DELETE":
        del target[last]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value


def _edit(folder: str, case: dict) -> str | None:
    """Apply the case's edits; the path of the file edited (None: none)."""
    edited = None
    for name, by_line in (case.get("edit") or {}).items():
        edited = os.path.join(folder, name)
        lines = _lines(edited)
        for number, changes in by_line.items():
            # line 0: the file is one JSON document (a profile)
            record = json.loads("\n".join(lines) if number == 0 else lines[number - 1])
            for key, value in changes.items():
                _set(record, key, value)
            text = json.dumps(record)  # NaN and Infinity as Python writes them
            lines = [text] if number == 0 else lines[:number - 1] + [text] + lines[number:]
        with open(edited, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    for name, by_line in (case.get("raw") or {}).items():
        edited = os.path.join(folder, name)
        lines = _lines(edited)
        for number, text in by_line.items():
            lines[number - 1] = text
        with open(edited, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    return edited


def _cases() -> list:
    out = []
    for i, case in enumerate(CORPUS["cases"]):
        commands = [case["args"]] if "args" in case else [
            ["calibrate", "{bad}", "--out", "{out}"], ["validate", "{bad}", "--out", "{out}", *LOOSE]]
        for argv in commands:
            out.append(pytest.param(case, argv, id=f"{i}-{argv[0]}-{case['field']}"))
    return out


CASES = _cases()


def _listing(folder) -> set[str]:
    return {os.path.relpath(os.path.join(root, name), folder)
            for root, dirs, files in os.walk(folder) for name in dirs + files}


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> str:
    return make_campaign(str(tmp_path_factory.mktemp("data") / "good"))


def test_the_corpus_is_large_enough():
    assert len(CASES) >= 100


def test_the_unedited_campaign_calibrates_and_validates(good, tmp_path, capsys):
    out = tmp_path / "cal.json"
    assert main(["calibrate", good, "--out", str(out)]) == 0, capsys.readouterr().err
    assert json.loads(out.read_text())["overheads"]["nvlink"]["calibration_runs"] == 2  # caps 5 and 50
    assert main(["validate", good, "--calibration", str(out), *LOOSE]) == 0, capsys.readouterr().err
    assert main(["validate", good, *LOOSE]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("case, argv", CASES)
def test_bad_data(good, tmp_path, monkeypatch, capsys, case, argv):
    monkeypatch.chdir(tmp_path)  # anything written without a path would land here
    bad = make_campaign(str(tmp_path / "bad"))
    noprofiles = make_campaign(str(tmp_path / "noprofiles"), profiles=False)
    edited = _edit(bad, case)
    before = _listing(tmp_path)
    paths = {"bad": bad, "good": good, "noprofiles": noprofiles, "out": str(tmp_path / "out")}
    args = [a.format(**paths) for a in argv]

    code = main(args)
    captured = capsys.readouterr()

    assert code == 2, captured.err
    assert captured.err.startswith("ddpsim: error: ") and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err
    assert case["field"] in captured.err
    named = case.get("file", edited or "")
    assert named.format(**paths) in captured.err
    assert captured.out == ""
    assert _listing(tmp_path) == before  # no calibration, report folder or staging file


NCCL_TESTS = os.path.join(ROOT, "validation", "data", "h200x4-2026-11-26", "allreduce_nvlink_w4.txt")


def _by_hand(text: str) -> str:
    """The harness's file as nccl-tests run by hand prints it: without the harness's own header line,
    each rank on its real host."""
    lines = [line for line in text.splitlines() if not line.startswith("# ddpsim harness:")]
    return "\n".join(line.replace(" on       host ", " on      gpu-a ") for line in lines) + "\n"


def _half_from(text: str, first_size: int) -> str:
    """Rows from ``first_size`` bytes on measured in half precision (another sweep pasted in)."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0].isdigit() and int(fields[0]) >= first_size:
            line = line.replace(" float ", "  half ")
        out.append(line)
    return "\n".join(out) + "\n"


def _wrong_at(text: str, size: int) -> str:
    """The row of ``size`` bytes with 3 wrong results out of place, as nccl-tests -c 1 reports a broken reduction."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == str(size):
            fields[8] = "3"
            line = "  ".join(fields)
        out.append(line)
    return "\n".join(out) + "\n"


def _twice(text: str) -> str:
    """Two runs of the same sweep pasted into one file."""
    rows = [line for line in text.splitlines() if line.split() and line.split()[0].isdigit()]
    return text + "\n".join(rows) + "\n"


def _cpu_time(text: str) -> str:
    """The column header of nccl-tests -C 1: its time columns are the host's launch time."""
    return text.replace("     time   algbw", "  cputime   algbw")


def _cut_last_row(text: str) -> str:
    """The last row without its in-place half: a run killed while printing it."""
    lines = text.splitlines()
    last = max(i for i, line in enumerate(lines) if line.split() and line.split()[0].isdigit())
    lines[last] = "  ".join(lines[last].split()[:9])
    return "\n".join(lines[:last + 1]) + "\n"


def _short_of_max(text: str) -> str:
    """Rows up to 64 MiB of a run that was to reach maxBytes 1 GiB."""
    return "\n".join(line for line in text.splitlines()
                     if not (line.split() and line.split()[0].isdigit() and int(line.split()[0]) > 1 << 26)) + "\n"


@pytest.mark.parametrize("name, make, spec, field", [
    ("wrong.txt", lambda t: _wrong_at(t, 1 << 20), ":nvlink:4", "#wrong"),
    ("cputime.txt", _cpu_time, ":nvlink:4", "cputime"),
    ("aggregated.txt", lambda t: t.replace("agg iters: 1", "agg iters: 4"), ":nvlink:4", "agg iters"),
    ("cut_row.txt", _cut_last_row, ":nvlink:4", "row"),
    ("short_of_max.txt", _short_of_max, ":nvlink:4", "maxBytes"),
    ("two_runs.txt", lambda t: t + t, ":nvlink:4", "columns"),
    ("broadcast.txt", lambda t: "# Collective test starting: broadcast_perf\n" + t, ":nvlink:4", "collective"),
    ("typo_option.txt", lambda t: t, ":nvlink:4:dtype=float", "--nccl-tests"),
    ("absent_type.txt", lambda t: t, ":nvlink:4:type=half", "type"),
    ("twice.txt", _twice, ":nvlink:4", "size"),
    # one real host given as two nodes: an intra-node sweep would be fitted as the network
    ("one_host.txt", _by_hand, ":nvlink:4:2", "--nccl-tests NODES"),
    ("one_host_links.txt", _by_hand, ":nvlink:4:4", "--nccl-tests NODES"),
    ("mixed.txt", lambda t: _half_from(t, 1 << 20), ":nvlink:4", "type"),
    ("mixed_by_hand.txt", lambda t: _half_from(_by_hand(t), 4096 * 2), ":nvlink:4", "type"),
])
def test_bad_nccl_tests_input(tmp_path, monkeypatch, capsys, name, make, spec, field):
    monkeypatch.chdir(tmp_path)
    with open(NCCL_TESTS, encoding="utf-8") as handle:
        (tmp_path / name).write_text(make(handle.read()))
    before = _listing(tmp_path)
    code = main(["calibrate", "--nccl-tests", f"{tmp_path / name}{spec}", "--links-only", "--out", str(tmp_path / "c.json")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and name in err and field in err, err
    assert _listing(tmp_path) == before


def test_nccl_tests_that_agree_with_their_header_are_fitted(tmp_path, capsys):
    # the controls of the cases above: the same rows given as what their header says
    by_hand = tmp_path / "by_hand.txt"
    with open(NCCL_TESTS, encoding="utf-8") as handle:
        by_hand.write_text(_by_hand(handle.read()))
    out = tmp_path / "c.json"
    assert main(["calibrate", "--nccl-tests", f"{by_hand}:nvlink:4:1", "--links-only", "--out", str(out)]) == 0, \
        capsys.readouterr().err
    # the harness's own file names no host ("host" for every rank); its launch's name says its nodes
    # (nvlink_w4_2: one; a file of emulated nodes is named socket_2x1_0), given as 2 it is refused
    # (tests/test_newcomer_inputs.py)
    assert main(["calibrate", "--nccl-tests", f"{NCCL_TESTS}:nvlink:4:1", "--links-only", "--out", str(out)]) == 0, \
        capsys.readouterr().err


def test_default_caps_that_were_not_measured_are_named_and_typed_caps_are_refused(tmp_path, capsys):
    # ddpsim measure --plan quick measures caps 5 and 25: the default 5,50 fits on 5 and says so
    folder = make_campaign(str(tmp_path / "quick"))
    path = os.path.join(folder, "ddp_runs.jsonl")
    lines = _lines(path)
    kept = [line for line in lines if json.loads(line)["bucket_cap_mb"] != 50]
    assert len(kept) == len(lines) - 1
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(kept) + "\n")
    out = tmp_path / "cal.json"
    assert main(["calibrate", folder, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "fitted on the caps 5 MB of the default 5, 50 (no plain run at 50 MB)" in err
    assert json.loads(out.read_text())["calibration_subset"] == {"bucket_cap_mb": [5.0]}
    out.unlink()
    assert main(["calibrate", folder, "--calibration-caps", "5,50", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--calibration-caps" in err and "no plain DDP run at 50 MB" in err
    assert not out.exists()


def test_a_calibration_with_a_non_finite_value_is_never_written(tmp_path):
    from ddpsim.errors import ScenarioError
    from ddpsim.fitting.fit import write_calibration

    out = tmp_path / "cal.json"
    with pytest.raises(ScenarioError) as err:
        write_calibration(str(out), {}, {"nvlink": {"bucket_launch_s": float("nan")}}, {"noise": {}})
    assert err.value.field == "overheads.nvlink.bucket_launch_s" and err.value.file == str(out)
    assert os.listdir(tmp_path) == []
    write_calibration(str(out), {}, {"nvlink": {"bucket_launch_s": 1e-5}}, {"noise": {}})  # the control
    assert json.loads(out.read_text())["overheads"]["nvlink"]["bucket_launch_s"] == 1e-5
