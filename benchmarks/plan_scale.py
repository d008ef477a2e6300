"""Planning commands at scale: a 100-point sweep at 16,384 GPUs against one point, and a 12-point
scaling curve to 131,072 GPUs.

One point: ``ddpsim run`` of the quickstart scenario (ResNet-50, H100 nodes of 8, rail-optimised 400G)
on 2,048 nodes with ``ddp.bucket_cap_mb=50``. The sweep: ``ddpsim sweep`` of the same scenario over
``ddp.bucket_cap_mb=1..100`` with 2 local workers (fresh output folder, report and figures included).
The curve: ``ddpsim scale --nodes 2,8,...,16384``. Each command is a fresh process, wall time as the
user waits for it (interpreter start and imports included); the one point and the sweep run
``--repeat`` times, interleaved, medians kept: the ratio is measured in this one run on a shared
machine (load average printed).

Run: .venv/bin/python benchmarks/plan_scale.py [--repeat 2] > benchmarks/plan_scale_output.txt
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

NODES = "2,8,32,128,256,512,1024,2048,4096,8192,12288,16384"


def timed(args: list[str]) -> tuple[float, float]:
    """(wall seconds, peak MB of the children so far) of one ddpsim command."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ddpsim", *args], check=True, capture_output=True, text=True)
    return time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    print(f"# benchmarks/plan_scale.py, load average {os.getloadavg()[0]:.1f} / {os.cpu_count()} cores at the start")
    base = ["scenarios/quickstart.yaml", "--set", "cluster.nodes=2048"]
    caps = ",".join(str(c) for c in range(1, 101))
    one, sweep = [], []
    for _ in range(args.repeat):
        one.append(timed(["run", *base, "--set", "ddp.bucket_cap_mb=50"])[0])
        out = tempfile.mkdtemp()
        try:
            sweep.append(timed(["sweep", *base, "--grid", f"ddp.bucket_cap_mb={caps}", "--out", out,
                                "--workers", "2"])[0])
        finally:
            shutil.rmtree(out)
    one_s, sweep_s = statistics.median(one), statistics.median(sweep)
    print(f"one point at 16,384 GPUs (ddpsim run)      {one_s:7.2f} s   runs: {', '.join(f'{x:.2f}' for x in one)}")
    print(f"100-point sweep at 16,384 GPUs, 2 workers  {sweep_s:7.2f} s   runs: {', '.join(f'{x:.2f}' for x in sweep)}")
    print(f"sweep / one point                          {sweep_s / one_s:7.2f}   (target <= 10)")
    scale_s, peak_mb = timed(["scale", "scenarios/quickstart.yaml", "--nodes", NODES])
    print(f"12-point scaling curve to 131,072 GPUs     {scale_s:7.2f} s   (nodes {NODES})")
    print(f"peak RSS of any command                    {peak_mb:7.0f} MB")
    print(f"# load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
