"""Bad traces and profiles never become a prediction (tests/bad_inputs/trace_corpus.yaml).

Each case edits a copy of a good file (a hand-built GPU trace, a measured profile) and runs ``ddpsim run``
on a scenario that names it, in-process: exit code 2, one line on stderr naming the file and the field,
no traceback, nothing written. The unedited files run with exit 0, so every refusal is the edit's doing.
"""

from __future__ import annotations

import copy
import gzip
import json
import os

import pytest
import yaml

from ddpsim.cli.main import main

HERE = os.path.dirname(os.path.abspath(__file__))
TRACE = os.path.join(HERE, "bad_inputs", "gpu_trace.json")
PROFILE = os.path.join(os.path.dirname(HERE), "validation", "data", "h100x2-2026-11-26", "profiles", "mlp-heavy.json")
CORPUS = yaml.safe_load(open(os.path.join(HERE, "bad_inputs", "trace_corpus.yaml"), encoding="utf-8"))["cases"]
CLUSTER = "cluster: {gpu: H100-SXM, nodes: 1, gpus_per_node: 2}\n"


def _set(record: dict, dotted: str, value) -> None:
    """Set (or with DELETE remove) ``a.b.3.c`` inside ``record``; "args.Input Dims" is one key of args."""
    head, _, rest = dotted.partition(".")
    parts = [head, rest] if head == "args" and rest else dotted.split(".")
    target = record
    for part in parts[:-1]:
        target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
    last = parts[-1]
    if value == "DELETE":
        del target[last]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value


def _write_case(case: dict, folder) -> tuple[str, str]:
    """(the scenario's path, the edited file's path)."""
    if "profile" in case:
        data = json.load(open(PROFILE, encoding="utf-8"))
        for key, value in case["profile"].items():
            _set(data, key, value)
        path = folder / "p.json"
        path.write_text(json.dumps(data))
        model, batch = "profile:p.json", 32
    else:
        data = json.load(open(TRACE, encoding="utf-8"))
        for index, edits in case.get("trace", {}).items():
            for key, value in edits.items():
                _set(data["traceEvents"][index], key, value)
        if "all" in case:
            edits = dict(case["all"])
            cat = edits.pop("cat")
            for event in data["traceEvents"]:
                if event.get("cat") == cat and "nccl" not in event["name"]:
                    event.update(edits)
        if "capture" in case:
            capture = case["capture"]
            data["ddpsim_capture"] = capture if not isinstance(capture, dict) else {
                "model": "t", "batch_size": 4, "precision": "fp32", **capture}
        text = json.dumps(data).encode()
        if "gzip" in case:
            packed = bytearray(gzip.compress(text))
            if case["gzip"] == "corrupt":
                packed[20:60] = b"\x00" * 40  # the header stays right, the deflate stream does not
            else:
                packed = packed[: len(packed) // 2]
            path = folder / "t.json.gz"
            path.write_bytes(bytes(packed))
            model = "trace:t.json.gz"
        else:
            path = folder / "t.json"
            path.write_bytes(text)
            model = "trace:t.json"
        batch = 4
    scenario = folder / "s.yaml"
    scenario.write_text(f"workload: {{model: '{model}', batch_size: {batch}}}\n" + CLUSTER)
    return str(scenario), str(path)


def _listing(folder) -> set[str]:
    return {os.path.relpath(os.path.join(root, name), folder)
            for root, dirs, files in os.walk(folder) for name in dirs + files}


@pytest.mark.parametrize("kind", ["trace", "profile", "gzip"])
def test_the_unedited_files_run(tmp_path, capsys, kind):
    case = {"trace": {}, "profile": {"profile": {}}, "gzip": {"gzip": "none"}}[kind]
    if kind == "gzip":
        scenario, path = _write_case({}, tmp_path)
        with open(path, "rb") as handle:
            packed = gzip.compress(handle.read())
        (tmp_path / "t.json.gz").write_bytes(packed)
        (tmp_path / "s.yaml").write_text("workload: {model: 'trace:t.json.gz', batch_size: 4}\n" + CLUSTER)
    else:
        scenario, path = _write_case(case, tmp_path)
    assert main(["run", scenario, "--json"]) == 0, capsys.readouterr().err


def test_the_hand_built_trace_predicts_its_own_compute():
    """The base trace's compute step is its kernels' span, 350 us (tests/test_trace.py works it out by hand):
    a kernel dropped for a bad field would shorten it, which is why such a trace is refused instead."""
    from ddpsim.workload.trace import read_trace

    assert read_trace(TRACE).profile["step_s"] == pytest.approx(350e-6)


@pytest.mark.parametrize("case", CORPUS, ids=[f"{k}-{c['field']}" for k, c in enumerate(CORPUS)])
def test_a_bad_trace_or_profile_is_refused_in_one_line(tmp_path, monkeypatch, capsys, case):
    monkeypatch.chdir(tmp_path)
    scenario, path = _write_case(copy.deepcopy(case), tmp_path)
    before = _listing(tmp_path)
    code = main(["run", scenario, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("ddpsim: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert path in err, err
    assert case["field"] in err, err
    assert _listing(tmp_path) == before
