"""Every JSON document the CLI writes validates against its shipped schema (ddpsim/schemas), carries its version
and ddpsim's, and a field added to an output without its schema fails here. The documents come from the real
CLI (``ddpsim.cli.main``) on small scenarios; stdout of ``--json`` must be one JSON object and nothing else."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import re
import shutil

import pytest

import ddpsim
from ddpsim import schemas
from ddpsim.cli import main
from ddpsim.jsonfile import open_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICKSTART = os.path.join(ROOT, "scenarios", "quickstart.yaml")
DATA = os.path.join(ROOT, "validation", "data")


def _valid(kind: str, data: dict) -> dict:
    pytest.importorskip("jsonschema")  # the test extra installs it (pyproject)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in schemas.validator(kind).iter_errors(data)]
    assert not errors, f"{kind}: " + "; ".join(errors[:5])
    return data


def _json_out(capsys, *argv: str, rc: int = 0) -> dict:
    """The command's stdout, which must parse as one JSON object whole (nothing printed beside it)."""
    capsys.readouterr()
    assert main(list(argv)) == rc
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    """One small sweep shared by the tests below: two caps of the quickstart, inline (one worker)."""
    out = tmp_path_factory.mktemp("sweep") / "caps"
    html = out.parent / "copy.html"
    assert main(["sweep", QUICKSTART, "--grid", "ddp.bucket_cap_mb=5,default", "--out", str(out), "--workers", "1",
                 "--html", str(html)]) == 0
    return out


# ---- every output, from the CLI, against its schema ----

def test_run_result_v3_has_the_resolved_scenario_and_names(capsys):
    data = _valid("run-result", _json_out(capsys, "run", QUICKSTART, "--json", "--set", "cluster.inter_node.latency=7us"))
    assert data["kind"] == "run-result" and data["schema_version"] == 3
    # pyproject's version, which the package's __version__ repeats
    assert data["ddpsim_version"] == ddpsim.__version__
    scenario = data["resolved_scenario"]
    # the file's values in SI (quickstart.yaml: 400Gbps, 450GB/s, 3us), the --set, and a default it left out
    assert scenario["cluster"]["inter_node"]["nic_bandwidth_Bps"] == pytest.approx(400e9 / 8)
    assert scenario["cluster"]["intra_node"]["bandwidth_Bps"] == pytest.approx(450e9)
    assert scenario["cluster"]["intra_node"]["latency_s"] == pytest.approx(3e-6)
    assert scenario["cluster"]["inter_node"]["latency_s"] == pytest.approx(7e-6)
    assert scenario["overheads"]["bucket_launch_s"] == pytest.approx(40e-6)  # OverheadSpec's documented default
    assert scenario["workload"] == {"model": "resnet50", "batch_size": 64, "precision": "fp32", "seq_len": None,
                                    "optimizer": "auto", "memory_format": "channels_first",
                                    "activation_checkpointing": "none", "compute_efficiency": None}
    # value_sources: keys name inputs; a value never hides in a key
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", key) for key in data["value_sources"])


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(os.path.join(ROOT, "scenarios")) if n.endswith(".yaml")))
def test_every_shipped_scenarios_result_validates(name, capsys):
    _valid("run-result", _json_out(capsys, "run", os.path.join(ROOT, "scenarios", name), "--json"))


def test_every_value_source_an_option_adds_is_in_the_schema(capsys):
    """A hook, accumulation, find_unused_parameters and a calibration with noise each name their inputs."""
    data = _valid("run-result", _json_out(
        capsys, "run", QUICKSTART, "--json", "--set", "ddp.comm_hook=bf16", "--set", "ddp.grad_accumulation_steps=2",
        "--set", "ddp.find_unused_parameters=true",
        "--set", f"calibration={os.path.join(ROOT, 'ddpsim', 'calibration', 'shipped', 'x4-multinode-h100.json')}"))
    sources = data["value_sources"]
    assert {"compress_hook", "accumulation_micro_steps", "autograd_nodes", "step_time_spread"} <= set(sources)
    # the count that used to sit in the key leads the value
    assert re.match(r"\d+ nodes \(find_unused_parameters' walk\): ", sources["autograd_nodes"])


def test_a_sharded_run_result_validates(capsys):
    data = _valid("run-result", _json_out(capsys, "run", QUICKSTART, "--set", "parallel.strategy=zero3", "--json"))
    assert data["strategy"] == "zero3" and data["collectives"] and data["buckets"] == []


