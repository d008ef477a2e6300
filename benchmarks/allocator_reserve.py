"""The caching allocator's reserve over the allocated peak, from the project's clean peak-memory runs.

A planner compares the allocated peak with the GPU's memory, but PyTorch's caching allocator holds more than it
hands out (segments split and cached): ``max_memory_reserved / max_memory_allocated`` of a step. Measured where one
configuration held the GPU alone: one process per configuration, or one after the other with the allocator's cache
emptied between them (the reserved figure of a launch that kept several configurations alive is the process's):

- ``validation/data/memory-2026-11-28/memory.json``: DDP, FSDP2 ZeRO-2 / ZeRO-3 and activation checkpointing,
  two models, 2 x H200 and 1 x H200, one process per configuration;
- ``validation/data/h200x4-fresh-2026-11-28/fsdp/fsdp_runs.jsonl``: DDP, ZeRO-2, ZeRO-3 of GPT-2 on 4 x H200.

    PYTHONPATH=. .venv/bin/python benchmarks/allocator_reserve.py           # print
    PYTHONPATH=. .venv/bin/python benchmarks/allocator_reserve.py --write   # and rewrite the package data
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any

from ddpsim.jsonfile import open_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "ddpsim", "hardware", "data", "allocator_reserve.json")
MEMORY_RUNS = "validation/data/memory-2026-11-28/memory.json"
FSDP_RUNS = "validation/data/h200x4-fresh-2026-11-28/fsdp/fsdp_runs.jsonl"


def measured_ratios(root: str = ROOT) -> list[dict[str, Any]]:
    """One row per run: where, what, and reserved / allocated peak."""
    rows = []
    with open(os.path.join(root, MEMORY_RUNS), encoding="utf-8") as handle:
        memory = json.load(handle)
    for part in ("two_gpu", "one_gpu"):
        for run in memory[part]:
            rows.append({"source": MEMORY_RUNS, "run": f"{run['model']} {run['strategy']} "
                         f"checkpointing={run['activation_checkpointing']} on {run['world_size']} GPU(s)",
                         "ratio": run["peak_reserved_bytes"] / run["peak_allocated_bytes"]})
    with open_data(os.path.join(root, FSDP_RUNS)) as handle:
        for line in handle:
            run = json.loads(line)
            if run.get("status") == "ok" and run.get("memory"):
                rows.append({"source": FSDP_RUNS, "run": f"{run['model']} {run['strategy']} on {run['world_size']} GPUs",
                             "ratio": run["memory"]["peak_reserved_bytes"] / run["memory"]["peak_allocated_bytes"]})
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = [r["ratio"] for r in rows]
    return {"about": "max_memory_reserved / max_memory_allocated of a training step, one configuration on the GPU at a time "
                     "(benchmarks/allocator_reserve.py --write)",
            "sources": sorted({r["source"] for r in rows}), "runs": len(ratios),
            "min": round(min(ratios), 4), "median": round(statistics.median(ratios), 4), "max": round(max(ratios), 4)}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite ddpsim/hardware/data/allocator_reserve.json")
    args = ap.parse_args(argv)
    rows = measured_ratios()
    for r in rows:
        print(f"{r['ratio']:.3f}  {r['run']}  ({r['source']})")
    out = summary(rows)
    print(json.dumps(out, indent=1))
    if args.write:
        with open(OUT, "w", encoding="utf-8") as handle:
            json.dump(out, handle, indent=1)
            handle.write("\n")
        print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
