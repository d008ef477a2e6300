"""Issue #39 item 2: DDP's all-reduces inside the step against the same sizes called alone, on allocation PL
(2 x H200, 2026-11-28), over sockets on one node and across 2 emulated nodes x 1 GPU (own NCCL_HOSTID each).

Two measurements of one launch each (``validation/data/h200x2-heldout-2026-11-28``):
- time: the timing-hook run (resnet50, cap 25, CUDA events around each bucket's all-reduce inside the step)
  over the launch's own all-reduce sweep at the same size (interpolated in log space);
- NCCL's choice: rank 0's NCCL log of the 2x1 launch (NCCL_DEBUG=INFO, TUNING) names every call's algorithm,
  protocol and channels; the sweep's sizes are powers of two, DDP's buckets are not.

Run: ``python -m validation.evidence --stage instep-pl``.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter

DATA = "validation/data/h200x2-heldout-2026-11-28"
LOG = f"{DATA}/logs/nccl_socket_2x1_0_r0.log"
_CALL = re.compile(r"AllReduce: (\d+) Bytes -> Algo (\w+) proto (\w+) channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\}")


def _jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
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
    with open(LOG, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            m = _CALL.search(line)
            if m and int(m.group(1)) > 1 << 20:  # the sizes DDP's buckets and the sweep's large rows have
                size = int(m.group(1))
                who = "sweep (powers of two)" if size & (size - 1) == 0 else "DDP buckets"
                calls[(who, m.group(2), m.group(3), int(m.group(5)) - int(m.group(4)) + 1)] += 1
    lines += ["", "NCCL's choice for calls over 1 MiB in the 2x1 launch (rank 0's log):", "",
              "| calls of | algorithm | protocol | channels | calls |", "|---|---|---|---|---|"]
    lines += [f"| {who} | {algo} | {proto} | {channels} | {n} |" for (who, algo, proto, channels), n in sorted(calls.items())]
    return "\n".join(lines) + "\n"
