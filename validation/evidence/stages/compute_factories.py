"""Step time of user factories with no profile, predicted on the CPU against measured on one H200.

The campaign ``factories-h200-2026-12-02`` (its README): ten models written as users write them, bf16 autocast
opened inside ``loss_fn``, fp32, and bf16 with every block checkpointed, one run per process, the median of five
plain training steps (AdamW, no DDP). Each is predicted as a one-GPU scenario whose workload is the same
``torch:`` factory: the torch importer traces it on the CPU and ddpsim's compute model prices its kernels from the
H200's datasheet and the shipped per-unit efficiencies (``ddpsim/hardware/data/compute_classes.json``). No fit saw
any of these runs. Checkpointing's slow-down (checkpointed over plain step, bf16) is compared per model too.
"""

from __future__ import annotations

import statistics
from typing import Any

from validation.evidence import ROOT
from validation.evidence.stages.memory_factories import DATA, records

PRECISIONS = {"bf16": "bf16-amp", "fp32": "fp32"}


def predict(record: dict[str, Any]) -> dict[str, Any]:
    """The one-GPU step ddpsim predicts for the run, and its error against the measured median step."""
    from ddpsim.loader import scenario_from_dict
    from ddpsim.simulation import simulate

    workload: dict[str, Any] = {"model": f"torch:{record['factory']}", "batch_size": record["batch_size"],
                                "precision": PRECISIONS[record["precision"]], "optimizer": "adamw"}
    if record.get("seq_len"):
        workload["seq_len"] = record["seq_len"]
    if record["checkpointing"] == "full":
        workload["activation_checkpointing"] = "full"
    scenario = {"workload": workload, "cluster": {"gpu": "H200", "nodes": 1, "gpus_per_node": 1}}
    result = simulate(scenario_from_dict(scenario, file=f"<{record['factory']}>", base_dir=ROOT))
    return {k: record[k] for k in ("model", "precision", "checkpointing")} | {
        "measured_s": float(record["step_s"]), "predicted_s": result.step_time_s,
        "error": result.step_time_s / float(record["step_s"]) - 1.0}


def run(path: str = DATA) -> str:
    rows = [predict(r) for r in records(path)]
    lines = ["One-GPU step time of user factories with no profile (torch: traced on the CPU, ddpsim's compute model) "
             "against measured on one H200 (factories-h200-2026-12-02); no fit saw these runs.", "",
             "| model | precision | checkpointing | measured ms | predicted ms | error |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['precision']} | {r['checkpointing']} | {1e3 * r['measured_s']:.1f} | "
                     f"{1e3 * r['predicted_s']:.1f} | {100 * r['error']:+.1f}% |")
    for name, part in (("all runs", rows), ("without checkpointing", [r for r in rows if r["checkpointing"] == "none"]),
                       ("checkpointed", [r for r in rows if r["checkpointing"] != "none"])):
        errors = [abs(r["error"]) for r in part]
        if errors:
            lines.append(f"\n{name}: mean |error| {100 * statistics.mean(errors):.1f}%, max {100 * max(errors):.1f}% "
                         f"over {len(errors)} runs, signed mean {100 * statistics.mean(r['error'] for r in part):+.1f}%")
    by = {(r["model"], r["checkpointing"]): r for r in rows if r["precision"] == "bf16"}
    slow = [(m, by[(m, "full")], by[(m, "none")]) for (m, c) in by if c == "full" and (m, "none") in by]
    if slow:
        lines += ["", "checkpointing every block, bf16: measured / predicted slow-down (checkpointed over plain step)"]
        errors = []
        for m, full, none in sorted(slow, key=lambda x: x[0]):
            measured, predicted = full["measured_s"] / none["measured_s"], full["predicted_s"] / none["predicted_s"]
            errors.append(abs(predicted / measured - 1))
            lines.append(f"- {m}: {measured:.2f}x / {predicted:.2f}x ({100 * (predicted / measured - 1):+.1f}%)")
        lines.append(f"slow-down error: mean {100 * statistics.mean(errors):.1f}%, max {100 * max(errors):.1f}%")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())
