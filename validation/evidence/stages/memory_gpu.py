"""Peak memory per GPU, predicted against measured on 2 x H200 (``validation/data/memory-2026-11-28``).

Two models of the user's own (``validation/campaigns/memory_models.py``: a 220 M LLaMA-style decoder at batch 8 x
1024 tokens, a ViT-B/16-shaped encoder at batch 64), bf16 autocast, AdamW. Measured by
``validation/campaigns/memory_gpu.py``: torch.cuda.max_memory_allocated over 5 steps after 3 warm-up steps, the max
over ranks. Predicted from ``torch:validation.campaigns.memory_models:build_*`` (PyTorch's MemTracker on fake
tensors, CPU) through ddpsim's memory model; nothing was fitted to these runs: every row is held out.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

from ddpsim.hardware.catalog import get_gpu
from ddpsim.hardware.compute import step_compute
from ddpsim.scenario.schema import WorkloadSpec
from ddpsim.sharded.checkpointing import recomputed_layers
from ddpsim.sharded.memory import Precision, memory_by_strategy
from ddpsim.sharded.units import shard_units
from ddpsim.workload.model import Workload
from ddpsim.workload.resolve import load_workload
from validation.evidence import ROOT

DATA = "validation/data/memory-2026-11-28/memory.json"
FACTORIES = {"decoder": ("torch:validation.campaigns.memory_models:build_decoder", 1024),
             "encoder": ("torch:validation.campaigns.memory_models:build_encoder", None)}
AC_EVERY = {"none": 0, "full": 1, "every_2": 2}


@functools.lru_cache(maxsize=4)
def _workload(name: str, batch_size: int) -> Workload:
    """The model imported as a scenario's torch: workload (MemTracker runs once per model)."""
    model, seq_len = FACTORIES[name]
    spec = WorkloadSpec(model=model, batch_size=batch_size, precision="bf16-amp", seq_len=seq_len, optimizer="adamw")
    return load_workload(spec, ROOT)


def predictions() -> list[dict[str, Any]]:
    """One row per measured run: what was run, measured and predicted peak bytes, and the error."""
    with open(os.path.join(ROOT, DATA), encoding="utf-8") as handle:
        data = json.load(handle)
    runs = data["two_gpu"] + data["one_gpu"]
    workloads = {name: _workload(name, next(r["batch_size"] for r in runs if r["model"] == name))
                 for name in FACTORIES}
    rows = []
    for run in runs:
        workload = workloads[run["model"]]
        units = shard_units(workload)
        every = AC_EVERY[run["activation_checkpointing"]]
        precision = Precision(run.get("param_dtype") or "bf16", run.get("reduce_dtype") or "fp32")
        by = memory_by_strategy(workload, run["world_size"], 2, units, precision, optimizer="adamw",
                                checkpoint_every=every)
        strategy = "ddp" if run["strategy"] == "none" else run["strategy"]
        memory = by[strategy]
        # a one-GPU run without DDP has no bucket copy
        predicted = memory["total"] - (memory.get("ddp_buckets", 0.0) if run["strategy"] == "none" else 0.0)
        measured = run["peak_allocated_bytes"]
        rows.append({"model": run["model"], "strategy": run["strategy"], "world_size": run["world_size"],
                     "activation_checkpointing": run["activation_checkpointing"], "measured_bytes": measured,
                     "predicted_bytes": predicted, "error": predicted / measured - 1.0, "step_s": run["step_s"]})
    return rows


def checkpointing_time() -> list[dict[str, Any]]:
    """Activation checkpointing's step-time cost on one GPU: measured and predicted step over the plain step."""
    with open(os.path.join(ROOT, DATA), encoding="utf-8") as handle:
        data = json.load(handle)
    runs = [r for r in data["one_gpu"] if r["model"] == "decoder"]
    workload = _workload("decoder", runs[0]["batch_size"])
    units = shard_units(workload)
    gpu = get_gpu("H200")

    def step_s(every: int) -> float:
        c = step_compute(workload, gpu, optimizer="adamw", recompute=recomputed_layers(units, every))
        return c.forward_s + c.backward_s + c.optimizer_s

    plain_measured = next(r["step_s"] for r in runs if r["activation_checkpointing"] == "none")
    rows = []
    for run in runs:
        if run["activation_checkpointing"] == "none":
            continue
        every = AC_EVERY[run["activation_checkpointing"]]
        measured = run["step_s"] / plain_measured
        predicted = step_s(every) / step_s(0)
        rows.append({"activation_checkpointing": run["activation_checkpointing"], "measured_ratio": measured,
                     "predicted_ratio": predicted, "error": predicted / measured - 1.0})
    return rows


def run() -> str:
    rows = predictions()
    lines = ["Peak memory per GPU, predicted (PyTorch's MemTracker on the CPU through ddpsim's memory model) against "
             "measured (torch.cuda.max_memory_allocated), 2 x H200, bf16 autocast, AdamW; no fit, every row held out.",
             "", "| model | strategy | GPUs | activation checkpointing | measured GiB | predicted GiB | error |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['strategy']} | {r['world_size']} | {r['activation_checkpointing']} | "
                     f"{r['measured_bytes'] / 2**30:.2f} | {r['predicted_bytes'] / 2**30:.2f} | {100 * r['error']:+.1f}% |")
    errors = [abs(r["error"]) for r in rows]
    lines += ["", f"mean |error| {100 * sum(errors) / len(errors):.1f}%, max {100 * max(errors):.1f}% over {len(rows)} runs",
              "", "Activation checkpointing's step time on one H200 (decoder), as a ratio to the plain step:", "",
              "| activation checkpointing | measured | predicted | error |", "|---|---|---|---|"]
    for r in checkpointing_time():
        lines.append(f"| {r['activation_checkpointing']} | {r['measured_ratio']:.3f} | {r['predicted_ratio']:.3f} | "
                     f"{100 * r['error']:+.1f}% |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())
