"""Bytes per GPU at the peak of a step, per data-parallel strategy, and the cheapest strategy that fits.

The parts, n = GPUs a parameter is sharded over (the world, or a node's GPUs under HSDP):
- ddp: ``hardware.compute.memory_per_gpu`` (parameters, gradients and optimizer states replicated, DDP's
  buckets a second copy of the gradients unless ``gradient_as_bucket_view``).
- zero1 (``ZeroRedundancyOptimizer`` beside DDP): as ddp, with the optimizer states / n.
- zero2 / zero3 (FSDP2): parameters, gradients and optimizer states / n (sharded on dim 0; the padding
  to a multiple of n is left out), plus what is all-gathered: the unsharded parameters in
  ``param_dtype`` (zero2 keeps every unit's from its forward to its backward; zero3 frees each after its
  forward, so at the start of backward the root unit, which FSDP2 never reshards after forward, the unit
  in use and the one prefetched are live) and the unsharded gradients before their reduce-scatter (the
  root's live through backward, its lm_head's gradient coming first; one block's at a time, plus its
  copy in ``reduce_dtype`` where that differs).
Activations are the workload's own figure (the zoo's count of what autograd saves, or the torch
importer's estimate), plus autocast's 16-bit weight copies when the parameters compute in fp32 under
AMP, as ddp counts them. Peak = the sum: every part is live at the start of backward.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ddpsim.errors import ScenarioError
from ddpsim.hardware.compute import memory_per_gpu
from ddpsim.sharded.checkpointing import checkpointed_activation_bytes
from ddpsim.sharded.units import ShardUnit
from ddpsim.workload.model import Workload

SHARDED_STRATEGIES = ("zero1", "zero2", "zero3")
STRATEGY_ORDER = ("ddp", "zero1", "zero2", "zero3")  # least communication and memory saving first
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
_AMP_DTYPE = {"bf16-amp": "bf16", "fp16-amp": "fp16", "fp32": "fp32"}


@dataclass(frozen=True)
class Precision:
    """The dtypes FSDP2's MixedPrecisionPolicy sets: all-gather / compute, and reduce-scatter."""

    param_dtype: str
    reduce_dtype: str

    @property
    def param_bytes(self) -> int:
        return DTYPE_BYTES[self.param_dtype]

    @property
    def reduce_bytes(self) -> int:
        return DTYPE_BYTES[self.reduce_dtype]


def resolve_precision(param_dtype: str, reduce_dtype: str, workload_precision: str) -> Precision:
    """"auto" param_dtype follows the workload's autocast (bf16-amp -> bf16); "auto" reduce_dtype is the
    param_dtype, as FSDP2 reduces in the compute dtype when reduce_dtype is None."""
    param = _AMP_DTYPE[workload_precision] if param_dtype == "auto" else param_dtype
    reduce = param if reduce_dtype == "auto" else reduce_dtype
    for field, value in (("parallel.param_dtype", param), ("parallel.reduce_dtype", reduce)):
        if value not in DTYPE_BYTES:
            raise ScenarioError(f"unknown dtype {value!r}; expected one of {', '.join(DTYPE_BYTES)}", field=field)
    return Precision(param, reduce)


def shard_degree(strategy: str, shard_group: str, world_size: int, gpus_per_node: int) -> int:
    """GPUs each parameter (or optimizer state) is split over: 1 for ddp; the node under HSDP."""
    if strategy == "ddp":
        return 1
    return min(gpus_per_node, world_size) if shard_group == "node" else world_size


