"""Peak memory of models of the user's own, predicted on the CPU against measured on one H200.

The campaign ``models-2026-11-28`` (helper harness-mem; its README): ten plain-torch factories at two batch sizes,
fp32 with SGD (momentum 0.9) and bf16 autocast with AdamW, each a world-size-1 ``ddpsim measure`` profile whose
``memory`` object holds the step's measured peak (torch.cuda.max_memory_allocated). Each is predicted as a scenario's
``torch:factory:build`` workload: PyTorch's MemTracker runs the factory's own training step on fake tensors (CPU),
and ddpsim's memory model gives the world-size-1 step's peak (no DDP, so no bucket copy). Nothing was fitted: every
run is held out. The measured profile itself (``profile:``) reproduces its own peak by construction; it is checked
where it predicts something else, the campaign's DDP / ZeRO-2 / ZeRO-3 runs (``ddpsim validate-fsdp``).
"""

from __future__ import annotations

import glob
import json
import os
import sys
from typing import Any

from ddpsim.hardware.compute import memory_per_gpu
from ddpsim.scenario.schema import WorkloadSpec
from ddpsim.workload.resolve import load_workload
from validation.evidence import ROOT

CAMPAIGN = os.environ.get("DDPSIM_MODELS_CAMPAIGN", os.path.join(ROOT, "validation/data/models-2026-11-28"))
PRECISIONS = {"fp32": "fp32", "bf16_autocast": "bf16-amp", "bf16-amp": "bf16-amp"}


def profiles(campaign: str = CAMPAIGN) -> list[dict[str, Any]]:
    """The campaign's profiles of factory models (``name:build@...``), fp32 first."""
    records = []
    for path in sorted(glob.glob(os.path.join(campaign, "profiles", "*.json"))):
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
        if ":" in record["model"].split("@")[0] and "memory" in record:
            records.append(record)
    return sorted(records, key=lambda r: (r["memory"].get("precision") != "fp32", r["model"]))


def predict(record: dict[str, Any], campaign: str = CAMPAIGN) -> dict[str, Any]:
    """One profile predicted: the factory imported with its batch, precision and optimizer (the factories are the
    2026-11-28 campaign's, which later campaigns of the same models ran)."""
    factories = os.path.join(campaign if os.path.isdir(os.path.join(campaign, "factories")) else CAMPAIGN, "factories")
    if factories not in sys.path:
        sys.path.insert(0, factories)
    memory = record["memory"]
    factory = record["model"].split("@")[0]
    precision = PRECISIONS[record["precision"]] if record["precision"] in PRECISIONS else record["precision"]
    optimizer = {"sgd": "sgd_momentum"}.get(memory["optimizer"], memory["optimizer"])
    spec = WorkloadSpec(model=f"torch:{factory}", batch_size=int(record["batch_size"]), precision=precision,
                        seq_len=record.get("seq_len"), optimizer=optimizer)
    workload = load_workload(spec, factories)
    predicted = memory_per_gpu(workload, optimizer)
    peak = predicted["total"] - predicted["ddp_buckets"]
    measured = float(memory["peak_allocated_bytes"])
    return {"model": factory, "batch_size": int(record["batch_size"]), "precision": precision, "optimizer": optimizer,
            "measured_bytes": measured, "predicted_bytes": peak, "error": peak / measured - 1.0,
            "source": workload.activation_source}


def render(rows: list[dict[str, Any]], campaign: str = "models-2026-11-28") -> str:
    lines = ["Peak memory of a world-size-1 step, predicted from torch:factory (PyTorch's MemTracker on the CPU, "
             f"ddpsim's memory model) against measured on one H200 ({campaign}); no fit, every run held out.",
             "", "| model | batch | precision | optimizer | measured GB | predicted GB | error |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['batch_size']} | {r['precision']} | {r['optimizer']} | "
                     f"{r['measured_bytes'] / 1e9:.2f} | {r['predicted_bytes'] / 1e9:.2f} | {100 * r['error']:+.1f}% |")
    errors = [abs(r["error"]) for r in rows]
    if errors:
        lines += ["", f"mean |error| {100 * sum(errors) / len(errors):.1f}%, max {100 * max(errors):.1f}% over "
                  f"{len(rows)} runs of {len({r['model'] for r in rows})} models"]
    return "\n".join(lines) + "\n"


def run() -> str:
    return render([predict(r) for r in profiles()])


ONE_PER_PROCESS = os.path.join(ROOT, "validation/data/remeasure-h200-2026-12-02")


def one_per_process() -> str:
    """The same 40 factory configurations measured again with one model per process (remeasure-h200-2026-12-02):
    no earlier model's tensors in any peak."""
    return render([predict(r, ONE_PER_PROCESS) for r in profiles(ONE_PER_PROCESS)],
                  "remeasure-h200-2026-12-02, one model per process")


if __name__ == "__main__":
    # python -m validation.evidence.stages.memory_models [ROWS.jsonl]: rows appended as they come (a long run)
    out = sys.argv[1] if len(sys.argv) > 1 else None
    done = []
    for record in profiles():
        try:
            row = predict(record)
        except Exception as err:  # noqa: BLE001 - a model the tracker cannot run is reported, not fatal here
            row = {"model": record["model"], "error_text": f"{type(err).__name__}: {err}"[:300]}
        done.append(row)
        if out:
            with open(out, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")
    print(render([r for r in done if "error_text" not in r]))


REMEASURED = os.path.join(ROOT, "validation/data/memdiag-h200x4-2026-11-28")


def remeasured() -> str:
    """The models-2026-11-28 rows that ddpsim missed most, measured again one after the other in a fresh process
    (memdiag-h200x4-2026-11-28): each peak less the bytes the process held before the model was built, what the
    harness records since it stopped counting an earlier model's leftovers."""
    with open(os.path.join(REMEASURED, "memdiag.json"), encoding="utf-8") as handle:
        measured = json.load(handle)
    campaign_peaks = {r["model"]: r["memory"]["peak_allocated_bytes"] for r in profiles()}
    lines = ["Peak memory of a world-size-1 step, predicted from torch:factory (MemTracker on the CPU, ddpsim's memory "
             "model) against the harness's profile_model run alone on one H200 of a fresh 4 x H200 allocation "
             "(memdiag-h200x4-2026-11-28); no fit, every run held out.", "",
             "| model | batch | precision | optimizer | in the campaign launch GB | re-measured GB | predicted GB | "
             "error against re-measured | error against the campaign launch |", "|---|---|---|---|---|---|---|---|---|"]
    errors = []
    for name, entry in measured.items():
        memory = dict(entry["memory"])
        memory["peak_allocated_bytes"] = entry["record_peak_allocated"] - entry["base_bytes"]
        record = {"model": name, "precision": memory["precision"], "batch_size": memory["batch_size"],
                  "seq_len": None, "memory": memory}
        row = predict(record)
        campaign = campaign_peaks.get(name)
        then = f"{100 * (row['predicted_bytes'] / campaign - 1):+.1f}%" if campaign else "-"
        errors.append(abs(row["error"]))
        lines.append(f"| {row['model']} | {row['batch_size']} | {row['precision']} | {row['optimizer']} | "
                     f"{campaign / 1e9 if campaign else float('nan'):.2f} | {row['measured_bytes'] / 1e9:.2f} | "
                     f"{row['predicted_bytes'] / 1e9:.2f} | {100 * row['error']:+.1f}% | {then} |")
    lines += ["", f"mean |error| {100 * sum(errors) / len(errors):.1f}%, max {100 * max(errors):.1f}% over "
              f"{len(errors)} re-measured runs"]
    return "\n".join(lines) + "\n"
