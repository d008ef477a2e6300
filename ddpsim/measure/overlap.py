"""A model's backward beside all-reduces (worker --overlap-bench, under torchrun): schema ``ddpsim.overlap/1``.

DDP runs the model's backward kernels on the compute stream while NCCL's all-reduces run on their own
stream. Each slows the other: they share the SMs and the memory bandwidth. How much depends on the kernels
(a bf16 GEMM left an all-reduce of 25 MiB at its own speed on 4 x H200, a convolution slowed it 2.4 times,
validation/data/h200x4-options-2026-11-26/microbench.jsonl), so it is measured per model, with the model's
own backward, instead of being fitted from step times:

* backward alone: ``loss.backward()`` timed on the compute stream (forward done before, untimed);
* all-reduces alone: a series of calls of ``bytes`` on a side stream, back to back;
* together: the same series queued beside the same backward.

Both sides sit behind one gate (a spin kernel) so that they start together on the GPU, whatever the
CPU's launch speed; the alone timings are gated the same way, so the ratios say what the GPU does, not the
host. The all-reduces are sized to outlast the backward (``allreduces_outlasted_backward`` says whether
they did); the comm slowdown counts only the calls that ended before backward did. Alone and together
alternate (A T A T ...) so that a drift of the host's speed falls on both.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any

import torch
import torch.distributed as dist

from .common import Marker, hold_stream, median, median_of, rank0_count, synchronize
from .spec import ModelSpec

MiB = 1024 * 1024
GATE_BASE_S = 0.03
ENQUEUE_S_PER_CALL = 30e-6  # CPU time to queue one all-reduce (10-15 us measured), with margin


def _agreed_float(v: float, device: torch.device) -> float:
    """The largest value over the ranks (the gate must hold on the slowest)."""
    t = torch.tensor([float(v)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


class _Streams:
    """The compute stream and a side stream for the all-reduces, held behind one gate."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.side = torch.cuda.Stream(device) if self.cuda else None

    def start_together(self, gate_s: float) -> None:
        dist.barrier()
        synchronize(self.device)
        hold_stream(self.device, gate_s)
        if self.side is not None:
            ev = torch.cuda.Event()
            ev.record()
            self.side.wait_event(ev)

    def allreduces(self, t: torch.Tensor, n: int) -> list[tuple[Marker, Marker]]:
        """``n`` all-reduces of ``t`` on the side stream: [(start marker, end marker)]."""
        marks = []
        ctx = torch.cuda.stream(self.side) if self.cuda else contextlib.nullcontext()
        with ctx:
            for _ in range(n):
                a = Marker(self.device).record()
                dist.all_reduce(t)
                marks.append((a, Marker(self.device).record()))
        return marks


def calls_inside(calls: list[tuple[float, float]], backward_s: float) -> tuple[list[float], bool]:
    """The durations of the calls wholly inside a backward from 0 to ``backward_s`` (start and end of each
    call in seconds from the backward's start): one that started before it (the backward still queueing)
    or ended after it ran partly alone. Also whether the calls ran to the backward's end."""
    inside = [end - start for start, end in calls if start >= 0 and end <= backward_s]
    return inside, bool(calls) and calls[-1][1] >= backward_s


def _backward(spec: ModelSpec, model: torch.nn.Module, batch: Any, device: torch.device) -> torch.Tensor:
    """Zero the gradients, run the forward (untimed) and wait for it: the loss, for the caller to time its
    backward."""
    for p in model.parameters():
        p.grad = None
    loss = spec.loss(model, batch)
    synchronize(device)
    return loss


