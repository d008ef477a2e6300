"""Memory of a training step, measured (torch and the standard library only): the record's ``memory`` object.

A world-size-1 profile (and a trace capture) records

- the peak allocated / reserved bytes of the caching allocator over plain training steps after warm-up
  (``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``, reset before each measured step: the
  peak of a step as a training loop with ``zero_grad(set_to_none=True)`` runs it);
- the model states: parameters, gradients, the optimizer's state tensors and buffers, in bytes;
- the activation bytes: what autograd keeps from forward to backward, counted in one extra step under
  ``torch.autograd.graph.saved_tensors_hooks`` as the unique storages of the saved tensors (a view and its
  base count once, at the size of the storage) that are not the model's own parameters or buffers. The
  batch itself counts where a layer saves it; so do autocast's low-precision copies of the weights (they
  live from forward to backward too). Each storage is attributed to the outermost module below the root
  that was running when it was first saved (``layers.3``, ``encoder``), the rest (the loss, functional
  code in the root's forward) to ``<root>``: the per-layer figures sum to the total.

DDP and FSDP runs record the peaks only, the max over ranks, with every rank's beside it.
"""
from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn as nn

ROOT_LAYER = "<root>"  # saved outside every child module: the loss, functional code in the root's forward
ACTIVATION_METHOD = "saved_tensors_hooks"

# ddpsim.measure's names -> the contract's (models.ModelSpec.make_optimizer: "sgd" is SGD with momentum 0.9)
OPTIMIZER_NAMES = {"sgd": "sgd_momentum", "adamw": "adamw", "adam": "adam"}
PRECISION_NAMES = {"fp32": "fp32", "bf16-amp": "bf16_autocast", "fp16-amp": "fp16_autocast"}


def _storage_key(t: torch.Tensor) -> tuple[str, int, int] | None:
    """(device, data pointer, bytes) of a tensor's storage; None for a tensor without one (sparse, fake)."""
    try:
        s = t.untyped_storage()
        return str(t.device), int(s.data_ptr()), int(s.nbytes())
    except (RuntimeError, NotImplementedError, TypeError):
        return None


class ActivationCounter:
    """Counts what autograd saves for backward while it is active (a context manager around the forward).

    ``total_bytes``: the unique storages saved, less the model's parameters and buffers (``exclude``);
    ``by_layer``: the same bytes by the outermost running module below ``model``'s root (when a model is
    given), ``<root>`` for the rest. The pack hook returns the tensor itself: the step runs as without it."""

    def __init__(self, model: nn.Module | None = None, exclude: list[torch.Tensor] | None = None):
        self.model = model
        self._excluded = {k[:2] for k in (_storage_key(t) for t in (exclude or [])) if k is not None}
        self._seen: dict[tuple[str, int], int] = {}
        self.by_layer: dict[str, int] = {}
        self._stack: list[str] = []
        self._handles: list[Any] = []
        self._hooks: Any = None

    @property
    def total_bytes(self) -> int:
        return sum(self._seen.values())

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        key = _storage_key(t)
        if key is not None and key[:2] not in self._excluded and key[:2] not in self._seen:
            self._seen[key[:2]] = key[2]
            layer = self._stack[0] if self._stack else ROOT_LAYER
            self.by_layer[layer] = self.by_layer.get(layer, 0) + key[2]
        return t

    @staticmethod
    def _unpack(t: torch.Tensor) -> torch.Tensor:
        return t

    def _watch_modules(self) -> None:
        if self.model is None:
            return
        for name, module in self.model.named_modules():
            if not name:
                continue  # the root: everything outside its children is <root>

            def push(_m: nn.Module, _args: Any, name: str = name) -> None:
                self._stack.append(name)

            def pop(_m: nn.Module, _args: Any, _out: Any) -> None:
                if self._stack:
                    self._stack.pop()

            self._handles.append(module.register_forward_pre_hook(push))
            self._handles.append(module.register_forward_hook(pop, always_call=True))

    def __enter__(self) -> ActivationCounter:
        self._watch_modules()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)
        # the hooks object holds our bound methods: a cycle that kept the model (and its gradients) alive until
        # Python's cyclic collector ran, and a later profile in the same process counted them in its peak
        # (models-2026-11-28: the MLP's measured peak 3.75 GB against 1.65 GB alone in a fresh process)
        self._hooks = None
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._stack.clear()


