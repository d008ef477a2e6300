"""Pooled calibration over allocations (``validation/pool.py``, research) and the probe (``fitting/recentre.py``): grouping folders into machines, the
balanced runs of a pooled fit, noise paired inside allocations only, the probe's re-centring, the spread
between allocations and the intervals built from it.

Expected values come from the hand-built inputs (which folders name which GPUs, which runs exist)
and from closed forms (root mean squares, lognormal quantiles), never from the code's own output.
"""

from __future__ import annotations

import json
import math
import os
import shutil

import pytest

from ddpsim.calibration.file import SCHEMA, calibration_from_dict
from ddpsim.errors import ScenarioError
from ddpsim.fitting.recentre import recentre
from ddpsim.fitting.validate import in_calibration_subset
from ddpsim.jsonfile import open_data
from ddpsim.spread import Z90
from validation.pool import (
    Allocation,
    HeldOutRun,
    allocation_folds,
    allocation_offsets,
    balanced_runs,
    find_allocations,
    predict_fold,
    spread_sigmas,
    summarise,
    within_allocation_noise,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "validation", "data")


def _run(model="resnet50", cap=25.0, world=2, transport="nvlink", launch="nvlink_w2_0", step=0.01, **extra):
    return {"model": model, "bucket_cap_mb": cap, "world_size": world, "transport": transport, "launch_id": launch,
            "step_s_median": step, "status": "ok", **extra}


def _folder(root, name, gpus=None, readme_gpus=None, gpu_name="NVIDIA H100 80GB HBM3", runs=1):
    path = root / name
    path.mkdir()
    if gpus is not None:
        (path / "machine.txt").write_text("name, uuid\n" + "".join(f"{gpu_name}, GPU-{u}-0000-0000\n" for u in gpus))
    if readme_gpus is not None:
        (path / "README.md").write_text("Machine: " + ", ".join(f"GPU-{u}..." for u in readme_gpus) + "\n")
    if runs:
        record = {**_run(), "fingerprint": {"gpu_name": gpu_name}}
        (path / "ddp_runs.jsonl").write_text(json.dumps(record) + "\n")
    return str(path)


def test_folders_that_name_the_same_gpus_are_one_allocation(tmp_path):
    a = _folder(tmp_path, "a", gpus=["aaaaaaaa", "bbbbbbbb"])
    a_w2 = _folder(tmp_path, "a-w2", gpus=["bbbbbbbb", "aaaaaaaa"])
    # no machine.txt: its README names a GPU of folder a
    b = _folder(tmp_path, "b", readme_gpus=["aaaaaaaa"])
    c = _folder(tmp_path, "c", gpus=["cccccccc"], gpu_name="NVIDIA H200")
    d = _folder(tmp_path, "d")  # names no GPU: its own allocation
    _folder(tmp_path, "empty", gpus=["dddddddd"], runs=0)  # neither runs nor sweeps: left out
    found = find_allocations([a, a_w2, b, c, d, str(tmp_path / "empty")])
    assert {(x.name, x.gpu, tuple(os.path.basename(f) for f in x.folders)) for x in found} == {
        ("a", "H100-SXM", ("a", "a-w2", "b")), ("c", "H200", ("c",)), ("d", "H100-SXM", ("d",))}


def test_one_machine_with_two_gpu_kinds_is_refused(tmp_path):
    a = _folder(tmp_path, "a", gpus=["aaaaaaaa"])
    b = _folder(tmp_path, "b", gpus=["aaaaaaaa"], gpu_name="NVIDIA H200")
    with pytest.raises(ScenarioError, match="GPU kinds"):
        find_allocations([a, b])


