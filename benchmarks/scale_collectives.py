"""How the FAST collective model scales: wall time and peak memory to price one all-reduce.

Run: ``.venv/bin/python benchmarks/scale_collectives.py [--bytes 25e6]``. Each row builds a
rail-optimised H100-like cluster (NVSwitch 450 GB/s, 8 x 400 Gb/s NICs per node) and prices one
all-reduce per algorithm from a cold model (schedule, routes, fair rates included).
Columns: ch = channels (rings/trees, one per NIC), build s = topology build, price s = first
pricing (schedule, routes, max-min rates), peak MB = tracemalloc peak of build + pricing.
After each size, what ``auto`` picks for the same all-reduce (NCCL's tuning: algorithm and
protocol with the least NCCL-model estimate) and its predicted time.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

from ddpsim.collectives import ALGORITHMS, CollectiveModel
from ddpsim.scenario.schema import ClusterSpec, InterNodeSpec, IntraNodeSpec
from ddpsim.topology import build_topology

GPUS_PER_NODE = 8


def cluster(nodes: int) -> ClusterSpec:
    return ClusterSpec(
        gpu="h100", nodes=nodes, gpus_per_node=GPUS_PER_NODE,
        intra_node=IntraNodeSpec("nvswitch", 450e9, 3e-6),
        inter_node=InterNodeSpec("rail-fat-tree", 50e9, 5e-6),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=float, default=25e6, help="all-reduce size per rank, bytes")
    parser.add_argument("--max-gpus", type=int, default=16384)
    args = parser.parse_args()
    print(f"all-reduce of {args.bytes / 1e6:g} MB, protocol simple, FAST mode")
    print(f"{'GPUs':>6} {'algorithm':>12} {'ch':>3} {'build s':>8} {'price s':>8} {'peak MB':>8} {'predicted ms':>13} {'busbw GB/s':>10}")
    gpus = GPUS_PER_NODE
    while gpus <= args.max_gpus:
        for algorithm in ALGORITHMS:
            # timed pass, then a separate traced pass for memory (tracing slows Python severalfold)
            start = time.perf_counter()
            topology = build_topology(cluster(gpus // GPUS_PER_NODE))
            built = time.perf_counter()
            model = CollectiveModel(topology)
            time_s = model.allreduce_time_s(args.bytes, algorithm, "simple")
            priced = time.perf_counter()
            tracemalloc.start()
            CollectiveModel(build_topology(cluster(gpus // GPUS_PER_NODE))).allreduce_time_s(args.bytes, algorithm, "simple")
            peak_MB = tracemalloc.get_traced_memory()[1] / 1e6
            tracemalloc.stop()
            busbw = model.bus_bandwidth_Bps(args.bytes, algorithm, "simple") / 1e9
            print(f"{gpus:>6} {algorithm:>12} {model.channels:>3} {built - start:>8.3f} {priced - built:>8.3f} "
                  f"{peak_MB:>8.1f} {time_s * 1e3:>13.3f} {busbw:>10.1f}")
        pick = "/".join(model.choose(args.bytes))
        auto_s = model.allreduce_time_s(args.bytes)
        print(f"{gpus:>6} {'auto':>12} {pick:>30} {auto_s * 1e3:>13.3f} "
              f"{model.bus_bandwidth_Bps(args.bytes) / 1e9:>10.1f}")
        gpus *= 2


if __name__ == "__main__":
    main()
