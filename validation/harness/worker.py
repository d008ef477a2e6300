"""Measurement worker. Runs under torchrun (sweep / microbench modes) or as a plain process (profile mode).

sweep mode (one process group for the launch, plus one per forced NCCL algorithm):
  (0) shape: --gpus-per-node G gives every G consecutive local ranks their own NCCL_HOSTID (set here, before
      the process group exists), so NCCL treats them as separate nodes and talks between them through its
      network transport (the campaign sets NCCL_NET=Socket NCCL_IB_DISABLE=1).  Under a real
      `torchrun --nnodes N` nothing is emulated: nodes = WORLD_SIZE / LOCAL_WORLD_SIZE.
  (1) all-reduce sweeps 4 KiB .. 1 GiB, once per --algos entry (default: NCCL's choice; ring/tree: a new
      communicator created while NCCL_ALGO=Ring/Tree is set, NCCL reads it at communicator init)
      -> allreduce.jsonl + nccl-tests text files
  (2) DDP configurations (model x batch size x bucket cap x option variant), built per model group and
      measured in interleaved rounds (A B C A B C), the reference configuration at the start and at the end
      of the launch -> ddp_runs.jsonl
microbench mode: microbench.jsonl (see microbench.py)
profile mode: profiles/<model>.json.  As a plain process: one GPU alone, no process group.  Under torchrun with
  W ranks: every GPU profiles the same model at once (as in a DDP step, the host runs W processes), each
  rank's profile under profiles/ranks/, the slowest rank's as profiles/<model>.json

Only rank 0 writes.  Everything uses RANK/WORLD_SIZE/LOCAL_RANK from torchrun, nothing assumes one host.
Device-agnostic: on a machine without CUDA it runs on CPU with gloo and perf_counter timing.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import re
import sys
import time
import traceback

import torch
import torch.distributed as dist

from . import nccl_log
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
from .models import MODELS, buffers_bytes, ddp_param_order, file_stem, resolve

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
def allreduce_sweep(device, W, quick=False, budget_s=40.0, min_bytes=4 * KiB, max_bytes=1 << 30, group=None):
    sizes = []
    s = min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s *= 2
    buf = torch.zeros(max_bytes // 4, dtype=torch.float32, device=device)
    for _ in range(5):
        dist.all_reduce(buf[:1024], group=group)
    dist.all_reduce(buf[: (16 << 20) // 4], group=group)
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
            dist.all_reduce(t, group=group)
        synchronize(device)
        est = (time.perf_counter() - w0) / nwarm
        reps = max(min_reps, min(max_reps, int(per_size / max(est, 1e-6))))
        if time.perf_counter() - t_begin > budget_s:
            reps = min_reps
        reps = bcast_int(reps, device)
        marks = [(Marker(device), Marker(device)) for _ in range(reps)]
        for a, b in marks:
            a.record()
            dist.all_reduce(t, group=group)
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
def _sync_floor_s(device, n=20):
    """What one synchronize costs on an idle device: taken off each measured wait for the GPU."""
    synchronize(device)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return median(times)


def _wait_for_gpu_s(device, floor_s):
    """How long the host waits for the GPU from now, less one idle synchronize: called right after
    ``loss.backward()`` returns, how far the backward thread ran ahead of the GPU."""
    t0 = time.perf_counter()
    synchronize(device)
    return max(0.0, time.perf_counter() - t0 - floor_s)


def profile_model(spec, device, iters=20, warmup=5):
    """World-size-1 times of one training step, and when each parameter's gradient is ready.

    A Python hook per parameter (to record its ready event) costs CPU time in backward: on a
    launch-bound model (258 tensors of mlp-ln-64 on an H100) that made the hooked backward ~30%
    slower than the same model's no_sync compute inside DDP. So iterations alternate: clean ones
    (no hooks) give forward, backward, optimizer and step times; hooked ones give the order and the
    ready times, scaled by clean / hooked backward so that they end where the clean backward ends.

    Two more kinds of iteration measure mechanisms directly. A "lead" iteration waits for the GPU right
    after ``loss.backward()`` returns: how long it waits is how far the backward thread ran ahead of the
    GPU (per-bucket traces: ResNet-50's thread is 9-15 ms ahead at its last bucket, GPT-2's and the MLPs'
    about 0), the slack that host work added on that thread (a comm hook) can use before it delays the
    GPU. An "accumulate" iteration skips ``zero_grad``: its backward adds into the existing ``.grad``
    (an add per parameter in AccumulateGrad), what every micro-step after the first pays under
    gradient accumulation."""
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

    fwd, bwd, optm, step, bwd_hooked = [], [], [], [], []
    lead, host_bwd, fwd_acc, bwd_acc = [], [], [], []
    ready = [[] for _ in order]
    orders = []
    sync_floor_s = _sync_floor_s(device)
    for it in range(warmup + 4 * iters):
        kind = ("clean", "hooked", "lead", "accumulate")[(it - warmup) % 4] if it >= warmup else ("clean", "hooked")[it % 2]
        hooked = kind == "hooked"
        handles = [p.register_post_accumulate_grad_hook(make_hook(i)) for i, (_, p) in enumerate(order)] if hooked else []
        try:
            state["fired"].clear()
            state["ev"].clear()
            m0, m1, m2, m3 = (Marker(device) for _ in range(4))
            m0.record()
            if kind != "accumulate":
                opt.zero_grad(set_to_none=True)
            loss = spec.loss(model, batch)
            m1.record()  # backward start
            t0 = time.perf_counter()
            loss.backward()
            if kind == "lead":
                host_bwd.append(time.perf_counter() - t0)
                lead.append(_wait_for_gpu_s(device, sync_floor_s))
            m2.record()
            opt.step()
            m3.record()
            synchronize(device)
        finally:
            for h in handles:
                h.remove()
        if it < warmup or kind == "lead":
            continue
        if kind == "accumulate":
            fwd_acc.append(m1.seconds_since(m0))
            bwd_acc.append(m2.seconds_since(m1))
            continue
        if hooked:
            bwd_hooked.append(m2.seconds_since(m1))
            ready_s = {i: ev.seconds_since(m1) for i, ev in state["ev"].items()}
            orders.append(list(state["fired"]))
            for i, t in ready_s.items():
                ready[i].append(t)
            continue
        fwd.append(m1.seconds_since(m0))
        bwd.append(m2.seconds_since(m1))
        optm.append(m3.seconds_since(m2))
        step.append(m3.seconds_since(m0))
    # the hooks' own CPU time, spread over backward: take it out of the ready times
    ready_scale = min(1.0, median(bwd) / median(bwd_hooked)) if bwd and bwd_hooked else 1.0
    ready = [[t * ready_scale for t in times] for times in ready]
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
           "backward_s_hooked": median(bwd_hooked) if bwd_hooked else None, "ready_scale": ready_scale,
           "backward_host_lead_s": median(lead) if lead else None,
           "backward_host_lead_s_p10": quantile(lead, 0.1) if lead else None,
           "backward_host_lead_s_p90": quantile(lead, 0.9) if lead else None,
           "backward_host_s": median(host_bwd) if host_bwd else None, "sync_floor_s": sync_floor_s,
           "forward_accumulate_s": median(fwd_acc) if fwd_acc else None,
           "backward_accumulate_s": median(bwd_acc) if bwd_acc else None,
           "backward_accumulate_s_p10": quantile(bwd_acc, 0.1) if bwd_acc else None,
           "backward_accumulate_s_p90": quantile(bwd_acc, 0.9) if bwd_acc else None,
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
        fut = dist.all_reduce(buf, group=state, async_op=True).get_future()
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


def _parse_list(s, conv=int):
    if s is None or s == "":
        return None
    return [conv(x) for x in str(s).split(",") if x.strip() != ""]


def _parse_indices(s):
    if s is None or s == "":
        return None
    return [[int(x) for x in grp.split()] for grp in str(s).split(",")]



# ============================================================================ DDP option variants
# Every run record carries all of these fields explicitly (the defaults are plain DDP).
VARIANT_DEFAULTS = {"gradient_as_bucket_view": False, "comm_hook": None, "timing_hook": False,
                    "grad_accumulation_steps": 1, "find_unused_parameters": False, "static_graph": False}
VARIANT_PARTS = {
    "none": {},
    "gbv": {"gradient_as_bucket_view": True},
    "fp16": {"comm_hook": "fp16"},
    "bf16": {"comm_hook": "bf16"},
    "find_unused": {"find_unused_parameters": True},
    "static_graph": {"static_graph": True},
    "timing": {"timing_hook": True},
}


def variant_options(name: str) -> dict:
    """'none', 'gbv', 'fp16', 'bf16', 'accumK', 'find_unused', 'static_graph', 'timing', or several joined by
    '+' (e.g. 'gbv+bf16') -> the explicit option fields."""
    opts = dict(VARIANT_DEFAULTS)
    for part in name.split("+"):
        m = re.fullmatch(r"accum(\d+)", part)
        if m:
            opts["grad_accumulation_steps"] = int(m.group(1))
        elif part in VARIANT_PARTS:
            opts.update(VARIANT_PARTS[part])
        else:
            raise ValueError(f"unknown DDP variant {part!r} (known: {', '.join(VARIANT_PARTS)}, accumK)")
    if opts["timing_hook"] and opts["comm_hook"]:
        raise ValueError("the timing hook and a compress hook cannot be registered together (one comm hook)")
    if opts["grad_accumulation_steps"] < 1:
        raise ValueError("accumK needs K >= 1")
    return opts


def is_default_ddp(opts: dict) -> bool:
    return all(opts[k] == v for k, v in VARIANT_DEFAULTS.items())


# ============================================================================ (3) DDP runs
class Runner:
    """One live DDP configuration: model, DDP wrapper with its options, optimizer, batch.  Kept alive while
    its group is measured so that rounds can be interleaved without rebuilding."""

    def __init__(self, spec, cap, variant, device, W, seed=0, group=None):
        from torch.nn.parallel import DistributedDataParallel as DDP

        self.spec, self.cap, self.variant, self.device, self.W = spec, cap, variant, device, W
        self.opts = variant_options(variant)
        rank = dist.get_rank()
        torch.manual_seed(seed)
        with torch.device(device):
            model = spec.build()
        model.train()
        self.order = ddp_param_order(model)
        index_of_param = {id(p): i for i, (_, p) in enumerate(self.order)}
        kw = dict(bucket_cap_mb=cap, gradient_as_bucket_view=self.opts["gradient_as_bucket_view"],
                  find_unused_parameters=self.opts["find_unused_parameters"],
                  static_graph=self.opts["static_graph"])  # broadcast_buffers: default True
        if device.type == "cuda":
            kw["device_ids"] = [device.index]
        self.ddp = DDP(model, process_group=group, **kw)
        self.model = model
        self.timer = None
        if self.opts["timing_hook"]:
            self.timer = BucketTimer(W, device, index_of_param)
            # the hook's state is the group its all-reduce runs on (None: the default group)
            self.ddp.register_comm_hook(group, self.timer.hook)
        elif self.opts["comm_hook"]:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            hook = {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}
            self.ddp.register_comm_hook(group, hook[self.opts["comm_hook"]])
        self.opt = spec.make_optimizer(self.ddp.parameters())
        self.batch = spec.make_batch(device, seed=1234 + rank)
        self.rounds = []
        self.nosync = None
        self.step_wall_estimate = None
        self.warmup_done = 0
        self.lead_s = None

    def _one_step(self, sync=True, lead_floor_s=None):
        """One optimizer step (K micro-batches, the first K-1 under no_sync).  Returns markers and wall time.
        With ``lead_floor_s`` the host waits for the GPU as soon as the last backward returns: the wait
        (less that floor, one idle synchronize) is how far the backward thread ran ahead of the GPU at world
        size 1; above it the wait also holds the all-reduces still running (DDP's copy-back waits for them)."""
        K = self.opts["grad_accumulation_steps"]
        d = self.device
        m0, mf, m1, m2, m3 = (Marker(d) for _ in range(5))
        w0 = time.perf_counter()
        m0.record()
        self.opt.zero_grad(set_to_none=True)
        for k in range(K):
            last = k == K - 1
            ctx = contextlib.nullcontext() if (sync and last) else self.ddp.no_sync()
            with ctx:
                if last and K > 1:
                    mf.record()
                loss = self.spec.loss(self.ddp, self.batch)
                if K > 1:
                    loss = loss / K
                if last:
                    m1.record()
                    if self.timer is not None and sync:
                        self.timer.begin(m1)
                loss.backward()
                if last:
                    lead_s = _wait_for_gpu_s(d, lead_floor_s) if lead_floor_s is not None else None
                    m2.record()
        self.opt.step()
        m3.record()
        synchronize(d)
        wall = time.perf_counter() - w0
        fwd_start = m0 if K == 1 else mf
        return {"step": m3.seconds_since(m0), "wall": wall, "fwd": m1.seconds_since(fwd_start),
                "bwd": m2.seconds_since(m1), "opt": m3.seconds_since(m2), "lead": lead_s}

    def measure_lead(self, n):
        """Median backward-thread lead over n steps (see ``_one_step``); None for n = 0."""
        if n <= 0:
            return None
        floor_s = _sync_floor_s(self.device)
        return median([self._one_step(lead_floor_s=floor_s)["lead"] for _ in range(n)])

    def run_steps(self, n, sync=True, timed_hook=False):
        res = {"step": [], "fwd": [], "bwd": [], "opt": [], "wall": []}
        if self.timer is not None:
            self.timer.active = timed_hook and sync
        for _ in range(n):
            r = self._one_step(sync)
            for k in res:
                res[k].append(r[k])
            if self.timer is not None and self.timer.active:
                self.timer.collect()
        if self.timer is not None:
            self.timer.active = False
        return res

    def warmup(self, n):
        # iteration 1 (one bucket) and the rebuild in iteration 2 are excluded; >= 3 so that DDP's logger has
        # sampled the rebuilt layout
        r = self.run_steps(n)
        self.warmup_done += n
        self.step_wall_estimate = r["wall"][-1] if r["wall"] else None

    def measure_round(self, steps, round_warmup, position, slot, t_launch0):
        if round_warmup:
            self.run_steps(round_warmup)
        t0 = time.perf_counter() - t_launch0
        r = self.run_steps(steps, timed_hook=True)
        self.step_wall_estimate = median(r["wall"])
        self.rounds.append({
            "round": sum(1 for x in self.rounds if x["position"] == "round") if position == "round" else None,
            "position": position, "slot": slot, "t_start_s": t0, "steps": steps, "round_warmup": round_warmup,
            "step_s_median": median(r["step"]), "step_s_p10": quantile(r["step"], 0.1),
            "step_s_p90": quantile(r["step"], 0.9),
            "step_wall_s_median": median(r["wall"]), "step_wall_s_p10": quantile(r["wall"], 0.1),
            "step_wall_s_p90": quantile(r["wall"], 0.9),
            "step_times_s": r["step"], "step_wall_times_s": r["wall"],
            "forward_s_median": median(r["fwd"]), "backward_s_median": median(r["bwd"]),
            "optimizer_s_median": median(r["opt"]),
        })

    def measure_nosync(self, n):
        if n > 0:
            self.nosync = self.run_steps(n, sync=False)

    def _per_rank(self, steps, nosync):
        """{field: [rank 0, rank 1, ...]} of the step, forward and backward medians and the no_sync ones
        (None where not measured); a collective, like ``record``. None at world size 1."""
        if self.W <= 1 or not steps:
            return None
        fields = ("step_s", "forward_s", "backward_s", "nosync_step_s", "nosync_forward_s", "nosync_backward_s")
        mine = [median(steps), median([r["forward_s_median"] for r in self.rounds]),
                median([r["backward_s_median"] for r in self.rounds])]
        mine += [median(nosync[k]) if nosync else float("nan") for k in ("step", "fwd", "bwd")]
        t = torch.tensor(mine, dtype=torch.float64, device=self.device)
        g = [torch.zeros_like(t) for _ in range(self.W)]
        dist.all_gather(g, t)
        table = torch.stack(g).tolist()
        return {f: [None if v != v else v for v in (row[i] for row in table)] for i, f in enumerate(fields)}

    def record(self):
        """The run's measurement fields (a collective: every rank must call it at the same point)."""
        pooled = {k: [] for k in ("step_times_s", "step_wall_times_s")}
        for r in self.rounds:
            pooled["step_times_s"] += r["step_times_s"]
            pooled["step_wall_times_s"] += r["step_wall_times_s"]
        st, wt = pooled["step_times_s"], pooled["step_wall_times_s"]
        ns = self.nosync
        logd = {}
        try:
            raw = self.ddp._get_ddp_logging_data()
            keep = ("bucket_cap_bytes", "bucket_sizes", "has_rebuilt_buckets", "rebuilt_bucket_sizes",
                    "rebuilt_per_bucket_param_indices", "prev_iteration_grad_ready_order_indices", "iteration",
                    "num_buckets_reduced", "total_parameter_size_bytes", "comm_hook", "avg_forward_compute_time",
                    "avg_backward_compute_time", "avg_backward_comm_time", "avg_backward_compute_comm_overlap_time",
                    "find_unused_parameters", "static_graph", "gradient_as_bucket_view")
            logd = {k: raw[k] for k in keep if k in raw}
            logd["_all_keys"] = sorted(raw.keys())
        except Exception as e:  # noqa: BLE001 - a logging-data failure must not lose the measurement
            logd = {"_error": repr(e)}
        step_max = None
        if self.W > 1 and st:
            t = torch.tensor(st, dtype=torch.float64, device=self.device)
            g = [torch.zeros_like(t) for _ in range(self.W)]
            dist.all_gather(g, t)
            step_max = median(torch.stack(g).max(dim=0).values.tolist())
        per_rank = self._per_rank(st, ns)
        # rebuilt layout when DDP rebuilt its buckets; otherwise (find_unused_parameters: no rebuild) the
        # initial layout, in reverse registration order
        sizes = _parse_list(logd.get("rebuilt_bucket_sizes"))
        layout_src = "rebuilt_bucket_sizes"
        if not sizes:
            sizes = _parse_list(logd.get("bucket_sizes"))
            layout_src = "bucket_sizes (no rebuild)" if sizes else None
        regular = [r for r in self.rounds if r["position"] == "round"]
        return {
            "step_s_median": median(st), "step_s_p10": quantile(st, 0.1), "step_s_p90": quantile(st, 0.9),
            "step_times_s": st, "step_s_median_max_over_ranks": step_max,
            # every rank's own medians (GPU events on its own streams): whether the ranks of one host run
            # their compute equally fast, or the step waits for the slowest
            "per_rank_s": per_rank,
            "step_wall_s_median": median(wt), "step_wall_s_p10": quantile(wt, 0.1),
            "step_wall_s_p90": quantile(wt, 0.9), "step_wall_times_s": wt,
            "step_time_source": "cuda_event" if self.device.type == "cuda" else "perf_counter",
            "rounds": self.rounds, "n_rounds": len(regular),
            "round_medians_s": [r["step_s_median"] for r in regular],
            "nosync_step_s_median": median(ns["step"]) if ns else None,
            "nosync_step_s_p10": quantile(ns["step"], 0.1) if ns else None,
            "nosync_step_s_p90": quantile(ns["step"], 0.9) if ns else None,
            "nosync_step_times_s": ns["step"] if ns else None,
            "nosync_forward_s_median": median(ns["fwd"]) if ns else None,
            "nosync_backward_s_median": median(ns["bwd"]) if ns else None,
            "nosync_optimizer_s_median": median(ns["opt"]) if ns else None,
            # diagnostic, never used to predict this run: the wait for the GPU once backward returns at this
            # world size; above world size 1 it includes the all-reduces still running (DDP's copy-back waits
            # for them), so it bounds the backward thread's lead from above
            "backward_host_lead_s": self.lead_s,
            "forward_s_median": median([r["forward_s_median"] for r in self.rounds]),
            "backward_s_median": median([r["backward_s_median"] for r in self.rounds]),
            "optimizer_s_median": median([r["optimizer_s_median"] for r in self.rounds]),
            "iterations": len(st), "nosync_iterations": len(ns["step"]) if ns else 0, "warmup": self.warmup_done,
            "bucket_sizes_bytes": sizes,
            "bucket_param_indices": _parse_indices(logd.get("rebuilt_per_bucket_param_indices")),
            "grad_ready_order": _parse_list(logd.get("prev_iteration_grad_ready_order_indices")),
            "bucket_layout_source": (f"ddp._get_ddp_logging_data(): {layout_src} / rebuilt_per_bucket_param_indices "
                                     "(reducer variable index == registration order)") if layout_src else None,
            "ddp_logging": logd,
            "per_bucket": self.timer.summary() if self.timer is not None else None,
            "per_bucket_samples": ([[list(r) for r in st_] for st_ in self.timer.steps]
                                   if self.timer is not None else None),
            "n_params": len(self.order), "param_bytes": sum(p.numel() * p.element_size() for _, p in self.order),
        }

    def close(self):
        del self.ddp, self.model, self.opt, self.batch
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def ddp_run(spec, cap, device, W, warmup=3, steps=10, nosync_steps=10, comm_hook=None, seed=0, variant=None,
            lead_steps=0, group=None):
    """One configuration measured in one round (the pre-interleaving API; comm_hook='timing' = variant 'timing')."""
    if variant is None:
        variant = "timing" if comm_hook == "timing" else (comm_hook or "none")
    r = Runner(spec, cap, variant, device, W, seed, group=group)
    try:
        r.warmup(warmup)
        r.measure_round(steps, 0, "round", 0, time.perf_counter())
        r.measure_nosync(nosync_steps)
        r.lead_s = r.measure_lead(lead_steps)
        rec = r.record()
    finally:
        r.close()
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


def plan_runs(models, caps, variants, batch_sizes=None, variant_caps=None, timing_cap=None, cap_models=None):
    """Configurations (model, batch_size or None, cap, variant), grouped by model (and batch size): every cap
    with variant 'none' (only for the models in ``cap_models`` when given; the others get the variant caps),
    then every other variant at ``variant_caps`` (default: the first cap), then the timing-hook run at
    timing_cap.  Order inside a model group = measurement order within each round."""
    out = []
    bss = batch_sizes or [None]
    vcaps = variant_caps if variant_caps is not None else caps[:1]
    for m in models:
        for bs in bss:
            seen = set()

            def add(cap, var, m=m, bs=bs, seen=seen):
                if (cap, var) not in seen:
                    seen.add((cap, var))
                    out.append((m, bs, cap, var))

            if "none" in variants:
                for cap in (caps if cap_models is None or m in cap_models else vcaps):
                    add(cap, "none")
            for var in variants:
                if var == "none":
                    continue
                for cap in vcaps:
                    add(cap, var)
            if timing_cap is not None:
                add(timing_cap, "timing")
    return out


def _cap_value(c):
    c = str(c)
    return int(float(c)) if float(c).is_integer() else float(c)


def parse_reference(s, default_model=None):
    """'model:cap[:variant]' (model may itself be module:factory: the cap is the last numeric field)."""
    if s is None or s.lower() == "none":
        return None
    parts = s.split(":")
    var = "none"
    if len(parts) >= 3 and not re.fullmatch(r"[0-9.]+", parts[-1]):
        var = parts.pop()
    cap = _cap_value(parts.pop())
    model = ":".join(parts) or default_model
    return (model, None, cap, var)


def run_interleaved(plan, reference, device, W, base_fn, write_fn, *, t_launch0, budget_s, rounds=2, steps=30,
                    warmup=3, round_warmup=2, nosync_steps=10, build_s=3.0, max_live=6, log_fn=print):
    """Measure ``plan`` (list of (model, bs, cap, variant)) in model groups, ``rounds`` interleaved rounds per
    group, the ``reference`` configuration first and last in the launch.  ``base_fn(key, spec)`` gives a record's
    identifying fields, ``write_fn(rec)`` stores it (rank 0).  Budget decisions are rank 0's (broadcast)."""
    rank = dist.get_rank()
    slot = [0]
    specs = {}

    def spec_of(key):
        m, bs, _, _ = key
        if (m, bs) not in specs:
            specs[(m, bs)] = resolve(m, bs)
        return specs[(m, bs)]

    def elapsed():
        return time.perf_counter() - t_launch0

    def est_round(r):
        return (r.step_wall_estimate or 1.0) * (steps + round_warmup) + 0.5

    def finish(key, runner, status="ok", error=None):
        spec = spec_of(key)
        rec = dict(base_fn(key, spec), status=status, error=error)
        if runner is not None and runner.rounds:
            try:
                rec.update(runner.record())
            except Exception:  # noqa: BLE001
                rec.update(status="failed", error=traceback.format_exc()[-4000:])
        elif status == "ok":
            rec.update(status="skipped", error=f"launch time budget exhausted ({budget_s:.0f}s) before any round")
        rec["is_reference"] = key == reference
        write_fn(rec)
        if rank == 0 and rec["status"] == "ok":
            log_fn(f"{key[0]!s:<11} bs {spec.batch_size:<4d} cap {key[2]!s:>4} {key[3]!s:<12} "
                   f"step {rec['step_s_median']:.4f} rounds {rec['round_medians_s']} "
                   f"nosync {rec['nosync_step_s_median'] or -1:.4f} buckets {len(rec['bucket_sizes_bytes'] or [])}")

    def build(key):
        spec = spec_of(key)
        ok, why = spec.available()
        if not ok:
            return None, ("skipped", why)
        try:
            r = Runner(spec, key[2], key[3], device, W)
            r.warmup(warmup)
            return r, None
        except Exception:  # noqa: BLE001 - a failing configuration is recorded and the launch goes on
            if device.type == "cuda":
                torch.cuda.empty_cache()
            return None, ("failed", traceback.format_exc()[-4000:])

    def measure(r, position):
        r.measure_round(steps, round_warmup, position, slot[0], t_launch0)
        slot[0] += 1

    ref_runner = None
    if reference is not None:
        skip = bcast_int(1 if elapsed() + build_s > budget_s else 0, device)
        if not skip:
            ref_runner, err = build(reference)
            if ref_runner is None:
                finish(reference, None, *err)
                reference = None
            else:
                measure(ref_runner, "reference_start")
    # reserve time for the reference at the end of the launch
    def reserve():
        return est_round(ref_runner) if ref_runner is not None else 0.0

    groups = []
    for key in plan:
        g = (key[0], key[1])
        # a model group larger than max_live is measured in chunks (GPU memory: every member is alive)
        if not groups or groups[-1][0] != g or len(groups[-1][1]) >= max_live:
            groups.append((g, []))
        groups[-1][1].append(key)
    for _, keys in groups:
        runners, errors = {}, {}
        for key in keys:
            if key == reference and ref_runner is not None:
                runners[key] = ref_runner
                continue
            skip = bcast_int(1 if elapsed() + build_s + reserve() > budget_s else 0, device)
            if skip:
                errors[key] = ("skipped", f"launch time budget exhausted ({budget_s:.0f}s)")
                continue
            r, err = build(key)
            if r is None:
                errors[key] = err
            else:
                runners[key] = r
        for _ in range(rounds):
            for key in keys:
                r = runners.get(key)
                if r is None:
                    continue
                skip = bcast_int(1 if elapsed() + est_round(r) + reserve() > budget_s else 0, device)
                if skip:
                    continue
                try:
                    measure(r, "round")
                except Exception:  # noqa: BLE001
                    errors[key] = ("failed", traceback.format_exc()[-4000:])
                    runners.pop(key).close()
                    if key == reference:
                        ref_runner = None  # its record is written as failed below
        for key in keys:
            r = runners.get(key)
            if r is not None and r.opts == VARIANT_DEFAULTS and key != reference:
                lead_steps = max(2, nosync_steps // 2)
                skip = bcast_int(1 if elapsed() + (r.step_wall_estimate or 1.0) * (nosync_steps + lead_steps)
                                 + reserve() > budget_s else 0, device)
                if not skip:
                    r.measure_nosync(nosync_steps)
                    # a diagnostic, never read to predict: the wait for the GPU once backward returns at this
                    # world size, which includes the all-reduces still running (an upper bound on the
                    # thread's lead; the profile's world-size-1 DDP lead is the one ddpsim uses)
                    r.lead_s = r.measure_lead(lead_steps)
        for key in keys:
            if key == reference and ref_runner is not None:
                continue  # written after the end-of-launch measurement
            r = runners.get(key)
            if r is not None:
                finish(key, r)
                r.close()
            else:
                finish(key, None, *errors.get(key, ("failed", "not built")))
    if ref_runner is not None:
        # rank 0 decides for all: a rank that measured while another skipped would wait in its all-reduces
        if bcast_int(1 if budget_s - elapsed() > 0 else 0, device):
            measure(ref_runner, "reference_end")
        ref_runner.measure_nosync(nosync_steps if bcast_int(1 if elapsed() + 5 < budget_s else 0, device) else 0)
        finish(reference, ref_runner)
        ref_runner.close()


# ============================================================================ shape (nodes x GPUs per node)
def shape_setup(gpus_per_node, out, launch_id, inter_node_transport=None):
    """Before init_process_group: this rank's NCCL_HOSTID when several 'nodes' share one host, and its own
    NCCL_DEBUG_FILE when NCCL_DEBUG is set.  Returns the shape fields every record carries."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    G = int(gpus_per_node) if gpus_per_node else local_world
    if G < 1 or local_world % G or world % G:
        raise SystemExit(f"--gpus-per-node {G} must divide the ranks of this host ({local_world}) and the world ({world})")
    emulated = G < local_world
    if emulated:
        # NCCL hashes this string instead of the host name: ranks with different ids are different nodes,
        # so P2P/SHM are not used between them and NCCL's network transport carries their traffic
        os.environ["NCCL_HOSTID"] = f"ddpsim-{os.environ.get('GROUP_RANK', '0')}-node{local_rank // G}"
    nccl_log_path = None
    if os.environ.get("NCCL_DEBUG"):
        if not os.environ.get("NCCL_DEBUG_FILE"):
            os.makedirs(os.path.join(out, "logs"), exist_ok=True)
            os.environ["NCCL_DEBUG_FILE"] = os.path.join(os.path.abspath(out), "logs",
                                                         f"nccl_{launch_id}_r{rank:d}.log")
        nccl_log_path = os.environ["NCCL_DEBUG_FILE"]
        if "%" in nccl_log_path:
            nccl_log_path = None  # a pattern (%h, %p) set from outside: not parsed
    nodes = world // G
    inter = None
    if nodes > 1:
        inter = inter_node_transport or (os.environ.get("NCCL_NET") or "unknown").lower()
    return {"nodes": nodes, "gpus_per_node": G, "nodes_emulated": emulated,
            "nccl_hostid": os.environ.get("NCCL_HOSTID") if emulated else None,
            "inter_node_transport": inter}, nccl_log_path


ALGO_ENV = {"ring": "Ring", "tree": "Tree"}


def sweep_name(transport, W, shape, algo):
    if shape["nodes"] == 1 and algo == "default":
        return f"allreduce_{transport}_w{W:d}.txt"  # the name earlier campaigns used
    return f"allreduce_{transport}_w{W:d}_{shape['nodes']:d}x{shape['gpus_per_node']:d}_{algo}.txt"


def net_probe(a, device, W, fp, shape, launch_id, probe_round=0):
    """Point-to-point patterns across the (emulated) nodes: the network endpoint's rates (netprobe.py).
    Returns the round's wall time in seconds."""
    from . import netprobe

    base = {"schema": "ddpsim.netprobe/1", "fingerprint": fp, "world_size": W, "transport": a.transport,
            "launch_id": launch_id, "probe_round": probe_round, **shape}
    t0 = time.perf_counter()
    try:
        recs = netprobe.probe(device, W, shape["gpus_per_node"], budget_s=30.0 if not a.quick else 5.0)
        if dist.get_rank() == 0:
            for r in recs:
                append_jsonl(os.path.join(a.out, "netprobe.jsonl"), dict(base, status="ok", error=None, **r))
            log(f"net probe: {len(recs)} patterns in {time.perf_counter() - t0:.1f}s: " + ", ".join(
                f"{r['pattern']} {r['flow_GBps']:.2f} GB/s per flow" for r in recs))
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the probe's 256 MiB buffers are not kept cached under the DDP runs that follow
        # rank 0's duration for every rank: the DDP budget it reserves must be the same on all of them
        return bcast_int(round(1000 * (time.perf_counter() - t0)), device) / 1000
    except Exception:
        # a rank that failed leaves the others inside a collective: record it and end the launch
        log("net probe FAILED", traceback.format_exc()[-600:])
        append_jsonl(os.path.join(a.out, "netprobe.jsonl"),
                     dict(base, bench="net_p2p", status="failed", rank=dist.get_rank(),
                          error=traceback.format_exc()[-4000:]))
        raise


def allreduce_sweeps(a, device, W, backend, fp, shape, topo_fn, nccl_path, launch_id):
    rank = dist.get_rank()
    algos = [x for x in a.algos.split(",") if x]
    per_algo_budget = a.allreduce_budget_s / max(1, len(algos))
    for algo in algos:
        t0 = time.perf_counter()
        base = {"schema": "ddpsim.allreduce/1", "fingerprint": fp, "world_size": W, "transport": a.transport,
                "dtype": "float32", "launch_id": launch_id, **shape,
                "algorithm_forced": None if algo == "default" else algo}
        group = None
        try:
            env_before = os.environ.get("NCCL_ALGO")
            if algo != "default":
                os.environ["NCCL_ALGO"] = ALGO_ENV[algo]
                try:
                    group = dist.new_group(backend=backend)
                    # make sure the communicator exists (read NCCL_ALGO) before the variable goes back
                    dist.all_reduce(torch.zeros(1, device=device), group=group)
                    synchronize(device)
                finally:
                    if env_before is None:
                        os.environ.pop("NCCL_ALGO", None)
                    else:
                        os.environ["NCCL_ALGO"] = env_before
            off = nccl_log.size_of(nccl_path)
            rows = allreduce_sweep(device, W, quick=a.quick, budget_s=per_algo_budget,
                                   max_bytes=a.allreduce_max_bytes, group=group)
            choices = nccl_log.tuning_choices(nccl_log.read_from(nccl_path, off)) if rank == 0 else {}
            for row in rows:
                c = choices.get(row["bytes"])
                row["nccl_algo"] = c["algo"] if c else None
                row["nccl_proto"] = c["proto"] if c else None
                row["nccl_channels"] = c["channels"] if c else None
                row["nccl_choice_mixed"] = c["mixed"] if c else None
            verified = None
            if algo != "default" and choices:
                verified = all(r["nccl_algo"] == ALGO_ENV[algo].upper() for r in rows if r["nccl_algo"])
            rec = dict(base, status="ok", error=None, **topo_fn(),
                       method="torch.distributed.all_reduce SUM in place, per-call CUDA events, median",
                       nccl_algo_env=(ALGO_ENV.get(algo) if algo != "default" else env_before),
                       algorithm_forced_verified=verified, rows=rows)
            if rank == 0:
                append_jsonl(os.path.join(a.out, "allreduce.jsonl"), rec)
                with open(os.path.join(a.out, sweep_name(a.transport, W, shape, algo)), "w") as f:
                    f.write(nccl_tests_text(rec))
                big = rows[-1]
                picks = sorted({f"{r['nccl_algo']}/{r['nccl_proto']}" for r in rows if r["nccl_algo"]})
                log(f"allreduce {algo} done in {time.perf_counter() - t0:.1f}s; {big['bytes']:d} B: "
                    f"{big['time_us_median']:.1f} us busbw {big['busbw_GBps']:.2f} GB/s; NCCL picked {picks}")
        except Exception:  # noqa: BLE001
            log("allreduce sweep FAILED", algo, traceback.format_exc()[-600:])
            if rank == 0:
                append_jsonl(os.path.join(a.out, "allreduce.jsonl"),
                             dict(base, status="failed", error=traceback.format_exc()[-4000:], rows=[]))
            if device.type == "cuda":
                torch.cuda.empty_cache()
        finally:
            if group is not None:
                try:
                    dist.destroy_process_group(group)
                except Exception:  # noqa: BLE001
                    pass


# ============================================================================ main
def _world1_group(device):
    """A one-rank process group for DDP at world size 1 (the profile launch runs without torchrun)."""
    import socket

    if dist.is_initialized():
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kw = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=0, world_size=1, timeout=datetime.timedelta(seconds=120), **kw)


class _PlainStep:
    """The model without DDP, stepped in turn with a DDP instance of it: both then see the same moments of
    the host, whose speed drifts within a launch (a launch-bound model's compute moved 1.45x between
    launches minutes apart on one 2 x H100 allocation, h100x2-profiles-2026-11-26m)."""

    def __init__(self, spec, device):
        torch.manual_seed(0)
        with torch.device(device):
            self.model = spec.build()
        self.model.train()
        self.spec, self.device = spec, device
        self.opt = spec.make_optimizer(list(self.model.parameters()))
        self.batch = spec.make_batch(device)

    def step(self):
        m0, m1 = Marker(self.device), Marker(self.device)
        m0.record()
        self.opt.zero_grad(set_to_none=True)
        self.spec.loss(self.model, self.batch).backward()
        self.opt.step()
        m1.record()
        synchronize(self.device)
        return m1.seconds_since(m0)


def _paired_world1_row(spec, cap, variant, device, steps, warmup, nosync, lead, group):
    """One ``ddp_world1`` row: DDP steps at world size 1 alternated with plain steps of the same model
    (D P D P ...). What DDP adds is the median of each pair's difference, not the difference of two
    medians taken at different times: on allocation m the profile's plain step and its DDP rows, timed one
    after the other, put 7.8 ms of DDP work on LN-MLP-64 whose 2-GPU DDP step was 1.5 ms over its compute."""
    r = Runner(spec, cap, variant, device, 1, group=group)
    twin = _PlainStep(spec, device)
    try:
        r.warmup(warmup)
        for _ in range(warmup):
            twin.step()
        ddp_s, plain_s = [], []
        for _ in range(steps):
            ddp_s.append(r._one_step()["step"])
            plain_s.append(twin.step())
        r.measure_nosync(nosync)
        lead_s = r.measure_lead(lead)
    finally:
        r.close()
        del twin
        if device.type == "cuda":
            torch.cuda.empty_cache()
    row = {"bucket_cap_mb": cap, "variant": variant, "status": "ok", "step_s": median(ddp_s),
           "step_s_p10": quantile(ddp_s, 0.1), "step_s_p90": quantile(ddp_s, 0.9), "steps": len(ddp_s),
           "plain_step_s": median(plain_s), "ddp_minus_plain_s": median([d - p for d, p in zip(ddp_s, plain_s, strict=True)])}
    if nosync:
        row["nosync_step_s"] = median(r.nosync["step"])
    if lead_s is not None:
        row["backward_host_lead_s"] = lead_s
    return row


def ddp_world1(spec, device, caps, variants=("none", "gbv", "fp16", "bf16"), steps=20, warmup=3, group=None):
    """DDP's own per-rank cost on this host: the model wrapped in DDP at world size 1 (its reducer hooks,
    bucket copies, the launch of each bucket's one-rank all-reduce) against plain steps of the same model
    taken in turn with them; with a compression hook also the hook's own work on the backward thread (cast, ``div_``,
    ``fut.then``), whose cost per bucket moves with the host as much as the reducer's does. Nothing crosses a link, so what it adds is the work every rank of a larger job does too;
    on a launch-bound model it is host time on the backward thread, which differs between machines.
    ``group``: this rank's own one-rank group when every GPU's profile runs at once (None: the default group,
    started here at world size 1)."""
    if group is None:
        _world1_group(device)
    out = []
    for cap in caps:
        for variant in variants:
            try:
                # plain DDP also times no_sync micro-steps: on a slow host they cost more than the plain
                # profile step (4 x H100 "e": BERT-large +22%), what accumulation's micro-steps pay
                nosync = steps if variant == "none" else 0
                # and how far its backward thread runs ahead of the GPU with DDP's reducer on it: the slack a
                # comm hook's host work uses up before it delays the GPU (4 x H100 "g": BERT-large 4.5 ms
                # without DDP, 0.5 ms with it; GPT-2 6.7 and 6.8 ms)
                lead = steps // 2 if variant == "none" else 0
                row = _paired_world1_row(spec, cap, variant, device, steps, warmup, nosync, lead, group)
            except Exception as e:  # noqa: BLE001 - e.g. the bf16 hook needs NCCL: recorded, the others go on
                out.append({"bucket_cap_mb": cap, "variant": variant, "status": "failed", "error": repr(e)[:300]})
                continue
            out.append(row)
    return out


def _concurrent_group(device):
    """Under torchrun with several ranks: a gloo process group that starts every rank's profile of a model
    together and gathers the results, and this rank's own one-rank group for its world-size-1 DDP.  None
    for the one-process profile."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=900))
    backend = "nccl" if device.type == "cuda" else "gloo"
    # every rank creates every group, in the same order (new_group is a collective of the default group)
    groups = [dist.new_group([r], backend=backend) for r in range(dist.get_world_size())]
    return groups[dist.get_rank()]


def _profile_one(a, spec, device, fp, ddp_caps, warm, own_group):
    """One model's profile on this rank (and its world-size-1 DDP rows)."""
    if warm and not a.quick:
        # the launch's first model once untimed: on the third 4 x H100 allocation the first
        # profile (ResNet-50) ran its forward at 20 ms against 13 ms on two others, slower than
        # its own DDP steps later in the launch (a cold GPU or library, not the model)
        profile_model(spec, device, iters=3, warmup=3)
    prof = profile_model(spec, device, iters=a.profile_iters, warmup=2 if a.quick else 5)
    prof["fingerprint"] = fp
    prof["launch_id"] = a.launch_id
    prof["status"] = "ok"
    prof["model_source"] = spec.source
    if ddp_caps:
        try:  # the profile above stands whatever happens here (a process group that will not start)
            prof["ddp_world1"] = ddp_world1(spec, device, ddp_caps, steps=a.profile_iters,
                                            warmup=2 if a.quick else 3, group=own_group)
        except Exception as e:  # noqa: BLE001
            prof["ddp_world1_error"] = repr(e)[:300]
    return prof


def slowest_rank_profile(profiles):
    """The profile a DDP step follows when every GPU of the host ran its own at once: the slowest rank's
    (each bucket's all-reduce waits for the last rank to launch it; on 2 x H100 the second rank ran
    launch-bound compute 13-52% slower than the first, h100x2-ranks-2026-11-26j and -k), with every rank's
    times beside it.  ``profiles``: one per rank, a dict with status 'ok' or an error."""
    ok = [(r, p) for r, p in enumerate(profiles) if p.get("status") == "ok"]
    if not ok:
        return None
    rank, chosen = max(ok, key=lambda rp: rp[1]["step_s"])
    out = dict(chosen)
    out["concurrent"] = {
        "ranks": len(profiles), "profiled_rank": rank,
        "why": "every GPU of the host profiled at once; the slowest rank's profile, which a DDP step waits for",
        "per_rank": [{"rank": r, "status": p.get("status"), "gpu": (p.get("gpu") or None),
                      **{k: p.get(k) for k in ("step_s", "forward_s", "backward_s", "optimizer_s")}}
                     for r, p in enumerate(profiles)],
    }
    return out


def _profile_main(a, models, batch_sizes, t_start):
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = get_device(local_rank)
    own_group = _concurrent_group(device)
    W = dist.get_world_size() if own_group is not None else 1
    rank = dist.get_rank() if own_group is not None else 0
    fp = fingerprint(device, W, "none", 1)
    fp["profile_ranks"] = W
    ddp_caps = [_cap_value(c) for c in a.profile_ddp_caps.split(",") if c] if a.profile_ddp_caps else []
    warm = True

    def failure(name, bs, status, error):
        if rank == 0:
            append_jsonl(os.path.join(a.out, "profile_failures.jsonl"),
                         {"model": name, "batch_size": bs, "status": status, "error": error, "fingerprint": fp,
                          "launch_id": a.launch_id})

    for name in models:
        for bs in (batch_sizes or [None]):
            go = [time.perf_counter() - t_start <= a.budget_s]
            if own_group is not None:
                dist.broadcast_object_list(go, 0)  # rank 0's clock decides, so that every rank skips alike
            if not go[0]:
                log("budget exhausted, skipping profile", name)
                continue
            t0 = time.perf_counter()
            try:
                spec = resolve(name, bs)
                ok, why = spec.available()
            except Exception:  # noqa: BLE001
                spec, ok, why = None, False, traceback.format_exc()[-4000:]
            if not ok:
                log("profile SKIPPED", name, why)
                failure(name, spec.batch_size if spec is not None else bs, "skipped", why)
                continue
            if own_group is not None:
                dist.barrier()  # start together: each rank's profile runs beside the others'
            try:
                prof = _profile_one(a, spec, device, fp, ddp_caps, warm, own_group)
                prof["gpu"] = str(device)
            except Exception:  # noqa: BLE001
                prof = {"status": "failed", "error": traceback.format_exc()[-4000:]}
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            warm = False
            profiles = [prof]
            if own_group is not None:
                profiles = [None] * W
                dist.all_gather_object(profiles, prof)
            if rank != 0:
                continue
            default_bs = MODELS[name].batch_size if name in MODELS else None
            stem = file_stem(name, spec.batch_size, default_bs if default_bs is not None else spec.batch_size)
            for r, p in enumerate(profiles):
                if p.get("status") != "ok":
                    log("profile FAILED", name, f"rank {r:d}", p.get("error", "")[-800:])
                    failure(name, bs, "failed", f"rank {r:d} of {W:d}: " + p.get("error", ""))
            if own_group is None:
                chosen = prof if prof.get("status") == "ok" else None
            else:
                chosen = slowest_rank_profile(profiles)
                for r, p in enumerate(profiles):
                    if p.get("status") == "ok":
                        write_json(os.path.join(a.out, "profiles", "ranks", f"{stem}.r{r:d}.json"), p)
            if chosen is None:
                continue
            write_json(os.path.join(a.out, "profiles", stem + ".json"), chosen)
            steps = " ".join(f"{p['step_s']:.4f}" for p in profiles if p.get("status") == "ok")
            log(f"profile {name} bs {spec.batch_size} step {chosen['step_s']:.4f} s fwd {chosen['forward_s']:.4f} "
                f"bwd {chosen['backward_s']:.4f} opt {chosen['optimizer_s']:.4f} (ranks: {steps}) "
                f"({time.perf_counter() - t0:.1f}s)")
    if own_group is not None:
        _finish(a.launch_id or "profile", t_start)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["sweep", "profile", "microbench"], default="sweep")
    ap.add_argument("--out", required=True)
    ap.add_argument("--transport", default="nvlink", help="label of the intra-node transport (the campaign sets its env)")
    ap.add_argument("--launch-id", default=None)
    ap.add_argument("--models", default="resnet50,gpt2-124m,mlp-heavy",
                    help="built-in names or module:factory, comma separated")
    ap.add_argument("--batch-sizes", default=None, help="per-GPU batch sizes (every model x each); default: the model's")
    ap.add_argument("--caps", default="1,5,10,25,50,200")
    ap.add_argument("--variants", default="none",
                    help="DDP option variants: none,gbv,fp16,bf16,accum4,find_unused,static_graph,timing (a+b combines)")
    ap.add_argument("--variant-caps", default=None, help="caps at which the non-'none' variants run (default: first cap)")
    ap.add_argument("--cap-sweep-models", default=None,
                    help="models that get every --caps entry (default: all); the others only the variant caps")
    ap.add_argument("--max-live", type=int, default=6, help="DDP instances alive at once (interleaved together)")
    ap.add_argument("--timing-cap", type=float, default=25)
    ap.add_argument("--no-timing-run", action="store_true")
    ap.add_argument("--reference", default=None,
                    help="model:cap[:variant] measured first and last in the launch ('none': no reference); "
                         "default: first model at the timing cap (or the first cap)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds per configuration")
    ap.add_argument("--round-warmup", type=int, default=2, help="untimed steps before each round")
    ap.add_argument("--gpus-per-node", type=int, default=None,
                    help="emulate nodes of G GPUs on this host (own NCCL_HOSTID per group of G local ranks)")
    ap.add_argument("--inter-node-transport", default=None, help="label recorded for the inter-node transport")
    ap.add_argument("--algos", default="default", help="all-reduce sweeps: default,ring,tree")
    ap.add_argument("--skip-allreduce", action="store_true")
    ap.add_argument("--net-probe", action="store_true",
                    help="across nodes: point-to-point patterns over the network (netprobe.jsonl, see netprobe.py)")
    ap.add_argument("--net-probe-rounds", type=int, default=1, choices=(1, 2, 3),
                    help="times the probe runs in the launch: last; 2: also before the DDP runs; 3: also before "
                         "the all-reduce sweeps (the probe's drift within a launch; a round with nothing between "
                         "it and the next is left out). An early round that fails ends the launch, as the last "
                         "does; the DDP runs leave 1.5 x an early round's time (else 10 s) for the last")
    ap.add_argument("--skip-ddp", action="store_true")
    ap.add_argument("--overlap-bench", action="store_true",
                    help="before the DDP runs, time each model's backward beside all-reduces (overlap.jsonl, "
                         "see overlap.py): the compute and comm slowdowns measured instead of fitted")
    ap.add_argument("--allreduce-budget-s", type=float, default=40.0, help="all sweeps of the launch together")
    ap.add_argument("--allreduce-max-bytes", type=int, default=1 << 30)
    ap.add_argument("--budget-s", type=float, default=1e9, help="skip remaining configs past this")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30, help="timed steps per configuration per round")
    ap.add_argument("--nosync-steps", type=int, default=None)
    ap.add_argument("--profile-iters", type=int, default=20)
    ap.add_argument("--profile-ddp-caps", default="25",
                    help="caps (MB) at which the profile launch also times DDP at world size 1: plain, with "
                         "gradient_as_bucket_view and with the fp16/bf16 compress hooks (empty: not measured)")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    t_start = time.perf_counter()
    models = [m for m in a.models.split(",") if m]
    batch_sizes = _parse_list(a.batch_sizes)
    caps = [_cap_value(c) for c in a.caps.split(",") if c]
    variants = [v for v in a.variants.split(",") if v]
    for v in variants:
        variant_options(v)  # fail early on a typo
    nosync = min(a.steps, 10) if a.nosync_steps is None else a.nosync_steps
    os.makedirs(a.out, exist_ok=True)

    if a.mode == "profile":
        return _profile_main(a, models, batch_sizes, t_start)

    # ---------------------------------------------------------------- sweep / microbench (under torchrun)
    launch_id = a.launch_id or f"{a.transport}_w{os.environ.get('WORLD_SIZE', '1')}_0"
    shape, nccl_path = shape_setup(a.gpus_per_node, a.out, launch_id, a.inter_node_transport)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = get_device(local_rank)
    backend = "nccl" if device.type == "cuda" else "gloo"
    kw = {}
    if device.type == "cuda":
        kw["device_id"] = device
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=300), **kw)
    rank, W = dist.get_rank(), dist.get_world_size()
    n_hosts = hostname_count()  # also the first collective: NCCL has printed its init lines by now
    fp = fingerprint(device, W, a.transport, n_hosts)
    topo_cache = {}

    def topo():
        # rank 0 reads what NCCL printed about the default communicator (the first one in its file)
        if not topo_cache.get("nccl_nnodes_seen") and rank == 0:
            topo_cache.update(nccl_log.topology(nccl_log.read_from(nccl_path), shape["nodes"]))
        return dict(topo_cache) or nccl_log.topology("", shape["nodes"])

    log(f"launch {launch_id} world {W:d} device {device} backend {backend} hosts {n_hosts:d} shape "
        f"{shape['nodes']}x{shape['gpus_per_node']} emulated {shape['nodes_emulated']} "
        f"NCCL nNodes {topo().get('nccl_nnodes_seen')} via {topo().get('nccl_transports_seen')}")

    if a.mode == "microbench":
        from . import microbench

        base = {"schema": "ddpsim.microbench/1", "launch_id": launch_id, "world_size": W,
                "transport": a.transport, **shape, "fingerprint": fp}
        for name, fn in (("allreduce_overlap", microbench.allreduce_overlap),
                         ("allreduce_launch_cpu", microbench.allreduce_launch_cpu),
                         ("cast", microbench.casts)):
            t0 = time.perf_counter()
            if t0 - t_start > a.budget_s:
                log("microbench budget exhausted, skipping", name)
                continue
            try:
                recs = fn(device, W) if name != "cast" else fn(device)
                if rank == 0:
                    for r in recs:
                        append_jsonl(os.path.join(a.out, "microbench.jsonl"), dict(base, status="ok", **r))
                log(f"microbench {name}: {len(recs)} records in {time.perf_counter() - t0:.1f}s")
            except Exception:  # noqa: BLE001
                log("microbench FAILED", name, traceback.format_exc()[-800:])
                if rank == 0:
                    append_jsonl(os.path.join(a.out, "microbench.jsonl"),
                                 dict(base, bench=name, status="failed", error=traceback.format_exc()[-4000:]))
        _finish(launch_id, t_start)
        return 0

    probing = a.net_probe and shape["nodes"] > 1
    probe_round = 0
    # the DDP runs leave time for the last round: an early round's duration x 1.5, else 10 s (rounds on
    # 4 x H100 took 3.6 to 5.5 s)
    probe_reserve_s = 10.0 if probing else 0.0
    # an early round runs only where something follows it before the next round (no rounds back to back)
    if probing and a.net_probe_rounds >= 3 and not a.skip_allreduce:
        probe_reserve_s = 1.5 * net_probe(a, device, W, fp, shape, launch_id, probe_round)
        probe_round += 1
    if not a.skip_allreduce:
        allreduce_sweeps(a, device, W, backend, fp, shape, topo, nccl_path, launch_id)
    if a.overlap_bench:
        overlap_bench(a, models, batch_sizes, device, W, fp, shape, launch_id)
    if probing and a.net_probe_rounds >= 2 and not a.skip_ddp:
        probe_reserve_s = 1.5 * net_probe(a, device, W, fp, shape, launch_id, probe_round)
        probe_round += 1

    if not a.skip_ddp:
        timing_cap = None if a.no_timing_run else _cap_value(a.timing_cap)
        cap_models = [m for m in a.cap_sweep_models.split(",") if m] if a.cap_sweep_models else None
        plan = plan_runs(models, caps, variants, batch_sizes, _parse_list(a.variant_caps, _cap_value), timing_cap,
                         cap_models)
        if a.reference is None:
            ref_cap = timing_cap if timing_cap in caps else caps[0]
            reference = (models[0], (batch_sizes or [None])[0], ref_cap, "none")
        else:
            reference = parse_reference(a.reference, models[0])
        topo_fields = topo()

        def base_fn(key, spec):
            m, _bs, cap, var = key
            opts = variant_options(var)
            return {"schema": "ddpsim.ddp_run/1", "model": m, "batch_size": spec.batch_size,
                    "precision": spec.precision, "seq_len": spec.seq_len, "bucket_cap_mb": cap, "world_size": W,
                    "transport": a.transport, "launch_id": launch_id, "variant": var, **opts,
                    "ddp_options_default": is_default_ddp(opts), "zero_grad_set_to_none": True,
                    "model_source": spec.source, **shape, **topo_fields, "fingerprint": fp}

        def write_fn(rec):
            if rank == 0:
                append_jsonl(os.path.join(a.out, "ddp_runs.jsonl"), rec)

        run_interleaved(plan, reference, device, W, base_fn, write_fn, t_launch0=t_start,
                        budget_s=a.budget_s - probe_reserve_s,
                        rounds=a.rounds, steps=a.steps, warmup=a.warmup, round_warmup=a.round_warmup,
                        nosync_steps=nosync, max_live=a.max_live, log_fn=log)
    if probing:
        # the last round runs last: where it fails, it ends the launch and loses nothing else
        net_probe(a, device, W, fp, shape, launch_id, probe_round)
    _finish(launch_id, t_start)
    return 0


