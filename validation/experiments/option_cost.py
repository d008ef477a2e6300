"""What DDP's ``find_unused_parameters`` and ``static_graph`` cost per step, mechanism by mechanism.

torch and the standard library only (torchvision for vit-b16 where installed). World size 1: gloo on
CPU, NCCL on one GPU. Every mechanism below is read in PyTorch's source (torch/nn/parallel/distributed.py
``_post_forward`` / ``_DDPSink``, torch/csrc/distributed/c10d/reducer.cpp):

* graph walk (find_unused): ``Reducer::search_unused_parameters`` walks every autograd node reachable
  from the outputs (an unordered_set insert per node) at the end of forward. Timed directly by calling
  ``reducer.prepare_for_backward(outputs)`` against ``prepare_for_backward([])``; the node and edge
  counts come from the same walk done in Python over ``grad_fn.next_functions``.
* _DDPSink (find_unused; static_graph only in iteration 1): a Python autograd Function on the outputs
  whose forward ``clone()``s every output tensor (a device copy of the logits) and whose backward
  runs in Python at the start of backward. Output bytes are recorded per model.
* per parameter (find_unused): ``autograd_hook`` writes ``local_used_map_[index] = 1`` (a CPU tensor
  select + fill) for every gradient; ``finalize_bucket_dense`` reads ``local_used_map_[i].item()``
  for every parameter (static_graph too). Measured as the slope of backward host time against the
  number of parameter tensors on a synthetic chain of N tiny parameters.
* fixed (find_unused): ``all_reduce_local_used_map`` after the last bucket (pinned temporary, H2D
  copy, one all-reduce of 4 bytes per parameter) and ``local_used_map_.fill_(0)``: the intercept.

Usage:  python -m validation.experiments.option_cost --device cpu --out FILE.json
        python -m validation.experiments.option_cost --device cuda --models resnet50,... --steps 40 --out FILE.json
On cuda it also times real training steps of the harness models (variants none, find_unused,
static_graph interleaved step by step, CUDA events for the GPU step and perf_counter for the host).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any

try:
    import torch
except ModuleNotFoundError as _no_torch:  # `python -m ... --help` on a host without torch
    from ddpsim.measure.needs_torch import without_torch

    without_torch(__name__, __doc__, _no_torch)
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ddpsim.measure.models import MODELS

VARIANTS: dict[str, dict[str, Any]] = {"none": {}, "find_unused": {"find_unused_parameters": True}, "static_graph": {"static_graph": True}}


def init_world1(device: str) -> None:
    if dist.is_initialized():
        return
    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def graph_counts(outputs: list[torch.Tensor]) -> dict[str, int]:
    """The walk of reducer.cpp search_unused_parameters, in Python: nodes seen and edges followed."""
    seen: set = set()
    queue = [t.grad_fn for t in outputs if t.grad_fn is not None]
    edges = 0
    while queue:
        fn = queue.pop()
        for nxt, _ in fn.next_functions:
            if nxt is None:
                continue
            edges += 1
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    accumulate = sum(1 for n in seen if type(n).__name__ == "AccumulateGrad")
    return {"nodes": len(seen), "edges": edges, "accumulate_grad_nodes": accumulate}


def outputs_of(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in outputs_of(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in outputs_of(o)]
    return []


def median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def time_walk(ddp: DDP, outputs: list[torch.Tensor], repeats: int) -> dict[str, float]:
    """prepare_for_backward(outputs) (the graph walk) against prepare_for_backward([]), interleaved."""
    walk, empty = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ddp.reducer.prepare_for_backward(outputs)
        t1 = time.perf_counter()
        ddp.reducer.prepare_for_backward([])
        t2 = time.perf_counter()
        walk.append(t1 - t0)
        empty.append(t2 - t1)
    return {"prepare_walk_us": median_us(walk), "prepare_empty_us": median_us(empty),
            "walk_us": median_us(walk) - median_us(empty)}


def model_graph(name: str, device: str, batch: int | None, repeats: int) -> dict:
    spec = MODELS[name]
    ok, why = spec.available()
    if not ok:
        return {"model": name, "status": "skipped", "reason": why}
    if batch is not None:
        from dataclasses import replace
        spec = replace(spec, batch_size=batch)
    torch.manual_seed(0)
    model = spec.build_on(device)
    ddp = DDP(model, find_unused_parameters=True)
    x, _ = spec.make_batch(device)
    if spec.precision == "bf16-amp":
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            out = ddp(x)
    else:
        out = ddp(x)
    # DDP walked from the outputs before _DDPSink wrapped them; walking from the sink's outputs sees the
    # same nodes (the sink's own node is the root, which the walk does not count)
    outs = outputs_of(out)
    counts = graph_counts(outs)
    rec: dict[str, Any] = {"model": name, "status": "ok", "batch_size": spec.batch_size, "precision": spec.precision,
           "param_tensors": sum(1 for p in model.parameters() if p.requires_grad),
           "output_bytes": sum(t.numel() * t.element_size() for t in outs),
           **counts, **time_walk(ddp, outs, repeats)}
    rec["walk_ns_per_node"] = rec["walk_us"] * 1e3 / max(rec["nodes"], 1)
    del out, outs, ddp, model
    return rec


class Chain(nn.Module):
    """N tiny parameters, each used once: y = y * w_i. Autograd: one MulBackward0 + one AccumulateGrad each."""

    def __init__(self, n: int, width: int = 8):
        super().__init__()
        self.ws = nn.ParameterList(nn.Parameter(torch.ones(width)) for _ in range(n))

    def forward(self, x):
        for w in self.ws:
            x = x * w
        return x


def chain_sweep(device: str, sizes: list[int], steps: int) -> dict:
    """Host time of forward and backward per variant against N: the slopes are the per-parameter costs."""
    out: dict[str, Any] = {"sizes": sizes, "steps": steps, "forward_us": {}, "backward_us": {}}
    for v in VARIANTS:
        out["forward_us"][v], out["backward_us"][v] = [], []
    for n in sizes:
        ddps = {}
        for v, kw in VARIANTS.items():
            torch.manual_seed(0)
            ddps[v] = DDP(Chain(n).to(device), bucket_cap_mb=25, **kw)
        x = torch.ones(4, 8, device=device)
        fwd: dict[str, list[float]] = {v: [] for v in VARIANTS}
        bwd: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for i in range(steps + 3):
            for v, ddp in ddps.items():
                sync(device)
                t0 = time.perf_counter()
                y = ddp(x)
                t1 = time.perf_counter()
                y.sum().backward()
                t2 = time.perf_counter()
                sync(device)
                for p in ddp.parameters():
                    p.grad = None
                if i >= 3:
                    fwd[v].append(t1 - t0)
                    bwd[v].append(t2 - t1)
        for v in VARIANTS:
            out["forward_us"][v].append(median_us(fwd[v]))
            out["backward_us"][v].append(median_us(bwd[v]))
        del ddps
    out["slopes_us_per_param"] = {}
    for phase in ("forward_us", "backward_us"):
        for v in VARIANTS:
            ys = out[phase][v]
            slope, intercept = _fit(sizes, ys)
            out["slopes_us_per_param"][f"{phase[:-3]}_{v}"] = {"slope_us": slope, "intercept_us": intercept}
    s = out["slopes_us_per_param"]
    out["extra_per_param_us"] = {
        f"{phase}_{v}": s[f"{phase}_{v}"]["slope_us"] - s[f"{phase}_none"]["slope_us"]
        for phase in ("forward", "backward") for v in ("find_unused", "static_graph")}
    out["extra_fixed_us"] = {
        f"{phase}_{v}": s[f"{phase}_{v}"]["intercept_us"] - s[f"{phase}_none"]["intercept_us"]
        for phase in ("forward", "backward") for v in ("find_unused", "static_graph")}
    return out


def _fit(xs: list[int], ys: list[float]) -> tuple[float, float]:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return slope, my - slope * mx


def step_timings(name: str, device: str, steps: int) -> dict:
    """Real training steps of a harness model, variants interleaved step by step (world size 1)."""
    spec = MODELS[name]
    ok, why = spec.available()
    if not ok:
        return {"model": name, "status": "skipped", "reason": why}
    runs = {}
    for v, kw in VARIANTS.items():
        torch.manual_seed(0)
        model = spec.build_on(device)
        ddp = DDP(model, **kw)
        runs[v] = (ddp, spec.make_optimizer(ddp.parameters()))
    batch = spec.make_batch(device)
    res: dict[str, dict[str, list[float]]] = {v: {"step": [], "host_fwd": [], "host_bwd": [], "host_step": [], "gpu_fwd": [], "gpu_bwd": []}
           for v in VARIANTS}
    for i in range(steps + 4):
        for v, (ddp, opt) in runs.items():
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            sync(device)
            t0 = time.perf_counter()
            ev[0].record()
            opt.zero_grad(set_to_none=True)
            loss = spec.loss(ddp, batch)
            t1 = time.perf_counter()
            ev[1].record()
            loss.backward()
            t2 = time.perf_counter()
            ev[2].record()
            opt.step()
            ev[3].record()
            t3 = time.perf_counter()
            sync(device)
            if i >= 4:
                r = res[v]
                r["step"].append(ev[0].elapsed_time(ev[3]) * 1e-3)
                r["gpu_fwd"].append(ev[0].elapsed_time(ev[1]) * 1e-3)
                r["gpu_bwd"].append(ev[1].elapsed_time(ev[2]) * 1e-3)
                r["host_fwd"].append(t1 - t0)
                r["host_bwd"].append(t2 - t1)
                r["host_step"].append(t3 - t0)
    summary = {v: {k: statistics.median(x) for k, x in r.items()} for v, r in res.items()}
    for v in VARIANTS:
        st = sorted(res[v]["step"])
        summary[v]["step_p10"] = st[len(st) // 10]
        summary[v]["step_p90"] = st[(9 * len(st)) // 10]
    ratios = {v: summary[v]["step"] / summary["none"]["step"] for v in VARIANTS}
    return {"model": name, "status": "ok", "batch_size": spec.batch_size, "steps": steps,
            "median_s": summary, "ratio_to_none": ratios,
            "samples_s": {v: res[v]["step"] for v in VARIANTS}}


def fingerprint(device: str) -> dict:
    fp = {"torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
          "processor": platform.processor(), "cpu_count": os.cpu_count(), "device": device,
          "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        with open("/proc/cpuinfo") as f:
            fp["cpu_model"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    except OSError:
        pass
    if device == "cuda":
        fp["gpu_name"] = torch.cuda.get_device_name(0)
        fp["cuda"] = torch.version.cuda
        fp["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        fp["NCCL_NVLS_ENABLE"] = os.environ.get("NCCL_NVLS_ENABLE")
    return fp


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--models", default="resnet50,gpt2-124m,bert-large,vit-b16,mlp-ln-64")
    ap.add_argument("--graph-batch", type=int, default=None,
                    help="batch size for the graph walk (node counts do not depend on it); default: 2 on cpu")
    ap.add_argument("--walk-repeats", type=int, default=30)
    ap.add_argument("--chain-sizes", default="50,100,200,400")
    ap.add_argument("--chain-steps", type=int, default=15)
    ap.add_argument("--steps", type=int, default=0, help="cuda only: timed training steps per variant")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    torch.set_num_threads(1 if a.device == "cpu" else torch.get_num_threads())
    init_world1(a.device)
    models = [m for m in a.models.split(",") if m]
    batch = a.graph_batch if a.graph_batch is not None else (2 if a.device == "cpu" else None)
    rec: dict[str, Any] = {"schema": "ddpsim.option_cost/1", "fingerprint": fingerprint(a.device), "argv": sys.argv[1:],
           "graph": [], "chain": None, "steps": []}
    t0 = time.perf_counter()
    for m in models:
        rec["graph"].append(model_graph(m, a.device, batch, a.walk_repeats))
        print(json.dumps({k: v for k, v in rec["graph"][-1].items()}), flush=True)
        if a.device == "cuda":
            torch.cuda.empty_cache()
    rec["chain"] = chain_sweep(a.device, [int(s) for s in a.chain_sizes.split(",")], a.chain_steps)
    print(json.dumps({k: rec["chain"][k] for k in ("extra_per_param_us", "extra_fixed_us")}), flush=True)
    if a.device == "cuda" and a.steps > 0:
        for m in models:
            r = step_timings(m, a.device, a.steps)
            rec["steps"].append(r)
            print(json.dumps({k: r.get(k) for k in ("model", "status", "ratio_to_none")}), flush=True)
            torch.cuda.empty_cache()
    rec["wall_s"] = time.perf_counter() - t0
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
