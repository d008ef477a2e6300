"""Do a calibration's fitted DDP overheads carry to a model they were not fitted on?

Leave one model out, per campaign: the links are fitted on every all-reduce sweep of the campaign (they
measure links, not models), the DDP overheads on the plain runs of the other models (caps 5 and 50, as
``ddpsim calibrate``; ``--caps all`` for every cap), and the held-out model's runs are predicted twice:

* carried: with the other models' fitted overhead terms (ddpsim's default);
* not carried ("fitted models only"): the fitted communication terms at their no-effect value, as a calibration fitted with
  ``--comm-terms-fitted-models-only`` does for a model its overheads were not fitted on
  (``ddpsim.calibration.file.NOT_CARRIED``).

Besides the mean / max absolute step error per link class and per model, it prints the overlap bench's
measured contention where the campaign has one (``overlap.jsonl``): the compute and all-reduce slowdowns
each model's own backward showed beside all-reduces.

With ``--calibration FILE`` it predicts every run of each DIR with that calibration instead (nothing
refitted, every run held out): the models the calibration's overheads were fitted on, and the others,
carried and not. With ``--measured-contention`` it fits no overhead term at all (links only, from the
campaign's sweeps) and predicts every run with every term at no effect, then with the overlap bench's
measured compute and all-reduce slowdowns of the run's own model, link class and world size.

    python -m validation.evidence.stages.overheads_across_models [--caps all] DIR [DIR ...]
    python -m validation.evidence.stages.overheads_across_models --calibration FILE DIR [DIR ...]
    python -m validation.evidence.stages.overheads_across_models --measured-contention DIR [DIR ...]
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
from collections import defaultdict
from typing import Any

from ddpsim.calibration.file import calibration_from_dict
from ddpsim.fitting.calibrate import calibrate, keep_comm_terms_for_fitted_models, load_measurements
from ddpsim.fitting.measured_scenarios import run_class
from ddpsim.fitting.validate import predict_run
from ddpsim.jsonfile import data_name, open_data
from validation.evidence.stages import across_gpus, printed


def _fitted_models_only(data: dict[str, Any]) -> dict[str, Any]:
    """The same calibration with its communication terms kept for the models they were fitted on."""
    out = json.loads(json.dumps(data))
    for entry in out["overheads"].values():
        keep_comm_terms_for_fitted_models(entry)
    return out


def _stats(errors: list[float]) -> str:
    if not errors:
        return "-"
    return f"{sum(abs(e) for e in errors) / len(errors):5.1f}% / {max(abs(e) for e in errors):5.1f}%"


def leave_one_model_out(data_dir: str, caps: list[float] | None) -> None:
    measured = load_measurements([data_dir])
    models = sorted({r["model"] for r in measured.runs})
    carried: dict[str, list[float]] = defaultdict(list)
    not_carried: dict[str, list[float]] = defaultdict(list)
    per_model: dict[tuple[str, str], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for held in models:
        train = [r for r in measured.runs if r["model"] != held]
        held_runs = [r for r in measured.runs if r["model"] == held]
        classes = {run_class(r) for r in held_runs}
        data = calibrate(measured.samples, train, measured.profiles, caps, classes=classes)
        carried_cal = calibration_from_dict(data, f"<without {held}>")
        fitted_only = calibration_from_dict(_fitted_models_only(data), f"<without {held}, fitted models only>")
        for run in held_runs:
            link = run_class(run)
            if link not in data["overheads"]:
                continue
            a = predict_run(measured, run, carried_cal).error_pct
            b = predict_run(measured, run, fitted_only).error_pct
            carried[link].append(a)
            not_carried[link].append(b)
            per_model[(link, held)][0].append(a)
            per_model[(link, held)][1].append(b)
    print(f"== {data_dir} (leave one model out; calibration caps {'all' if caps is None else caps})")
    print(f"{'link class':<10} {'runs':>4}  {'carried, mean / max':>20}  {'not carried, mean / max':>24}")
    for link in sorted(carried):
        print(f"{link:<10} {len(carried[link]):>4}  {_stats(carried[link]):>20}  {_stats(not_carried[link]):>24}")
    for (link, model), (errors_a, errors_b) in sorted(per_model.items()):
        bias_a, bias_b = sum(errors_a) / len(errors_a), sum(errors_b) / len(errors_b)
        print(f"    {link:<8} {model:<11} carried {_stats(errors_a)} (bias {bias_a:+5.1f})  not carried {_stats(errors_b)} "
              f"(bias {bias_b:+5.1f})")
    _overlap(data_dir)


def _overlap(data_dir: str) -> None:
    ok = _overlap_rows(data_dir)
    if not ok:
        return
    print("  measured beside all-reduces of 25 MiB (overlap.jsonl): model, link, GPUs: compute x, all-reduce x")
    for r in sorted(ok, key=lambda r: (r["transport"], r["world_size"], r["model"])):
        comm = r.get("comm_slowdown_ratio")
        comm_text = f"x{comm:.2f}" if comm else "- (no call inside the backward)"
        print(f"    {r['model']:<11} {r['transport']:<6} {r['world_size']}  compute x{r['compute_slowdown_ratio']:.2f}  "
              f"all-reduce {comm_text}")


def held_out(data_dir: str, calibration_path: str) -> None:
    """Every run of ``data_dir`` predicted by the calibration, its overheads carried to every model and not."""
    measured = load_measurements([data_dir])
    with open(calibration_path) as handle:
        data = json.load(handle)
    carried = across_gpus(calibration_from_dict(data, calibration_path))
    fitted_only = across_gpus(calibration_from_dict(_fitted_models_only(data), f"{calibration_path}, fitted models only"))
    groups: dict[tuple[str, str], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for run in measured.runs:
        link = run_class(run)
        fitted_on = carried.overhead_models(link, int(run["world_size"])) or []
        seen = "fitted on" if run["model"] in fitted_on else "other"
        a, b = predict_run(measured, run, carried).error_pct, predict_run(measured, run, fitted_only).error_pct
        for key in ((link, seen), (link, "all")):
            groups[key][0].append(a)
            groups[key][1].append(b)
    print(f"== {data_dir} predicted by {calibration_path} (every run held out)")
    print(f"{'link class':<10} {'models':<10} {'runs':>4}  {'carried, mean / max':>20}  {'not carried, mean / max':>24}")
    for (link, seen), (errors_a, errors_b) in sorted(groups.items()):
        print(f"{link:<10} {seen:<10} {len(errors_a):>4}  {_stats(errors_a):>20}  {_stats(errors_b):>24}")
    _overlap(data_dir)


def measured_contention(data_dir: str) -> None:
    """No fitted overhead term: every term at no effect, against the overlap bench's slowdowns in their place."""
    from ddpsim.calibration.file import NO_EFFECT
    from ddpsim.fitting.measured_scenarios import run_scenario
    from ddpsim.simulation import prepare, simulate

    measured = load_measurements([data_dir])
    slowdowns = {(r["model"], r["transport"], int(r["world_size"])): r for r in _overlap_rows(data_dir)}
    links = calibration_from_dict(calibrate(measured.samples, measured.runs, measured.profiles, None,
                                            links_only=True), f"<{data_dir} links>")
    none = {k: v for k, v in NO_EFFECT.items() if k != "max_inflight_buckets"}
    errors: dict[tuple[str, str], list[float]] = defaultdict(list)
    for run in measured.runs:
        bench = slowdowns.get((run["model"], run["transport"], int(run["world_size"])))
        if bench is None:
            continue
        measured_terms = {**none, "compute_slowdown": max(1.0, bench["compute_slowdown_ratio"]),
                          "comm_slowdown": max(1.0, bench.get("comm_slowdown_ratio") or 1.0)}
        for label, terms in (("no term", none), ("measured", measured_terms)):
            prep = prepare(run_scenario(run, measured.profiles.for_run(run) or "", links))
            prep = dataclasses.replace(prep, scenario=dataclasses.replace(
                prep.scenario, overheads=dataclasses.replace(prep.scenario.overheads, **terms)))
            errors[(run_class(run), label)].append((simulate(prep).step_time_s / float(run["step_s_median"]) - 1) * 100)
    print(f"== {data_dir}: no fitted term, every run (links from its own sweeps)")
    print(f"{'link class':<10} {'runs':>4}  {'no term, mean / max':>20}  {'measured slowdowns, mean / max':>31}")
    for link in sorted({k[0] for k in errors}):
        print(f"{link:<10} {len(errors[(link, 'no term')]):>4}  {_stats(errors[(link, 'no term')]):>20}  "
              f"{_stats(errors[(link, 'measured')]):>31}")