def overlap_bench(a, models, batch_sizes, device, W, fp, shape, launch_id):
    """Each model's backward beside all-reduces (overlap.py); a model that fails is recorded as failed."""
    from . import overlap

    rank = dist.get_rank()
    base = {"schema": "ddpsim.overlap/1", "launch_id": launch_id, "world_size": W, "transport": a.transport,
            **shape, "fingerprint": fp}
    for name in models:
        for bs in batch_sizes or [None]:
            t0 = time.perf_counter()
            try:
                spec = resolve(name, bs)
                recs = overlap.model_overlap(spec, device, reps=2 if a.quick else 5)
                status = [dict(base, status="ok", **r) for r in recs]
            except Exception:  # noqa: BLE001
                log("overlap bench FAILED", name, traceback.format_exc()[-800:])
                status = [dict(base, bench="model_overlap", model=name, status="failed",
                               error=traceback.format_exc()[-4000:])]
            if rank == 0:
                for r in status:
                    append_jsonl(os.path.join(a.out, "overlap.jsonl"), r)
            log(f"overlap bench {name}: {time.perf_counter() - t0:.1f}s")


def _finish(launch_id, t_start):
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    log(f"launch {launch_id} done in {time.perf_counter() - t_start:.1f}s")


if __name__ == "__main__":
    sys.exit(main())
