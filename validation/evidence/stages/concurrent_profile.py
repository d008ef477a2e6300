"""A model's compute profiled on one GPU alone, or on every GPU of the host at once.

On 2 x H100 the ranks of one DDP launch ran the same launch-bound compute up to 1.5 times apart
(validation/data/h100x2-ranks-2026-11-26j, -k), while the profile timed one process on GPU 0 with the rest
of the host idle. The harness's ``--profile-gpus 0`` runs the same model on every GPU at once and keeps
the slowest rank's profile. The three folders here (allocations l, m and n) measured both: the campaign's
profile launch (every GPU at once, ``profiles/``, each rank in ``profiles/ranks/``) and one process alone on
GPU 0 (``profiles-alone/``): alone before the campaign on l, after it on m and n. On n the world-size-1 DDP
rows alternate DDP and plain steps; the "unpaired" columns drop those pair differences.

For each folder this prints each model's profiled step, the runs' own compute (the slower rank's
``no_sync`` step, median over the plain runs: what the profile tries to stand for, measured inside the DDP
launch and never used to predict), and the error of ``ddpsim validate`` with each set of profiles.
Calibration: ddpsim/calibration/shipped/x4-h200.json (4 x H200, campaign A); no run of these folders is fitted.

    python -m validation.evidence --stage concurrent-profile
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile

from ddpsim.calibration.file import read_calibration  # noqa: E402
from ddpsim.fitting.validate import RunRow, validate  # noqa: E402
from ddpsim.jsonfile import data_path, open_data
from validation.evidence import ROOT  # noqa: E402
from validation.evidence.stages import across_gpus, printed

CALIBRATION = os.path.join(ROOT, "ddpsim", "calibration", "shipped", "x4-h200.json")
CAMPAIGNS = ("h100x2-profiles-2026-11-26l", "h100x2-profiles-2026-11-26m", "h100x2-profiles-2026-11-26n")
# profiled one GPU alone only (the harness's default), DDP's world-size-1 rows paired
PAIRED_ONLY = ("h100x2-profiles-2026-11-26o",)
RUN_FILES = ("ddp_runs.jsonl", "launches.jsonl", "campaign_args.json")
# a diagnostic column, not a prediction: the profile scaled to the DDP launch's own compute
ORACLE = "runs' own compute"


def _read(path: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _runs_compute_s(campaign_dir: str) -> dict[str, float]:
    """Per model: median over its plain runs of the slower rank's no_sync step."""
    by_model: dict[str, list[float]] = {}
    with open_data(os.path.join(campaign_dir, "ddp_runs.jsonl")) as handle:
        for line in handle:
            run = json.loads(line)
            per_rank = (run.get("per_rank_s") or {}).get("nosync_step_s") or []
            if run.get("status") == "ok" and run.get("variant") == "none" and all(per_rank):
                by_model.setdefault(run["model"], []).append(max(per_rank))
    return {model: statistics.median(values) for model, values in by_model.items()}


def _with_profiles(campaign_dir: str, profiles: str, into: str, paired: bool = True) -> str:
    """A copy of the campaign's runs beside the given profiles folder (as ``profiles/``); ``paired``
    False drops the world-size-1 rows' pair differences, so that DDP's charge is set against the
    profile's own step as before allocation n."""
    os.makedirs(into)
    for name in RUN_FILES:
        source = data_path(os.path.join(campaign_dir, name))
        assert source is not None, f"{campaign_dir} has no {name}"
        shutil.copy(source, into)
    shutil.copytree(os.path.join(campaign_dir, profiles), os.path.join(into, "profiles"))
    if not paired:
        for name in os.listdir(os.path.join(into, "profiles")):
            path = os.path.join(into, "profiles", name)
            if name.endswith(".json"):
                profile = _read(path)
                for row in profile.get("ddp_world1", []):
                    row.pop("ddp_minus_plain_s", None)
                with open(path, "w", encoding="utf-8") as handle:
                    json.dump(profile, handle)
    return into


def _scaled_to_runs(profiles_dir: str, compute_s: dict[str, float]) -> None:
    """Rewrite each profile in place so that its step equals the runs' own compute (``compute_s``, per
    model): every compute time scaled by one factor, DDP's world-size-1 charge kept as it was. A
    diagnostic: what the error would be with a profile as fast as the DDP launch's own compute, i.e.
    how much of the error is the compute input moving between launches."""
    for name in os.listdir(profiles_dir):
        path = os.path.join(profiles_dir, name)
        if not name.endswith(".json"):
            continue
        profile = _read(path)
        if profile["model"] not in compute_s:
            continue
        ratio = compute_s[profile["model"]] / profile["step_s"]
        for row in profile.get("ddp_world1", []):
            if row.get("status", "ok") == "ok" and "ddp_minus_plain_s" not in row:
                row["ddp_minus_plain_s"] = row["step_s"] - profile["step_s"]
        for key in ("forward_s", "backward_s", "optimizer_s", "step_s", "backward_accumulate_s"):
            if profile.get(key) is not None:
                profile[key] *= ratio
        for param in profile["params"]:
            if param.get("grad_ready_s") is not None:
                param["grad_ready_s"] *= ratio
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(profile, handle)


