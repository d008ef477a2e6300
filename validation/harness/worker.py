"""Measurement worker. Runs under torchrun (sweep mode) or as a plain process (profile mode).

sweep mode (one NCCL process group for the whole launch):
  (1) all-reduce sweep 4 KiB .. 1 GiB -> allreduce.jsonl + allreduce_<transport>_w<W>.txt
  (2) every model x bucket cap DDP run  -> ddp_runs.jsonl (+ one comm-hook timing run per model)
profile mode (world size 1, no process group): profiles/<model>.json

Only rank 0 writes.  Everything uses RANK/WORLD_SIZE/LOCAL_RANK from torchrun, nothing assumes one host.
Device-agnostic: on a machine without CUDA it runs on CPU with gloo and perf_counter timing.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

from .common import (
    Marker,
    append_jsonl,
    fingerprint,
    hostname_count,
    median,
    nccl_tests_text,
    quantile,
    synchronize,
    write_json,
)
from .models import MODELS, buffers_bytes, ddp_param_order

KiB = 1024


def log(*a):
    print(f"[worker r{os.environ.get('RANK', '0')} {time.strftime('%H:%M:%S')}]", *a, flush=True)


def stats3(xs):
    return median(xs), quantile(xs, 0.1), quantile(xs, 0.9)


def get_device(local_rank: int) -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def bcast_int(v: int, device) -> int:
    """Rank 0's value, agreed by all ranks (keeps collective counts identical)."""
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return int(v)
    t = torch.tensor([int(v)], dtype=torch.int64, device=device)
    dist.broadcast(t, 0)
    return int(t.item())


