"""Where a profile's peak comes from: the harness's own profile_model under the allocator's history, then the
live blocks at the peak of the last clean step, grouped by the innermost Python frame of ddpsim/torch/user code."""
import collections
import json
import sys

import torch

from ddpsim.measure import profile as prof
from ddpsim.measure.models import resolve

out = sys.argv[1]
results = {}
for name in sys.argv[2:]:
    spec = resolve(name)
    dev = torch.device("cuda", 0)
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated(dev)
    torch.cuda.memory._record_memory_history(max_entries=300000, stacks="python")
    rec = prof.profile_model(spec, dev, iters=2, warmup=2)
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = snap["device_traces"][0]
    live = {}
    cur = best = 0
    best_live = {}
    for ev in trace:
        a = ev["action"]
        if a == "alloc":
            live[ev["addr"]] = ev
            cur += ev["size"]
            if cur > best:
                best = cur
                best_live = dict(live)
        elif a == "free_completed" or a == "free_requested":
            if a == "free_requested" and ev["addr"] in live:
                cur -= live.pop(ev["addr"])["size"]
    groups = collections.Counter()
    for ev in best_live.values():
        frames = ev.get("frames") or []
        key = []
        for f in frames:
            fn = f.get("filename", "")
            if ("ddpsim" in fn or "factories" in fn or "torch/optim" in fn or "torch/autograd" in fn or "torch/nn" in fn) :
                key.append(f"{fn.split('/')[-1]}:{f.get('line')}:{f.get('name')}")
            if len(key) >= 3:
                break
        groups[" < ".join(key) or "?"] += ev["size"]
    results[name] = {"record_peak_allocated": rec["memory"]["peak_allocated_bytes"], "trace_peak_bytes": best,
                     "base_bytes": base, "memory": {k: v for k, v in rec["memory"].items() if k != "activation_bytes_by_layer"},
                     "live_at_peak_by_frame": groups.most_common(25)}
    print(name, rec["memory"]["peak_allocated_bytes"], best, flush=True)
    del rec, snap, trace, live, best_live
json.dump(results, open(out, "w"), indent=1)