def _overlap_rows(data_dir: str) -> list[dict[str, Any]]:
    rows = []
    for root, _dirs, files in sorted(os.walk(data_dir)):
        if "overlap.jsonl" in {data_name(name) for name in files}:
            with open_data(os.path.join(root, "overlap.jsonl")) as f:
                rows += [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if r.get("status") == "ok"]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--caps", default="5,50", help="calibration caps, or 'all'")
    ap.add_argument("--calibration", default=None, help="predict every run with this calibration instead")
    ap.add_argument("--measured-contention", action="store_true",
                    help="no fitted term; the overlap bench's slowdowns against none")
    a = ap.parse_args(argv)
    caps = None if a.caps == "all" else [float(c) for c in a.caps.split(",")]
    for data_dir in a.dirs:
        if a.measured_contention:
            measured_contention(data_dir)
        elif a.calibration:
            held_out(data_dir, a.calibration)
        else:
            leave_one_model_out(data_dir, caps)
    return 0



# the committed output: these four invocations, each after its command line
INVOCATIONS = [
    ["validation/data/h200x4-2026-11-26", "validation/data/h100x4-overlap-2026-11-27"],
    ["--calibration", "ddpsim/calibration/shipped/x4-h200.json", "validation/data/h100x4-mlp-wide-2026-11-27",
     "validation/data/h100x4-models-2026-11-27", "validation/data/h100x4-overlap-2026-11-27b",
     "validation/data/h200x4-options-2026-11-27", "validation/data/h200x4-options-2026-11-27b"],
    ["--caps", "all", "validation/data/h200x4-options-2026-11-26"],
    ["--measured-contention", "validation/data/h100x4-overlap-2026-11-27"],
]


def run() -> str:
    """The stage's output (validation/reports/overheads-across-models/output.txt), from the repository root."""
    parts = []
    for argv in INVOCATIONS:
        text = printed(functools.partial(main, argv), __name__)
        parts.append(f"$ python -m validation.evidence.stages.overheads_across_models {' '.join(argv)}\n"
                     + text)
    return "\n".join(parts)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