def sharded_memory(workload: Workload, strategy: str, n_shards: int, units: list[ShardUnit],
                   precision: Precision, gradient_as_bucket_view: bool = False, optimizer: str = "auto",
                   checkpoint_every: int = 0) -> dict[str, float]:
    """Bytes per GPU by part, and their ``total``, for one strategy (see the module's text).
    ``checkpoint_every``: activation checkpointing of every k-th block (0: none; sharded.checkpointing)."""
    tracked = workload.peak_memory.checkpointed.get(checkpoint_every) if workload.peak_memory and checkpoint_every \
        else None
    if tracked is not None:
        # PyTorch's MemTracker ran the step with those blocks checkpointed: its peak, not the formula
        workload = replace(workload, peak_memory=tracked)
        activations = None
    else:
        activations = checkpointed_activation_bytes(workload, units, checkpoint_every) if checkpoint_every else None
    replicated = memory_per_gpu(workload, optimizer, gradient_as_bucket_view, activations)
    if strategy == "ddp":
        return replicated
    n = max(1, n_shards)
    if strategy == "zero1":
        memory = dict(replicated)
        del memory["total"]
        memory["optimizer_states"] = replicated["optimizer_states"] / n
        memory["total"] = sum(memory.values())
        return memory
    if strategy not in SHARDED_STRATEGIES:
        raise ScenarioError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGY_ORDER)}",
                            field="parallel.strategy")
    n_params = workload.n_params
    param_storage = float(sum(p.bytes for p in workload.params))
    root = sum(u.numel for u in units if u.is_root)
    largest_block = max((u.numel for u in units if not u.is_root), default=0)
    if strategy == "zero2":
        unsharded_params = float(n_params * precision.param_bytes)
    else:
        # the root plus the block in use and the block prefetched (at most n units, all of them if fewer)
        blocks = sorted((u.numel for u in units if not u.is_root), reverse=True)[:2]
        unsharded_params = float((root + sum(blocks)) * precision.param_bytes)
    reduce_copy = precision.reduce_bytes if precision.reduce_dtype != precision.param_dtype else 0
    unsharded_grads = float(root * precision.param_bytes + largest_block * (precision.param_bytes + reduce_copy))
    amp = workload.precision != "fp32"
    autocast_copies = 2.0 * n_params if precision.param_dtype == "fp32" and amp else 0.0
    peak = workload.peak_memory
    if peak is not None:
        # the world-size-1 step's parts, sharded. Its activations hold autocast's 16-bit weight copies (made in
        # forward and saved for backward, as MemTracker and saved_tensors_hooks both see them), which FSDP2's
        # all-gathered param_dtype parameters replace when that is 16-bit.
        copies = 2.0 * n_params if amp and not autocast_copies else 0.0
        at_peak = {
            "parameters": replicated["parameters"] / n,
            "gradients": replicated["gradients"] / n,
            "optimizer_states": replicated["optimizer_states"] / n,
            "unsharded_params": unsharded_params,
            "unsharded_grads": unsharded_grads,
            "activations": max(replicated["activations"] - copies, 0.0),
            "other": replicated["other"],
        }
        # The world-size-1 peak may fall in the optimizer's step (a small model, activations gone), where sharding
        # divides the states by n: then the start of backward is the sharded step's peak, with everything forward
        # kept (MemTracker's per-module figure, which holds autocast's copies) and no gradient yet
        # (zero_grad(set_to_none=True)); the temporaries of the world-size-1 peak count where it fell in backward.
        backward = peak.backward_parts
        if backward is not None:
            start_of_backward = dict(at_peak, gradients=backward["gradients"] / n,
                                     activations=max(backward["activations"] - copies, 0.0) if activations is None
                                     else at_peak["activations"], other=backward["other"])
        else:
            start_of_backward = dict(at_peak, gradients=0.0,
                                     activations=max(float(workload.activation_bytes) - copies, 0.0)
                                     if activations is None else at_peak["activations"],
                                     other=peak.parts["other"] if peak.parts["activations"] > 0 else 0.0)
        memory = max(at_peak, start_of_backward, key=lambda m: sum(m.values()))
    else:
        memory = {
            "parameters": param_storage / n + workload.buffer_bytes,
            "gradients": float(workload.grad_bytes) / n,
            "optimizer_states": replicated["optimizer_states"] / n,
            "unsharded_params": unsharded_params,
            "unsharded_grads": unsharded_grads,
            "activations": replicated["activations"] - (2.0 * n_params if amp else 0.0) + autocast_copies,
        }
        if workload.transient_bytes:
            memory["other"] = float(workload.transient_bytes)
        # every part at once but the gradients, which exist from the end of backward, when the activations are gone
        # (zero_grad(set_to_none=True) frees them before forward)
        end_of_backward = dict(memory, activations=0.0, other=0.0)
        memory = max(dict(memory, gradients=0.0), end_of_backward, key=lambda m: sum(m.values()))
    memory["total"] = sum(memory.values())
    return memory


def memory_by_strategy(workload: Workload, world_size: int, gpus_per_node: int, units: list[ShardUnit],
                       precision: Precision, shard_group: str = "world", gradient_as_bucket_view: bool = False,
                       optimizer: str = "auto", checkpoint_every: int = 0) -> dict[str, dict[str, float]]:
    """``sharded_memory`` of every strategy, in STRATEGY_ORDER (world size 1 shards nothing)."""
    return {s: sharded_memory(workload, s, shard_degree(s, shard_group, world_size, gpus_per_node), units, precision,
                              gradient_as_bucket_view, optimizer, checkpoint_every)
            for s in STRATEGY_ORDER}


def recommend_strategy(by_strategy: dict[str, dict[str, float]], gpu_memory_bytes: float) -> str | None:
    """The first strategy of STRATEGY_ORDER that fits (the least sharding, so the least communication
    that fits), or None when none does."""
    for strategy in STRATEGY_ORDER:
        if strategy in by_strategy and by_strategy[strategy]["total"] <= gpu_memory_bytes:
            return strategy
    return None


def fit_text(strategy: str, by_strategy: dict[str, dict[str, float]], gpu_name: str, gpu_memory_bytes: float) -> str:
    """One line for a strategy that does not fit: how much it needs and which strategy would fit."""
    need = by_strategy[strategy]["total"] / 2**30
    have = gpu_memory_bytes / 2**30
    best = recommend_strategy(by_strategy, gpu_memory_bytes)
    label = "plain DDP" if strategy == "ddp" else strategy
    if best is None:
        least = min(by_strategy, key=lambda s: by_strategy[s]["total"])
        advice = (f"no strategy fits; the least is {least} at {by_strategy[least]['total'] / 2**30:.1f} GiB "
                  "(fewer samples per GPU, activation checkpointing or more GPUs)")
    else:
        advice = (f"the cheapest strategy that fits is {best} at {by_strategy[best]['total'] / 2**30:.1f} GiB "
                  f"(--set parallel.strategy={best})")
    return f"{label} does not fit: {need:.1f} GiB needed per GPU, {gpu_name} has {have:.0f} GiB; {advice}"