def test_balanced_runs_take_models_in_turn_and_leave_options_out():
    runs = ([_run("resnet50", cap) for cap in (1, 5, 25, 50)] + [_run("gpt2-124m", cap) for cap in (5, 25)]
            + [_run("resnet50", 25, comm_hook="fp16_compress")]
            + [_run("resnet50", cap, world=4, launch="nvlink_w4_0") for cap in (5, 25)])
    chosen = balanced_runs(runs, 3, salt="x")
    w2 = [r for r in chosen if r["world_size"] == 2]
    w4 = [r for r in chosen if r["world_size"] == 4]
    assert len(w2) == 3 and len(w4) == 2  # at most 3 per (class, GPUs, nodes); all 2 of the w4 group
    # models in turn, in name order (gpt2-124m, resnet50, gpt2-124m): never three of resnet50 although
    # it has the most runs
    assert sorted(r["model"] for r in w2) == ["gpt2-124m", "gpt2-124m", "resnet50"]
    assert not any(r.get("comm_hook") for r in chosen)
    # the rotation depends on the salt only: the same salt gives the same runs
    assert balanced_runs(runs, 3, salt="x") == chosen


def test_launch_noise_pairs_launches_inside_one_allocation_only():
    from ddpsim.fitting.calibrate import Measurements
    from ddpsim.fitting.fit import fit_noise
    from ddpsim.fitting.measurements import Profiles

    def runs(host, steps):
        return [_run(step=s, launch=f"nvlink_w2_{i}", host=host) for i, s in enumerate(steps)]

    a, b = runs("A", [0.010, 0.011]), runs("B", [0.020, 0.020])
    by_allocation = {"A": Measurements([], a, Profiles()), "B": Measurements([], b, Profiles())}
    noise = within_allocation_noise(by_allocation)["nvlink"]
    # two pairs (one per allocation): ln(1.1) and 0; variance of a difference is 2 sigma^2
    assert noise["launch_pairs"] == 2
    assert noise["launch_sigma"] == pytest.approx(math.sqrt(math.log(1.1) ** 2 / (2 * 2)))
    # fit_noise on the pooled runs pairs A's launches with B's too: the allocation gap counts as noise
    assert fit_noise(a + b)["nvlink"]["launch_sigma"] > 5 * noise["launch_sigma"]


def _link(bandwidth, worlds):
    return {"bandwidth_Bps": bandwidth, "latency_s": 1e-5, "world_sizes": worlds}


def test_the_probe_replaces_only_the_link_parts_it_measured():
    base = {
        "schema": SCHEMA,
        "link_classes": {
            "nvlink": {**_link(100e9, [2, 4]), "by_world_size": {"2": _link(100e9, [2]), "4": _link(110e9, [4])}},
            "socket": _link(5e9, [2]),
        },
        "overheads": {"nvlink": {"bucket_launch_s": 1e-5}},
        "allocation_spread": {"nvlink": {"sigma": 0.10, "residual_sigma": 0.05, "sigma_after_probe": 0.03,
                                         "residual_sigma_after_probe": 0.04},
                              "socket": {"sigma": 0.2, "sigma_after_probe": 0.05}},
    }
    probe = {"nvlink": _link(80e9, [4])}  # the allocation swept NVLink on 4 GPUs only
    out, probed = recentre(base, probe)
    assert probed == {("nvlink", "4")}
    cal = calibration_from_dict(out, "<recentred>")
    assert cal.link_fit("nvlink", 4, 1).bandwidth_Bps == 80e9
    assert cal.link_fit("nvlink", 2, 1).bandwidth_Bps == 100e9
    assert cal.link_fit("socket", 2, 1).bandwidth_Bps == 5e9
    assert out["overheads"] == base["overheads"]
    # the probed class's interval shrinks to what the probe leaves; the other class keeps its spread
    assert out["allocation_spread"]["nvlink"]["sigma"] == 0.03
    assert out["allocation_spread"]["nvlink"]["residual_sigma"] == 0.04
    assert out["allocation_spread"]["socket"]["sigma"] == 0.2
    assert base["link_classes"]["nvlink"]["by_world_size"]["4"]["bandwidth_Bps"] == 110e9  # base untouched


def test_a_network_probe_replaces_its_shape():
    base = {"schema": SCHEMA, "link_classes": {"net": {**_link(3e9, [2]), "shapes": ["2x1"]}}}
    out, probed = recentre(base, {"net": {**_link(1e9, [4]), "shapes": ["4x1"]}})
    assert probed == {("net", "4x1")}
    cal = calibration_from_dict(out, "<recentred>")
    assert cal.link_fit("net", 4, 4).bandwidth_Bps == 1e9
    assert cal.link_fit("net", 2, 2).bandwidth_Bps == 3e9
    assert out["link_classes"]["net"]["shapes"] == ["2x1", "4x1"]


