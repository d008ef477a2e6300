"""Trace a model's training steps with torch.profiler, as ddpsim reads them (``model: trace:PATH``).

    python -m ddpsim.measure.trace --model gpt2-124m --out trace.json.gz
    torchrun --nproc-per-node 4 -m ddpsim.measure.trace --model gpt2-124m --out trace.json   # inside DDP

Torch and the standard library only: it runs on the GPU host. ``--model`` takes what ``ddpsim measure``
takes (a built-in name, ``module:factory``, ``hf:CONFIG``, with ``@batch=``, ``@precision=``, ...). The
profiler records CPU and CUDA activity with input shapes (``record_shapes=True``: the gradients' sizes), one
``ProfilerStep#N`` span per step, and writes beside the events what the trace cannot say itself: the model
argument, batch size, precision, every parameter's name and shape in registration order and the order their
gradients became ready (one unprofiled step with a ``register_post_accumulate_grad_hook`` per parameter).
Under torchrun (WORLD_SIZE > 1) the model is wrapped in DDP and every rank writes its own trace
(``.rank<R>`` before the suffix); DDP's all-reduces in it are what ``trace:`` reports as a check.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from typing import Any

try:
    import torch
except ModuleNotFoundError as _no_torch:  # `python -m ... --help` on a host without torch
    from .needs_torch import without_torch

    without_torch(__name__, __doc__, _no_torch)
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule

from .memory import PeakTracker, profile_memory
from .models import ddp_param_order, resolve
from .spec import ModelArgError, ModelSpec

CAPTURE_KEY = "ddpsim_capture"  # read by ddpsim.workload.trace


def _rank_path(path: str, rank: int, world: int) -> str:
    if world <= 1:
        return path
    for suffix in (".json.gz", ".json"):
        if path.endswith(suffix):
            return f"{path[:-len(suffix)]}.rank{rank:d}{suffix}"
    return f"{path}.rank{rank:d}"


def _hook_order(model: torch.nn.Module, named: list[tuple[str, torch.nn.Parameter]], opt: torch.optim.Optimizer,
                spec: ModelSpec, batch: Any) -> list[str]:
    """Parameter names in the order autograd accumulated their gradients, from one unprofiled step."""
    fired: list[str] = []
    handles = [p.register_post_accumulate_grad_hook(lambda _p, n=name: fired.append(n)) for name, p in named]
    try:
        opt.zero_grad(set_to_none=True)
        spec.loss(model, batch).backward()
        opt.step()
    finally:
        for h in handles:
            h.remove()
    return fired


def capture(model_arg: str, out: str, steps: int = 5, warmup: int = 3, device_name: str | None = None,
            unprofiled_steps: int = 10) -> str:
    """Trace ``steps`` training steps of the model after ``warmup`` untraced ones and as many (at least
    ``unprofiled_steps``) timed without the profiler, whose median step the trace's metadata records;
    returns the trace's path."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device_name is None:
        device_name = f"cuda:{local:d}" if torch.cuda.is_available() else "cpu"
    device = torch.device(device_name)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    spec = resolve(model_arg)
    ok, why = spec.available()
    if not ok:
        raise ModelArgError(f"model {model_arg!r} cannot be built here: {why}")
    torch.manual_seed(0)
    model = spec.build_on(device)
    model.train()
    named = ddp_param_order(model)
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        if not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                    timeout=datetime.timedelta(seconds=600))
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = spec.make_optimizer([p for _, p in named])
    batch = spec.make_batch(device)
    # DDP rebuilds its buckets in the first step's ready order: the hooked step is that first step
    ready_order = _hook_order(model, named, opt, spec, batch)
    meta = {
        "model": spec.name, "batch_size": spec.batch_size, "precision": spec.precision, "seq_len": spec.seq_len,
        "optimizer": spec.optimizer, "world_size": world, "rank": rank, "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "torch": torch.__version__,
        "params": [{"name": n, "shape": list(p.shape), "dtype": str(p.dtype).replace("torch.", "")} for n, p in named],
        "ready_order": ready_order, "steps": steps, "warmup": warmup,
    }
    path = _rank_path(out, rank, world)
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    written: list[str] = []

    def ready(prof: profile) -> None:
        prof.export_chrome_trace(path)
        written.append(path)

    def train_step() -> None:
        opt.zero_grad(set_to_none=True)
        spec.loss(model, batch).backward()
        opt.step()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        train_step()
    # the profiler lengthens every op on the host: a launch-bound step runs slower traced than not. The same
    # steps timed without it let the reader scale the traced times back (ddpsim.workload.trace)
    plain_s = []
    peaks = PeakTracker(device)  # the peak memory of the unprofiled steps (the profiler holds its own buffers)
    for _ in range(max(steps, unprofiled_steps)):
        sync()
        peaks.begin()
        t0 = time.perf_counter()
        train_step()
        sync()
        plain_s.append(time.perf_counter() - t0)
        peaks.end()
    meta["unprofiled_step_s"] = sorted(plain_s)[len(plain_s) // 2]
    meta["unprofiled_steps"] = len(plain_s)
    # the states, and the activations of one more step, counted on the model itself (inside DDP: its module)
    inner = getattr(model, "module", model)
    meta["memory"] = profile_memory(peaks, inner, opt, lambda: spec.loss(model, batch), spec.optimizer,
                                    spec.precision, spec.batch_size)
    with profile(activities=activities, record_shapes=True, on_trace_ready=ready,
                 schedule=schedule(wait=0, warmup=1, active=steps, repeat=1)) as prof:
        for i in range(1 + steps):
            if i == 1:  # metadata is kept only while the profiler records
                prof.add_metadata_json(CAPTURE_KEY, json.dumps(meta))
                prof.add_metadata_json("memory", json.dumps(meta["memory"]))  # the record contract's top level
            train_step()
            prof.step()
    sync()
    if not written:
        raise RuntimeError(f"the profiler wrote no trace to {path}")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddpsim.measure.trace", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a model as ddpsim measure takes it, e.g. gpt2-124m@batch=8")
    parser.add_argument("--out", required=True, help="the trace file (.json or .json.gz)")
    parser.add_argument("--steps", type=int, default=5, help="traced steps (default 5)")
    parser.add_argument("--warmup", type=int, default=3, help="untraced steps first (default 3)")
    parser.add_argument("--device", help="cuda:N or cpu (default: this rank's GPU, else cpu)")
    a = parser.parse_args(argv)
    if a.steps < 1 or a.warmup < 0:
        print("error: --steps must be >= 1 and --warmup >= 0", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        path = capture(a.model, a.out, a.steps, a.warmup, a.device)
    except ModelArgError as e:
        print(f"error: --model: {e}", file=sys.stderr)
        return 2
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    print(f"traced {a.steps} steps of {a.model} into {path} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