def model_state_tensors(model: nn.Module) -> list[torch.Tensor]:
    return list(model.parameters()) + list(model.buffers())


def _unique_bytes(tensors: Sequence[torch.Tensor]) -> int:
    """Bytes of the tensors, a shared tensor once (tied weights)."""
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if id(t) in seen:
            continue
        seen.add(id(t))
        total += t.numel() * t.element_size()
    return total


def state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None) -> dict[str, int]:
    """Parameters, gradients (as they are now: call it after a backward), optimizer states, buffers."""
    params = list(model.parameters())
    grads = [p.grad for p in params if p.grad is not None]
    opt_tensors: list[torch.Tensor] = []
    if optimizer is not None:
        for st in optimizer.state.values():
            opt_tensors += [v for v in st.values() if isinstance(v, torch.Tensor)]
    return {"parameter_bytes": _unique_bytes(params), "gradient_bytes": _unique_bytes(grads),
            "optimizer_state_bytes": _unique_bytes(opt_tensors), "buffer_bytes": _unique_bytes(list(model.buffers()))}


def count_activations(model: nn.Module, loss_fn: Callable[[], torch.Tensor]) -> tuple[int, dict[str, int]]:
    """One forward (``loss_fn()``) under the counter, then its backward: (bytes, bytes by layer).

    The backward runs so that the saved tensors are freed as in any step; the gradients it leaves are the
    caller's to clear or step with."""
    with ActivationCounter(model, exclude=model_state_tensors(model)) as counter:
        loss = loss_fn()
    loss.backward()
    return counter.total_bytes, dict(counter.by_layer)


