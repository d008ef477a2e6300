"""What the network endpoint's duplex budget costs the simulator: one step of GPT-2 on 16,384 GPUs
(2,048 nodes of 8, fat-tree, ring and tree), full duplex against a 0.6 budget (one more link per GPU).

Run: ``.venv/bin/python benchmarks/duplex_speed.py`` (median wall seconds of 3, prepare included)."""

from __future__ import annotations

import statistics
import sys
import time

from ddpsim.loader import scenario_from_dict
from ddpsim.simulation import prepare, simulate


def _seconds(duplex: float, algorithm: str) -> tuple[float, float]:
    walls, step = [], 0.0
    for _ in range(3):
        scenario = scenario_from_dict({
            "workload": {"model": "gpt2-124m", "batch_size": 8},
            "cluster": {"gpu": "H100", "nodes": 2048, "gpus_per_node": 8, "intra_node": {"type": "nvswitch"},
                        "inter_node": {"type": "fat-tree", "nic_bandwidth": "400Gbps", "duplex_factor": duplex}},
            "collective": {"algorithm": algorithm},
        })
        t0 = time.perf_counter()
        step = simulate(prepare(scenario)).step_time_s
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls), step


def main() -> int:
    print(f"{'algorithm':9s} {'duplex':>6s} {'wall s':>7s} {'step ms':>9s}")
    for algorithm in ("ring", "tree"):
        for duplex in (1.0, 0.6):
            wall, step = _seconds(duplex, algorithm)
            print(f"{algorithm:9s} {duplex:6.1f} {wall:7.2f} {step * 1e3:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
