"""The bad-input corpus (tests/bad_inputs/corpus.yaml): every case exits 2 with one line on stderr
that names the file and the field, prints no traceback, and leaves nothing on disk.

Runs ``ddpsim.cli.main.main(argv)`` in-process: hundreds of cases in seconds.
"""

from __future__ import annotations

import os
import textwrap

import pytest
import yaml

from ddpsim.cli.main import main

CORPUS = yaml.safe_load(open(os.path.join(os.path.dirname(__file__), "bad_inputs", "corpus.yaml"), encoding="utf-8"))
BASE = textwrap.dedent(
    """
    workload: {model: mlp, batch_size: 4}
    cluster:
      gpu: H100-SXM
      nodes: 1
      gpus_per_node: 2
      intra_node: {type: nvswitch, bandwidth: 450GB/s, latency: 3us}
    ddp: {bucket_cap_mb: 25}
    """
)
# how each scenario subcommand is called in the corpus: the smallest useful command line
COMMANDS = {
    "run": ["run", "{scenario}", "--out", "{out}"],
    "sweep": ["sweep", "{scenario}", "--grid", "ddp.bucket_cap_mb=5,25", "--out", "{out}", "--workers", "1"],
    "tune-buckets": ["tune-buckets", "{scenario}", "--candidates", "5,25", "--out", "{out}"],
    "scale": ["scale", "{scenario}", "--nodes", "1,2", "--out", "{out}"],
    "variability": ["variability", "{scenario}", "--iterations", "3", "--out", "{out}"],
}


def _cases() -> list:
    cases = []
    for i, case in enumerate(CORPUS["set"]):
        for command in COMMANDS:
            if command in case.get("skip", ()):
                continue
            argv = list(COMMANDS[command])
            for item in case["set"]:
                argv += ["--set", item]
            cases.append(pytest.param(argv, BASE, case["field"], case.get("file", True),
                                      id=f"set{i}-{command}-{case['set'][0]}"))
    for i, case in enumerate(CORPUS["file"]):
        for command in ("run", "sweep"):
            cases.append(pytest.param(list(COMMANDS[command]), case["text"], case["field"], True,
                                      id=f"file{i}-{command}"))
    for i, case in enumerate(CORPUS["args"]):
        cases.append(pytest.param(case["args"], BASE, case["field"], case.get("file", True),
                                  id=f"args{i}-{'-'.join(case['args'][:1])}-{case['field']}"))
    return cases


CASES = _cases()


def test_the_corpus_is_large_enough():
    assert len(CASES) >= 200


def _listing(folder) -> set[str]:
    return {os.path.relpath(os.path.join(root, name), folder)
            for root, dirs, files in os.walk(folder) for name in dirs + files}


@pytest.mark.parametrize("argv, scenario_text, field, names_file", CASES)
def test_bad_input(tmp_path, monkeypatch, capsys, argv, scenario_text, field, names_file):
    monkeypatch.chdir(tmp_path)  # plots written without --out would land here
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(scenario_text)
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00\x81 not text")
    before = _listing(tmp_path)
    paths = {"scenario": str(scenario), "out": str(tmp_path / "out"), "missing": str(tmp_path / "missing.yaml"),
             "folder": str(tmp_path / "a-folder"), "binary": str(tmp_path / "binary.yaml")}
    args = [a.format(**paths) for a in argv]

    code = main(args)
    captured = capsys.readouterr()

    assert code == 2, captured.err
    assert captured.err.startswith("ddpsim: error: ") and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err
    assert field in captured.err
    if isinstance(names_file, str):
        assert names_file in captured.err
    elif names_file:
        named = [p for key, p in paths.items() if key != "out" and p in args]
        assert any(p in captured.err for p in named), captured.err
    assert captured.out == ""
    assert _listing(tmp_path) == before  # no output folder, plot, staging folder or temporary file