def test_bucket_parameter_names_are_the_torch_models_own(tmp_path, capsys):
    pytest.importorskip("torch")
    from tests.fixtures_models import tiny_lm

    path = tmp_path / "s.yaml"
    path.write_text("workload: {model: 'torch:tests.fixtures_models:tiny_lm', batch_size: 2}\n"
                    "cluster: {gpu: H100-SXM, nodes: 1, gpus_per_node: 2}\nddp: {bucket_cap_mb: 0.001}\n")
    data = _valid("run-result", _json_out(capsys, "run", str(path), "--json"))
    names = [n for b in data["buckets"] for n in b["param_names"]]
    # DDP reduces each trainable tensor once (the tied head shares the embedding's): torch's own list
    expected = [n for n, p in tiny_lm().named_parameters() if p.requires_grad]
    assert sorted(names) == sorted(expected)
    assert all(len(b["param_names"]) == b["n_params"] for b in data["buckets"])


def test_bucket_parameter_names_of_a_profile_are_the_profiles(tmp_path, capsys):
    profile = os.path.join(DATA, "h100x2-profiles-2026-11-26o", "profiles")
    name = sorted(os.listdir(profile))[0]
    with open(os.path.join(profile, name)) as handle:
        measured = json.load(handle)
    params = measured["params"]
    path = tmp_path / "s.yaml"
    path.write_text(f"workload: {{model: 'profile:{os.path.join(profile, name)}', batch_size: {measured['batch_size']}, "
                    f"precision: {measured['precision']}}}\n"
                    "cluster: {gpu: H100-SXM, nodes: 1, gpus_per_node: 2}\n")
    data = _json_out(capsys, "run", str(path), "--json")
    names = sorted(n for b in data["buckets"] for n in b["param_names"])
    assert names == sorted(p["name"] for p in params)


def test_planning_outputs_validate(tmp_path, capsys):
    _valid("tune-buckets", _json_out(capsys, "tune-buckets", QUICKSTART, "--candidates", "5,25", "--json"))
    strategy = _valid("tune-strategy", _json_out(capsys, "tune-strategy", QUICKSTART, "--json"))
    assert strategy["resolved_scenario"]["cluster"]["nodes"] == 2
    _valid("scale", _json_out(capsys, "scale", QUICKSTART, "--nodes", "1,2", "--json"))
    variability = _valid("variability", _json_out(capsys, "variability", QUICKSTART, "--iterations", "3", "--json",
                                                  "--out", str(tmp_path / "v")))
    assert json.loads((tmp_path / "v" / "variability.json").read_text()) == variability


def test_sweep_outputs_validate(sweep_dir, capsys):
    data = _valid("sweep", json.loads((sweep_dir / "sweep.json").read_text()))
    assert data["counts"] == {"points": 2, "simulated": 2, "reused": 0, "failed": 0}
    for point in (sweep_dir / "points").iterdir():
        record = _valid("sweep-point", json.loads(point.read_text()))
        _valid("run-result", record["result"])
    # --json on the rerun: the same points, now reused, on stdout alone
    again = _valid("sweep", _json_out(capsys, "sweep", QUICKSTART, "--grid", "ddp.bucket_cap_mb=5,default",
                                      "--out", str(sweep_dir), "--workers", "1", "--json"))
    assert again["counts"]["reused"] == 2 and again["points"] == [dict(p, cached=True) for p in data["points"]]


def test_validate_and_calibrate_outputs_validate(tmp_path, capsys):
    campaign = os.path.join(DATA, "h100x2-profiles-2026-11-26o")
    calibration = os.path.join(ROOT, "ddpsim", "calibration", "shipped", "x4-h200.json")
    report = _json_out(capsys, "validate", campaign, "--calibration", calibration, "--json", "--allow-other-gpu", rc=1)
    _valid("validation", report)
    nccl = os.path.join(DATA, "h200x4-2026-11-26")
    out = tmp_path / "links.json"
    printed = _valid("calibration", _json_out(
        capsys, "calibrate", "--links-only", "--out", str(out),
        "--nccl-tests", f"{os.path.join(nccl, 'allreduce_nvlink_w2.txt')}:nvlink:2",
        "--nccl-tests", f"{os.path.join(nccl, 'allreduce_nvlink_w4.txt')}:nvlink:4", "--json"))
    assert json.loads(out.read_text()) == printed  # --json prints what it wrote
    recentred = tmp_path / "probed.json"
    _valid("calibration", _json_out(capsys, "calibrate", os.path.join(DATA, "h200x2-measure-2026-11-27b"),
                                    "--recentre", os.path.join(ROOT, "ddpsim", "calibration", "shipped", "pooled-h200.json"),
                                    "--out", str(recentred), "--json"))
    # what ddpsim writes, it reads back; and the shipped calibrations (older: no version fields) still validate
    from ddpsim.calibration.file import read_calibration

    read_calibration(str(out))
    shipped = os.path.join(ROOT, "ddpsim", "calibration", "shipped")
    assert len(os.listdir(shipped)) >= 7
    for name in sorted(os.listdir(shipped)):
        with open(os.path.join(shipped, name)) as handle:
            _valid("calibration", json.load(handle))


