"""Peak memory of user factories (bf16 autocast inside loss_fn and fp32, with and without checkpointing every
block), predicted on the CPU against measured on one GPU.

The measurements come from ``validation/campaigns/memory_factories.py`` (one model per process, a plain training step
with AdamW, the peak allocated over one step with the optimizer's states in place), written to
``validation/data/factories-h200-2026-12-02/memory_factories.jsonl`` (``DDPSIM_MEMORY_FACTORIES`` names another file). Each run
is predicted as the same factory named ``torch:validation.campaigns.memory_factories:<model>_<precision>``:
PyTorch's MemTracker over the factory's own step on fake tensors, and ddpsim's memory model of a world-size-1 step
(DDP with gradient_as_bucket_view holds the same tensors as the plain step), with
``workload.activation_checkpointing: full`` where the run checkpointed. Nothing was fitted on these runs.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from typing import Any

from validation.evidence import ROOT

DATA = os.environ.get("DDPSIM_MEMORY_FACTORIES",
                      os.path.join(ROOT, "validation/data/factories-h200-2026-12-02/memory_factories.jsonl"))
PRECISIONS = {"bf16": "bf16-amp", "fp32": "fp32"}


def records(path: str = DATA) -> list[dict[str, Any]]:
    """The measured runs (those that failed on the GPU are left out: they carry an ``error``)."""
    with open(path, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return [r for r in rows if "error" not in r]


def predict(record: dict[str, Any]) -> dict[str, Any]:
    """ddpsim's world-size-1 peak for the run, and its error against the measured peak allocated."""
    from ddpsim.errors import ScenarioError
    from ddpsim.sharded.checkpointing import checkpoint_every
    from ddpsim.sharded.memory import resolve_precision, sharded_memory
    from ddpsim.sharded.units import shard_units
    from ddpsim.workload.torch_import import import_torch_model

    precision = PRECISIONS[record["precision"]]
    every = checkpoint_every(record["checkpointing"])
    try:
        # the checkpointed step tracked as PyTorch runs it, as a scenario asking for checkpointing has it tracked
        workload = import_torch_model(record["factory"], record["batch_size"], precision, record.get("seq_len"),
                                      "adamw", every)
    except ScenarioError as err:
        return {**_key(record), "refused": err.detail}
    memory = sharded_memory(workload, "ddp", 1, shard_units(workload), resolve_precision("auto", "auto", precision),
                            gradient_as_bucket_view=True, optimizer="adamw", checkpoint_every=every)
    measured = float(record["peak_allocated_bytes"])
    return {**_key(record), "predicted_bytes": memory["total"], "measured_bytes": measured,
            "error": memory["total"] / measured - 1.0, "source": workload.activation_source}


def _key(record: dict[str, Any]) -> dict[str, Any]:
    return {k: record[k] for k in ("model", "precision", "checkpointing")}


def slowdowns(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Measured step time with every block checkpointed over without, bf16, per model."""
    by = {(r["model"], r["checkpointing"]): r["step_s"] for r in rows if r["precision"] == "bf16"}
    return {m: by[(m, "full")] / by[(m, "none")] for (m, c) in by if c == "full" and (m, "none") in by}


def run(path: str = DATA) -> str:
    if not os.path.exists(path):
        return (f"no measurements at {path}: run validation/campaigns/memory_factories.py on a GPU "
                "(OUT=<folder>) and copy its memory_factories.jsonl there\n")
    rows = records(path)
    predicted = [predict(r) for r in rows]
    lines = ["| model | precision | checkpointing | measured GiB | predicted GiB | error |", "|---|---|---|---|---|---|"]
    for p in predicted:
        if "refused" in p:
            lines.append(f"| {p['model']} | {p['precision']} | {p['checkpointing']} | | refused: {p['refused']} | |")
            continue
        lines.append(f"| {p['model']} | {p['precision']} | {p['checkpointing']} | {p['measured_bytes'] / 2**30:.2f} | "
                     f"{p['predicted_bytes'] / 2**30:.2f} | {100 * p['error']:+.1f}% |")
    errors = [abs(p["error"]) for p in predicted if "error" in p]
    if errors:
        lines += ["", f"{len(errors)} runs priced, {len(predicted) - len(errors)} refused: mean |error| "
                  f"{100 * statistics.mean(errors):.1f}%, max {100 * max(errors):.1f}%"]
    slow = slowdowns(rows)
    if slow:
        lines += ["", "measured slow-down of checkpointing every block (bf16): "
                  + ", ".join(f"{m} {v:.2f}x" for m, v in sorted(slow.items()))]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run(sys.argv[1] if len(sys.argv) > 1 else DATA))
