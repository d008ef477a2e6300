"""Issue #39 item 2: DDP's all-reduces inside the step against the same sizes called alone, on allocation PL
(2 x H200, 2026-11-28), over sockets on one node and across 2 emulated nodes x 1 GPU (own NCCL_HOSTID each).

Two measurements of one launch each (``validation/data/h200x2-heldout-2026-11-28``):
- time: the timing-hook run (resnet50, cap 25, CUDA events around each bucket's all-reduce inside the step)
  over the launch's own all-reduce sweep at the same size (interpolated in log space);
- NCCL's choice: rank 0's NCCL log of the 2x1 launch (NCCL_DEBUG=INFO, TUNING) names every call's algorithm,
  protocol and channels; the sweep's sizes are powers of two, DDP's buckets are not.

A third table reads the earlier 2 x 1 launches (every committed ``*multinode*`` folder, world size 2): each plain
run's step against its buckets' isolated all-reduces summed (the bucket layout from a timing-hook run of the
same model and cap, any campaign: DDP's layout depends on the model and the cap only), and against its
gradient bytes at the rate of the sweep's largest call (one long transfer). A fourth lists the network probe's
point-to-point rate (``netprobe.jsonl``, pattern ``collective_one_way``) in each launch (two rounds: the first after the sweep, before the DDP runs, the second after them): how
far the emulated network's rate moves while a launch's DDP runs go.

Run: ``python -m validation.evidence --stage instep-pl``.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
from collections import Counter

from ddpsim.jsonfile import glob_data, has_data, open_data

DATA = "validation/data/h200x2-heldout-2026-11-28"
LOG = f"{DATA}/logs/nccl_socket_2x1_0_r0.log"
_CALL = re.compile(r"AllReduce: (\d+) Bytes -> Algo (\w+) proto (\w+) channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\}")


def _jsonl(path: str) -> list[dict]:
    if not has_data(path):
        return []
    with open_data(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _alone_s(sweep: dict, size: int) -> float:
    rows = sorted((int(r["bytes"]), float(r["time_us_median"]) * 1e-6) for r in sweep["rows"])
    for (b0, t0), (b1, t1) in zip(rows, rows[1:], strict=False):
        if b0 <= size <= b1:
            f = (math.log(size) - math.log(b0)) / (math.log(b1) - math.log(b0))
            return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0)))
    raise ValueError(f"{size} B outside the sweep of {sweep['launch_id']}")


def instep_pl() -> str:
    sweeps = {s["launch_id"]: s for s in _jsonl(f"{DATA}/allreduce.jsonl") if s.get("rows")}
    lines = ["# In-step against isolated all-reduces, allocation PL (2 x H200, 2026-11-28)", "",
             "| launch | model, cap | bucket | bytes | in step ms | alone ms | in step / alone |",
             "|---|---|---|---|---|---|---|"]
    for run in _jsonl(f"{DATA}/ddp_runs.jsonl"):
        if run.get("status") != "ok" or not run.get("per_bucket") or run["launch_id"] not in sweeps:
            continue
        for bucket in run["per_bucket"]:
            took = float(bucket["end_s"]) - float(bucket["start_s"])
            alone = _alone_s(sweeps[run["launch_id"]], int(bucket["bytes"]))
            lines.append(f"| {run['launch_id']} | {run['model']}, {run['bucket_cap_mb']:g} MB | {bucket['index']} | "
                         f"{bucket['bytes']} | {1e3 * took:.2f} | {1e3 * alone:.2f} | {took / alone:.2f} |")
    calls: Counter[tuple[str, str, str, int]] = Counter()
    with open_data(LOG, errors="replace") as handle:
        for line in handle:
            m = _CALL.search(line)
            if m and int(m.group(1)) > 1 << 20:  # the sizes DDP's buckets and the sweep's large rows have
                size = int(m.group(1))
                who = "sweep (powers of two)" if size & (size - 1) == 0 else "DDP buckets"
                calls[(who, m.group(2), m.group(3), int(m.group(5)) - int(m.group(4)) + 1)] += 1
    lines += ["", "NCCL's choice for calls over 1 MiB in the 2x1 launch (rank 0's log):", "",
              "| calls of | algorithm | protocol | channels | calls |", "|---|---|---|---|---|"]
    lines += [f"| {who} | {algo} | {proto} | {channels} | {n} |" for (who, algo, proto, channels), n in sorted(calls.items())]
    return "\n".join(lines + _earlier_launches() + _network_drift()) + "\n"


def _earlier_launches() -> list[str]:
    layouts: dict[tuple[str, float], list[int]] = {}
    for path in glob_data("validation/data/*/ddp_runs.jsonl"):
        for run in _jsonl(path):
            if run.get("status") == "ok" and run.get("per_bucket"):
                layouts.setdefault((str(run["model"]), float(run["bucket_cap_mb"])),
                                   [int(b["bytes"]) for b in run["per_bucket"]])
    lines = ["", "Earlier 2 x 1 launches: the step against its buckets' all-reduces called alone (sum of the sweep's "
             "times at their sizes) and against its bytes at the sweep's largest call's rate:", "",
             "| campaign | model, cap | buckets (MiB) | step ms | isolated sum ms | step / sum | at largest-call rate ms "
             "| step / that |", "|---|---|---|---|---|---|---|---|"]
    for folder in sorted(glob.glob("validation/data/*multinode*")):
        sweeps = {s["launch_id"]: s for s in _jsonl(f"{folder}/allreduce.jsonl")
                  if s.get("rows") and not s.get("algorithm_forced")}
        for run in _jsonl(f"{folder}/ddp_runs.jsonl"):
            layout = layouts.get((str(run.get("model")), float(run.get("bucket_cap_mb") or 0)))
            sweep = sweeps.get(str(run.get("launch_id")))
            if (run.get("status") != "ok" or int(run.get("nodes") or 1) < 2 or int(run.get("world_size") or 0) != 2
                    or run.get("per_bucket") or run.get("variant") not in (None, "none") or not layout or not sweep):
                continue
            alone = sum(_alone_s(sweep, size) for size in layout)
            largest = max(sweep["rows"], key=lambda r: int(r["bytes"]))
            long_s = sum(layout) * float(largest["time_us_median"]) * 1e-6 / int(largest["bytes"])
            step = float(run["step_s_median"])
            sizes = sorted({round(b / 2**20) for b in layout})
            lines.append(f"| {os.path.basename(folder)} | {run['model']}, {float(run['bucket_cap_mb']):g} MB | "
                         f"{len(layout)} of {'/'.join(map(str, sizes))} | {1e3 * step:.1f} | {1e3 * alone:.1f} | "
                         f"{step / alone:.2f} | {1e3 * long_s:.1f} | {step / long_s:.2f} |")
    return lines


def _network_drift() -> list[str]:
    lines = ["", "The emulated network's rate while launches run (netprobe `collective_one_way`, GB/s per flow; with two "
             "rounds the first runs after the sweep, before the DDP runs, the second after them):", "", "| campaign | launch | rounds | max / min |", "|---|---|---|---|"]
    for path in glob_data("validation/data/*/netprobe.jsonl"):
        rates: dict[str, list[float]] = {}
        for record in _jsonl(path):
            if record.get("status") == "ok" and record.get("pattern") == "collective_one_way":
                rates.setdefault(str(record["launch_id"]), []).append(float(record["flow_GBps"]))
        for launch, values in sorted(rates.items()):
            lines.append(f"| {os.path.basename(os.path.dirname(path))} | {launch} | "
                         f"{', '.join(f'{v:.2f}' for v in values)} | {max(values) / min(values):.2f} |")
    return lines
