"""Wall time of one simulated step: GPT-2 124M on 64 GPUs (8 x 8 H100, 400G rail fat tree).

Run: .venv/bin/python benchmarks/step_speed.py
"""

from __future__ import annotations

import statistics
import time

from ddpsim.loader import scenario_from_dict
from ddpsim.simulation import simulate


def scenario(mode: str, algorithm: str, nodes: int = 8):
    return scenario_from_dict(
        {
            "workload": {"model": "gpt2-124m", "batch_size": 8, "precision": "bf16-amp", "seq_len": 1024},
            "cluster": {
                "gpu": "H100-SXM",
                "nodes": nodes,
                "gpus_per_node": 8,
                "intra_node": {"type": "nvswitch", "bandwidth": "450GB/s", "latency": "3us"},
                "inter_node": {"type": "rail-fat-tree", "nic_bandwidth": "400Gbps", "latency": "5us"},
            },
            "ddp": {"bucket_cap_mb": 25},
            "collective": {"algorithm": algorithm},
            "simulation": {"mode": mode},
        }
    )


def main() -> None:
    print(f"{'GPUs':>5} {'mode':>9} {'algorithm':>12} {'wall s (median of 3)':>21} {'step ms':>9} {'buckets':>8}")
    for mode in ("detailed", "fast"):
        for algorithm in ("auto", "ring", "tree", "hierarchical"):
            walls = []
            for _ in range(3):
                start = time.perf_counter()
                result = simulate(scenario(mode, algorithm))
                walls.append(time.perf_counter() - start)
            print(
                f"{result.world_size:>5} {mode:>9} {algorithm:>12} {statistics.median(walls):>21.3f} "
                f"{result.step_time_s * 1e3:>9.2f} {len(result.buckets):>8}"
            )


if __name__ == "__main__":
    main()
