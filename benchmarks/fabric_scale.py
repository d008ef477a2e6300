"""Fabrics at scale: custom graphs of 4,096 and 16,384 GPUs, and all-reduces simulated flow by flow.

Custom graph: nodes of 8 GPUs around an NVSwitch vertex (450 GB/s, 1.5 us per link); GPU i of every
node on the rail-i leaf of its group of 16 nodes (400 Gb/s, 2.5 us); every leaf on each of 8 spines
(800 Gb/s, 0.5 us): 2.5 links per GPU, many equal-length paths. One step of GPT-2 124M (25 MB
buckets), ``simulate()`` from the scenario dict: load (reading the scenario), prepare (workload,
topology, collective model) and simulate (routes are searched here, on first use), in seconds;
``YAML file``: the same scenario read from a YAML file (``load_scenario``, as ``ddpsim run`` does)
instead of from the dict.

Every flow: one 256 MiB ring (or tree) all-reduce with every repetition of every phase simulated on
the flow network (``CollectiveModel.allreduce_process`` without ``exclusive``; DDP's detailed mode
replays repetitions instead). H100 nodes of 8 on a rail-optimised 400G fat tree, 8 channels.
``kept`` is the engine as shipped; ``none`` keeps no max-min solution (``_SOLUTIONS_KEPT = 0``), so
every rate update solves max-min from scratch, as the engine did before. ``FAST ms`` is FAST mode's
price of the same all-reduce (it re-shares bandwidth in its own loop).

Every point runs in a fresh process; peak MB is that process's peak RSS (the interpreter and
imports included, about 50 MB), CPU and wall seconds cover the timed work only.

Run: .venv/bin/python benchmarks/fabric_scale.py [--quick] > benchmarks/fabric_scale_output.txt
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

CUSTOM = r"""
import json, os, resource, sys, tempfile, time
import yaml
from ddpsim.loader import load_scenario, scenario_from_dict
from ddpsim.simulation import prepare, simulate
gpus, mode, algorithm, extra = int(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
via_file = extra.pop("via_file", False)
g, per_leaf, spines = 8, 16, 8
nodes = gpus // g
links = []
for n in range(nodes):
    for i in range(g):
        links.append({"a": f"n{n}.g{i}", "b": f"n{n}.nvsw", "bandwidth": "450GB/s", "latency": "1.5us"})
        links.append({"a": f"n{n}.g{i}", "b": f"leaf{n // per_leaf}.r{i}", "bandwidth": "400Gbps", "latency": "2.5us"})
for leaf in range(-(-nodes // per_leaf)):
    for i in range(g):
        links += [{"a": f"leaf{leaf}.r{i}", "b": f"spine{s}", "bandwidth": "800Gbps", "latency": "0.5us"}
                  for s in range(spines)]
data = {"workload": {"model": "gpt2-124m", "batch_size": 8, "precision": "bf16-amp"},
        "cluster": {"gpu": "H100-SXM", "topology": {"gpus": [f"n{n}.g{i}" for n in range(nodes) for i in range(g)],
                                                     "links": links, "gpus_per_node": g}},
        "ddp": {"bucket_cap_mb": 25}, "collective": {"algorithm": algorithm},
        "simulation": {"mode": mode, **extra}}
if via_file:
    path = os.path.join(tempfile.mkdtemp(), "custom.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(data, f)
cpu, wall = time.process_time(), time.perf_counter()
scenario = load_scenario(path) if via_file else scenario_from_dict(data)
loaded = time.perf_counter()
prep = prepare(scenario)
prepared = time.perf_counter()
result = simulate(prep)
end = time.perf_counter()
print(json.dumps({"links": len(links), "load_s": loaded - wall, "prepare_s": prepared - loaded,
                  "simulate_s": end - prepared, "wall_s": end - wall, "cpu_s": time.process_time() - cpu,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "step_s": result.step_time_s, "algorithm": result.algorithm, "ranks": result.simulated_ranks}))
"""

EVERY_FLOW = r"""
import json, resource, sys, time
import simpy
import ddpsim.network.flows as flows
from ddpsim.collectives import CollectiveModel
from ddpsim.network import FlowNetwork
from ddpsim.scenario.schema import ClusterSpec, InterNodeSpec, IntraNodeSpec
from ddpsim.topology import build_topology
gpus, algorithm, keep = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "kept"
if not keep:
    flows._SOLUTIONS_KEPT = 0
cluster = ClusterSpec(gpu="h100", nodes=gpus // 8, gpus_per_node=8, intra_node=IntraNodeSpec("nvswitch", 450e9, 3e-6),
                      inter_node=InterNodeSpec("rail-fat-tree", 50e9, 5e-6))
nbytes = 256 * 2**20
cpu, wall = time.process_time(), time.perf_counter()
model = CollectiveModel(build_topology(cluster))
env = simpy.Environment()
network = FlowNetwork(env, model.topology.capacity_Bps)
env.process(model.allreduce_process(env, network, nbytes, algorithm, "simple"))
env.run()
print(json.dumps({"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "allreduce_s": env.now, "fast_s": model.allreduce_time_s(nbytes, algorithm, "simple"),
                  "updates": network.rate_updates, "solves": network.rate_solves}))
"""


def run(script: str, *args: object) -> dict:
    out = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, no engine without kept solutions")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} / {os.cpu_count()} cores at the start")
    print()
    print("Custom graph, one step of GPT-2 124M (targets at 16,384 GPUs: <= 2 GB, <= 30 s)")
    print(f"{'GPUs':>6} {'links':>6} {'mode':>8} {'algorithm':>9} {'case':>9} {'load s':>7} {'prep s':>7} "
          f"{'sim s':>7} {'wall s':>7} {'CPU s':>7} {'peak MB':>8} {'ranks':>5} {'step ms':>9}")
    cases = [("fast", "auto", "plain", {}), ("fast", "auto", "YAML file", {"via_file": True}), ("detailed", "ring", "plain", {}), ("detailed", "tree", "plain", {}),
             ("detailed", "ring", "jitter x3", {"jitter_cv": 0.05, "iterations": 3})]
    for gpus in (1024, 4096) if args.quick else (4096, 16384):
        for mode, algorithm, case, extra in cases:
            p = run(CUSTOM, gpus, mode, algorithm, json.dumps(extra))
            print(f"{gpus:>6} {p['links']:>6} {mode:>8} {p['algorithm']:>9} {case:>9} {p['load_s']:>7.2f} "
                  f"{p['prepare_s']:>7.2f} {p['simulate_s']:>7.2f} {p['wall_s']:>7.2f} {p['cpu_s']:>7.2f} "
                  f"{p['peak_mb']:>8.0f} {p['ranks']:>5} {p['step_s'] * 1e3:>9.3f}", flush=True)
    print()
    print("Every flow: one 256 MiB all-reduce, every repetition simulated (target: ring at 4,096 GPUs <= 5 s)")
    print(f"{'GPUs':>6} {'algorithm':>9} {'kept':>5} {'wall s':>7} {'CPU s':>7} {'peak MB':>8} {'updates':>8} "
          f"{'solves':>7} {'sim ms':>9} {'FAST ms':>9} {'sim/FAST-1':>10}")
    sizes = (256, 512, 1024) if args.quick else (512, 1024, 2048, 4096)
    walls: dict[tuple[str, str], dict[int, float]] = {}
    for algorithm in ("ring", "tree"):
        for gpus in sizes:
            for keep in ("kept", "none"):
                if keep == "none" and (args.quick or (gpus > 2048 and algorithm == "ring")):
                    continue  # tens of seconds each: the growth is clear from the smaller sizes
                p = run(EVERY_FLOW, gpus, algorithm, keep)
                walls.setdefault((algorithm, keep), {})[gpus] = p["cpu_s"]
                print(f"{gpus:>6} {algorithm:>9} {keep:>5} {p['wall_s']:>7.2f} {p['cpu_s']:>7.2f} {p['peak_mb']:>8.0f} "
                      f"{p['updates']:>8} {p['solves']:>7} {p['allreduce_s'] * 1e3:>9.3f} {p['fast_s'] * 1e3:>9.3f} "
                      f"{p['allreduce_s'] / p['fast_s'] - 1:>+10.1e}", flush=True)
    print()
    print("Cost growth (CPU seconds, fitted between the smallest and largest size measured):")
    for (algorithm, keep), by_size in walls.items():
        lo, hi = min(by_size), max(by_size)
        if hi > lo and by_size[lo] > 0:
            exponent = math.log(by_size[hi] / by_size[lo]) / math.log(hi / lo)
            print(f"  {algorithm:>4}, solutions {keep:>4}: ~ n^{exponent:.2f} from {lo} to {hi} GPUs")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
