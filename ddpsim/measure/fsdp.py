"""FSDP2 / DDP steps measured per strategy and precision, with each run's peak memory (torch + stdlib only).

    torchrun --standalone --nproc-per-node N -m ddpsim.measure.fsdp --out DIR \
        --models gpt2-124m,llama-1b --strategies ddp,zero2,zero3 [--param-dtypes bf16,fp32] [--gpus-per-node G]

Strategies: ``ddp`` (DistributedDataParallel, the model's own autocast), ``zero2`` (``fully_shard`` per block and
on the root with ``reshard_after_forward=False``), ``zero3`` (``reshard_after_forward=True``). A block is a module
whose name ends in the first numbered part (``h.3``, ``layers.11``): the children of the model's ModuleList, as
ddpsim's ``parallel.unit: auto`` reads them. FSDP runs take ``MixedPrecisionPolicy(param_dtype, reduce_dtype)``
from ``--param-dtypes`` (fp32 = no policy: fp32 parameters under the model's autocast; ``auto``, the default: bf16
for a bf16-autocast model without BatchNorm statistics, else fp32) and ``--reduce-dtype``.

Every run appends one record to ``DIR/fsdp_runs.jsonl`` (rank 0 writes): schema ``ddpsim.fsdp_run/1``, the same
model, shape (nodes, gpus_per_node, emulated nodes) and fingerprint fields as ``ddp_runs.jsonl``, the step's
median / p10 / p90 and its parts (CUDA events; perf_counter on CPU), ``peak_memory_bytes`` =
``torch.cuda.max_memory_allocated()`` over the timed steps (after warm-up, so the optimizer states exist; None
on CPU), ``allocated_after_step_bytes``, the units with their unsharded parameter counts, and status ok / failed
(an out-of-memory run is a record with its error, and the next run goes on).
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
import traceback
from dataclasses import replace
from typing import Any

try:
    import torch
except ModuleNotFoundError as _no_torch:  # `python -m ... --help` on a host without torch
    from .needs_torch import without_torch

    without_torch(__name__, __doc__, _no_torch)
import torch.distributed as dist
import torch.nn as nn

from .common import (
    Marker,
    append_jsonl,
    fingerprint,
    get_device,
    hostname_count,
    log,
    median,
    quantile,
    synchronize,
)
from .memory import run_peaks
from .models import SHARDING_MODELS as BUILTIN
from .models import ddp_param_order, resolve
from .shape import shape_setup
from .spec import ModelSpec, parse_model_arg

SCHEMA = "ddpsim.fsdp_run/1"
STRATEGIES = ("ddp", "zero2", "zero3")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_model(name: str) -> ModelSpec:
    """This module's built-ins (with the same @batch / @precision / @optimizer / @seq options), else models.resolve."""
    base, opts = parse_model_arg(name)
    if base not in BUILTIN:
        return resolve(name)
    spec = replace(BUILTIN[base], name=name)
    if "batch" in opts:
        spec = replace(spec, batch_size=int(opts["batch"]))
    if "seq" in opts:
        spec = replace(spec, seq_len=int(opts["seq"]))
    if "precision" in opts:
        spec = replace(spec, precision={"bf16": "bf16-amp"}.get(opts["precision"], opts["precision"]))
    if "optimizer" in opts:
        spec = replace(spec, optimizer=opts["optimizer"])
    return spec


# ----------------------------------------------------------------------------- wrapping
def block_names(model: nn.Module) -> list[str]:
    """Modules whose name ends in its first numbered part (``h.3``, ``model.layers.11``), in module order."""
    names = []
    for name, _module in model.named_modules():
        parts = name.split(".") if name else []
        if parts and parts[-1].isdigit() and not any(p.isdigit() for p in parts[:-1]):
            names.append(name)
    return names


def unit_numels(model: nn.Module, blocks: list[str]) -> list[dict]:
    """Unsharded parameters per unit, root first: each block's, then the rest (shared parameters once)."""
    modules = dict(model.named_modules())
    seen: set[int] = set()
    units = []
    for name in blocks:
        params = [p for p in modules[name].parameters() if id(p) not in seen]
        seen.update(id(p) for p in params)
        units.append({"name": name, "numel": sum(p.numel() for p in params)})
    root = sum(p.numel() for p in model.parameters() if id(p) not in seen)
    return [{"name": "<root>", "numel": root}] + units