# ============================================================================ (1) all-reduce sweep
def allreduce_sweep(device, W, quick=False, budget_s=40.0, min_bytes=4 * KiB, max_bytes=1 << 30):
    sizes = []
    s = min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s *= 2
    buf = torch.zeros(max_bytes // 4, dtype=torch.float32, device=device)
    for _ in range(5):
        dist.all_reduce(buf[:1024])
    dist.all_reduce(buf[: (16 << 20) // 4])
    synchronize(device)
    per_size = max(0.05, min(1.5, budget_s / len(sizes)))
    max_reps = 10 if quick else 50
    min_reps = 3
    t_begin = time.perf_counter()
    rows = []
    for nbytes in sizes:
        t = buf[: nbytes // 4]
        nwarm = 2 if nbytes >= (256 << 20) else 5
        w0 = time.perf_counter()
        for _ in range(nwarm):
            dist.all_reduce(t)
        synchronize(device)
        est = (time.perf_counter() - w0) / nwarm
        reps = max(min_reps, min(max_reps, int(per_size / max(est, 1e-6))))
        if time.perf_counter() - t_begin > budget_s:
            reps = min_reps
        reps = bcast_int(reps, device)
        marks = [(Marker(device), Marker(device)) for _ in range(reps)]
        for a, b in marks:
            a.record()
            dist.all_reduce(t)
            b.record()
        synchronize(device)
        us = [b.seconds_since(a) * 1e6 for a, b in marks]
        med, p10, p90 = stats3(us)
        algbw = nbytes / (med * 1e-6) / 1e9
        rows.append({"bytes": nbytes, "repeats": reps, "warmup": nwarm, "time_us_median": med, "time_us_p10": p10,
                     "time_us_p90": p90, "algbw_GBps": algbw, "busbw_GBps": algbw * 2 * (W - 1) / W})
    del buf
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


# ============================================================================ (2) profile (world size 1)
def profile_model(spec, device, iters=20, warmup=5):
    torch.manual_seed(0)
    with torch.device(device):
        model = spec.build()
    model.train()
    order = ddp_param_order(model)
    opt = spec.make_optimizer([p for _, p in order])
    batch = spec.make_batch(device)
    state = {"fired": [], "ev": {}}

    def make_hook(i):
        def h(p):
            state["fired"].append(i)
            state["ev"][i] = Marker(device).record()
        return h

    handles = [p.register_post_accumulate_grad_hook(make_hook(i)) for i, (_, p) in enumerate(order)]
    fwd, bwd, optm, step = [], [], [], []
    ready = [[] for _ in order]
    orders = []
    try:
        for it in range(warmup + iters):
            state["fired"].clear()
            state["ev"].clear()
            m0, m1, m2, m3 = (Marker(device) for _ in range(4))
            m0.record()
            opt.zero_grad(set_to_none=True)
            loss = spec.loss(model, batch)
            m1.record()  # backward start
            loss.backward()
            m2.record()
            opt.step()
            m3.record()
            synchronize(device)
            if it < warmup:
                continue
            fwd.append(m1.seconds_since(m0))
            bwd.append(m2.seconds_since(m1))
            optm.append(m3.seconds_since(m2))
            step.append(m3.seconds_since(m0))
            for i, ev in state["ev"].items():
                ready[i].append(ev.seconds_since(m1))
            orders.append(list(state["fired"]))
    finally:
        for h in handles:
            h.remove()
    fired = orders[0] if orders else []
    rank_of = {pi: k for k, pi in enumerate(fired)}
    params = []
    for i, (name, p) in enumerate(order):
        params.append({"name": name, "numel": p.numel(), "dtype": str(p.dtype).replace("torch.", ""),
                       "shape": list(p.shape), "grad_ready_s": median(ready[i]) if ready[i] else None,
                       "ready_order": rank_of.get(i)})
    out = {"schema": "ddpsim.profile/1", "model": spec.name, "batch_size": spec.batch_size,
           "precision": spec.precision, "seq_len": spec.seq_len,
           "forward_s": median(fwd), "backward_s": median(bwd), "optimizer_s": median(optm), "step_s": median(step),
           "forward_s_p10": quantile(fwd, 0.1), "forward_s_p90": quantile(fwd, 0.9),
           "backward_s_p10": quantile(bwd, 0.1), "backward_s_p90": quantile(bwd, 0.9),
           "step_s_p10": quantile(step, 0.1), "step_s_p90": quantile(step, 0.9),
           "iterations": len(step), "warmup": warmup,
           "ready_order_stable": all(o == fired for o in orders),
           "optimizer": spec.optimizer, "params": params, "buffers_bytes": buffers_bytes(model),
           "param_bytes": sum(p.numel() * p.element_size() for _, p in order)}
    del model, opt, batch
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


# ============================================================================ (3) DDP runs
class BucketTimer:
    """Comm hook that times each bucket: launch (event on the compute stream at hook call), end (event
    recorded in the future's callback, on a stream that waits for the NCCL work), relative to an event
    recorded at backward start.  start_s is inferred: max(launch_s, previous bucket's end_s), because
    all buckets run in index order on one NCCL stream."""

    def __init__(self, W, device, index_of_param):
        self.W = W
        self.device = device
        self.index_of_param = index_of_param
        self.active = False
        self.bw_start = None
        self.bw_cpu = 0.0
        self.cur = []
        self.steps = []
        self.param_indices = {}

    def begin(self, marker):
        self.bw_start = marker
        self.bw_cpu = time.perf_counter()
        self.cur = []

    def hook(self, state, bucket):
        launch = Marker(self.device).record()
        cpu = time.perf_counter()
        buf = bucket.buffer()
        buf.div_(self.W)
        fut = dist.all_reduce(buf, async_op=True).get_future()
        if not self.active:
            return fut.then(lambda f: f.value()[0])
        idx = bucket.index()
        if idx not in self.param_indices:
            try:
                self.param_indices[idx] = [self.index_of_param.get(id(p), -1) for p in bucket.parameters()]
            except Exception:
                pass
        entry = {"index": idx, "bytes": buf.numel() * buf.element_size(), "launch": launch,
                 "cpu": cpu - self.bw_cpu, "end": None}
        self.cur.append(entry)

        def cb(f):
            entry["end"] = Marker(self.device).record()
            return f.value()[0]

        return fut.then(cb)

    def collect(self):
        if not self.active:
            return
        rows = []
        prev_end = 0.0
        for e in sorted(self.cur, key=lambda e: e["index"]):
            launch_s = e["launch"].seconds_since(self.bw_start)
            end_s = e["end"].seconds_since(self.bw_start) if e["end"] is not None else None
            start_s = max(launch_s, prev_end)
            if end_s is not None:
                prev_end = end_s
            rows.append((e["index"], e["bytes"], launch_s, start_s, end_s, e["cpu"]))
        self.steps.append(rows)
        self.cur = []

    def summary(self):
        if not self.steps:
            return None
        nb = max(len(s) for s in self.steps)
        out = []
        for k in range(nb):
            col = [s[k] for s in self.steps if len(s) > k]
            ends = [c[4] for c in col if c[4] is not None]
            out.append({"index": col[0][0], "bytes": col[0][1],
                        "launch_s": median([c[2] for c in col]), "start_s": median([c[3] for c in col]),
                        "end_s": median(ends) if ends else None,
                        "launch_cpu_s": median([c[5] for c in col]),
                        "start_inferred": True,
                        "param_indices": self.param_indices.get(col[0][0])})
        return out


def _steps(ddp, spec, opt, batch, n, device, sync=True, timer=None):
    res = {"step": [], "fwd": [], "bwd": [], "opt": [], "wall": []}
    ctx = contextlib.nullcontext if sync else ddp.no_sync
    for _ in range(n):
        m0, m1, m2, m3 = (Marker(device) for _ in range(4))
        w0 = time.perf_counter()
        with ctx():
            m0.record()
            opt.zero_grad(set_to_none=True)
            loss = spec.loss(ddp, batch)
            m1.record()
            if timer is not None:
                timer.begin(m1)
            loss.backward()
            m2.record()
        opt.step()
        m3.record()
        synchronize(device)
        res["wall"].append(time.perf_counter() - w0)
        res["step"].append(m3.seconds_since(m0))
        res["fwd"].append(m1.seconds_since(m0))
        res["bwd"].append(m2.seconds_since(m1))
        res["opt"].append(m3.seconds_since(m2))
        if timer is not None:
            timer.collect()
    return res


def _parse_list(s, conv=int):
    if s is None or s == "":
        return None
    return [conv(x) for x in str(s).split(",") if x.strip() != ""]


def _parse_indices(s):
    if s is None or s == "":
        return None
    return [[int(x) for x in grp.split()] for grp in str(s).split(",")]


def ddp_run(spec, cap, device, W, warmup=3, steps=10, nosync_steps=10, comm_hook=None, seed=0):
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = dist.get_rank()
    torch.manual_seed(seed)
    with torch.device(device):
        model = spec.build()
    model.train()
    order = ddp_param_order(model)
    index_of_param = {id(p): i for i, (_, p) in enumerate(order)}
    kw = dict(bucket_cap_mb=cap, gradient_as_bucket_view=False)  # broadcast_buffers: default True
    if device.type == "cuda":
        kw["device_ids"] = [device.index]
    ddp = DDP(model, **kw)
    timer = None
    if comm_hook == "timing":
        timer = BucketTimer(W, device, index_of_param)
        ddp.register_comm_hook(None, timer.hook)
    opt = spec.make_optimizer(ddp.parameters())
    batch = spec.make_batch(device, seed=1234 + rank)
    _steps(ddp, spec, opt, batch, warmup, device, True, timer)  # iteration 1 + rebuild in iteration 2 excluded
    if timer is not None:
        timer.active = True
    s = _steps(ddp, spec, opt, batch, steps, device, True, timer)
    if timer is not None:
        timer.active = False
    ns = _steps(ddp, spec, opt, batch, nosync_steps, device, False, None) if nosync_steps > 0 else None
    # the logger samples the rebuilt layout at the forward of iteration >= 3 (warmup >= 3 guarantees it)
    logd = {}
    try:
        raw = ddp._get_ddp_logging_data()
        keep = ("bucket_cap_bytes", "bucket_sizes", "has_rebuilt_buckets", "rebuilt_bucket_sizes",
                "rebuilt_per_bucket_param_indices", "prev_iteration_grad_ready_order_indices", "iteration",
                "num_buckets_reduced", "total_parameter_size_bytes", "comm_hook", "avg_forward_compute_time",
                "avg_backward_compute_time", "avg_backward_comm_time", "avg_backward_compute_comm_overlap_time")
        logd = {k: raw[k] for k in keep if k in raw}
        logd["_all_keys"] = sorted(raw.keys())
    except Exception as e:  # noqa
        logd = {"_error": repr(e)}
    # max over ranks of each step time (cheap: one small all_gather)
    step_max = None
    if W > 1:
        t = torch.tensor(s["step"], dtype=torch.float64, device=device)
        g = [torch.zeros_like(t) for _ in range(W)]
        dist.all_gather(g, t)
        gm = torch.stack(g).max(dim=0).values.tolist()
        step_max = median(gm)
    rec = {
        "step_s_median": median(s["step"]), "step_s_p10": quantile(s["step"], 0.1),
        "step_s_p90": quantile(s["step"], 0.9), "step_times_s": s["step"],
        "step_s_median_max_over_ranks": step_max,
        "step_wall_s_median": median(s["wall"]),
        "nosync_step_s_median": median(ns["step"]) if ns else None,
        "nosync_step_s_p10": quantile(ns["step"], 0.1) if ns else None,
        "nosync_step_s_p90": quantile(ns["step"], 0.9) if ns else None,
        "nosync_step_times_s": ns["step"] if ns else None,
        "nosync_forward_s_median": median(ns["fwd"]) if ns else None,
        "nosync_backward_s_median": median(ns["bwd"]) if ns else None,
        "nosync_optimizer_s_median": median(ns["opt"]) if ns else None,
        "forward_s_median": median(s["fwd"]), "backward_s_median": median(s["bwd"]),
        "optimizer_s_median": median(s["opt"]),
        "iterations": steps, "nosync_iterations": nosync_steps, "warmup": warmup,
        "bucket_sizes_bytes": _parse_list(logd.get("rebuilt_bucket_sizes")),
        "bucket_param_indices": _parse_indices(logd.get("rebuilt_per_bucket_param_indices")),
        "grad_ready_order": _parse_list(logd.get("prev_iteration_grad_ready_order_indices")),
        "bucket_layout_source": "ddp._get_ddp_logging_data(): rebuilt_bucket_sizes / "
                                "rebuilt_per_bucket_param_indices (reducer variable index == registration order)",
        "ddp_logging": logd,
        "per_bucket": timer.summary() if timer is not None else None,
        "per_bucket_samples": ([[list(r) for r in st] for st in timer.steps] if timer is not None else None),
        "n_params": len(order), "param_bytes": sum(p.numel() * p.element_size() for _, p in order),
    }
    del ddp, model, opt, batch
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rec


def plan_configs(models, caps, timing_cap):
    """Priority order: timing cap first (+ its comm-hook timing run), then the other caps spread out,
    so that a launch running out of budget drops the least informative caps."""
    caps = list(caps)
    first = [timing_cap] if timing_cap in caps else []
    rest = [c for c in caps if c not in first]
    # spread: smallest, largest, then the middle ones
    spread = []
    while rest:
        spread.append(rest.pop(0))
        if rest:
            spread.append(rest.pop())
    out = []
    for cap in first:
        for m in models:
            out.append((m, cap, None))
        for m in models:
            out.append((m, cap, "timing"))
    if timing_cap is not None and timing_cap not in caps:
        for m in models:
            out.append((m, timing_cap, "timing"))
    for cap in spread:
        for m in models:
            out.append((m, cap, None))
    return out


# ============================================================================ main
def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["sweep", "profile"], default="sweep")
    ap.add_argument("--out", required=True)
    ap.add_argument("--transport", default="nvlink")
    ap.add_argument("--launch-id", default=None)
    ap.add_argument("--models", default="resnet50,gpt2-124m,mlp-heavy")
    ap.add_argument("--caps", default="1,5,10,25,50,200")
    ap.add_argument("--timing-cap", type=float, default=25)
    ap.add_argument("--no-timing-run", action="store_true")
    ap.add_argument("--skip-allreduce", action="store_true")
    ap.add_argument("--allreduce-budget-s", type=float, default=40.0)
    ap.add_argument("--allreduce-max-bytes", type=int, default=1 << 30)
    ap.add_argument("--budget-s", type=float, default=1e9, help="skip remaining configs past this")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--nosync-steps", type=int, default=None)
    ap.add_argument("--profile-iters", type=int, default=20)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    t_start = time.perf_counter()
    models = [m for m in a.models.split(",") if m]
    caps = [float(c) if "." in c else int(c) for c in a.caps.split(",") if c]
    nosync = a.steps if a.nosync_steps is None else a.nosync_steps
    os.makedirs(a.out, exist_ok=True)

    if a.mode == "profile":
        device = get_device(int(os.environ.get("LOCAL_RANK", "0")))
        fp = fingerprint(device, 1, "none", 1)
        for name in models:
            if time.perf_counter() - t_start > a.budget_s:
                log("budget exhausted, skipping profile", name)
                continue
            try:
                t0 = time.perf_counter()
                prof = profile_model(MODELS[name], device, iters=a.profile_iters, warmup=2 if a.quick else 5)
                prof["fingerprint"] = fp
                prof["launch_id"] = a.launch_id
                prof["status"] = "ok"
                write_json(os.path.join(a.out, "profiles", name + ".json"), prof)
                log(f"profile {name} step {prof['step_s']:.4f} s fwd {prof['forward_s']:.4f} "
                    f"bwd {prof['backward_s']:.4f} opt {prof['optimizer_s']:.4f} "
                    f"({time.perf_counter() - t0:.1f}s)")
            except Exception as e:
                log("profile FAILED", name, repr(e))
                append_jsonl(os.path.join(a.out, "profile_failures.jsonl"),
                             {"model": name, "status": "failed", "error": traceback.format_exc()[-4000:],
                              "fingerprint": fp, "launch_id": a.launch_id})
                if device.type == "cuda":
                    torch.cuda.empty_cache()
        return 0

    # ---------------------------------------------------------------- sweep mode (under torchrun)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = get_device(local_rank)
    backend = "nccl" if device.type == "cuda" else "gloo"
    kw = {}
    if device.type == "cuda":
        kw["device_id"] = device
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=300), **kw)
    rank, W = dist.get_rank(), dist.get_world_size()
    n_hosts = hostname_count()
    fp = fingerprint(device, W, a.transport, n_hosts)
    launch_id = a.launch_id or f"{a.transport}_w{W:d}_0"
    log(f"launch {launch_id} world {W:d} device {device} backend {backend} hosts {n_hosts:d}")

    if not a.skip_allreduce:
        try:
            t0 = time.perf_counter()
            rows = allreduce_sweep(device, W, quick=a.quick, budget_s=a.allreduce_budget_s,
                                   max_bytes=a.allreduce_max_bytes)
            rec = {"schema": "ddpsim.allreduce/1", "status": "ok", "error": None, "fingerprint": fp,
                   "world_size": W, "transport": a.transport, "dtype": "float32", "launch_id": launch_id,
                   "method": "torch.distributed.all_reduce SUM in place, per-call CUDA events, median",
                   "rows": rows}
            if rank == 0:
                append_jsonl(os.path.join(a.out, "allreduce.jsonl"), rec)
                with open(os.path.join(a.out, f"allreduce_{a.transport}_w{W:d}.txt"), "w") as f:
                    f.write(nccl_tests_text(rec))
                big = rows[-1]
                log(f"allreduce sweep done in {time.perf_counter() - t0:.1f}s; {big['bytes']:d} B: "
                    f"{big['time_us_median']:.1f} us busbw {big['busbw_GBps']:.2f} GB/s")
        except Exception as e:
            log("allreduce sweep FAILED", repr(e))
            if rank == 0:
                append_jsonl(os.path.join(a.out, "allreduce.jsonl"),
                             {"schema": "ddpsim.allreduce/1", "status": "failed",
                              "error": traceback.format_exc()[-4000:], "fingerprint": fp, "world_size": W,
                              "transport": a.transport, "dtype": "float32", "launch_id": launch_id, "rows": []})
            if device.type == "cuda":
                torch.cuda.empty_cache()

    timing_cap = None if a.no_timing_run else (int(a.timing_cap) if float(a.timing_cap).is_integer() else a.timing_cap)
    configs = plan_configs(models, caps, timing_cap)
    last_dur = {}
    for (name, cap, hook) in configs:
        spec = MODELS[name]
        elapsed = time.perf_counter() - t_start
        est = last_dur.get(name, 0.0)
        skip = bcast_int(1 if elapsed + est > a.budget_s else 0, device)
        base = {"schema": "ddpsim.ddp_run/1", "model": name, "batch_size": spec.batch_size,
                "precision": spec.precision, "seq_len": spec.seq_len, "bucket_cap_mb": cap, "world_size": W,
                "transport": a.transport, "launch_id": launch_id, "comm_hook": hook, "fingerprint": fp}
        if skip:
            if rank == 0:
                log(f"skip (budget) {name} cap {cap} hook {hook}")
                append_jsonl(os.path.join(a.out, "ddp_runs.jsonl"),
                             dict(base, status="skipped", error=f"launch time budget exhausted ({a.budget_s:.0f}s)"))
            continue
        t0 = time.perf_counter()
        try:
            rec = ddp_run(spec, cap, device, W, warmup=a.warmup, steps=a.steps, nosync_steps=nosync,
                          comm_hook=hook)
            rec = dict(base, status="ok", error=None, **rec)
            if rank == 0:
                log(f"{name!s:<10} cap {cap!s:>4} hook {hook!s:<6} step {rec['step_s_median']:.4f} "
                    f"(p10 {rec['step_s_p10']:.4f} p90 {rec['step_s_p90']:.4f}) "
                    f"nosync {rec['nosync_step_s_median'] or -1:.4f} "
                    f"buckets {len(rec['bucket_sizes_bytes'] or [])}  {time.perf_counter() - t0:.1f}s")
        except Exception as e:
            log(f"FAILED {name} cap {cap}: {e!r}")
            rec = dict(base, status="failed", error=traceback.format_exc()[-4000:])
            if device.type == "cuda":
                torch.cuda.empty_cache()
        rec["run_wall_s"] = time.perf_counter() - t0
        last_dur[name] = rec["run_wall_s"]
        if rank == 0:
            append_jsonl(os.path.join(a.out, "ddp_runs.jsonl"), rec)
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception:
        pass
    log(f"launch {launch_id} done in {time.perf_counter() - t_start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
