"""Leave-one-out validation (``ddpsim validate --cross``) and what validate does with every run record.

The data is a slice of a committed GPU campaign, copied and edited in a temporary folder: the
expected facts come from the records themselves (which model, which launch), never from ddpsim.
"""

import json
import os
import shutil

import pytest

from ddpsim.cli import main
from ddpsim.errors import ScenarioError
from ddpsim.fitting.calibrate import calibrate, load_measurements
from ddpsim.fitting.measurements import Profiles
from ddpsim.fitting.validate import cross_validate, validate
from ddpsim.jsonfile import data_path, open_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "validation", "data")


def _campaign(tmp_path, name, keep, edit=None, folder="camp"):
    """A copy of campaign ``name`` with only the runs ``keep`` accepts (and ``edit`` applied)."""
    src = os.path.join(DATA, name)
    dst = tmp_path / folder
    dst.mkdir()
    shutil.copytree(os.path.join(src, "profiles"), dst / "profiles")
    shutil.copy(str(data_path(os.path.join(src, "allreduce.jsonl"))), dst)
    lines = []
    with open_data(os.path.join(src, "ddp_runs.jsonl")) as handle:
        for line in handle:
            run = json.loads(line)
            if keep(run):
                lines.append(json.dumps(edit(run) if edit else run))
    (dst / "ddp_runs.jsonl").write_text("\n".join(lines) + "\n")
    return str(dst)


def _plain_nvlink(models):
    return lambda r: r["transport"] == "nvlink" and r["model"] in models and r.get("comm_hook") != "timing"


def test_leave_one_model_out_never_sees_the_held_out_model(tmp_path):
    # the held-out model's measured steps doubled: if its runs leaked into its fold's fit, its
    # predictions would move; they must not change at all (the other model: mlp-heavy, the cheapest to fit)
    models = {"resnet50", "mlp-heavy"}
    plain = _campaign(tmp_path, "h100x2-2026-11-26", _plain_nvlink(models))

    def doubled(run):
        return {**run, "step_s_median": 2 * run["step_s_median"]} if run["model"] == "resnet50" else run

    edited = _campaign(tmp_path, "h100x2-2026-11-26", _plain_nvlink(models), doubled, folder="edited")
    # each fold fits on the other model's cap-50 run: a leaked run of the held-out model would be in it
    a = cross_validate([plain], "model", [50])
    b = cross_validate([edited], "model", [50])
    assert {r.fold for r in a.rows} == models and all(r.fold == r.model for r in a.rows)
    pred_a = {(r.model, r.bucket_cap_mb): r.predicted_s for r in a.rows}
    pred_b = {(r.model, r.bucket_cap_mb): r.predicted_s for r in b.rows}
    for (model, cap), predicted in pred_a.items():
        if model == "resnet50":
            assert pred_b[(model, cap)] == predicted
    # the other model's fold did fit on the doubled runs, so some of its predictions moved
    assert any(pred_b[k] != pred_a[k] for k in pred_a if k[0] == "mlp-heavy")
    with open_data(os.path.join(plain, "ddp_runs.jsonl")) as handle:
        recorded = [json.loads(line)["model"] for line in handle]
    counts = {m: recorded.count(m) for m in models}
    for fold in a.folds:
        assert fold["runs"] == counts[fold["held_out"]]
        assert fold["training_runs"] == sum(counts.values()) - counts[fold["held_out"]]


def test_leave_one_host_out_drops_the_hosts_own_sweeps(tmp_path):
    keep = _plain_nvlink({"resnet50"})
    one = _campaign(tmp_path, "h100x2-2026-11-26", keep, folder="hostA")
    two = _campaign(tmp_path, "h200x2-2026-11-26", keep, folder="hostB")
    v = cross_validate([one, two], "host", [5, 50])
    assert {r.fold for r in v.rows} == {"hostA", "hostB"}
    assert all(r.fold == r.host for r in v.rows)
    # each fold fitted its links on the other host's sweeps only: as many as that host's file holds
    sweeps = {}
    for folder, path in (("hostA", one), ("hostB", two)):
        with open_data(os.path.join(path, "allreduce.jsonl")) as handle:
            sweeps[folder] = sum(1 for line in handle if line.strip() and json.loads(line).get("status", "ok") == "ok")
    other = {"hostA": "hostB", "hostB": "hostA"}
    assert all(f["training_sweeps"] == sweeps[other[f["held_out"]]] for f in v.folds)


def test_cross_needs_two_parts(tmp_path):
    only = _campaign(tmp_path, "h100x2-2026-11-26", _plain_nvlink({"resnet50"}))
    assert main(["validate", only, "--cross", "model"]) == 2


def test_unknown_run_field_is_refused_with_its_name(tmp_path, capsys):
    camp = _campaign(tmp_path, "h100x2-2026-11-26", _plain_nvlink({"resnet50"}),
                     lambda r: {**r, "activation_checkpointing": True})
    assert main(["validate", camp]) == 2
    err = capsys.readouterr().err
    assert "activation_checkpointing" in err and "ddp_runs.jsonl" in err and err.count("\n") == 1


