"""Wall time, events and peak memory of one simulated steady-state step, 8 to 16,384 GPUs.

GPT-2 124M and LLaMA-7B gradients on H100 nodes of 8 over a rail-optimised 400G fat tree, for
ring, tree and hierarchical all-reduce; detailed mode up to 64 GPUs (where both modes run, their
step times are compared), fast mode at every size. Each point runs in a fresh process so peak RSS
is its own.

Run: .venv/bin/python benchmarks/scale.py [--max-gpus 16384] [--models gpt2-124m,llama-7b]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

POINT = r"""
import json, resource, sys, time
from ddpsim.loader import scenario_from_dict
from ddpsim.simulation import simulate
model, gpus, algorithm, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
scenario = scenario_from_dict({
    "workload": {"model": model, "batch_size": 1 if model == "llama-7b" else 8, "precision": "bf16-amp"},
    "cluster": {"gpu": "H100-SXM", "nodes": max(1, gpus // 8), "gpus_per_node": min(8, gpus),
                "intra_node": {"type": "nvswitch", "bandwidth": "450GB/s", "latency": "3us"},
                "inter_node": {"type": "rail-fat-tree", "nic_bandwidth": "400Gbps", "latency": "5us"}},
    "ddp": {"bucket_cap_mb": 25},
    "collective": {"algorithm": algorithm},
    "simulation": {"mode": mode},
})
start = time.perf_counter()
result = simulate(scenario)
wall = time.perf_counter() - start
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"wall_s": wall, "events": result.events, "peak_mb": peak_mb, "step_s": result.step_time_s}))
"""


def run_point(model: str, gpus: int, algorithm: str, mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", POINT, model, str(gpus), algorithm, mode], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-gpus", type=int, default=16384)
    parser.add_argument("--models", default="gpt2-124m,llama-7b")
    args = parser.parse_args()
    sizes = [n for n in (8, 64, 256, 1024, 4096, 16384) if n <= args.max_gpus]
    print(f"{'model':>10} {'GPUs':>6} {'algorithm':>12} {'mode':>9} {'wall s':>8} {'events':>8} {'peak MB':>8} "
          f"{'step ms':>9} {'fast/detailed':>13}")
    for model in args.models.split(","):
        for algorithm in ("ring", "tree", "hierarchical"):
            for gpus in sizes:
                modes = ("detailed", "fast") if gpus <= 64 else ("fast",)
                points = {mode: run_point(model, gpus, algorithm, mode) for mode in modes}
                for mode, p in points.items():
                    agree = ""
                    if mode == "fast" and "detailed" in points:
                        agree = f"{p['step_s'] / points['detailed']['step_s'] - 1:+.2e}"
                    print(f"{model:>10} {gpus:>6} {algorithm:>12} {mode:>9} {p['wall_s']:>8.3f} {p['events']:>8} "
                          f"{p['peak_mb']:>8.0f} {p['step_s'] * 1e3:>9.2f} {agree:>13}", flush=True)


if __name__ == "__main__":
    main()