class PeakTracker:
    """The max over chosen steps of the allocator's per-step peaks (each step's peak reset before it).

    On a CPU device there are no allocator statistics: the peaks stay None.

    ``baseline_bytes``: what the process held before the model was built (``settled_allocated_bytes``), taken
    off every allocated peak: whatever an earlier model of the same launch left behind is not this one's."""

    def __init__(self, device: torch.device, baseline_bytes: int = 0):
        self.device = device
        self.cuda = device.type == "cuda"
        self.baseline_bytes = baseline_bytes
        self.peak_allocated_bytes: int | None = None
        self.peak_reserved_bytes: int | None = None
        self.steps = 0

    def begin(self) -> None:
        if self.cuda:
            # resetting a device whose allocator no tensor has touched yet fails ("Invalid device argument")
            if torch.cuda.memory_allocated(self.device) == 0:
                torch.zeros(1, device=self.device)
            torch.cuda.reset_peak_memory_stats(self.device)

    def end(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            alloc = int(torch.cuda.max_memory_allocated(self.device)) - self.baseline_bytes
            reserved = int(torch.cuda.max_memory_reserved(self.device))
            self.peak_allocated_bytes = max(alloc, self.peak_allocated_bytes or 0)
            self.peak_reserved_bytes = max(reserved, self.peak_reserved_bytes or 0)
        self.steps += 1

    @contextmanager
    def step(self) -> Iterator[None]:
        self.begin()
        yield
        self.end()


def settled_allocated_bytes(device: torch.device) -> int:
    """The bytes this process holds on ``device`` once unreachable Python objects are collected (0 on a CPU):
    a profile's baseline, taken before its model is built."""
    gc.collect()
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    return int(torch.cuda.memory_allocated(device))


def profile_memory(tracker: PeakTracker, model: nn.Module, optimizer: torch.optim.Optimizer | None,
                   loss_fn: Callable[[], torch.Tensor], optimizer_name: str, precision: str,
                   batch_size: int) -> dict[str, Any]:
    """The profile's ``memory`` object: the tracker's peaks, the states now (after a measured step, so that the
    gradients and the optimizer's states exist), and the activations of one more step, counted."""
    states = state_bytes(model, optimizer)
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    activation_bytes, by_layer = count_activations(model, loss_fn)
    if optimizer is not None:
        optimizer.step()
    return {"peak_allocated_bytes": tracker.peak_allocated_bytes, "peak_reserved_bytes": tracker.peak_reserved_bytes,
            **states, "activation_bytes": activation_bytes, "activation_bytes_by_layer": by_layer,
            "activation_method": ACTIVATION_METHOD, "optimizer": OPTIMIZER_NAMES.get(optimizer_name, optimizer_name),
            "precision": PRECISION_NAMES.get(precision, precision), "batch_size": int(batch_size),
            "peak_steps": tracker.steps, "allocated_before_model_bytes": tracker.baseline_bytes if tracker.cuda else None,
            "peak_source": "torch.cuda.max_memory_allocated" if tracker.cuda else None}


def run_peaks(device: torch.device, peak_allocated: int | None, peak_reserved: int | None,
              gather: bool = True) -> dict[str, Any] | None:
    """A DDP / FSDP run's ``memory``: the max over the ranks of the default process group and every rank's own
    (``gather``: a collective, every rank calls it at the same point; False: this rank only, as a world-size-1
    run beside other ranks' own runs). None on a CPU device."""
    import torch.distributed as dist

    if device.type != "cuda" or peak_allocated is None or peak_reserved is None:
        return None
    mine = torch.tensor([float(peak_allocated), float(peak_reserved)], dtype=torch.float64, device=device)
    world = dist.get_world_size() if gather and dist.is_initialized() else 1
    rows = [mine]
    if world > 1:
        rows = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(rows, mine)
    per_rank = [{"peak_allocated_bytes": int(r[0].item()), "peak_reserved_bytes": int(r[1].item())} for r in rows]
    return {"peak_allocated_bytes": max(r["peak_allocated_bytes"] for r in per_rank),
            "peak_reserved_bytes": max(r["peak_reserved_bytes"] for r in per_rank), "per_rank": per_rank}


class RunPeaks:
    """The peak of one DDP configuration while others of its launch stay alive beside it (interleaved rounds).

    The process's allocated peak would hold every live configuration's states. So: this configuration's own
    resident bytes once it is built and warmed up (parameters, gradients, optimizer states, DDP's buckets, the
    batch), plus the most the allocation rose above its level at the start of any timed round. The reserved
    peak is the process's (the allocator's segments are shared)."""

    METHOD = ("own resident bytes after warm-up + the rise of torch.cuda.max_memory_allocated above the "
              "allocation at the start of each timed round; reserved: the process's peak")

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self._built_from = torch.cuda.memory_allocated(device) if self.cuda else 0
        self.resident_bytes: int | None = None
        self._round_start = 0
        self.peak_allocated_bytes: int | None = None
        self.peak_reserved_bytes: int | None = None

    def built(self) -> None:
        """Call once the configuration is built and warmed up (its gradients and optimizer states exist)."""
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self.resident_bytes = int(torch.cuda.memory_allocated(self.device)) - self._built_from

    def begin(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self._round_start = int(torch.cuda.memory_allocated(self.device))
            torch.cuda.reset_peak_memory_stats(self.device)

    def end(self) -> None:
        if not self.cuda or self.resident_bytes is None:
            return
        torch.cuda.synchronize(self.device)
        rise = int(torch.cuda.max_memory_allocated(self.device)) - self._round_start
        own = self.resident_bytes + max(0, rise)
        self.peak_allocated_bytes = max(own, self.peak_allocated_bytes or 0)
        self.peak_reserved_bytes = max(int(torch.cuda.max_memory_reserved(self.device)), self.peak_reserved_bytes or 0)