def _has_pairs(profiles_dir: str) -> bool:
    return any("ddp_minus_plain_s" in row for name in os.listdir(profiles_dir) if name.endswith(".json")
               for row in _read(os.path.join(profiles_dir, name)).get("ddp_world1", []))


def _errors(rows: list[RunRow]) -> str:
    errors = [abs(r.error_pct) for r in rows]
    return f"{statistics.mean(errors):5.1f} / {max(errors):5.1f}"


def _paired_against_unpaired(campaign: str, calibration) -> None:
    """A campaign profiled alone with paired world-size-1 rows: the error with the pair differences and
    without them (DDP's charge against the profile's own step)."""
    campaign_dir = os.path.join(ROOT, "validation", "data", campaign)
    compute = _runs_compute_s(campaign_dir)
    with tempfile.TemporaryDirectory() as tmp:
        results = {label: [r for r in validate([_with_profiles(campaign_dir, "profiles", os.path.join(tmp, label),
                                                               paired)], calibration).rows if r.held_out]
                   for label, paired in (("paired", True), ("unpaired", False))}
        oracle = _with_profiles(campaign_dir, "profiles", os.path.join(tmp, "oracle"))
        _scaled_to_runs(os.path.join(oracle, "profiles"), compute)
        results[ORACLE] = [r for r in validate([oracle], calibration).rows if r.held_out]
    print(f"{campaign}: profiled alone (the default); error mean / max % with DDP's world-size-1 charge paired "
          "or not")
    print(f"  {'model':11s} {'alone':>6s} {'runs':>6s}   {'paired':>13s}  {'unpaired':>13s}  {'runs own compute':>17s}")
    for model in sorted(compute):
        step_s = _read(os.path.join(campaign_dir, "profiles", f"{model}.json"))["step_s"]
        rows = {label: [r for r in result if r.model == model] for label, result in results.items()}
        print(f"  {model:11s} {step_s * 1e3:6.1f} {compute[model] * 1e3:6.1f}   {_errors(rows['paired']):>13s}  "
              f"{_errors(rows['unpaired']):>13s}  {_errors(rows[ORACLE]):>17s}")
    print(f"  {'all runs':11s} {'':6s} {'':6s}   {_errors(results['paired']):>13s}  {_errors(results['unpaired']):>13s}"
          f"  {_errors(results[ORACLE]):>17s}   ({len(results['paired'])} runs)")


def main() -> int:
    calibration = across_gpus(read_calibration(CALIBRATION))
    for campaign in PAIRED_ONLY:
        _paired_against_unpaired(campaign, calibration)
    for campaign in CAMPAIGNS:
        campaign_dir = os.path.join(ROOT, "validation", "data", campaign)
        compute = _runs_compute_s(campaign_dir)
        results = {}
        with tempfile.TemporaryDirectory() as tmp:
            variants = [("alone", "profiles-alone", True), ("at once", "profiles", True)]
            if _has_pairs(os.path.join(campaign_dir, "profiles")):
                variants += [("alone, unpaired", "profiles-alone", False), ("at once, unpaired", "profiles", False)]
            variants.append((ORACLE, "profiles-alone", True))
            for label, folder, paired in variants:
                copy = _with_profiles(campaign_dir, folder, os.path.join(tmp, label.replace(" ", "_").replace("'", "")),
                                      paired)
                if label == ORACLE:
                    _scaled_to_runs(os.path.join(copy, "profiles"), compute)
                results[label] = [r for r in validate([copy], calibration).rows if r.held_out]
        print(f"{campaign}: step ms (alone on GPU 0 | every GPU at once: each rank, kept) against the runs' "
              "compute; error mean / max % of ddpsim validate with each")
        labels = list(results)
        print(f"  {'model':11s} {'alone':>6s} {'ranks at once':>15s} {'kept':>6s} {'runs':>6s}   "
              + "  ".join(f"{label:>17s}" for label in labels))
        for model in sorted(compute):
            alone = _read(os.path.join(campaign_dir, "profiles-alone", f"{model}.json"))["step_s"]
            kept = _read(os.path.join(campaign_dir, "profiles", f"{model}.json"))
            ranks = " ".join(f"{r['step_s'] * 1e3:6.1f}" for r in kept["concurrent"]["per_rank"])
            rows = {label: [r for r in result if r.model == model] for label, result in results.items()}
            print(f"  {model:11s} {alone * 1e3:6.1f} {ranks:>15s} {kept['step_s'] * 1e3:6.1f} "
                  f"{compute[model] * 1e3:6.1f}   " + "  ".join(f"{_errors(rows[label]):>17s}" for label in labels))
        print(f"  {'all runs':11s} {'':6s} {'':15s} {'':6s} {'':6s}   "
              + "  ".join(f"{_errors(results[label]):>17s}" for label in labels) + f"   ({len(results['alone'])} runs)")
        print("  (unpaired: DDP's world-size-1 charge set against the profile's own step, as before allocation n)"
              if "at once, unpaired" in results else "")
    return 0



def run() -> str:
    """The stage's output (validation/reports/concurrent-profile/output.txt): what the benchmark printed."""
    return printed(main, __name__)

if __name__ == "__main__":
    sys.exit(main())