def fsdp_units(model: nn.Module) -> list[dict]:
    """The units fully_shard made, read back from FSDP2's own parameter groups (unsharded sizes)."""
    units = []
    for name, module in model.named_modules():
        state = getattr(module, "_get_fsdp_state", None)
        group = state()._fsdp_param_group if state is not None else None
        if group is not None:
            numel = sum(p._orig_size.numel() for p in group.fsdp_params)
            units.append({"name": name or "<root>", "numel": numel})
    return units


def wrap(model: nn.Module, strategy: str, param_dtype: str, reduce_dtype: str, device: torch.device,
         hsdp_nodes: int = 0) -> nn.Module:
    """DDP, or fully_shard per block and on the root; ``hsdp_nodes`` > 1: a 2-D mesh that shards within each
    group of world / hsdp_nodes consecutive ranks (a node) and replicates across the groups (HSDP)."""
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = (MixedPrecisionPolicy() if param_dtype == "fp32"
              else MixedPrecisionPolicy(param_dtype=DTYPES[param_dtype], reduce_dtype=DTYPES[reduce_dtype]))
    reshard = strategy == "zero3"
    mesh = None
    if hsdp_nodes > 1:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device.type, (hsdp_nodes, dist.get_world_size() // hsdp_nodes),
                                mesh_dim_names=("replicate", "shard"))
    modules = dict(model.named_modules())
    for name in block_names(model):
        fully_shard(modules[name], mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    return model


# ----------------------------------------------------------------------------- one run
def measure(spec: ModelSpec, strategy: str, param_dtype: str, reduce_dtype: str, device: torch.device,
            warmup: int, steps: int, hsdp_nodes: int = 0) -> dict:
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = spec.build_on(device)
    model.train()
    n_params = sum(p.numel() for _, p in ddp_param_order(model))
    param_bytes = sum(p.numel() * p.element_size() for _, p in ddp_param_order(model))
    expected_units = unit_numels(model, block_names(model))
    if strategy != "ddp":
        refuse_cast_buffers(spec, model, param_dtype)
    wrapped = wrap(model, strategy, param_dtype, reduce_dtype, device, hsdp_nodes)
    units = fsdp_units(model) if strategy != "ddp" else []
    opt = spec.make_optimizer(wrapped.parameters())
    batch = spec.make_batch(device, seed=1234 + rank)
    times: dict[str, list[float]] = {"step": [], "fwd": [], "bwd": [], "opt": []}

    def one_step(record: bool) -> None:
        m0, m1, m2, m3 = (Marker(device) for _ in range(4))
        m0.record()
        opt.zero_grad(set_to_none=True)
        loss = spec.loss(wrapped, batch)
        m1.record()
        loss.backward()
        m2.record()
        opt.step()
        m3.record()
        synchronize(device)
        if record:
            times["step"].append(m3.seconds_since(m0))
            times["fwd"].append(m1.seconds_since(m0))
            times["bwd"].append(m2.seconds_since(m1))
            times["opt"].append(m3.seconds_since(m2))

    for _ in range(warmup):
        one_step(False)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    for _ in range(steps):
        one_step(True)
    peak = torch.cuda.max_memory_allocated(device) if cuda else None
    memory = run_peaks(device, peak, torch.cuda.max_memory_reserved(device) if cuda else None)
    allocated = torch.cuda.memory_allocated(device) if cuda else None
    peaks = None
    if peak is not None and dist.get_world_size() > 1:
        t = torch.tensor([float(peak)], dtype=torch.float64, device=device)
        gathered = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, t)
        peaks = [int(g.item()) for g in gathered]
    st = times["step"]
    return {
        "step_s_median": median(st), "step_s_p10": quantile(st, 0.1), "step_s_p90": quantile(st, 0.9),
        "step_times_s": st, "forward_s_median": median(times["fwd"]), "backward_s_median": median(times["bwd"]),
        "optimizer_s_median": median(times["opt"]),
        "step_time_source": "cuda_event" if cuda else "perf_counter",
        "peak_memory_bytes": peak, "peak_memory_bytes_per_rank": peaks, "allocated_after_step_bytes": allocated,
        "memory": memory,
        "n_params": n_params, "param_bytes": param_bytes, "units": units, "expected_units": expected_units,
        "iterations": len(st), "warmup": warmup,
    }


