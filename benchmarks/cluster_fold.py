"""One simulated step at 16,384 and 131,072 GPUs: the folded network against pricing every rank.

ResNet-50 (the quickstart scenario) and GPT-2 124M on H100 nodes of 8 over a rail-optimised 400G
fabric, FAST mode, one step with per-rank jitter (cv 0.05) and a straggler (rank 5, 1.3x) for DDP,
and ZeRO-3 (whose step takes no jitter). Each point runs in a fresh process (peak RSS is its own)
and times reading the scenario, ``prepare`` and ``simulate`` (imports and interpreter start are not
counted: about a second, the same at every size). Every point runs ``--repeat`` times, interleaved,
and the median is kept; the figures that matter are the ratios, measured in this one run on a
shared machine (its load average is printed at start and end).

Run: .venv/bin/python benchmarks/cluster_fold.py [--repeat 3] > benchmarks/cluster_fold_output.txt
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

POINT = r"""
import json, resource, sys, time
from ddpsim.loader import load_scenario
from ddpsim.simulation import prepare, simulate
model, nodes, strategy, fold, nodes_per_leaf = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1", sys.argv[5]
sets = [f"cluster.nodes={nodes}", f"parallel.strategy={strategy}", f"workload.model={model}"]
if strategy == "ddp":
    sets += ["simulation.jitter_cv=0.05", "simulation.straggler_rank=5", "simulation.straggler_slowdown=1.3"]
if nodes_per_leaf != "-":
    sets += [f"cluster.inter_node.nodes_per_leaf={nodes_per_leaf}", "cluster.inter_node.oversubscription=2"]
start = time.perf_counter()
scenario = load_scenario("scenarios/quickstart.yaml", sets)
prep = prepare(scenario, fold=fold)
prepared = time.perf_counter()
result = simulate(prep)
end = time.perf_counter()
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"wall_s": end - start, "prepare_s": prepared - start, "simulate_s": end - prepared,
                  "peak_mb": peak_mb, "step_s": result.step_time_s, "ranks": result.simulated_ranks,
                  "busiest": result.links[0].busy_s if result.links else 0.0}))
"""


def run_point(model: str, nodes: int, strategy: str, fold: bool, per_leaf: str) -> dict:
    out = subprocess.run([sys.executable, "-c", POINT, model, str(nodes), strategy, "1" if fold else "0", per_leaf],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"# benchmarks/cluster_fold.py, load average {os.getloadavg()[0]:.1f} / {os.cpu_count()} cores at the start")
    cases = [(model, strategy, per_leaf) for model in ("resnet50", "gpt2-124m") for strategy in ("ddp", "zero3")
             for per_leaf in ("-", "32")]
    # (case, nodes, fold) -> runs; interleaved so that a burst of load hits every point alike
    runs: dict[tuple, list[dict]] = {}
    points = [(case, nodes, True) for case in cases for nodes in (2048, 16384)]
    points += [(case, 2048, False) for case in cases]  # every rank priced, at 16,384 GPUs
    for _ in range(args.repeat):
        for case, nodes, fold in points:
            runs.setdefault((case, nodes, fold), []).append(run_point(case[0], nodes, case[1], fold, case[2]))

    def median(key: tuple, field: str) -> float:
        return statistics.median(r[field] for r in runs[key])

    print(f"{'model':>10} {'strategy':>8} {'leaf':>4} {'GPUs':>7} {'network':>10} {'wall s':>7} {'prep s':>7} "
          f"{'sim s':>7} {'peak MB':>8} {'ranks':>5} {'step ms':>9}")
    for case in cases:
        for nodes, fold in ((2048, False), (2048, True), (16384, True)):
            key = (case, nodes, fold)
            r = runs[key][0]
            print(f"{case[0]:>10} {case[1]:>8} {case[2]:>4} {nodes * 8:>7} {'folded' if fold else 'every rank':>10} "
                  f"{median(key, 'wall_s'):7.2f} {median(key, 'prepare_s'):7.2f} {median(key, 'simulate_s'):7.2f} "
                  f"{max(x['peak_mb'] for x in runs[key]):8.0f} {r['ranks']:>5} {r['step_s'] * 1e3:9.3f}")
    print("\nratios (medians of this run):")
    print(f"{'model':>10} {'strategy':>8} {'leaf':>4} {'131072/16384 wall':>18} {'peak MB 131072':>15} "
          f"{'every/folded 16384':>19} {'folded-every step':>18} {'busiest link':>13}")
    for case in cases:
        small, large, every = (case, 2048, True), (case, 16384, True), (case, 2048, False)
        step_diff = runs[small][0]["step_s"] / runs[every][0]["step_s"] - 1
        busy_diff = runs[small][0]["busiest"] / runs[every][0]["busiest"] - 1 if runs[every][0]["busiest"] else 0.0
        print(f"{case[0]:>10} {case[1]:>8} {case[2]:>4} {median(large, 'wall_s') / median(small, 'wall_s'):18.2f} "
              f"{max(x['peak_mb'] for x in runs[large]):15.0f} {median(every, 'wall_s') / median(small, 'wall_s'):19.1f} "
              f"{step_diff:+18.1e} {busy_diff:+13.1e}")
    print(f"# load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
