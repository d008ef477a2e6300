"""Mechanism micro-benchmarks (worker --mode microbench, under torchrun): schema ``ddpsim.microbench/1``.

(a) ``allreduce_overlap``: all-reduce time alone and while a big GEMM / a convolution runs on another
    stream, and that kernel's time alone and while all-reduces run (comm slowdown under compute, compute
    slowdown under comm).  Both streams are held behind one gate (a spin kernel on the main stream) so that
    the two sides start together instead of one finishing while the CPU still enqueues the other.
(b) ``allreduce_launch_cpu``: CPU time of the Python call ``dist.all_reduce(t, async_op=True)`` (plus
    ``get_future()``), and of the same call inside a DDP comm hook (the autograd-hook path).
(c) ``cast``: the extra kernels of the fp16/bf16 compress hooks: fp32 bucket -> 16 bit, and back.

Units are in the field names.  On CPU/gloo everything runs with tiny sizes and no second stream (the
numbers then only prove that the code runs).
"""
from __future__ import annotations

import contextlib
import time

import torch
import torch.distributed as dist

from .common import Marker, hold_stream, median, quantile, rank0_count, synchronize

KiB, MiB = 1024, 1024 * 1024


def _stats_us(xs_s):
    us = [x * 1e6 for x in xs_s]
    return {"median": median(us), "p10": quantile(us, 0.1), "p90": quantile(us, 0.9), "n": len(us)}


class Kernel:
    """One compute kernel to overlap with: a big GEMM or a ResNet-like 3x3 convolution."""

    def __init__(self, kind, device):
        self.kind = kind
        cuda = device.type == "cuda"
        if kind == "gemm":
            n = 8192 if cuda else 128
            dt = torch.bfloat16 if cuda else torch.float32
            self.a = torch.randn(n, n, device=device, dtype=dt)
            self.b = torch.randn(n, n, device=device, dtype=dt)
            self.desc = f"matmul {n}x{n}x{n} {str(dt).replace('torch.', '')}"
        else:
            bs, c, hw = (64, 256, 56) if cuda else (2, 8, 8)
            dt = torch.bfloat16 if cuda else torch.float32
            self.conv = torch.nn.Conv2d(c, c, 3, padding=1, bias=False).to(device=device, dtype=dt)
            self.x = torch.randn(bs, c, hw, hw, device=device, dtype=dt)
            if cuda:
                self.conv = self.conv.to(memory_format=torch.channels_last)
                self.x = self.x.to(memory_format=torch.channels_last)
            self.desc = f"conv2d 3x3 {c}->{c} on {bs}x{c}x{hw}x{hw} {str(dt).replace('torch.', '')} channels_last"

    @torch.no_grad()
    def __call__(self):
        if self.kind == "gemm":
            return torch.mm(self.a, self.b)
        return self.conv(self.x)


def _marked_allreduces(device, t, reps):
    """``reps`` all-reduces of ``t`` back to back, each between two stream markers."""
    marks = []
    for _ in range(reps):
        a = Marker(device).record()
        dist.all_reduce(t)
        marks.append((a, Marker(device).record()))
    return marks


