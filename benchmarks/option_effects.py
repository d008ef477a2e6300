"""Predicted vs measured effect of each DDP option in the 4 x H200 options campaign, and the per-option
error table the advisor uses (``ddpsim/planning/option_errors.py``, written by ``--write``).

For every model and transport of ``validation/data/h200x4-options-2026-11-26`` the run of variant
``none`` at cap 25 and each option's run are simulated with ``run_scenario`` and the shipped
calibration ``validation/calibration-h200x4.json``, the run's DDP options set on the scenario. Effect =
option step / none step, measured (pooled medians of the same launch) and predicted.

Per option the table keeps every model's (predicted, measured) ratio and its error as the root mean
square of (predicted - measured) over the models and transports measured. It also records the
campaign's own repeat noise for the pair: the larger relative gap between round 1 and round 2 of
the two runs, so that an error at the level of that noise can be told from a model error.

    .venv/bin/python benchmarks/option_effects.py            # print the table
    .venv/bin/python benchmarks/option_effects.py --write    # and rewrite ddpsim/planning/option_errors.py
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import pprint
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ddpsim.calibration.file import read_calibration  # noqa: E402
from ddpsim.calibration.measured_scenarios import run_scenario  # noqa: E402
from ddpsim.calibration.measurements import read_ddp_runs  # noqa: E402
from ddpsim.simulation import simulate  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAMPAIGN = "validation/data/h200x4-options-2026-11-26"
CALIBRATION = "validation/calibration-h200x4.json"
OPTIONS = {
    "find_unused": {"find_unused_parameters": True},
    "static_graph": {"static_graph": True},
    "gbv": {"gradient_as_bucket_view": True},
    "fp16": {"comm_hook": "fp16"},
    "bf16": {"comm_hook": "bf16"},
}
OUT = "ddpsim/planning/option_errors.py"


def _round_gap(run: dict) -> float:
    a, b = run["round_medians_s"][:2]
    return abs(a - b) / min(a, b)


def compare() -> list[dict]:
    calibration = read_calibration(os.path.join(ROOT, CALIBRATION))
    runs = [r for r in read_ddp_runs(os.path.join(ROOT, CAMPAIGN, "ddp_runs.jsonl"))
            if r.get("status") == "ok" and r["bucket_cap_mb"] == 25]
    by_key = {(r["model"], r["transport"], r["variant"]): r for r in runs}
    rows = []
    for (model, transport, variant), none in sorted(by_key.items()):
        if variant != "none":
            continue
        profile = os.path.join(ROOT, CAMPAIGN, "profiles", f"{model}.json")
        base = run_scenario(none, profile, calibration)
        predicted_none = simulate(base).step_time_s
        for option, changes in OPTIONS.items():
            run = by_key.get((model, transport, option))
            if run is None:
                continue
            scenario = dataclasses.replace(base, ddp=dataclasses.replace(base.ddp, **changes))
            predicted = simulate(scenario).step_time_s
            rows.append({
                "option": option, "model": model, "transport": transport,
                "measured_ratio": run["step_s_median"] / none["step_s_median"],
                "predicted_ratio": predicted / predicted_none,
                "repeat_noise": max(_round_gap(run), _round_gap(none)),
            })
    return rows


def error_table(rows: list[dict]) -> dict:
    table = {}
    for option in OPTIONS:
        mine = [r for r in rows if r["option"] == option]
        if not mine:
            continue
        errors = [r["predicted_ratio"] - r["measured_ratio"] for r in mine]
        table[option] = {
            "rms_error": math.sqrt(sum(e * e for e in errors) / len(errors)),
            "median_repeat_noise": sorted(r["repeat_noise"] for r in mine)[len(mine) // 2],
            "n": len(mine),
            "runs": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items() if k != "option"}
                     for r in mine],
        }
    return table


def write_module(table: dict) -> None:
    body = pprint.pformat(table, width=110, sort_dicts=True)
    text = (
        '"""Measured error of ddpsim\'s predicted effect of each DDP option (written by\n'
        "benchmarks/option_effects.py --write; do not edit by hand).\n\n"
        f"Source: {CAMPAIGN} (4 x H200, NVLink and sockets, cap 25), simulated with {CALIBRATION}.\n"
        "Per option: every run's predicted and measured ratio (option step / none step), the RMS of\n"
        "(predicted - measured) over them, and the median repeat noise of the pairs (the larger relative\n"
        "gap between the two rounds of the option's and the none run).\n"
        '"""\n\n'
        f"SOURCE = {CAMPAIGN!r}\n"
        f"OPTION_ERRORS: dict = {body}\n"
    )
    with open(os.path.join(ROOT, OUT), "w") as f:
        f.write(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    rows = compare()
    table = error_table(rows)
    if a.json:
        print(json.dumps(table, indent=1))
    else:
        print(f"{'option':13} {'model':11} {'link':7} {'measured':>8} {'predicted':>9} {'noise':>6}")
        for r in rows:
            print(f"{r['option']:13} {r['model']:11} {r['transport']:7} {r['measured_ratio']:8.3f} "
                  f"{r['predicted_ratio']:9.3f} {100 * r['repeat_noise']:5.1f}%")
        for option, t in table.items():
            print(f"{option:13} rms error {t['rms_error']:.3f}  median repeat noise "
                  f"{100 * t['median_repeat_noise']:.1f}%  (n={t['n']})")
    if a.write:
        write_module(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
