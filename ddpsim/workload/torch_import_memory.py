"""A training step's peak memory by part, estimated on the CPU with PyTorch's own tracker.

``torch.distributed._tools.mem_tracker.MemTracker`` runs a real training step (forward, loss, backward,
optimizer step) of the user's model under ``FakeTensorMode``: no weights and no batch are allocated, yet every
tensor the step creates is seen, and attributed to parameters, buffers, gradients, optimizer states,
activations (created in forward) and temporaries. Two steps run, so the second starts with the optimizer's
states as a training loop does; the peak is the larger one's. The optimizer takes ``foreach=True``, the
implementation PyTorch picks on CUDA (on the CPU it would pick the per-tensor one, whose temporaries differ),
and autocast runs on the CPU's lower-precision list, which holds the same matrix products as CUDA's.

MemTracker is a private API: it is used only on the torch versions it was tested with here (``TESTED``);
elsewhere, or where the step fails on fake tensors, the caller keeps its own estimate and says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ddpsim.workload.model import PeakMemory

TESTED = ((2, 5), (2, 13))  # torch major.minor, inclusive: MemTracker's API as read here
SOURCE = "PyTorch's MemTracker (a real training step on fake tensors, CPU)"


@dataclass(frozen=True)
class StepMemory:
    """The estimate: the peak by part, what forward keeps for backward, and per block module."""

    peak: PeakMemory
    activation_bytes: float
    activation_bytes_by_layer: dict[str, float]


class MemoryEstimateError(Exception):
    """The tracker could not run (torch version, or the step failed on fake tensors): the reason, one line."""


def torch_version_ok(torch: Any) -> tuple[bool, str]:
    """(whether MemTracker is used on this torch, the version read)."""
    version = str(torch.__version__).split("+")[0]
    try:
        major_minor = tuple(int(x) for x in version.split(".")[:2])
    except ValueError:
        return False, version
    return TESTED[0] <= major_minor <= TESTED[1], version


def make_optimizer(torch: Any, params: Any, optimizer: str) -> Any:
    """The torch optimizer a name of ``workload.optimizer`` stands for (None for "none")."""
    if optimizer == "none":
        return None
    fused = optimizer.endswith("_fused")
    kind = optimizer.removesuffix("_fused")
    impl = {"fused": True} if fused else {"foreach": True}
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.01, **impl)
    if kind == "sgd_momentum":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, **impl)
    if kind == "adam":
        return torch.optim.Adam(params, lr=1e-4, **impl)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, **impl)
    raise ValueError(f"unknown optimizer {optimizer!r}")


def default_loss(torch: Any, model: Any, batch: Any) -> Any:
    """``ddpsim measure``'s default loss for a user's model: cross-entropy of ``model(x)`` against an integer
    ``y`` (MSE against a float one) for a batch ``(x, y)``; else the mean square of the output."""
    functional = torch.nn.functional
    if isinstance(batch, tuple | list) and len(batch) == 2:
        x, y = batch
        out = model(x)
        if not torch.is_floating_point(y):
            return functional.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
        return functional.mse_loss(out.float(), y.float())
    out = model(**batch) if isinstance(batch, dict) else model(batch)
    return _outputs_loss(torch, out)


def hf_loss(torch: Any, out: Any) -> Any:
    """A Hugging Face model's training loss: its own LM loss where it computed one, else ``_outputs_loss``."""
    loss = getattr(out, "loss", None)
    return loss if isinstance(loss, torch.Tensor) else _outputs_loss(torch, out)