def allreduce_overlap(device, W, sizes=(256 * KiB, 4 * MiB, 25 * MiB), kernels=("gemm", "conv"), reps=20):
    cuda = device.type == "cuda"
    side = torch.cuda.Stream(device) if cuda else None
    side_ctx = (lambda: torch.cuda.stream(side)) if cuda else contextlib.nullcontext
    out = []
    for kind in kernels:
        k = Kernel(kind, device)
        for _ in range(3):
            k()
        synchronize(device)
        # compute alone: per-kernel events on the side stream
        with side_ctx():
            marks = [(Marker(device).record(), k(), Marker(device).record()) for _ in range(reps)]
        synchronize(device)
        comp_alone = [b.seconds_since(a) for a, _, b in marks]
        for nbytes in sizes:
            if not cuda:
                nbytes = min(nbytes, 64 * KiB)
            t = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
            for _ in range(5):
                dist.all_reduce(t)
            synchronize(device)
            marks = _marked_allreduces(device, t, reps)
            synchronize(device)
            comm_alone = [b.seconds_since(a) for a, b in marks]
            # the same calls queued behind the gate, back to back (no CPU launch gap between them): the
            # baseline the 'with kernel' calls must be compared with, since those are queued the same way
            dist.barrier()
            synchronize(device)
            hold_stream(device, 0.02)
            marks = _marked_allreduces(device, t, reps)
            synchronize(device)
            comm_queued = [b.seconds_since(a) for a, b in marks]
            span_queued = marks[-1][1].seconds_since(marks[0][0])
            c_med, k_med = median(comm_alone), median(comp_alone)

            # comm under compute: enough kernels to outlast reps all-reduces even when they run 10x slower
            # (an all-reduce may wait for SMs until a kernel finishes), at most ~60 ms of kernels
            n_kern = max(10, int(10 * span_queued / max(k_med, 1e-6)) + 2)
            n_kern = min(n_kern, max(10, int(0.06 / max(k_med, 1e-6))), 400)
            dist.barrier()
            synchronize(device)
            hold_stream(device, 0.02)
            gate_ev = torch.cuda.Event() if cuda else None
            if cuda:
                gate_ev.record()
                side.wait_event(gate_ev)
            with side_ctx():
                k0 = Marker(device).record()
                for _ in range(n_kern):
                    k()
                k1 = Marker(device).record()
            marks = _marked_allreduces(device, t, reps)
            synchronize(device)
            comm_busy = [b.seconds_since(a) for a, b in marks]
            span_busy = marks[-1][1].seconds_since(marks[0][0])
            comm_end_in_compute = marks[-1][1].seconds_since(k0) <= k1.seconds_since(k0)

            # compute under comm: enough all-reduces to outlast reps kernels
            n_comm = max(4, int(2.5 * reps * k_med / max(c_med, 1e-6)) + 2)
            n_comm = rank0_count(min(n_comm, 3000), device)
            dist.barrier()
            synchronize(device)
            enqueue_guess = n_comm * 15e-6  # CPU time to enqueue the all-reduces (~10-15 us each)
            hold_stream(device, 0.02 + enqueue_guess)
            if cuda:
                gate_ev = torch.cuda.Event()
                gate_ev.record()
                side.wait_event(gate_ev)
            c0 = Marker(device).record()
            for _ in range(n_comm):
                dist.all_reduce(t)
            c1 = Marker(device).record()
            with side_ctx():
                marks = [(Marker(device).record(), k(), Marker(device).record()) for _ in range(reps)]
            synchronize(device)
            comp_busy = [b.seconds_since(a) for a, _, b in marks]
            comp_end_in_comm = marks[-1][2].seconds_since(c0) <= c1.seconds_since(c0)
            cb, kb = median(comm_busy), median(comp_busy)
            out.append({
                "bench": "allreduce_overlap", "kernel": kind, "kernel_desc": k.desc, "bytes": nbytes,
                "dtype": "float32", "repeats": reps,
                "allreduce_alone_us": _stats_us(comm_alone),
                "allreduce_with_kernel_us": _stats_us(comm_busy),
                "allreduce_slowdown_ratio": cb / c_med if c_med else None,
                # added after the 2026-11-26 campaign: the queued baseline and whole-series spans
                "allreduce_alone_queued_us": _stats_us(comm_queued),
                "allreduce_series_alone_queued_us": span_queued * 1e6,
                "allreduce_series_with_kernel_us": span_busy * 1e6,
                "allreduce_series_slowdown_ratio": span_busy / span_queued if span_queued else None,
                "kernel_alone_us": _stats_us(comp_alone),
                "kernel_with_allreduce_us": _stats_us(comp_busy),
                "kernel_slowdown_ratio": kb / k_med if k_med else None,
                "kernels_behind_allreduces": n_kern, "allreduces_behind_kernels": n_comm,
                "allreduces_ended_inside_kernel_span": bool(comm_end_in_compute),
                "kernels_ended_inside_allreduce_span": bool(comp_end_in_comm),
            })
            del t
        del k
        if cuda:
            torch.cuda.empty_cache()
    return out