def test_validate_fsdp_is_one_object(tmp_path, capsys):
    source = os.path.join(DATA, "h200x2-fsdp-2026-11-27", "fsdp_runs.jsonl")
    with open_data(source) as handle:
        first = [line for line in handle if line.strip()][:2]
    (tmp_path / "fsdp_runs.jsonl").write_text("".join(first))
    data = _valid("validate-fsdp", _json_out(capsys, "validate-fsdp", str(tmp_path), "--json"))
    assert len(data["runs"]) == 2 and data["calibration"] is None


def test_the_measure_document_of_a_campaign_validates():
    from ddpsim.cli.measure_json import measure_document

    folder = os.path.join(DATA, "h200x2-measure-2026-11-27b")
    with open(os.path.join(folder, "plan.json")) as handle:
        plan = json.load(handle)
    data = _valid("measure", measure_document(folder, plan, 0, 1.0))
    with open_data(os.path.join(folder, "ddp_runs.jsonl")) as handle:
        runs = [json.loads(line) for line in handle if line.strip()]
    assert sum(data["ddp_runs"].values()) == len(runs)


def test_every_subcommand_has_json():
    from ddpsim.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    lacking = [name for name, p in sub.choices.items()
               if not any("--json" in a.option_strings for a in p._actions)]
    assert not lacking


# ---- the schemas themselves ----

def test_the_schemas_are_valid_and_closed():
    jsonschema = pytest.importorskip("jsonschema")
    for name in (*schemas.KINDS, *schemas.PARTS):
        schema = schemas.schema(name)
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$id"] == schemas.URN + name

        open_objects = [where for where, node in _nodes(schema, "")
                        if "properties" in node and node.get("additionalProperties") is not False]
        # an object that lists its fields refuses others: a new field must reach the schema
        assert not open_objects, f"{name}: {open_objects}"