def test_runs_not_predicted_are_counted_with_the_reason(tmp_path):
    src = os.path.join(DATA, "h100x2-2026-11-26", "ddp_runs.jsonl")
    with open_data(src) as handle:
        records = [json.loads(line) for line in handle]
    timing = sum(r.get("comm_hook") == "timing" for r in records)
    assert timing > 0
    camp = _campaign(tmp_path, "h100x2-2026-11-26", lambda r: True,
                     lambda r: {**r, "status": "failed", "error": "OOM"} if r["bucket_cap_mb"] == 200 else r)
    failed = sum(r["bucket_cap_mb"] == 200 for r in records)
    v = validate([camp], None)
    reasons = [reason for _run, reason in v.skipped]
    assert sum("timing hook" in r for r in reasons) == sum(
        r.get("comm_hook") == "timing" and r["bucket_cap_mb"] != 200 for r in records)
    assert sum("OOM" in r for r in reasons) == failed
    assert len(v.rows) + len(v.skipped) == len(records)


def test_recorded_options_reach_the_prediction(tmp_path):
    # accumulation over 4 micro-batches: the measured step holds 4 forward+backward passes, and so
    # must the prediction (it was predicted as one micro-step before)
    camp = _campaign(tmp_path, "h200x4-options-2026-11-26",
                     lambda r: r["status"] == "ok" and r["transport"] == "nvlink" and r["model"] == "resnet50"
                     and r["bucket_cap_mb"] == 25 and r["variant"] in ("none", "accum4", "fp16"))
    v = validate([camp], None)
    by_option = {r.option: r for r in v.rows}
    assert set(by_option) == {"none", "accum4", "fp16"}
    measured = by_option["accum4"].measured_s / by_option["none"].measured_s
    predicted = by_option["accum4"].predicted_s / by_option["none"].predicted_s
    assert measured > 3 and predicted == pytest.approx(measured, rel=0.25)
    assert by_option["fp16"].predicted_s != by_option["none"].predicted_s


def test_multinode_run_without_a_network_fit_is_refused(tmp_path, capsys):
    camp = _campaign(tmp_path, "h200x4-multinode-2026-11-26",
                     lambda r: r["status"] == "ok" and r["model"] == "resnet50")
    assert main(["validate", camp, "--calibration", os.path.join(ROOT, "ddpsim", "calibration", "shipped", "x4-h200.json")]) == 2
    err = capsys.readouterr().err
    assert ".nodes" in err and "net" in err and err.count("\n") == 1


def test_runs_on_a_link_nobody_swept_are_left_out_with_the_reason(tmp_path):
    # the options campaign swept NVLink only: its socket runs cannot be calibrated, and say so
    camp = _campaign(tmp_path, "h200x4-options-2026-11-26",
                     lambda r: r["status"] == "ok" and r["model"] in ("resnet50", "gpt2-124m") and r["variant"] == "none")
    v = cross_validate([camp], "model", None)
    assert {r.transport for r in v.rows} == {"nvlink"}
    with open_data(os.path.join(camp, "ddp_runs.jsonl")) as handle:
        sockets = sum(json.loads(line)["transport"] == "socket" for line in handle)
    assert sockets > 0
    assert sum("no socket sweeps" in reason for _run, reason in v.skipped) == sockets