AUTO = "auto"  # the model's own precision: see auto_param_dtype


def auto_param_dtype(spec: ModelSpec) -> str:
    """The FSDP parameter dtype ``auto`` means for a model: bf16 for one that trains under bf16 autocast, else
    fp32, and fp32 as well for a model with BatchNorm's (or InstanceNorm's) running statistics.

    A bf16 ``MixedPrecisionPolicy`` casts parameters but not buffers: an fp32 U-Net with BatchNorm then fails in
    its first forward ("Expected running_mean to have type BFloat16 but got Float"). An fp32 model is measured
    in fp32 (what its user trains with); a bf16-autocast model with such buffers keeps fp32 parameters and its
    autocast."""
    if spec.precision != "bf16-amp":
        return "fp32"
    try:
        with torch.device("meta"):
            model = spec.build()
    except Exception:  # noqa: BLE001 - a factory that cannot build on meta: its buffers are checked at the run
        return "bf16"
    return "fp32" if norm_statistics(model) else "bf16"


def norm_statistics(model: nn.Module) -> list[str]:
    """Names of the running statistics of BatchNorm / InstanceNorm layers (the buffers whose dtype must match the
    parameters'). Other floating buffers (a rotary table) mix with bf16 activations by type promotion."""
    from torch.nn.modules.batchnorm import _NormBase

    return [f"{name}.{b}" if name else b for name, module in model.named_modules() if isinstance(module, _NormBase)
            for b, t in module.named_buffers(recurse=False) if t is not None and t.is_floating_point()]


def plan(models: list[str], strategies: list[str], param_dtypes: list[str],
         auto: dict[str, str] | None = None) -> list[tuple[str, str, str]]:
    """(model, strategy, param dtype): DDP once per model (its precision is the model's autocast); ``auto`` in
    ``param_dtypes`` is the model's dtype in ``auto`` (model -> dtype; absent: fp32), a repeated dtype runs once."""
    runs = []
    for m in models:
        for s in strategies:
            dtypes: list[str] = []
            for dt in (["fp32"] if s == "ddp" else param_dtypes):
                dt = (auto or {}).get(m, "fp32") if dt == AUTO else dt
                if dt not in dtypes:
                    dtypes.append(dt)
            runs += [(m, s, dt) for dt in dtypes]
    return runs


