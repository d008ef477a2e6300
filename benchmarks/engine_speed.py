"""Engine speed: detailed vs fast mode, 64 to 4,096 GPUs, and perturbed clusters at 16,384 GPUs.

GPT-2 124M and LLaMA-7B gradients (25 MB buckets) on H100 nodes of 8 over a rail-optimised 400G
fat tree, ring, tree and hierarchical all-reduce. Every measurement runs ``simulate()`` in a fresh
process (so its peak RSS is its own) and times only the simulation (prepare included, imports
not): CPU seconds (process time) and wall seconds, the median of 3 runs; peak RSS is the largest
of the 3. ``fast/detailed`` is the relative difference of the step times where both modes run.

The perturbed cases: one straggler (rank 77, 1.3x compute), per-rank jitter (cv 5%, one step,
and three steps), a degraded NIC link (30% bandwidth).

Run: .venv/bin/python benchmarks/engine_speed.py [--quick] > benchmarks/engine_speed_output.txt
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys

POINT = r"""
import json, resource, sys, time
from ddpsim.loader import scenario_from_dict
from ddpsim.simulation import simulate
model, gpus, algorithm, mode, extra = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
scenario = scenario_from_dict({
    "workload": {"model": model, "batch_size": 1 if model == "llama-7b" else 8, "precision": "bf16-amp"},
    "cluster": {"gpu": "H100-SXM", "nodes": max(1, gpus // 8), "gpus_per_node": min(8, gpus),
                "intra_node": {"type": "nvswitch", "bandwidth": "450GB/s", "latency": "3us"},
                "inter_node": {"type": "rail-fat-tree", "nic_bandwidth": "400Gbps", "latency": "5us"}},
    "ddp": {"bucket_cap_mb": 25},
    "collective": {"algorithm": algorithm},
    "simulation": {"mode": mode, **extra},
})
cpu, wall = time.process_time(), time.perf_counter()
result = simulate(scenario)
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
print(json.dumps({"cpu_s": cpu, "wall_s": wall, "events": result.events, "step_s": result.step_time_s,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "ranks": result.simulated_ranks}))
"""

PERTURBATIONS = {
    "straggler": {"straggler_rank": 77, "straggler_slowdown": 1.3},
    "jitter": {"jitter_cv": 0.05},
    "jitter x3 steps": {"jitter_cv": 0.05, "iterations": 3},
    "degraded link": {"degraded_link_factor": 0.3},
}


def measure(model: str, gpus: int, algorithm: str, mode: str, extra: dict, repeats: int) -> dict:
    runs = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", POINT, model, str(gpus), algorithm, mode, json.dumps(extra)],
                             capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {
        "cpu_s": statistics.median(r["cpu_s"] for r in runs),
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "peak_mb": max(r["peak_mb"] for r in runs),
        "events": runs[0]["events"],
        "step_s": runs[0]["step_s"],
        "ranks": runs[0]["ranks"],
    }


HEADER = (f"{'model':>9} {'GPUs':>6} {'algorithm':>12} {'case':>15} {'mode':>8} {'CPU s':>7} {'wall s':>7} "
          f"{'peak MB':>8} {'events':>7} {'ranks':>5} {'step ms':>10} {'fast/detailed':>13}")


def row(model: str, gpus: int, algorithm: str, case: str, mode: str, p: dict, agree: str = "") -> str:
    return (f"{model:>9} {gpus:>6} {algorithm:>12} {case:>15} {mode:>8} {p['cpu_s']:>7.2f} {p['wall_s']:>7.2f} "
            f"{p['peak_mb']:>8.0f} {p['events']:>7} {p['ranks']:>5} {p['step_s'] * 1e3:>10.3f} {agree:>13}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="one run per point, GPT-2 only")
    args = parser.parse_args()
    repeats = 1 if args.quick else 3
    models = ("gpt2-124m",) if args.quick else ("gpt2-124m", "llama-7b")
    sizes = (64, 256, 1024, 4096)
    print("Symmetric clusters: detailed vs fast (CPU and wall seconds: median of 3; peak RSS: max of 3)")
    print(HEADER)
    growth: list[str] = []
    for model in models:
        for algorithm in ("ring", "tree", "hierarchical"):
            detailed_cpu = {}
            for gpus in sizes:
                points = {mode: measure(model, gpus, algorithm, mode, {}, repeats) for mode in ("detailed", "fast")}
                detailed_cpu[gpus] = points["detailed"]["cpu_s"]
                agree = f"{points['fast']['step_s'] / points['detailed']['step_s'] - 1:+.1e}"
                for mode, p in points.items():
                    print(row(model, gpus, algorithm, "symmetric", mode, p, agree if mode == "fast" else ""),
                          flush=True)
            exponent = math.log(detailed_cpu[sizes[-1]] / detailed_cpu[sizes[0]]) / math.log(sizes[-1] / sizes[0])
            growth.append(f"  {model} {algorithm}: detailed CPU time ~ n^{exponent:.2f} from {sizes[0]} to {sizes[-1]} GPUs")
    print()
    print("Perturbed clusters at 16,384 GPUs, ring (ranks: ranks simulated after folding)")
    print(HEADER)
    for model in models:
        for case, extra in PERTURBATIONS.items():
            points = {mode: measure(model, 16384, "ring", mode, extra, repeats) for mode in ("detailed", "fast")}
            agree = f"{points['fast']['step_s'] / points['detailed']['step_s'] - 1:+.1e}"
            for mode, p in points.items():
                print(row(model, 16384, "ring", case, mode, p, agree if mode == "fast" else ""), flush=True)
    print()
    print("Cost growth (fitted over the symmetric sizes):")
    print("\n".join(growth))
    print()
    # exact rank dropping keeps the Pareto front of the ranks' per-step factors: it grows with the steps
    from ddpsim.ddp.fold import draw_factors, plan_ranks

    print("Ranks simulated at 16,384 GPUs with jitter (cv 5%), by simulation.iterations:")
    for steps in (1, 2, 3, 5, 10):
        print(f"  {steps:>2} steps: {len(plan_ranks(draw_factors(16384, steps, 0, 0.05, None, 1.0)).factors)} ranks")


if __name__ == "__main__":
    main()
