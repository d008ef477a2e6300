"""docs/accuracy.md is what the evidence pipeline makes of the committed stage outputs, and a small stage
recomputed from validation/data gives its committed output: data, code and document cannot drift apart."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from validation.evidence.__main__ import main
from validation.evidence.assemble import ROOT, assemble, read_manifest
from validation.evidence.figures import FigureError
from validation.evidence.reports import RunRow, mean_max
from validation.evidence.stage import stage_text

MANIFEST = read_manifest(ROOT)


def _committed(path: str) -> str:
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        return handle.read()


def test_accuracy_md_is_current():
    # the fast part of `make evidence`: template + manifest + committed stage outputs
    assert assemble(ROOT, MANIFEST) == _committed(MANIFEST["output"]), (
        "docs/accuracy.md is stale: run `make evidence-fast` (or `make evidence` after changing data or code)")


# stages that take about a second each: recomputed here from validation/data and the committed calibrations
@pytest.mark.parametrize("name", ["heldout-mlp-wide", "heldout-h200x4-d", "uncalibrated-d", "find-unused-traces",
                                  "multinode-noise", "memory-published"])
def test_small_stage_reproduces_its_committed_output(name, monkeypatch):
    monkeypatch.chdir(ROOT)  # reports name their data by repository-relative path
    spec = MANIFEST["stages"][name]
    assert stage_text(name, spec) == _committed(spec["output"])


def test_every_figure_is_accounted_for():
    stages = MANIFEST["stages"]
    for figure in MANIFEST["figures"]:
        assert figure["status"] in ("generated", "template"), figure["id"]
        if figure["status"] == "template":
            assert figure["why"], figure["id"]  # a figure not regenerated says why
            continue
        assert figure["calibration_saw"] and figure["held_out"], figure["id"]
        rows = figure.get("rows", [])
        named = ({row.get("stage") for row in rows} | {row.get("uncalibrated_stage") for row in rows}) - {None}
        if "stage" in figure:
            named.add(figure["stage"])
        for stage in named:
            assert os.path.exists(os.path.join(ROOT, stages[stage]["output"])), (figure["id"], stage)
    for name, spec in stages.items():
        assert spec["calibration_saw"] and spec["held_out"], name
        for folder in spec["data"]:
            assert os.path.isdir(os.path.join(ROOT, folder)), (name, folder)


def test_mean_from_step_times_max_from_printed_errors():
    rows = [RunRow("m", "none", "nvlink", 2, 25, "l", 10.00, 11.00, 10.0),  # +10%
            RunRow("m", "none", "nvlink", 2, 25, "l", 20.00, 19.00, -5.0)]  # -5%
    assert mean_max(rows) == pytest.approx((7.5, 10.0))


def _copy_root(tmp_path, manifest):
    """A repository root holding the template, the manifest and the stage outputs the figures read."""
    for stage in manifest["stages"].values():
        src = os.path.join(ROOT, stage["output"])
        if os.path.exists(src):
            os.makedirs(os.path.dirname(tmp_path / stage["output"]), exist_ok=True)
            shutil.copy(src, tmp_path / stage["output"])
    shutil.copy(os.path.join(ROOT, manifest["template"]), tmp_path / manifest["template"])
    os.makedirs(tmp_path / "validation" / "evidence", exist_ok=True)
    (tmp_path / "validation" / "evidence" / "manifest.json").write_text(json.dumps(manifest))
    return tmp_path


def test_a_changed_stage_output_changes_the_document(tmp_path):
    os.makedirs(tmp_path / "docs")
    root = _copy_root(tmp_path, MANIFEST)
    report = root / MANIFEST["stages"]["cross-model"]["output"]
    text = report.read_text()
    old = "| nvlink     | 42   | 23.7           | 73.7          |"
    assert old in text
    report.write_text(text.replace(old, "| nvlink     | 42   | 99.9           | 73.7          |"))
    assert "| | 42 | 99.9% | 73.7% |" not in assemble(str(root), MANIFEST)  # the split label is on the row
    assert "| leave one model out (A: 3 models) | NVLink | 42 | 99.9% | 73.7% | 6.1% |" in assemble(str(root), MANIFEST)


def test_a_marker_without_a_generated_figure_is_refused(tmp_path):
    os.makedirs(tmp_path / "docs")
    root = _copy_root(tmp_path, MANIFEST)
    template = root / MANIFEST["template"]
    template.write_text(template.read_text() + "\n{{figure:no-such-figure}}\n")
    with pytest.raises(FigureError, match="no-such-figure"):
        assemble(str(root), MANIFEST)


def test_unknown_stage_exits_2(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # main() runs from the repository root
    assert main(["--stage", "no-such-stage"]) == 2
    assert "no stage no-such-stage" in capsys.readouterr().err


def test_inline_values_read_the_report(tmp_path):
    """A number in the prose follows its report: the cross-host cap advice is the report's line, and a
    campaign's mean is recomputed from that campaign's rows (two rows written here: +10% and -20%)."""
    from validation.evidence.figures import Stages, inline_value

    report = tmp_path / "r.md"
    report.write_text("# ddpsim validation\n\n"
                      "| model | option | link | GPUs | cap MB | launch | measured ms | predicted ms | error % |\n"
                      "|---|---|---|---|---|---|---|---|---|\n"
                      "| m | none | nvlink | 4 | 25 | c1/nvlink_w4_0 | 10.00 | 11.00 | +10.0 |\n"
                      "| m | none | nvlink | 4 | 25 | c1/nvlink_w4_1 | 10.00 | 8.00 | -20.0 |\n"
                      "| m | none | nvlink | 4 | 25 | c2/nvlink_w4_0 | 10.00 | 10.10 | +1.0 |\n\n"
                      "| link class | runs | mean abs err % | max abs err % | mean err % | launch | ar |\n"
                      "|---|---|---|---|---|---|---|\n"
                      "| nvlink | 3 | 10.3 | 20.0 | -3.0 | - | - |\n\n"
                      "bucket-cap recommendation within 5% of the measured best: 2 of 3 groups\n")
    stages = Stages(str(tmp_path), {"stages": {"s": {"output": "r.md"}}})
    assert inline_value("cap_advice", ["s"], stages) == "2 of 3"
    assert inline_value("campaign_mean", ["s", "c1"], stages) == "15.0"
    assert inline_value("campaign_max", ["s", "c1"], stages) == "20.0"
    assert inline_value("campaign_runs", ["s", "c2"], stages) == "1"
    assert inline_value("spread", ["s", "nvlink"], stages) == "-"
    with pytest.raises(FigureError, match="no layouts line"):
        inline_value("layouts", ["s"], stages)


def test_the_readme_accuracy_table_quotes_the_generated_document():
    # the README's small table is a copy: every mean / max pair in it must be a row of docs/accuracy.md
    import re

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    section = readme.split("## How accurate it is", 1)[1].split("\n## ", 1)[0]
    pairs = re.findall(r"(\d+\.\d)% / (\d+\.\d)%", section)
    assert len(pairs) >= 9
    accuracy = open(os.path.join(root, "docs", "accuracy.md"), encoding="utf-8").read()
    missing = [p for p in pairs if f"| {p[0]}% | {p[1]}% |" not in accuracy]
    assert not missing, f"README pairs not in docs/accuracy.md (run make evidence, then copy): {missing}"