def _outputs_loss(torch: Any, out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.float().pow(2).mean()
    values = out.values() if isinstance(out, dict) else out
    if hasattr(out, "to_tuple"):
        values = out.to_tuple()
    tensors = [v for v in values if isinstance(v, torch.Tensor) and v.is_floating_point()]
    return sum(t.float().pow(2).mean() for t in tensors)


def step_memory(torch: Any, build: Callable[[], tuple[Any, Callable[[Any], Any]]], precision: str, optimizer: str,
                blocks: list[str], checkpointed: tuple[str, ...] = ()) -> StepMemory:
    """The estimate for a model ``build()`` returns with a function giving the step's loss (called with the
    model, under autocast where ``precision`` asks); ``blocks`` are module names whose forward's kept
    activations are reported one by one; ``checkpointed`` module names run under ``torch.utils.checkpoint``
    (non-reentrant, as torchtitan and FSDP recipes wrap their blocks). Raises MemoryEstimateError with the reason."""
    ok, version = torch_version_ok(torch)
    if not ok:
        raise MemoryEstimateError(f"torch {version}: MemTracker is private and tested here with torch "
                                  f"{TESTED[0][0]}.{TESTED[0][1]} to {TESTED[1][0]}.{TESTED[1][1]} only")
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.distributed._tools.mem_tracker import MemTracker, _ModState
    except Exception as err:  # a private API that moved
        raise MemoryEstimateError(f"MemTracker not importable: {type(err).__name__}: {err}") from None
    from ddpsim.workload.torch_autocast import autocast_on_cpu

    amp = precision != "fp32"
    dtype = torch.float16 if precision == "fp16-amp" else torch.bfloat16
    try:
        with FakeTensorMode(allow_non_fake_inputs=True), _sdpa_without_dropout(torch), autocast_on_cpu(torch), \
                _grouped_mm_at_16_bits(torch):
            model, loss_of = build()
            model.train()
            for name in checkpointed:
                _checkpoint(torch, model.get_submodule(name))
            opt = make_optimizer(torch, [p for p in model.parameters() if p.requires_grad], optimizer)
            tracker = _global_peak_tracker(MemTracker)()
            tracker.track_external(model, *([opt] if opt is not None else []))
            with tracker:
                for step in range(2):
                    if amp:
                        with torch.autocast("cpu", dtype):
                            loss = loss_of(model)
                    else:
                        loss = loss_of(model)
                    loss.backward()
                    if step == 1:
                        backward_by_type = dict(next(iter(tracker._peak_mem_snap.values()), {}))
                    if opt is not None:
                        opt.step()
                        opt.zero_grad(set_to_none=True)
                    else:
                        model.zero_grad(set_to_none=True)
                    if step == 0:
                        tracker.reset_mod_stats()  # module figures of the second step: states in place
                        overall = (dict(tracker._peak_mem), dict(tracker._peak_mem_snap))
                        tracker._peak_mem.clear()  # the second step's forward and backward alone, states in place
                        tracker._peak_mem_snap.clear()
            for dev, total in overall[0].items():  # the step's peak: the larger of both steps'
                if tracker._peak_mem.get(dev, 0) < total:
                    tracker._peak_mem[dev], tracker._peak_mem_snap[dev] = total, overall[1][dev]
            peak_by_type = next(iter(tracker.get_tracker_snapshot("peak").values()))
            kept = _forward_kept(tracker, model, _ModState)
            by_block = {}
            for name in blocks:
                module = model.get_submodule(name)
                if module in tracker.memory_tracking:
                    by_block[name] = _forward_kept(tracker, module, _ModState)
    except MemoryEstimateError:
        raise
    except Exception as err:  # the user's step on fake tensors: any failure means "no estimate", with why
        text = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise MemoryEstimateError(f"the step failed under FakeTensorMode: {type(err).__name__}: {text}") from None
    parts = _parts(peak_by_type)
    peak = PeakMemory(peak_bytes=sum(parts.values()), parts=parts, optimizer=optimizer, source=SOURCE,
                      backward_parts=_parts(backward_by_type))
    return StepMemory(peak, kept, by_block)


def _checkpoint(torch: Any, module: Any) -> None:
    """``module``'s forward under non-reentrant checkpointing: it keeps its inputs, and runs again in backward."""
    from torch.utils.checkpoint import checkpoint

    forward = module.forward

    def checkpointed(*args: Any, **kwargs: Any) -> Any:
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    module.forward = checkpointed


def _grouped_mm_at_16_bits(torch: Any) -> Any:
    """A mixture of experts' grouped matmul (``grouped_mm``, transformers' MoE layers) on fp32 operands, as DDP keeps
    an fp32 model's weights: torch's fake kernel takes bf16 only (as the GPU's does), so the operands are cast to
    bf16 first, which is what autocast does to a matrix product's operands (the cast weights are autocast's
    16-bit copies)."""
    from torch.overrides import TorchFunctionMode

    grouped = {f for f in (getattr(torch.nn.functional, "grouped_mm", None), getattr(torch, "_grouped_mm", None))
               if f is not None}

    class _Cast(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func in grouped and len(args) >= 2 and args[0].dtype == torch.float32:
                args = (args[0].to(torch.bfloat16), args[1].to(torch.bfloat16), *args[2:])
            return func(*args, **(kwargs or {}))

    return _Cast()


def _global_peak_tracker(tracker_class: Any) -> Any:
    """MemTracker keeping the step's global peak only. Its own peak update walks every tracked module and
    deep-copies a snapshot for each active one at every aten op (quadratic in the model's depth: 250 s for a
    7 B LLaMA at 2 x 4096 on two loaded cores); the per-module peaks it keeps are not read here (the per-block
    figures come from the pre- and post-forward snapshots its hooks take), and the global peak is updated the
    same way."""

    class GlobalPeakTracker(tracker_class):
        def _update_peak_stats(self, peak_state: Any) -> None:
            for dev, dev_snap in self._curr_mem_snap.items():
                total = dev_snap[_TOTAL]
                if self._peak_mem.get(dev, 0) < total:
                    self._peak_mem[dev] = total
                    self._peak_mem_snap[dev] = dict(dev_snap)

    return GlobalPeakTracker


_TOTAL = "Total"  # torch.distributed._tools.mem_tracker._TOTAL_KEY


@contextlib.contextmanager
def _sdpa_without_dropout(torch: Any) -> Iterator[None]:
    """Scaled-dot-product attention with its dropout off while the tracker runs. CUDA's fused attention kernels
    apply dropout inside the kernel and keep no mask (backward regenerates it from the RNG state), while on the
    CPU dropout sends SDPA to its math path, which saves the attention matrix and the mask: the CPU's
    allocations, not the GPU's. With dropout off the CPU takes its fused path too (nn.MultiheadAttention and
    nn.Transformer call SDPA through torch.nn.functional)."""
    functional = torch.nn.functional
    original = functional.scaled_dot_product_attention

    def without_dropout(*args: Any, **kwargs: Any) -> Any:
        if len(args) > 4:
            args = (*args[:4], 0.0, *args[5:])
        if "dropout_p" in kwargs:
            kwargs["dropout_p"] = 0.0
        return original(*args, **kwargs)

    functional.scaled_dot_product_attention = without_dropout
    try:
        yield
    finally:
        functional.scaled_dot_product_attention = original


def _parts(by_type: dict[Any, Any]) -> dict[str, float]:
    """MemTracker's reference types as PeakMemory's parts."""
    by = {str(getattr(k, "value", k)): float(v) for k, v in by_type.items()}
    return {"parameters": by.get("Parameter", 0.0) + by.get("Buffer", 0.0), "gradients": by.get("Gradient", 0.0),
            "optimizer_states": by.get("Optstate", 0.0), "activations": by.get("Activation", 0.0),
            "other": by.get("Temp", 0.0) + by.get("Other", 0.0)}


def _forward_kept(tracker: Any, module: Any, states: Any) -> float:
    """Activation bytes a module's forward left alive (post-forward less pre-forward, second step)."""
    snaps = tracker.memory_tracking[module].snapshots
    pre, post = snaps.get(states.PRE_FW), snaps.get(states.POST_FW)
    if not pre or not post:
        return 0.0

    def act(snapshot: dict[Any, dict[Any, int]]) -> float:
        by_type = next(iter(snapshot.values()))
        return float(sum(v for k, v in by_type.items() if str(getattr(k, "value", k)) == "Activation"))

    return max(act(post[-1]) - act(pre[-1]), 0.0)


def with_step_memory(torch: Any, workload: Any, build: Callable[[], tuple[Any, Callable[[Any], Any]]],
                     optimizer: str, checkpoint_every: int = 0) -> Any:
    """``workload`` with MemTracker's estimate (peak by part, activations, per block), or, where the tracker
    cannot run, the workload as it was with a note saying why its activations are the importer's rough guess.
    ``checkpoint_every`` k > 0: the step with every k-th block checkpointed is tracked too (the blocks of
    ``sharded.checkpointing``), its peak kept in ``peak_memory.checkpointed[k]``."""
    from dataclasses import replace

    from ddpsim.sharded.checkpointing import checkpointed_units
    from ddpsim.sharded.units import ROOT, shard_units

    units = shard_units(workload)
    blocks = [u.name for u in units if u.name != ROOT]
    chosen = tuple(u.name for u in checkpointed_units(units, checkpoint_every))
    try:
        estimate = step_memory(torch, build, workload.precision, optimizer, blocks)
        if chosen:
            with_ckpt = step_memory(torch, build, workload.precision, optimizer, [], chosen).peak
            estimate = StepMemory(replace(estimate.peak, checkpointed={checkpoint_every: replace(
                with_ckpt, source=f"{SOURCE}, every {checkpoint_every} block(s) checkpointed")}),
                estimate.activation_bytes, estimate.activation_bytes_by_layer)
    except MemoryEstimateError as err:
        return replace(workload, optimizer=optimizer, activation_source=(
            f"the torch importer's rough estimate (a third of each layer's forward traffic): {SOURCE} did not "
            f"run ({err})"))
    return replace(workload, optimizer=optimizer, peak_memory=estimate.peak,
                   activation_bytes=estimate.activation_bytes, activation_source=SOURCE,
                   activation_bytes_by_layer=estimate.activation_bytes_by_layer)