def test_profiles_slower_than_the_runs_compute_are_named():
    # the H100 campaign's world-size-1 profile of mlp-ln-64 (22.4 ms) is slower than the compute-only
    # (no_sync) steps its own 4-GPU runs measured: validate must say so beside the errors
    camp = os.path.join(DATA, "h100x4-options-2026-11-26")
    with open(os.path.join(camp, "profiles", "mlp-ln-64.json"), encoding="utf-8") as handle:
        profile_s = json.load(handle)["step_s"]
    with open_data(os.path.join(camp, "ddp_runs.jsonl")) as handle:
        nosync = sorted(r["nosync_step_s_median"] for r in map(json.loads, handle)
                        if r["model"] == "mlp-ln-64" and r.get("nosync_step_s_median"))
    assert profile_s > 1.1 * nosync[len(nosync) // 2]
    v = validate([camp], None)
    assert any("mlp-ln-64" in w and "slower than the runs' compute" in w for w in v.profile_warnings)
    assert not any("resnet50" in w for w in v.profile_warnings)


def test_a_launch_whose_reference_moved_is_flagged():
    # the options campaign's socket launch: its reference configuration (ResNet-50, cap 25) measured
    # first and last in the launch moved by about a fifth, far past the launch's round-to-round spread
    from ddpsim.fitting.calibrate import load_measurements
    from ddpsim.fitting.validate import launch_drift

    camp = os.path.join(DATA, "h200x4-options-2026-11-26")
    with open_data(os.path.join(camp, "ddp_runs.jsonl")) as handle:
        reference = next(r for r in map(json.loads, handle) if r.get("is_reference") and r["transport"] == "socket")
    by_position = {r["position"]: r["step_s_median"] for r in reference["rounds"] if r["position"].startswith("reference")}
    expected = (by_position["reference_end"] / by_position["reference_start"] - 1) * 100
    drift = {d["launch"].split("/")[-1]: d for d in launch_drift(load_measurements([camp]).runs)}
    assert drift["socket_w4_0"]["drift_pct"] == pytest.approx(expected, rel=1e-9)
    assert drift["socket_w4_0"]["drifted"] and abs(expected) > 15
    assert not drift["nvlink_w4_0"]["drifted"]


def test_launch_levels_from_the_reference_configuration():
    # the multi-node campaign's 2 x 2 shape was launched twice (the second time on another machine),
    # each launch with ResNet-50 cap 25 as its reference: the level is each reference over their median
    from ddpsim.fitting.calibrate import load_measurements
    from ddpsim.fitting.validate import RunRow, launch_levels, normalised_by_reference

    camp = os.path.join(DATA, "h200x4-multinode-2026-11-26")
    with open_data(os.path.join(camp, "ddp_runs.jsonl")) as handle:
        refs = {r["launch_id"]: r["step_s_median"] for r in map(json.loads, handle)
                if r.get("is_reference") and r["launch_id"].startswith("nvlink_2x2")}
    assert set(refs) == {"nvlink_2x2_0", "nvlink_2x2_1"}
    middle = (refs["nvlink_2x2_0"] + refs["nvlink_2x2_1"]) / 2
    levels = launch_levels(load_measurements([camp]).runs)
    host = "h200x4-multinode-2026-11-26"
    for launch, step in refs.items():
        assert levels[f"{host}/{launch}"] == pytest.approx(step / middle, rel=1e-12)
    assert f"{host}/socket_4x1_0" not in levels  # launched once: nothing to compare it with
    row = RunRow("resnet50", "nvlink", 4, 25.0, 0.05, None, None, 0.05, True, "nvlink_2x2_1", nodes=2, host=host)
    [normalised] = normalised_by_reference([row], load_measurements([camp]).runs)
    assert normalised.measured_s == pytest.approx(0.05 / (refs["nvlink_2x2_1"] / middle), rel=1e-12)
    assert normalised.launch_level == pytest.approx(refs["nvlink_2x2_1"] / middle, rel=1e-12)


def test_each_run_is_predicted_from_its_own_campaigns_profile():
    # the same models profiled on two allocations of 4 x H100 differ by up to 1.5x in forward time
    # (a slower host CPU): a run must never take the other campaign's profile
    dirs = [os.path.join(DATA, d)
            for d in ("h100x4-options-2026-11-26", "h100x4-options-2026-11-26b")]
    measured = load_measurements(dirs)
    assert len(measured.runs) == 82
    for run in measured.runs:
        path = measured.profiles.for_run(run)
        assert path is not None
        assert os.path.dirname(os.path.dirname(path)) == os.path.dirname(run["_source"])
        assert os.path.basename(path) == f"{run['model']}.json"
    forwards = {campaign: json.load(open(p))["forward_s"]
                for (campaign, model), p in measured.profiles.paths.items() if model == "bert-large"}
    assert len(set(forwards.values())) == 2


def test_the_fixed_stretch_and_the_idle_start_wait_exclude_each_other():
    # the wait replaces the stretch: asking for both is refused (exit 2 through the CLI's ScenarioError),
    # not a silent mixture; cross_validate refuses before it loads anything
    with pytest.raises(ScenarioError) as err:
        calibrate([], [], Profiles(), None, fix_measured_stretch=True, idle_start_wait=True)
    assert err.value.field == "idle_start_wait"
    with pytest.raises(ScenarioError) as err:
        cross_validate([os.path.join(DATA, "no-such-campaign")], "model", fix_measured_stretch=True,
                       idle_start_wait=True)
    assert err.value.field == "idle_start_wait"


def test_a_report_over_several_campaigns_names_each_runs_campaign(capsys):
    # every campaign calls its launch "nvlink_w4_0": over two, each row says whose it is
    dirs = [os.path.join(DATA, d) for d in ("h100x4-options-2026-11-26d", "h100x4-options-2026-11-26e")]
    main(["validate", *dirs, "--calibration", "x4:H200", "--allow-other-gpu"])  # H100 runs, on purpose
    out = capsys.readouterr().out
    assert "h100x4-options-2026-11-26d/nvlink_w4_0" in out and "h100x4-options-2026-11-26e/nvlink_w4_0" in out


def test_the_fitted_models_only_option_reaches_every_fold(tmp_path, monkeypatch):
    import ddpsim.fitting.validate as validate_module
    from ddpsim.cli.validation_report import validation_text

    plain = _campaign(tmp_path, "h100x2-2026-11-26", _plain_nvlink({"resnet50", "mlp-heavy"}))
    seen = []
    real = validate_module.calibrate

    def spy(*args, **kwargs):
        seen.append(kwargs.get("comm_terms_fitted_models_only"))
        return real(*args, **kwargs)

    monkeypatch.setattr(validate_module, "calibrate", spy)
    v = cross_validate([plain], "model", [50], comm_terms_fitted_models_only=True)
    assert seen == [True, True]  # one fold per model, each fitted with the option
    assert "kept for the models it was fitted on (comm_terms_fitted_models_only" in validation_text(v)