def allreduce_launch_cpu(device, W, sizes=(4 * KiB, 256 * KiB, 4 * MiB, 25 * MiB), reps=50):
    out = []
    for nbytes in sizes:
        if device.type != "cuda":
            nbytes = min(nbytes, 64 * KiB)
        t = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
        for _ in range(5):
            dist.all_reduce(t)
        synchronize(device)
        call_s, fut_s = [], []
        for _ in range(reps):
            c0 = time.perf_counter()
            w = dist.all_reduce(t, async_op=True)
            c1 = time.perf_counter()
            f = w.get_future().then(lambda f: f.value())
            c2 = time.perf_counter()
            f.wait()
            synchronize(device)
            call_s.append(c1 - c0)
            fut_s.append(c2 - c0)
        out.append({"bench": "allreduce_launch_cpu", "path": "python", "bytes": nbytes, "dtype": "float32",
                    "repeats": reps, "call_cpu_us": _stats_us(call_s), "call_and_future_then_cpu_us": _stats_us(fut_s)})
        del t
    out.append(_hook_launch_cpu(device, W))
    return out


def _hook_launch_cpu(device, W, layers=16, width=1024, steps=8):
    """The same call made from a DDP comm hook during backward (bucket_cap_mb=1: one bucket per layer)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    if device.type != "cuda":
        width = 64
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)]).to(device)
    kw = {"device_ids": [device.index]} if device.type == "cuda" else {}
    ddp = DDP(model, bucket_cap_mb=1, **kw)
    rec = {"calls": [], "active": False}

    def hook(state, bucket):
        buf = bucket.buffer()
        buf.div_(W)
        c0 = time.perf_counter()
        fut = dist.all_reduce(buf, async_op=True).get_future()
        fut2 = fut.then(lambda f: f.value()[0])
        if rec["active"]:
            rec["calls"].append(time.perf_counter() - c0)
        return fut2

    ddp.register_comm_hook(None, hook)
    x = torch.randn(64, width, device=device)
    for i in range(steps + 3):
        rec["active"] = i >= 3
        ddp(x).float().pow(2).mean().backward()
        synchronize(device)
    del ddp, model
    return {"bench": "allreduce_launch_cpu", "path": "ddp_comm_hook", "bytes": width * width * 4 + width * 4,
            "dtype": "float32", "repeats": len(rec["calls"]), "buckets_per_step": layers,
            "call_and_future_then_cpu_us": _stats_us(rec["calls"])}


def casts(device, sizes_mib=(1, 5, 25, 100), reps=20):
    out = []
    for mib in sizes_mib:
        n = (mib * MiB if device.type == "cuda" else min(mib, 1) * 64 * KiB) // 4
        t = torch.randn(n, device=device)
        for dt in (torch.float16, torch.bfloat16):
            h = t.to(dt)
            synchronize(device)
            down, up = [], []
            for _ in range(reps):
                a = Marker(device).record()
                h = t.to(dt)
                b = Marker(device).record()
                _ = h.to(torch.float32)
                c = Marker(device).record()
                down.append((a, b))
                up.append((b, c))
            synchronize(device)
            out.append({"bench": "cast", "bytes_fp32": n * 4, "to_dtype": str(dt).replace("torch.", ""),
                        "repeats": reps,
                        "cast_down_us": _stats_us([b.seconds_since(a) for a, b in down]),
                        "cast_up_us": _stats_us([c.seconds_since(b) for b, c in up])})
        del t
    return out