def _row(allocation, measured, predicted, probed=None, link="nvlink", step_sigma=0.0):
    return HeldOutRun(allocation=allocation, gpu="H100-SXM", group=link, link_class=link, model="resnet50",
                      world_size=2, nodes=1, bucket_cap_mb=25.0, launch=f"{allocation}/l", measured_s=measured,
                      pooled_s=predicted, probed_s=probed, model_in_fit=True, step_sigma=step_sigma, launch_sigma=None)


def test_allocation_spread_is_the_root_mean_square_of_the_offsets():
    e = math.exp
    rows = [_row("A", e(0.10), 1.0), _row("A", e(0.20), 1.0),   # offset 0.15, residuals -0.05, +0.05
            _row("B", e(-0.10), 1.0), _row("B", e(-0.10), 1.0),  # offset -0.10, residuals 0
            _row("C", e(0.05), 1.0, probed=e(0.01))]             # offset 0.05
    offsets = allocation_offsets(rows, mode="pooled")[("H100-SXM", "nvlink")]
    assert offsets == pytest.approx({"A": 0.15, "B": -0.10, "C": 0.05})
    alloc, within, n = spread_sigmas(rows, mode="pooled")[("H100-SXM", "nvlink")]
    assert n == 3
    assert alloc == pytest.approx(math.sqrt((0.15 ** 2 + 0.10 ** 2 + 0.05 ** 2) / 3))
    # five runs, three offsets estimated: two degrees of freedom
    assert within == pytest.approx(math.sqrt((0.05 ** 2 + 0.05 ** 2) / 2))
    # leaving A out: B and C only
    alloc_b_c, _, _ = spread_sigmas(rows, mode="pooled", leave_out="A")[("H100-SXM", "nvlink")]
    assert alloc_b_c == pytest.approx(math.sqrt((0.10 ** 2 + 0.05 ** 2) / 2))
    # after the probe only C has a prediction: one allocation gives no spread
    assert spread_sigmas(rows, mode="links")[("H100-SXM", "nvlink")][0] is None


def test_each_allocations_interval_comes_from_the_other_allocations():
    e = math.exp
    # four allocations, two runs each, offsets +-0.1 and residuals +-0.02
    rows = []
    for name, offset in (("A", 0.1), ("B", -0.1), ("C", 0.1), ("D", -0.1)):
        rows += [_row(name, e(offset + 0.02), 1.0), _row(name, e(offset - 0.02), 1.0)]
    rows.append(_row("E", e(0.5), 1.0))  # far off, one run (no residual of its own)
    summary = summarise(rows, mode="pooled")[0]
    assert summary.runs == 9 and summary.allocations == 5
    # A..D: the others' spread includes E's 0.5 offset, so their intervals are wide and hold them;
    # E's interval from A..D: sigma = sqrt(0.1^2 + within^2) with within = sqrt(8 x 0.02^2 / 4)
    sigma_e = math.sqrt(0.1 ** 2 + 8 * 0.02 ** 2 / 4)
    assert Z90 * sigma_e < 0.5  # so E falls outside its interval
    assert summary.inside == 8 and summary.with_interval == 9


def test_folds_deal_allocations_in_turn():
    allocs = [Allocation(n, "H100-SXM", (n,)) for n in "abcde"]
    assert [[a.name for a in p] for p in allocation_folds(allocs, 2)] == [["a", "c", "e"], ["b", "d"]]
    assert len(allocation_folds(allocs, None)) == 5


def test_a_pooled_file_says_which_folders_it_was_fitted_on():
    subset = {"bucket_cap_mb": "all", "folders": ["camp-a"]}
    assert in_calibration_subset({"bucket_cap_mb": 25, "_source": "/x/camp-a/ddp_runs.jsonl"}, subset)
    assert not in_calibration_subset({"bucket_cap_mb": 25, "_source": "/x/camp-b/ddp_runs.jsonl"}, subset)


