"""Predicted vs measured effect of each DDP option in every options campaign, and the per-option error
table the advisor uses (``ddpsim/planning/data/option_errors.json``, written by ``--write``; read by
``ddpsim/planning/option_errors.py``).

The campaigns (``CAMPAIGNS``): three 4 x H200 allocations (``validation/data/h200x4-options-2026-11-26``,
``h200x4-options-2026-11-27`` and ``-27b``, the last two with the whole plan launched twice) and eight 4 x H100
allocations, at 4 GPUs and, where measured, 2 GPUs. For every model, transport and world size of each
campaign the run of variant ``none`` at cap 25 and each option's run are simulated with
``run_scenario``, the campaign's own profile and the shipped calibration
``x4:H200``, the run's DDP options set on the scenario. Effect = option step /
none step, measured (pooled medians of the same launch) and predicted. A model without a profile in
its campaign is skipped.

Per option the table keeps every (campaign, model, transport, world size) (predicted, measured) ratio
and the root mean square of (predicted - measured) over them. It also records the campaign's own repeat
noise for the pair: the larger relative gap between round 1 and round 2 of the two runs, so that an
error at the level of that noise can be told from a model error.

    .venv/bin/python benchmarks/option_effects.py            # print the table
    .venv/bin/python benchmarks/option_effects.py --write    # and rewrite ddpsim/planning/data/option_errors.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ddpsim.calibration.file import read_calibration  # noqa: E402
from ddpsim.fitting.measured_scenarios import run_scenario  # noqa: E402
from ddpsim.fitting.measurements import read_ddp_runs  # noqa: E402
from ddpsim.outdir import atomic_write_text  # noqa: E402
from ddpsim.planning.option_errors import DATA_FILE, format_table  # noqa: E402
from ddpsim.simulation import simulate  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAMPAIGNS = tuple(f"validation/data/{name}" for name in (
    "h200x4-options-2026-11-26", "h100x4-options-2026-11-26", "h100x4-options-2026-11-26b",
    "h100x4-options-2026-11-26c", "h100x4-options-2026-11-26d", "h100x4-options-2026-11-26e",
    "h100x4-options-2026-11-26f", "h100x4-options-2026-11-26f-w2", "h100x4-options-2026-11-26g",
    "h100x4-options-2026-11-26g-w2", "h100x4-options-2026-11-26h", "h100x4-options-2026-11-26h-w2",
    "h200x4-options-2026-11-27", "h200x4-options-2026-11-27b"))
SOURCE = ("14 options campaigns on three 4 x H200 and eight 4 x H100 allocations "
          "(validation/data/h*-options-2026-11-26*, h200x4-options-2026-11-27 and -27b)")
CALIBRATION = "x4:H200"  # the shipped calibration, by name
OPTIONS = {
    "find_unused": {"find_unused_parameters": True},
    "static_graph": {"static_graph": True},
    "gbv": {"gradient_as_bucket_view": True},
    "fp16": {"comm_hook": "fp16"},
    "bf16": {"comm_hook": "bf16"},
}
OUT = os.path.join("ddpsim/planning", DATA_FILE)


def _round_gap(run: dict) -> float | None:
    """None where the launch ran out of time for a second round (nothing to compare)."""
    medians = run.get("round_medians_s") or []
    if len(medians) < 2:
        return None
    a, b = medians[:2]
    return abs(a - b) / min(a, b)


def _repeat_noise(*runs: dict) -> float | None:
    gaps = [_round_gap(r) for r in runs]
    return None if any(g is None for g in gaps) else max(g for g in gaps if g is not None)


def compare() -> list[dict]:
    # the H100 options campaigns too, on purpose (an option's effect is a ratio of two steps on one machine)
    calibration = replace(read_calibration(CALIBRATION), other_gpu_allowed=True)
    rows = []
    for campaign in CAMPAIGNS:
        runs = [r for r in read_ddp_runs(os.path.join(ROOT, campaign, "ddp_runs.jsonl"))
                if r.get("status") == "ok" and r["bucket_cap_mb"] == 25]
        # an option is paired with the plain run of its own launch (X and Y launched the whole plan twice)
        by_key = {(r["launch_id"], r["model"], r["transport"], r["world_size"], r["variant"]): r for r in runs}
        for (launch, model, transport, world, variant), none in sorted(by_key.items()):
            profile = os.path.join(ROOT, campaign, "profiles", f"{model}.json")
            if variant != "none" or not os.path.exists(profile):
                continue
            base = run_scenario(none, profile, calibration)
            predicted_none = simulate(base).step_time_s
            for option, changes in OPTIONS.items():
                run = by_key.get((launch, model, transport, world, option))
                if run is None:
                    continue
                scenario = dataclasses.replace(base, ddp=dataclasses.replace(base.ddp, **changes))
                predicted = simulate(scenario).step_time_s
                rows.append({
                    "option": option, "campaign": os.path.basename(campaign), "launch_id": launch, "model": model,
                    "transport": transport, "world_size": world,
                    "measured_ratio": run["step_s_median"] / none["step_s_median"],
                    "predicted_ratio": predicted / predicted_none,
                    "repeat_noise": _repeat_noise(run, none),
                })
    return rows


def _median(values: list[float]) -> float | None:
    return sorted(values)[len(values) // 2] if values else None


def error_table(rows: list[dict]) -> dict:
    table = {}
    for option in OPTIONS:
        mine = [r for r in rows if r["option"] == option]
        if not mine:
            continue
        errors = [r["predicted_ratio"] - r["measured_ratio"] for r in mine]
        table[option] = {
            "rms_error": math.sqrt(sum(e * e for e in errors) / len(errors)),
            "median_repeat_noise": _median([r["repeat_noise"] for r in mine if r["repeat_noise"] is not None]),
            "n": len(mine),
            "runs": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items() if k != "option"}
                     for r in mine],
        }
    return table


def write_data(table: dict) -> None:
    atomic_write_text(os.path.join(ROOT, OUT), format_table(SOURCE, CALIBRATION, table))


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
        print(f"{'option':13} {'campaign':30} {'model':11} {'link':7} {'GPUs':>4} {'measured':>8} {'predicted':>9} "
              f"{'noise':>6}")
        for r in rows:
            print(f"{r['option']:13} {r['campaign']:30} {r['model']:11} {r['transport']:7} {r['world_size']:4d} "
                  f"{r['measured_ratio']:8.3f} "
                  f"{r['predicted_ratio']:9.3f} "
                  + (f"{100 * r['repeat_noise']:5.1f}%" if r["repeat_noise"] is not None else "     -"))
        for option, t in table.items():
            noise = t["median_repeat_noise"]
            print(f"{option:13} rms error {t['rms_error']:.3f}  median repeat noise "
                  + (f"{100 * noise:.1f}%" if noise is not None else "-") + f"  (n={t['n']})")
    if a.write:
        write_data(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
