"""DDP's per-bucket host and copy costs against bucket_cap_mb on one GPU (issue #42 item 3, #46 item 1).

Torch and the standard library only; one GPU; under 4 minutes on an H200:

    python validation/campaigns/per_bucket_costs.py --out $OUT/per_bucket_costs.json

Per model (ResNet-50 fp32 batch 64, GPT-2 124M bf16 autocast batch 8 x 512, mlp-ln-64 fp32 batch 256: a
GPU-bound CNN, a transformer, a launch-bound MLP) and per bucket_cap_mb in (1, 5, 25, 100), all in this one
process so the numbers compare within one machine:

- the plain step (no DDP) and the DDP step at world size 1 (NCCL, one rank: the reducer's autograd hooks,
  the copies into the flat buckets, one all-reduce launch per bucket; nothing on a link), plain and with
  gradient_as_bucket_view (no copy in or out), median over steps timed with CUDA events;
- the backward thread's time in ``loss.backward()`` (perf_counter, without a synchronize inside), DDP minus
  plain: the reducer's host work on the thread that issues backward's kernels;
- the buckets DDP built (``_get_ddp_logging_data()``: rebuilt bucket sizes) and so the cost per bucket;
- the copy kernels alone: for each bucket size, ``flat.copy_(grad)`` of that many bytes timed with CUDA events
  (read + write, the copy-in's and copy-out's memory traffic), and its effective bandwidth.

It writes one JSON file (schema ``ddpsim.per_bucket_costs/1``) with the machine's fingerprint.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from ddpsim.measure.models import gpt2_124m, mlp_ln_64, resnet50  # noqa: E402

CAPS_MB = (1, 5, 25, 100)
WARMUP, STEPS = 4, 12
MODELS: dict[str, tuple[Any, int, str]] = {
    "resnet50": (resnet50, 64, "fp32"),
    "gpt2-124m": (gpt2_124m, 8, "bf16-amp"),
    "mlp-ln-64": (mlp_ln_64, 256, "fp32"),
}


def _batch(name: str, batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    if name == "resnet50":
        return torch.randn(batch, 3, 224, 224, device=device), torch.randint(0, 1000, (batch,), device=device)
    if name == "gpt2-124m":
        tokens = torch.randint(0, 50257, (batch, 512), device=device)
        return tokens, tokens
    return torch.randn(batch, 1024, device=device), torch.randn(batch, 1024, device=device)


def _loss(name: str, model: nn.Module, x: torch.Tensor, y: torch.Tensor, precision: str) -> torch.Tensor:
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16-amp"):
        out = model(x)
        if name == "gpt2-124m":
            return F.cross_entropy(out.float().view(-1, out.shape[-1]), y.view(-1))
        if name == "resnet50":
            return F.cross_entropy(out, y)
        return F.mse_loss(out, y)


def _time_steps(name: str, model: nn.Module, precision: str, batch: int, device: torch.device) -> dict[str, float]:
    """Median step (CUDA events) and median backward-thread time over STEPS after WARMUP."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    x, y = _batch(name, batch, device)
    steps, threads = [], []
    for i in range(WARMUP + STEPS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        opt.zero_grad(set_to_none=True)
        loss = _loss(name, model, x, y, precision)
        t0 = time.perf_counter()
        loss.backward()
        thread_s = time.perf_counter() - t0
        opt.step()
        end.record()
        torch.cuda.synchronize()
        if i >= WARMUP:
            steps.append(start.elapsed_time(end) / 1e3)
            threads.append(thread_s)
    return {"step_s": statistics.median(steps), "backward_thread_s": statistics.median(threads),
            "step_p10_s": sorted(steps)[len(steps) // 10], "step_p90_s": sorted(steps)[-1 - len(steps) // 10]}


def _copy_s(n_bytes: int, device: torch.device, repeats: int = 20) -> float:
    """One copy of ``n_bytes`` (fp32) into a flat buffer: what the copy-in (and copy-out) costs per bucket."""
    n = max(1, n_bytes // 4)
    src, dst = torch.randn(n, device=device), torch.empty(n, device=device)
    for _ in range(3):
        dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats


def measure(deadline_s: float, device: torch.device) -> dict[str, Any]:
    began = time.monotonic()
    results: dict[str, Any] = {"models": {}, "skipped": []}
    copy_cache: dict[int, float] = {}
    for name, (build, batch, precision) in MODELS.items():
        torch.manual_seed(0)
        model = build().to(device)
        plain = _time_steps(name, model, precision, batch, device)
        record: dict[str, Any] = {"batch_size": batch, "precision": precision, "plain": plain,
                                  "param_tensors": sum(1 for p in model.parameters() if p.requires_grad),
                                  "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
                                  "caps": {}}
        for cap in CAPS_MB:
            for gbv in (False, True):
                if time.monotonic() - began > deadline_s:
                    results["skipped"].append(f"{name} cap {cap} gbv {gbv}: over the time budget")
                    continue
                # a fresh copy per configuration: no reducer hooks or bucket views left from the previous one
                torch.manual_seed(0)
                fresh = build().to(device)
                ddp = nn.parallel.DistributedDataParallel(fresh, device_ids=[0], bucket_cap_mb=cap,
                                                          gradient_as_bucket_view=gbv, broadcast_buffers=False)
                timed = _time_steps(name, ddp, precision, batch, device)
                logging = ddp._get_ddp_logging_data()
                sizes = [int(s) for s in str(logging.get("rebuilt_bucket_sizes", "")).split(",") if s.strip()]
                for size in sizes:
                    if size not in copy_cache:
                        copy_cache[size] = _copy_s(size, device)
                copies_s = sum(copy_cache[s] for s in sizes)
                record["caps"][f"{cap}{'-gbv' if gbv else ''}"] = {
                    **timed, "bucket_cap_mb": cap, "gradient_as_bucket_view": gbv, "bucket_sizes_bytes": sizes,
                    "buckets": len(sizes),
                    "extra_step_s": timed["step_s"] - plain["step_s"],
                    "extra_backward_thread_s": timed["backward_thread_s"] - plain["backward_thread_s"],
                    # one copy of every bucket's bytes; DDP does it twice without gradient_as_bucket_view
                    "bucket_copy_once_s": copies_s,
                }
                del ddp, fresh
                torch.cuda.empty_cache()
        results["models"][name] = record
        del model
        torch.cuda.empty_cache()
    results["copy_kernels"] = [{"bytes": b, "copy_s": s, "read_plus_write_GBps": 2 * b / s / 1e9}
                               for b, s in sorted(copy_cache.items())]
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--budget-s", type=float, default=200.0, help="stop starting new runs after this long")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("per_bucket_costs: no CUDA device", file=sys.stderr)
        return 2
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ.setdefault("MASTER_PORT", str(s.getsockname()[1]))
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=0, world_size=1)
    began = time.monotonic()
    try:
        results = measure(args.budget_s, device)
    finally:
        dist.destroy_process_group()
    results.update({
        "schema": "ddpsim.per_bucket_costs/1", "wall_s": time.monotonic() - began,
        "fingerprint": {"gpu_name": torch.cuda.get_device_name(0), "torch": torch.__version__,
                        "cuda": torch.version.cuda, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
        "warmup": WARMUP, "steps": STEPS,
    })
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=1)
    os.replace(args.out + ".tmp", args.out)
    print(f"wrote {args.out} in {results['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