def test_allocation_spread_widens_the_interval_and_old_files_still_load():
    base = {"schema": SCHEMA, "link_classes": {"nvlink": _link(1e11, [2])},
            "noise": {"nvlink": {"step_sigma": 0.02, "launch_sigma": 0.03}}}
    old = calibration_from_dict(base, "<old>")
    low, _, high = old.step_interval("nvlink", 1.0)
    assert high == pytest.approx(math.exp(Z90 * math.sqrt(0.02 ** 2 + 0.03 ** 2)))
    pooled = calibration_from_dict({**base, "allocation_spread": {"nvlink": {"sigma": 0.08, "residual_sigma": 0.05}}},
                                   "<pooled>")
    # the residual spread holds the launch noise and replaces it
    low, _, high = pooled.step_interval("nvlink", 1.0)
    sigma = math.sqrt(0.02 ** 2 + 0.05 ** 2 + 0.08 ** 2)
    assert (low, high) == pytest.approx((math.exp(-Z90 * sigma), math.exp(Z90 * sigma)))
    with pytest.raises(ScenarioError, match="allocation_spread.nvlink"):
        calibration_from_dict({**base, "allocation_spread": {"nvlink": {"sigma": "wide"}}}, "<bad>")


def _copy(tmp_path, name, folder, scale_runs=1.0, scale_sweeps=1.0, models=("resnet50",), transports=("nvlink",)):
    """A slice of a committed campaign: plain runs of some models and transports, steps and sweep times scaled."""
    src, dst = os.path.join(DATA, name), tmp_path / folder
    dst.mkdir()
    shutil.copytree(os.path.join(src, "profiles"), dst / "profiles")
    runs = []
    with open_data(os.path.join(src, "ddp_runs.jsonl")) as handle:
        for line in handle:
            run = json.loads(line)
            if run["model"] in models and run["transport"] in transports and run["bucket_cap_mb"] in (5, 50) \
                    and not run.get("comm_hook"):
                runs.append(json.dumps({**run, "step_s_median": run["step_s_median"] * scale_runs}))
    (dst / "ddp_runs.jsonl").write_text("\n".join(runs) + "\n")
    sweeps = []
    with open_data(os.path.join(src, "allreduce.jsonl")) as handle:
        for line in handle:
            record = json.loads(line)
            if record["transport"] in transports:
                record["rows"] = [{**row, "time_us_median": row["time_us_median"] * scale_sweeps}
                                  for row in record["rows"]]
                sweeps.append(json.dumps(record))
    (dst / "allreduce.jsonl").write_text("\n".join(sweeps) + "\n")
    return str(dst)


def test_a_fold_never_sees_the_held_out_allocation(tmp_path):
    from ddpsim.fitting.calibrate import load_measurements

    # one GPU kind per pool, as find_allocations groups them (a pool of another kind is refused when it predicts)
    train = _copy(tmp_path, "h200x4-2026-11-26", "train", models=("mlp-heavy",))
    held = _copy(tmp_path, "h200x2-2026-11-26", "held", models=("mlp-heavy",))
    # the same allocation with every step doubled and its sweeps three times slower
    edited = _copy(tmp_path, "h200x2-2026-11-26", "edited", scale_runs=2.0, scale_sweeps=3.0, models=("mlp-heavy",))
    a_train, a_held, a_edit = (Allocation(os.path.basename(p), "H200", (p,)) for p in (train, held, edited))
    loaded = {a.name: load_measurements(a.folders) for a in (a_train, a_held, a_edit)}
    # one training run per link class and GPU count (per_group=1): the fit simulates half the runs
    plain = predict_fold([a_held], [a_train], loaded, per_group=1)
    moved = predict_fold([a_edit], [a_train], loaded, per_group=1)
    assert len(plain) == len(moved) == 2  # mlp-heavy at caps 5 and 50
    for p, m in zip(sorted(plain, key=lambda r: r.bucket_cap_mb), sorted(moved, key=lambda r: r.bucket_cap_mb),
                    strict=True):
        # the pooled prediction knows nothing of the held-out allocation
        assert m.pooled_s == p.pooled_s
        assert m.measured_s == pytest.approx(2 * p.measured_s)
        # the probe reads its sweeps: three times slower links, a slower step
        assert p.probed_s is not None and m.probed_s is not None and m.probed_s > p.probed_s
    with pytest.raises(ValueError, match="own training"):
        predict_fold([a_held], [a_held], loaded)