def _nodes(node, where):
    """Every (path, object) inside a schema."""
    if isinstance(node, dict):
        yield where, node
        for key, value in node.items():
            yield from _nodes(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _nodes(value, f"{where}/{i}")


def test_a_field_the_schema_does_not_know_fails(capsys):
    pytest.importorskip("jsonschema")
    data = _json_out(capsys, "run", QUICKSTART, "--json")
    data["new_field_s"] = 1.0
    assert not schemas.validator("run-result").is_valid(data)
    data.pop("new_field_s")
    data["buckets"][0]["new_field"] = 1
    assert not schemas.validator("run-result").is_valid(data)
    data["buckets"][0].pop("new_field")
    data["value_sources"]["new input (with 3 values)"] = "somewhere"
    assert not schemas.validator("run-result").is_valid(data)


def test_the_resolved_scenario_schema_is_the_scenarios():
    # regenerate with `python -m ddpsim.schemas` after a scenario field changes (and move the versions)
    assert schemas.schema("resolved-scenario") == json.loads(json.dumps(schemas.resolved_scenario_schema()))


def _fields(node, where=""):
    """Every property path of a schema: what a version stands for."""
    found = []
    if isinstance(node, dict):
        for key, value in node.get("properties", {}).items():
            found.append(f"{where}/{key}")
            found += _fields(value, f"{where}/{key}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                found += _fields(node[key], f"{where}[]")
        for option in node.get("anyOf", []):
            found += _fields(option, where)
    return found


# The fields each version of each kind has (a digest of _fields). A change here means a field was added,
# removed or renamed: move that kind's schema_version, say what changed in docs/reference.md ("Output
# contracts"), then update its line.
FIELDS_AT_VERSION = {
    "run-result": (3, "4767482b0b60"),
    "sweep": (2, "91e089923235"),
    "sweep-point": (2, "39539896b787"),
    "scale": (2, "3a014881e068"),
    "variability": (2, "815bac9dcabf"),
    "tune-buckets": (2, "2c766b116c5d"),
    "tune-strategy": (2, "83c1a8b7dced"),
    "validate-fsdp": (1, "a031467bad5b"),
    "validation": (2, "bddfa1da253f"),
    "calibration": (3, "4e5e804f8506"),
    "measure": (1, "ffdbbade2d06"),
}


def test_a_version_stands_for_one_set_of_fields():
    assert set(FIELDS_AT_VERSION) == set(schemas.KINDS)
    changed = []
    for kind, (version, digest) in FIELDS_AT_VERSION.items():
        fields = sorted(_fields(schemas.schema(kind)))
        now = hashlib.sha256("\n".join(fields).encode()).hexdigest()[:12]
        if schemas.schema_version(kind) != version or now != digest:
            changed.append(f"{kind}: version {schemas.schema_version(kind)}, fields {now}")
    assert not changed, changed


def test_the_reference_lists_every_kind_at_its_version():
    with open(os.path.join(ROOT, "docs", "reference.md"), encoding="utf-8") as handle:
        text = handle.read()
    for kind in schemas.KINDS:
        assert re.search(rf"\| `{kind}` \| {schemas.schema_version(kind)} \|", text), kind


# ---- the HTML report, the DataFrame and Parquet ----

def _inline_images(page: str) -> list[bytes]:
    assert "<script" not in page and "<link" not in page
    assert not re.search(r"""(src|href)=["'](?!data:)""", page)  # nothing fetched from elsewhere
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


def test_the_sweep_report_has_its_plots_inline(sweep_dir):
    page = (sweep_dir / "report.html").read_text()
    images = _inline_images(page)
    pngs = sorted(p for p in os.listdir(sweep_dir) if p.endswith(".png"))
    assert len(images) == len(pngs) == 2
    assert sorted(images) == sorted((sweep_dir / p).read_bytes() for p in pngs)
    assert (sweep_dir.parent / "copy.html").read_text() == page


def test_the_scale_report_has_its_plot_inline(tmp_path, capsys):
    page_file = tmp_path / "scale.html"
    assert main(["scale", QUICKSTART, "--nodes", "1,2", "--html", str(page_file), "--out", str(tmp_path / "o")]) == 0
    (image,) = _inline_images(page_file.read_text())
    assert image.startswith(b"\x89PNG\r\n\x1a\n")
    assert _inline_images((tmp_path / "o" / "report.html").read_text())[0] == \
        (tmp_path / "o" / "scaling_efficiency.png").read_bytes()


def _csv_rows(folder) -> list[dict]:
    with open(os.path.join(folder, "sweep.csv")) as handle:
        return list(csv.DictReader(handle))


def test_the_sweep_dataframe_holds_the_csvs_numbers(sweep_dir):
    pytest.importorskip("pandas")
    from ddpsim.planning.sweep_results import sweep_dataframe

    frame = sweep_dataframe(str(sweep_dir))
    rows = _csv_rows(sweep_dir)
    assert list(frame["point"]) == [r["point"] for r in rows]
    assert list(frame["step_time_s"]) == [float(r["step_time_s"]) for r in rows]
    assert list(frame.columns[:1]) == ["ddp.bucket_cap_mb"]


def test_the_sweep_parquet_holds_the_csvs_numbers(sweep_dir):
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(sweep_dir / "sweep.parquet").to_pylist()
    rows = _csv_rows(sweep_dir)
    assert [t["step_time_s"] for t in table] == [float(r["step_time_s"]) for r in rows]
    # 5 and "default" in one column: written as text, as the CSV has them
    assert [t["ddp.bucket_cap_mb"] for t in table] == [r["ddp.bucket_cap_mb"] for r in rows]


def test_without_pandas_the_helper_says_how_to_get_it(monkeypatch, sweep_dir):
    from ddpsim.planning.sweep_results import sweep_dataframe

    monkeypatch.setitem(__import__("sys").modules, "pandas", None)
    with pytest.raises(ImportError, match="pip install pandas"):
        sweep_dataframe(str(sweep_dir))


def test_without_pyarrow_the_sweep_writes_no_parquet(monkeypatch, tmp_path, sweep_dir):
    monkeypatch.setitem(__import__("sys").modules, "pyarrow", None)
    out = tmp_path / "again"
    shutil.copytree(sweep_dir / "points", out / "points")  # reused: no simulation
    assert main(["sweep", QUICKSTART, "--grid", "ddp.bucket_cap_mb=5,default", "--out", str(out)]) == 0
    assert (out / "sweep.json").exists() and not (out / "sweep.parquet").exists()


def test_measure_json_sends_the_campaigns_output_to_stderr(tmp_path, monkeypatch, capfd):
    """What the campaign and its launched processes print goes to stderr; stdout is the document alone."""
    import subprocess
    import sys

    from ddpsim.measure import cli as harness

    def campaign(argv):
        assert "--json" not in argv  # the harness never sees the flag
        print("[campaign] a progress line", flush=True)
        subprocess.run([sys.executable, "-c", "print('a launch writing to its stdout')"], check=True)
        (tmp_path / "plan.json").write_text(json.dumps({"plan": "probe", "models": ["resnet50"], "shapes": [],
                                                        "link_classes": ["nvlink"], "budget_s": 120.0, "devices": 1,
                                                        "cpu_dry_run": True}))
        return 0

    monkeypatch.setattr(harness, "main", campaign)
    assert main(["measure", "--out", str(tmp_path), "--json", "--plan", "probe"]) == 0
    out, err = capfd.readouterr()
    assert "a progress line" in err and "a launch writing to its stdout" in err
    assert _valid("measure", json.loads(out))["out"] == str(tmp_path)
