"""Why do DDP's fp16/bf16 compression hooks make steps slower on NVLink?  (issue #10)

torch + Python standard library only.  Launch on one host:

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node=N -m validation.experiments.hook_mechanism --out DIR

For each model (default resnet50, gpt2-124m, mlp-ln-64: the harness's definitions in models.py) at
bucket_cap_mb=25 every variant below is built as its own DDP instance and measured in two interleaved
rounds (A B C ... then ... C B A, so drift cancels).  Each variant changes one thing against a neighbour:

    none           DDP's C++ path: mul_out copy-in (divides), fp32 all-reduce, no Python
    cpp_allreduce  the built-in C++ ALLREDUCE comm hook (copy-in without divide, C++ div in the hook)
    py_noop        a Python hook that communicates nothing (a completed future): Python path, no comm
    py_allreduce   torch's default_hooks.allreduce_hook: Python path + div_ + fp32 all-reduce + then
    py_allreduce_sleep100  py_allreduce + 100 us of busy CPU inside the hook: how much step time one us of
                   hook CPU costs
    cast_fp32wire  cast to 16 bit and back on the compute stream (allocating, like the fp16 hook), then the
                   fp32 all-reduce: the casts and their allocation without the 16-bit wire
    fp16_wire_only all-reduce of a persistent fp16 tensor with the bucket's element count, no cast, no
                   decompress (gradients stay undivided: timing only): the 16-bit wire alone
    fp16_prealloc  the fp16 hook with a persistent 16-bit buffer per bucket (no allocation per step)
    fp16, bf16     torch's default_hooks.fp16_compress_hook / bf16_compress_hook

Per variant: step / forward / backward / optimizer time (CUDA events, medians of all timed steps), the CPU
wall time of ``loss.backward()`` (the autograd thread's enqueue time: when it is as long as the GPU's
backward, backward is launch-bound and any CPU time in a hook delays it), each hook call's CPU time and
its entry time after backward started, caching-allocator counters over the timed steps (cudaMalloc
count = ``num_device_alloc``), and a torch.profiler summary of a few steps: kernel time and count per
stream by kernel name, the compute stream's busy time (union of its kernels) per step, CUDA runtime calls
(cudaMalloc, cudaStreamWaitEvent, syncs) by count and CPU time.  Plus an all-reduce micro-benchmark:
fp32 vs fp16 vs bf16 for the same element count and for the same byte count, queued back to back.
Results: DIR/hook_mechanism.jsonl (one record per variant, written as it finishes) and
DIR/hook_mechanism.json (everything, with the machine's fingerprint), both from rank 0.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time
from collections import defaultdict
from typing import Any

try:
    import torch
except ModuleNotFoundError as _no_torch:  # `python -m ... --help` on a host without torch
    from ddpsim.measure.needs_torch import without_torch

    without_torch(__name__, __doc__, _no_torch)
import torch.distributed as dist

from ddpsim.measure.common import (
    Marker,
    append_jsonl,
    fingerprint,
    median,
    quantile,
    synchronize,
    write_json,
)
from ddpsim.measure.models import ddp_param_order, resolve

MiB = 1024 * 1024
VARIANTS = ("none", "cpp_allreduce", "py_noop", "py_allreduce", "py_allreduce_sleep100", "cast_fp32wire",
            "fp16_wire_only", "fp16_prealloc", "fp16", "bf16")
SLEEP_S = 100e-6


def log(*a):
    if dist.get_rank() == 0:
        print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


# ----------------------------------------------------------------------------- the hooks
def _busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class Hooks:
    """The variants' comm hooks, each wrapped to record its CPU time and entry time after backward began."""

    def __init__(self, W: int, device: torch.device):
        self.W, self.device = W, device
        self.persistent: dict[tuple[int, torch.dtype], torch.Tensor] = {}
        self.calls: list[tuple[int, float, float]] = []  # (bucket index, entry after backward start, duration)
        self.bw_cpu_start = 0.0
        self.active = False

    def _persistent(self, index: int, like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        key = (index, dtype)
        t = self.persistent.get(key)
        if t is None or t.numel() != like.numel():
            t = torch.empty(like.numel(), dtype=dtype, device=like.device)
            self.persistent[key] = t
        return t

    def make(self, variant: str):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        W = self.W

        def py_noop(state, bucket):
            fut = torch.futures.Future(devices=[self.device] if self.device.type == "cuda" else None)
            fut.set_result(bucket.buffer())
            return fut

        def py_allreduce_sleep(state, bucket):
            _busy_wait(SLEEP_S)
            return default_hooks.allreduce_hook(state, bucket)

        def cast_fp32wire(state, bucket):
            buf = bucket.buffer()
            compressed = buf.to(torch.float16).div_(W)  # allocates, like _compress_hook
            buf.copy_(compressed)  # the decompress cast, here on the compute stream
            fut = dist.all_reduce(buf, async_op=True).get_future()
            return fut.then(lambda f: f.value()[0])

        def fp16_wire_only(state, bucket):
            buf = bucket.buffer()
            wire = self._persistent(bucket.index(), buf, torch.float16)
            fut = dist.all_reduce(wire, async_op=True).get_future()
            return fut.then(lambda f: buf)

        def fp16_prealloc(state, bucket):
            buf = bucket.buffer()
            compressed = self._persistent(bucket.index(), buf, torch.float16)
            compressed.copy_(buf)
            compressed.div_(W)
            fut = dist.all_reduce(compressed, async_op=True).get_future()

            def decompress(f):
                buf.copy_(f.value()[0])
                return buf

            return fut.then(decompress)

        table = {"py_noop": py_noop, "py_allreduce": default_hooks.allreduce_hook,
                 "py_allreduce_sleep100": py_allreduce_sleep, "cast_fp32wire": cast_fp32wire,
                 "fp16_wire_only": fp16_wire_only, "fp16_prealloc": fp16_prealloc,
                 "fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}
        hook = table[variant]

        def timed(state, bucket):
            t0 = time.perf_counter()
            fut = hook(state, bucket)
            t1 = time.perf_counter()
            if self.active:
                self.calls.append((bucket.index(), t0 - self.bw_cpu_start, t1 - t0))
            return fut

        return timed


# ----------------------------------------------------------------------------- one variant
class Run:
    def __init__(self, spec, variant: str, cap_mb: float, device: torch.device, W: int):
        from torch.nn.parallel import DistributedDataParallel as DDP

        self.spec, self.variant, self.device = spec, variant, device
        torch.manual_seed(0)
        model = spec.build_on(device)
        model.train()
        self.n_params = len(ddp_param_order(model))
        kw: dict[str, Any] = {"device_ids": [device.index]} if device.type == "cuda" else {}
        self.ddp = DDP(model, bucket_cap_mb=cap_mb, **kw)
        self.hooks = Hooks(W, device)
        if variant == "cpp_allreduce":
            self.ddp._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
        elif variant != "none":
            self.ddp.register_comm_hook(None, self.hooks.make(variant))
        self.opt = spec.make_optimizer(self.ddp.parameters())
        self.batch = spec.make_batch(device, seed=1234 + dist.get_rank())
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.mem_deltas: list[dict[str, int]] = []

    def step(self, timed: bool) -> None:
        d = self.device
        m0, m1, m2, m3 = (Marker(d) for _ in range(4))
        w0 = time.perf_counter()
        m0.record()
        self.opt.zero_grad(set_to_none=True)
        loss = self.spec.loss(self.ddp, self.batch)
        m1.record()
        self.hooks.bw_cpu_start = time.perf_counter()
        self.hooks.active = timed
        loss.backward()
        bw_cpu = time.perf_counter() - self.hooks.bw_cpu_start
        self.hooks.active = False
        m2.record()
        self.opt.step()
        m3.record()
        enqueue_cpu = time.perf_counter() - w0
        synchronize(d)
        if timed:
            s = self.samples
            s["step_s"].append(m3.seconds_since(m0))
            s["forward_s"].append(m1.seconds_since(m0))
            s["backward_s"].append(m2.seconds_since(m1))
            s["optimizer_s"].append(m3.seconds_since(m2))
            s["backward_cpu_s"].append(bw_cpu)
            s["step_enqueue_cpu_s"].append(enqueue_cpu)

    def measure(self, steps: int) -> None:
        before = _mem_counters(self.device)
        for _ in range(steps):
            self.step(True)
        after = _mem_counters(self.device)
        self.mem_deltas.append({k: after[k] - before[k] for k in after})

    def close(self) -> None:
        del self.ddp, self.opt, self.batch, self.hooks
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def _mem_counters(device: torch.device) -> dict[str, int]:
    if device.type != "cuda":
        return {}
    s = torch.cuda.memory_stats(device)
    keys = ("num_device_alloc", "num_device_free", "num_alloc_retries", "allocation.all.allocated",
            "segment.all.allocated")
    return {k: int(s.get(k, 0)) for k in keys}


def _stats(xs: list[float]) -> dict:
    return {"median": median(xs), "p10": quantile(xs, 0.1), "p90": quantile(xs, 0.9), "n": len(xs)}


# ----------------------------------------------------------------------------- profiler summary
def profile_summary(run: Run, steps: int) -> dict:
    """A few steps under torch.profiler, reduced to per-stream kernel totals and runtime-call counts."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(steps):
            run.step(False)
    if dist.get_rank() != 0:  # only rank 0 reports; the others wait for it at the next collective
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    by_stream: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for e in kernels:
        by_stream[str(e.get("args", {}).get("stream", e.get("tid")))][e["name"]].append(float(e["dur"]))
    streams = {}
    for stream, names in by_stream.items():
        total = sum(sum(v) for v in names.values())
        top = sorted(names.items(), key=lambda kv: -sum(kv[1]))[:12]
        streams[stream] = {"kernel_us_per_step": total / steps,
                           "kernels_per_step": sum(len(v) for v in names.values()) / steps,
                           "top": [{"name": n[:120], "count_per_step": len(v) / steps,
                                    "us_per_step": sum(v) / steps, "median_us": median(v)} for n, v in top]}
    # the compute stream: most kernel time that is not NCCL
    def non_nccl(stream: str) -> float:
        return sum(sum(v) for n, v in by_stream[stream].items() if "nccl" not in n.lower())
    compute_stream = max(by_stream, key=non_nccl) if by_stream else None
    busy_us = 0.0
    span_us = 0.0
    if compute_stream is not None:
        iv = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in kernels
                    if str(e.get("args", {}).get("stream", e.get("tid"))) == compute_stream)
        cur_s, cur_e = iv[0]
        for s, e in iv[1:]:
            if s > cur_e:
                busy_us += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        busy_us += cur_e - cur_s
        span_us = iv[-1][1] - iv[0][0]
    runtime: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            runtime[e["name"]].append(float(e["dur"]))
    # CPU ops inside the hooks (the wrapper's call shows as the Python-side ops it ran; report the usual suspects)
    cpu_ops: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op" and e["name"] in ("aten::to", "aten::_to_copy", "aten::copy_", "aten::div_",
                                                        "aten::empty_strided", "c10d::allreduce_",
                                                        "nccl:all_reduce", "aten::mul", "aten::mul_"):
            cpu_ops[e["name"]].append(float(e["dur"]))
    return {
        "profiled_steps": steps,
        "compute_stream": compute_stream,
        "compute_stream_busy_us_per_step": busy_us / steps,
        "compute_stream_span_us_per_step": span_us / steps,
        "streams": streams,
        "runtime_calls": {n: {"count_per_step": len(v) / steps, "us_per_step": sum(v) / steps}
                          for n, v in sorted(runtime.items(), key=lambda kv: -sum(kv[1]))[:25]},
        "cpu_ops": {n: {"count_per_step": len(v) / steps, "us_per_step": sum(v) / steps}
                    for n, v in cpu_ops.items()},
    }


def variant_record(run: Run, prof: dict | None, W: int) -> dict:
    s = run.samples
    calls = run.hooks.calls
    per_bucket: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for idx, entry, dur in calls:
        per_bucket[idx].append((entry, dur))
    logd = {}
    try:
        raw = run.ddp._get_ddp_logging_data()
        logd = {k: raw.get(k) for k in ("rebuilt_bucket_sizes", "comm_hook", "avg_backward_compute_time",
                                         "avg_backward_comm_time", "avg_backward_compute_comm_overlap_time")}
    except Exception as e:  # noqa: BLE001 - logging data is context, not the measurement
        logd = {"_error": repr(e)}
    return {
        "schema": "ddpsim.hook_mechanism/1", "model": run.spec.name, "variant": run.variant, "world_size": W,
        "batch_size": run.spec.batch_size, "precision": run.spec.precision, "n_param_tensors": run.n_params,
        **{k: _stats(v) for k, v in s.items()},
        "step_times_s": s["step_s"],
        "hook_calls_per_step": len(calls) / max(1, len(s["step_s"])),
        "hook_cpu_s": _stats([c[2] for c in calls]) if calls else None,
        "hook_per_bucket": [{"index": i, "entry_after_backward_start_s": median([x[0] for x in v]),
                             "cpu_s": median([x[1] for x in v])} for i, v in sorted(per_bucket.items())],
        "allocator_deltas_per_round": run.mem_deltas,
        "profile": prof,
        "ddp_logging": logd,
    }


# ----------------------------------------------------------------------------- all-reduce dtype bench
def allreduce_dtypes(device: torch.device, reps: int = 20) -> list[dict]:
    """Queued back-to-back all-reduces: fp32 vs fp16 vs bf16 at equal element count and at equal bytes."""
    out = []
    for fp32_mib in (6.25, 12.5, 25.0):
        numel = int(fp32_mib * MiB / 4)
        for dtype, n in ((torch.float32, numel), (torch.float16, numel), (torch.bfloat16, numel),
                         (torch.float32, numel // 2)):
            t = torch.ones(n, dtype=dtype, device=device)
            for _ in range(3):
                dist.all_reduce(t)
            synchronize(device)
            dist.barrier()
            marks = [Marker(device) for _ in range(reps + 1)]
            marks[0].record()
            for i in range(reps):
                dist.all_reduce(t)
                marks[i + 1].record()
            synchronize(device)
            per = [marks[i + 1].seconds_since(marks[i]) for i in range(reps)]
            out.append({"dtype": str(dtype).replace("torch.", ""), "numel": n,
                        "bytes": n * t.element_size(), "time_s": _stats(per)})
            del t
    return out


# ----------------------------------------------------------------------------- main
def measure_model(a, name: str, variants: list[str], device: torch.device, W: int, fp: dict, jsonl: str,
                  result: dict) -> None:
    spec = resolve(name, a.batch_size)
    ok, why = spec.available()
    if not ok:
        log(f"skip {name}: {why}")
        return
    log(f"{name}: building {len(variants)} variants")
    runs = [Run(spec, v, a.cap_mb, device, W) for v in variants]
    try:
        for r in runs:
            for _ in range(a.warmup):
                r.step(False)
        for order in (runs, list(reversed(runs))):  # two interleaved rounds
            for r in order:
                r.step(False)
                r.measure(a.steps)
        for r in runs:
            prof = None
            if a.profile_steps > 0:
                try:
                    prof = profile_summary(r, a.profile_steps)
                except Exception as e:  # noqa: BLE001 - rank 0's trace parsing; the timings stand without it
                    prof = {"_error": repr(e)}
            rec = variant_record(r, prof, W)
            rec["fingerprint_gpu"] = fp["gpu_name"]
            if dist.get_rank() == 0:
                append_jsonl(jsonl, rec)
                result["records"].append(rec)
                hook_us = ((rec["hook_cpu_s"] or {}).get("median") or 0) * 1e6
                print(f"  {name:10s} {r.variant:22s} step {rec['step_s']['median'] * 1e3:7.2f} ms  "
                      f"bwd {rec['backward_s']['median'] * 1e3:7.2f}  "
                      f"bwd_cpu {rec['backward_cpu_s']['median'] * 1e3:7.2f}  "
                      f"hook {hook_us:6.0f} us x {rec['hook_calls_per_step']:.0f}", flush=True)
    finally:
        for r in runs:
            r.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="resnet50,gpt2-124m,mlp-ln-64")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--cap-mb", type=float, default=25.0)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per round (2 rounds)")
    ap.add_argument("--profile-steps", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=None, help="override every model's batch (CPU smoke tests)")
    ap.add_argument("--budget-s", type=float, default=400.0)
    a = ap.parse_args(argv)

    t_start = time.perf_counter()
    rank, W = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    own_group = not dist.is_initialized()  # tests bring their own one-rank gloo group
    if own_group:
        dist.init_process_group(backend, device_id=device if device.type == "cuda" else None)
    os.makedirs(a.out, exist_ok=True)
    jsonl = os.path.join(a.out, "hook_mechanism.jsonl")
    fp = fingerprint(device, W, "nvlink" if device.type == "cuda" else "cpu")
    result: dict = {"schema": "ddpsim.hook_mechanism/1", "fingerprint": fp, "args": vars(a), "records": [],
                    "allreduce_dtypes": None}
    if device.type == "cuda":
        log("all-reduce dtype bench")
        result["allreduce_dtypes"] = allreduce_dtypes(device)
    variants = a.variants.split(",")
    for name in a.models.split(","):
        over = torch.tensor([float(time.perf_counter() - t_start > a.budget_s)], device=device)
        dist.all_reduce(over, op=dist.ReduceOp.MAX)  # every rank stops at the same model
        if over.item() > 0:
            log(f"budget spent before {name}")
            break
        try:
            measure_model(a, name, variants, device, W, fp, jsonl, result)
        except Exception as e:  # noqa: BLE001 - one model's failure (on every rank alike) must not lose the others
            log(f"{name} failed: {e!r}")
            result.setdefault("failures", []).append({"model": name, "error": repr(e)})
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
        if rank == 0:
            write_json(os.path.join(a.out, "hook_mechanism.json"), result)
    result["wall_s"] = time.perf_counter() - t_start
    if rank == 0:
        write_json(os.path.join(a.out, "hook_mechanism.json"), result)
    dist.barrier()
    if own_group:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