def refuse_cast_buffers(spec: ModelSpec, model: nn.Module, param_dtype: str) -> None:
    """A low-precision parameter dtype asked for a model with floating-point buffers (BatchNorm's running
    statistics) fails inside the first forward with a dtype mismatch: say so before, in one line."""
    if param_dtype == "fp32":
        return
    stats = norm_statistics(model)
    if stats:
        raise ValueError(f"model {spec.name}: --param-dtypes {param_dtype} casts its parameters but not its "
                         f"{len(stats)} normalization statistics (first: {stats[0]}); measure it with "
                         "--param-dtypes auto or fp32")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m ddpsim.measure.fsdp", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder; fsdp_runs.jsonl is appended to")
    ap.add_argument("--models", default="gpt2-124m,llama-1b",
                    help="built-in names (llama-1b, llama-tiny, gpt-tiny and ddpsim.measure.models'), module:factory or hf:CONFIG, "
                         "each with @batch=B, @precision=fp32|bf16, @optimizer, @seq; comma separated")
    ap.add_argument("--strategies", default=",".join(STRATEGIES), help="ddp, zero2, zero3 (comma separated)")
    ap.add_argument("--param-dtypes", default=AUTO,
                    help="FSDP runs: MixedPrecisionPolicy param_dtype per run (fp32: no policy; auto, the default: "
                         "bf16 for a model that trains under bf16 autocast, fp32 for an fp32 one); comma separated")
    ap.add_argument("--reduce-dtype", default="fp32", choices=sorted(DTYPES), help="MixedPrecisionPolicy reduce_dtype")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=1, help="the whole plan this many times (each run rebuilt)")
    ap.add_argument("--transport", default="nvlink", help="label of the intra-node transport (NCCL env set by the caller)")
    ap.add_argument("--gpus-per-node", type=int, default=None, help="emulate nodes of G GPUs (own NCCL_HOSTID)")
    ap.add_argument("--inter-node-transport", default=None)
    ap.add_argument("--hsdp", action="store_true",
                    help="FSDP runs shard within a node (--gpus-per-node, or this host's ranks) and replicate across "
                         "nodes (a 2-D DeviceMesh); records shard_group 'node'")
    ap.add_argument("--launch-id", default=None)
    a = ap.parse_args(argv)
    a.strategy_list = [s for s in a.strategies.split(",") if s]
    a.dtype_list = [d for d in a.param_dtypes.split(",") if d]
    bad = ([s for s in a.strategy_list if s not in STRATEGIES]
           + [d for d in a.dtype_list if d not in DTYPES and d != AUTO])
    if bad:
        ap.error(f"unknown strategy or dtype: {', '.join(bad)} (strategies {', '.join(STRATEGIES)}; "
                 f"dtypes {', '.join(DTYPES)}, {AUTO})")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    models = [m for m in a.models.split(",") if m]
    specs = {m: resolve_model(m) for m in models}  # a typo fails before any process group exists
    auto = {m: auto_param_dtype(spec) for m, spec in specs.items()} if AUTO in a.dtype_list else {}
    os.makedirs(a.out, exist_ok=True)
    launch_id = a.launch_id or f"fsdp_{a.transport}_w{os.environ.get('WORLD_SIZE', '1')}"
    shape, _nccl_log = shape_setup(a.gpus_per_node, a.out, launch_id, a.inter_node_transport)
    device = get_device(int(os.environ.get("LOCAL_RANK", "0")))
    backend = "nccl" if device.type == "cuda" else "gloo"
    kw: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=600), **kw)
    rank, world = dist.get_rank(), dist.get_world_size()
    fp = fingerprint(device, world, a.transport, hostname_count())
    hsdp_nodes = shape["nodes"] if a.hsdp else 0
    out_path = os.path.join(a.out, "fsdp_runs.jsonl")
    failed = 0
    for round_index in range(a.rounds):
        for model, strategy, param_dtype in plan(models, a.strategy_list, a.dtype_list, auto):
            spec = specs[model]
            base = {"schema": SCHEMA, "model": model, "batch_size": spec.batch_size, "precision": spec.precision,
                    "seq_len": spec.seq_len, "optimizer": spec.optimizer, "strategy": strategy,
                    "reshard_after_forward": strategy == "zero3" if strategy != "ddp" else None,
                    "param_dtype": param_dtype if strategy != "ddp" else None,
                    "reduce_dtype": (a.reduce_dtype if param_dtype != "fp32" else None) if strategy != "ddp" else None,
                    "shard_group": ("node" if hsdp_nodes > 1 else "world") if strategy != "ddp" else None,
                    "world_size": world, "transport": a.transport, "launch_id": launch_id, "round": round_index,
                    "model_source": spec.source, **shape, "fingerprint": fp}
            t0 = time.perf_counter()
            try:
                rec = dict(base, status="ok", error=None,
                           **measure(spec, strategy, param_dtype, a.reduce_dtype, device, a.warmup, a.steps,
                                     hsdp_nodes))
            except Exception:  # noqa: BLE001 - one failed run (out of memory, a model error) must not end the launch
                failed += 1
                err = traceback.format_exc()[-4000:]
                log(f"FAILED {model} {strategy} {param_dtype}: {err.splitlines()[-1]}")
                rec = dict(base, status="failed", error=err)
            if device.type == "cuda":
                torch.cuda.empty_cache()  # the run's model and optimizer went with measure()'s frame
            if rank == 0:
                append_jsonl(out_path, rec)
                step = rec.get("step_s_median")
                peak = rec.get("peak_memory_bytes")
                log(f"{model} {strategy} {param_dtype}: {rec['status']}"
                    + (f", step {step * 1e3:.2f} ms" if step else "")
                    + (f", peak {peak / 2**30:.2f} GiB" if peak else "") + f" ({time.perf_counter() - t0:.1f} s)")
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