def test_a_probe_without_sweeps_is_refused_and_one_with_sweeps_says_what_it_did_not_touch(tmp_path):
    from ddpsim.fitting.recentre import probe_calibration

    base = {"schema": SCHEMA, "link_classes": {"nvlink": _link(1e11, [2]), "socket": _link(5e9, [2])},
            "allocation_spread": {"nvlink": {"sigma": 0.1, "sigma_after_probe": 0.02}}}
    no_sweeps = tmp_path / "runs-only"
    no_sweeps.mkdir()
    (no_sweeps / "ddp_runs.jsonl").write_text(json.dumps(_run()) + "\n")
    with pytest.raises(ScenarioError, match="no all-reduce sweep"):
        probe_calibration(base, [str(no_sweeps)])
    probe = _copy(tmp_path, "h100x2-2026-11-26", "probe")  # its NVLink sweeps only (the copy keeps nvlink)
    out, notes = probe_calibration(base, [probe])
    assert out["probed_from"]["parts"] == ["nvlink 2"]
    assert out["allocation_spread"]["nvlink"]["sigma"] == 0.02
    assert len(notes) == 1 and notes[0].startswith("socket:")
    # the probe's link is what `calibrate --links-only` fits on the same sweeps, not the base's 100 GB/s
    from ddpsim.fitting.calibrate import calibrate, load_measurements

    m = load_measurements([probe])
    alone = calibrate(m.samples, [], m.profiles, None, links_only=True)["link_classes"]["nvlink"]["bandwidth_Bps"]
    assert calibration_from_dict(out, "<p>").link_fit("nvlink", 2, 1).bandwidth_Bps == alone != 1e11


def test_the_level_probe_keeps_the_pooled_curves_and_takes_the_probes_bandwidth():
    pooled_part = {**_link(100e9, [4]), "latency_s": 7e-6, "call_floor_s": 2e-5}
    base = {"schema": SCHEMA, "link_classes": {"nvlink": {**_link(100e9, [2, 4]),
                                                          "by_world_size": {"4": pooled_part}}}}
    probe = {"nvlink": {**_link(80e9, [4]), "latency_s": 3e-5, "call_floor_s": 9e-5}}
    out, probed = recentre(base, probe, keep_shape=True)
    assert probed == {("nvlink", "4")}
    entry = out["link_classes"]["nvlink"]["by_world_size"]["4"]
    assert entry["bandwidth_Bps"] == 80e9  # the probe's
    assert (entry["latency_s"], entry["call_floor_s"]) == (7e-6, 2e-5)  # the pool's


def test_leaving_a_class_out_one_allocation_at_a_time_never_fits_on_the_held_out_one(tmp_path):
    from validation.pool import cross_validate_allocations

    def allocations(root, doubled):
        root.mkdir()
        made = []
        for name in ("a", "b", "c"):
            path = _copy(root, "h100x2-2026-11-26", name, scale_runs=2.0 if name == doubled else 1.0,
                         models=("mlp-heavy",))
            made.append(Allocation(name, "H100-SXM", (path,)))
        return made

    # one run per allocation in each fit (per_group=1): each fit simulates half the runs
    plain = cross_validate_allocations(allocations(tmp_path / "plain", None), folds=2, per_group=1,
                                       loo_classes=("nvlink",))
    edited = cross_validate_allocations(allocations(tmp_path / "edited", "c"), folds=2, per_group=1,
                                        loo_classes=("nvlink",))
    # every allocation's two runs (mlp-heavy at caps 5 and 50), once each
    assert sorted(r.allocation for r in plain) == ["a", "a", "b", "b", "c", "c"]

    def by_run(rows):
        return {(r.allocation, r.bucket_cap_mb): r.pooled_s for r in rows}

    before, after = by_run(plain), by_run(edited)
    # c's runs doubled: c's own predictions do not move (it was never in its fit), a's and b's do
    assert all(after[k] == before[k] for k in before if k[0] == "c")
    assert all(after[k] != before[k] for k in before if k[0] != "c")
