"""Peak memory and step time of FSDP2 ZeRO-2 / ZeRO-3 and DDP on 2 GPUs, and of activation checkpointing on
one GPU, for the two models of memory_models.py. Torch and the standard library only (the GPU host's).

    python validation/campaigns/memory_gpu.py --out OUT/memory.json

Peaks are torch.cuda.max_memory_allocated / max_memory_reserved over the measured steps (the counters reset
after the warm-up steps), the max over ranks; step time the median of the measured steps."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import memory_models  # noqa: E402

WARMUP, STEPS = 3, 5
MODELS = {"decoder": (memory_models.build_decoder, 8), "encoder": (memory_models.build_encoder, 64)}


def _fsdp() -> tuple[Any, Any]:
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    return fully_shard, MixedPrecisionPolicy


def _loss(loss_fn: Any, model: Any, batch: Any) -> torch.Tensor:
    if loss_fn is not None:
        return loss_fn(model, batch)
    x, y = batch
    return F.cross_entropy(model(x).float(), y)


def _with_checkpointing(model: Any, every: int) -> None:
    """Wrap every ``every``-th block's forward in torch.utils.checkpoint (non-reentrant), as torchtitan's
    full (every=1) and selective layer (every=k) activation checkpointing does."""
    for i, block in enumerate(model.layers):
        if i % every == 0:
            original = block.forward
            block.forward = lambda x, _f=original: checkpoint(_f, x, use_reentrant=False)


def _saved_bytes(model: Any, batch: Any, loss_fn: Any) -> int:
    """Unique storages autograd keeps from forward to backward (saved_tensors_hooks), one step."""
    seen: dict[int, int] = {}
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in params and t.device.type == "cuda":
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cuda", torch.bfloat16):
            loss = _loss(loss_fn, model, batch)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(seen.values())


def _measure(model: Any, opt: Any, batch: Any, loss_fn: Any, autocast: bool) -> dict[str, Any]:
    ctx = (lambda: torch.autocast("cuda", torch.bfloat16)) if autocast else contextlib.nullcontext
    times = []
    for i in range(WARMUP + STEPS):
        if i == WARMUP:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with ctx():
            loss = _loss(loss_fn, model, batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i >= WARMUP:
            times.append(time.perf_counter() - t0)
    return {"peak_allocated_bytes": torch.cuda.max_memory_allocated(),
            "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
            "step_s": statistics.median(times), "step_times_s": times}


def _clear() -> None:
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def one_gpu(out: dict[str, Any]) -> None:
    """Activation checkpointing (none, full, every 2nd block) on the decoder; the saved bytes of both models."""
    device = torch.device("cuda:0")
    torch.cuda.set_device(device)
    rows = []
    for name, (build, batch_size) in MODELS.items():
        acs = ("none", "full", "every_2") if name == "decoder" else ("none",)
        for ac in acs:
            torch.manual_seed(0)
            model, make_batch, loss_fn = build()
            model = model.to(device)
            batch = make_batch(batch_size, device, 0)
            saved = _saved_bytes(model, batch, loss_fn) if ac == "none" else None
            if ac != "none":
                _with_checkpointing(model, 1 if ac == "full" else 2)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
            row = {"model": name, "batch_size": batch_size, "precision": "bf16-amp", "optimizer": "adamw",
                   "activation_checkpointing": ac, "strategy": "none", "world_size": 1,
                   **_measure(model, opt, batch, loss_fn, autocast=True)}
            if saved is not None:
                row["activation_bytes"] = saved
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "step_times_s"}), flush=True)
            del model, opt, batch
            _clear()
    out["one_gpu"] = rows


def _rank(rank: int, world: int, path: str) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    device = torch.device("cuda", rank)
    fully_shard, policy = _fsdp()
    rows = []
    for name, (build, batch_size) in MODELS.items():
        for strategy in ("ddp", "zero2", "zero3"):
            torch.manual_seed(0)
            model, make_batch, loss_fn = build()
            model = model.to(device)
            if strategy == "ddp":
                model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
            else:
                mp_policy = policy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
                for block in model.layers:
                    fully_shard(block, mp_policy=mp_policy, reshard_after_forward=strategy == "zero3")
                fully_shard(model, mp_policy=mp_policy, reshard_after_forward=strategy == "zero3")
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
            batch = make_batch(batch_size, device, rank)
            result = _measure(model, opt, batch, loss_fn, autocast=strategy == "ddp")
            peaks = [None] * world
            dist.all_gather_object(peaks, (result["peak_allocated_bytes"], result["peak_reserved_bytes"]))
            row = {"model": name, "batch_size": batch_size, "precision": "bf16-amp", "optimizer": "adamw",
                   "strategy": strategy, "world_size": world, "param_dtype": "bf16" if strategy != "ddp" else None,
                   "reduce_dtype": "fp32" if strategy != "ddp" else None, "activation_checkpointing": "none",
                   "peak_allocated_bytes": max(p[0] for p in peaks), "peak_reserved_bytes": max(p[1] for p in peaks),
                   "per_rank": [{"peak_allocated_bytes": a, "peak_reserved_bytes": r} for a, r in peaks],
                   "step_s": result["step_s"], "step_times_s": result["step_times_s"]}
            rows.append(row)
            if rank == 0:
                print(json.dumps({k: v for k, v in row.items() if k not in ("step_times_s", "per_rank")}), flush=True)
            del model, opt, batch
            _clear()
            dist.barrier()
    if rank == 0:
        with open(path, "w") as f:
            json.dump(rows, f)
    dist.destroy_process_group()


def _fingerprint() -> dict[str, Any]:
    def smi(query: str) -> str:
        try:
            return subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                                  text=True, timeout=20).stdout.strip().splitlines()[0]
        except Exception as err:  # noqa: BLE001 - the fingerprint says what it could not read
            return f"unknown ({err})"

    nccl = torch.cuda.nccl.version() if torch.cuda.is_available() else None
    return {"gpu": torch.cuda.get_device_name(0), "gpu_count": torch.cuda.device_count(),
            "driver": smi("driver_version"), "torch": torch.__version__, "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl),
            "transport": "NVLink (one host, NCCL_NVLS_ENABLE=" + os.environ.get("NCCL_NVLS_ENABLE", "unset") + ")"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out: dict[str, Any] = {"warmup_steps": WARMUP, "measured_steps": STEPS}
    start = time.time()
    if torch.cuda.device_count() >= 2:
        tmp = args.out + ".two.json"
        mp.spawn(_rank, args=(2, tmp), nprocs=2, join=True)
        with open(tmp) as f:
            out["two_gpu"] = json.load(f)
        os.remove(tmp)
    one_gpu(out)
    out["fingerprint"] = _fingerprint()
    out["wall_s"] = time.time() - start
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