def model_overlap(spec: ModelSpec, device: torch.device, sizes: tuple[int, ...] = (25 * MiB,), reps: int = 5,
                  warmup: int = 3) -> list[dict[str, Any]]:
    """Records of one model: per all-reduce size, backward and all-reduces alone and together."""
    streams = _Streams(device)
    model = spec.build_on(device)
    batch = spec.make_batch(device)
    backward_wall = []
    for _ in range(warmup):
        loss = _backward(spec, model, batch, device)
        t0 = time.perf_counter()
        loss.backward()
        synchronize(device)
        backward_wall.append(time.perf_counter() - t0)
    synchronize(device)
    # the gate must outlast the CPU queueing the whole backward (and the all-reduces before it): the
    # backward's wall time ungated is an upper bound of its queueing time
    bwd_wall = _agreed_float(median_of(backward_wall), device)
    out = []
    for nbytes in sizes:
        if not streams.cuda:
            nbytes = min(nbytes, 64 * 1024)
        t = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
        for _ in range(3):
            dist.all_reduce(t)
        synchronize(device)
        bwd_alone, bwd_busy, ar_alone, ar_busy, outlasted, started_first = [], [], [], [], [], []
        n_calls = None
        for _ in range(reps):
            gate_s = min(GATE_BASE_S + 1.5 * bwd_wall + (n_calls or 0) * ENQUEUE_S_PER_CALL, 1.0)
            # backward alone, gated
            loss = _backward(spec, model, batch, device)
            streams.start_together(gate_s)
            b0 = Marker(device).record()
            loss.backward()
            b1 = Marker(device).record()
            synchronize(device)
            bwd_alone.append(b1.seconds_since(b0))
            # all-reduces alone, gated, back to back on the side stream
            streams.start_together(gate_s)
            marks = streams.allreduces(t, 20)
            synchronize(device)
            ar_alone += [b.seconds_since(a) for a, b in marks]
            if n_calls is None:
                # enough calls to outlast a backward even if every call runs 4 times slower beside it
                guess = int(4 * median_of(bwd_alone) / max(median_of(ar_alone), 1e-6)) + 4
                n_calls = rank0_count(min(max(guess, 8), 2000), device)
                gate_s = min(GATE_BASE_S + 1.5 * bwd_wall + n_calls * ENQUEUE_S_PER_CALL, 1.0)
            # together
            loss = _backward(spec, model, batch, device)
            streams.start_together(gate_s)
            marks = streams.allreduces(t, n_calls)
            b0 = Marker(device).record()
            loss.backward()
            b1 = Marker(device).record()
            synchronize(device)
            bwd_busy.append(b1.seconds_since(b0))
            calls = [(a.seconds_since(b0), b.seconds_since(b0)) for a, b in marks]
            inside, ran_through = calls_inside(calls, b1.seconds_since(b0))
            ar_busy += inside
            outlasted.append(ran_through)
            started_first.append(calls[0][0] <= 0)
        del t
        ba, bb, aa = median(bwd_alone), median(bwd_busy), median(ar_alone)
        ab = median(ar_busy) if ar_busy else None
        out.append({
            "bench": "model_overlap", "model": spec.name, "batch_size": spec.batch_size,
            "precision": spec.precision, "bytes": nbytes, "dtype": "float32", "repeats": reps,
            "backward_alone_s": ba, "backward_with_allreduces_s": bb,
            "allreduce_alone_s": aa, "allreduce_during_backward_s": ab,
            "allreduce_calls_during_backward": len(ar_busy), "allreduce_calls_per_repeat": n_calls,
            "compute_slowdown_ratio": bb / ba if (bb is not None and ba) else None,
            "comm_slowdown_ratio": ab / aa if (ab is not None and aa) else None,
            # the compute slowdown holds only where the all-reduces ran through the whole backward
            "allreduces_outlasted_backward": all(outlasted),
            "allreduces_started_first": all(started_first),
            "gate_s": gate_s, "backward_wall_ungated_s": bwd_wall,
            "backward_alone_all_s": bwd_alone, "backward_with_allreduces_all_s": bwd_busy,
        })
    del model
    if streams.cuda:
        torch.cuda.empty_cache()
    return out
