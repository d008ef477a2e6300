"""Per-step compute time of one GPU: forward, backward as segments ending in gradient readiness, optimizer.

A measured profile wins over any estimate. Otherwise each layer costs a roofline time,
``max(flops / (peak * efficiency), bytes / (bandwidth * memory_efficiency)) + kernels * launch``,
with backward charging twice the forward kernels (input grad and weight grad per forward kernel).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ddpsim.errors import ScenarioError
from ddpsim.hardware.catalog import GPUSpec
from ddpsim.hardware.kernel_classes import ClassFit, layer_seconds, optimizer_times
from ddpsim.scenario.schema import OPTIMIZERS
from ddpsim.workload.model import Layer, Workload
from ddpsim.workload.zoo import LANGUAGE_MODELS

# Other spellings a user may write: the fused kernels with a hyphen, and torch's class names.
OPTIMIZER_ALIASES = {"sgd-fused": "sgd_momentum_fused", "adam-fused": "adam_fused", "adamw-fused": "adamw_fused",
                     "sgd-momentum": "sgd_momentum", "momentum": "sgd_momentum"}

# fp32 passes over the parameters per step. PyTorch's default on CUDA is the foreach implementation,
# one pass per operand of each _foreach_ op:
#   SGD (momentum 0, torch's default): p.add_(g) (3) = 3, and no state.
#   SGD momentum: buf.mul_ (2) + buf.add_(g) (3) + p.add_(buf) (3) = 8.
#   AdamW: p.mul_(1-lr*wd) (2), m.lerp_(g) (3), v.mul_ (2), v.addcmul_(g,g) (3), sqrt(v) (2), div_ (2),
#   add_(eps) (2), p.addcdiv_(m, denom) (4) = 20; Adam skips the decay pass.
# The fused kernels touch each operand once: SGD reads p, g, m and writes p, m (5); Adam reads
# p, g, m, v and writes p, m, v (7).
_PASSES = {"sgd": 3, "sgd_momentum": 8, "sgd_momentum_fused": 5, "adam": 18, "adamw": 20, "adam_fused": 7,
           "adamw_fused": 7, "none": 0}
_FOREACH_OPS = {"sgd": 1, "sgd_momentum": 3, "sgd_momentum_fused": 1, "adam": 8, "adamw": 9, "adam_fused": 1,
                "adamw_fused": 1, "none": 0}
# fp32 state per parameter: SGD's momentum buffer, Adam's two moments (its step counters are scalars)
STATE_BYTES_PER_PARAM = {"sgd": 0, "sgd_momentum": 4, "sgd_momentum_fused": 4, "adam": 8, "adamw": 8,
                         "adam_fused": 8, "adamw_fused": 8, "none": 0}
# multi_tensor_apply launches a kernel per 320 blocks of 65,536 elements or per ~48 tensors.
_MTA_ELEMS_PER_LAUNCH = 320 * 65536
_MTA_TENSORS_PER_LAUNCH = 48


@dataclass(frozen=True)
class StepCompute:
    """Compute of one step on one GPU.

    backward_segments, in execution order: (duration_s, indices into ``workload.params`` whose
    gradients become ready at the END of this segment, in hook-firing order).
    """

    forward_s: float
    backward_segments: tuple[tuple[float, tuple[int, ...]], ...]
    optimizer_s: float
    # Parameters that get no gradient (unused in forward). They sit in the first segment, since DDP
    # with find_unused_parameters marks them ready when the first gradient hook fires, but they are
    # not part of the rebuild order: no hook ever fires for them.
    unused: tuple[int, ...] = ()

    @property
    def backward_s(self) -> float:
        return sum(duration for duration, _ in self.backward_segments)

    @property
    def ready_order(self) -> tuple[int, ...]:
        """Parameter indices in the order their gradients become ready (DDP's rebuild order)."""
        unused = set(self.unused)
        return tuple(i for _, ready in self.backward_segments for i in ready if i not in unused)


def resolve_optimizer(workload: Workload, optimizer: str = "auto") -> str:
    """"auto": the optimizer the workload was measured or estimated with where it says, else AdamW for
    language models (zoo LMs, or any workload with a sequence length) and SGD with momentum otherwise, as
    the validation harness trains them."""
    name = canonical_optimizer(optimizer)
    if name == "auto":
        if workload.optimizer:
            return canonical_optimizer(workload.optimizer)
        return "adamw" if workload.name in LANGUAGE_MODELS or workload.seq_len is not None else "sgd_momentum"
    return name


def canonical_optimizer(optimizer: str) -> str:
    """The name of ``OPTIMIZERS`` that ``optimizer`` spells (an alias or torch's class name, any case)."""
    name = optimizer.strip().lower()
    name = OPTIMIZER_ALIASES.get(name, name)
    if name not in _PASSES and name != "auto":
        raise ScenarioError(f"unknown optimizer {optimizer!r}; expected one of {', '.join(OPTIMIZERS)}",
                            field="workload.optimizer")
    return name


def roofline_s(flops: float, n_bytes: float, kernels: float, gpu: GPUSpec, precision: str,
               efficiency: float | None = None, kind: str = "", cudnn_tf32: bool = True) -> float:
    """Seconds for work of ``flops`` and ``n_bytes`` in ``kernels`` kernels on ``gpu``.

    fp32 convolutions use the TF32 peak when ``cudnn_tf32`` (PyTorch's default
    ``torch.backends.cudnn.allow_tf32 = True``); fp32 matmuls keep the fp32 peak
    (``torch.backends.cuda.matmul.allow_tf32`` defaults to False).
    """
    eff = gpu.default_compute_efficiency if efficiency is None else efficiency
    if not 0.0 < eff <= 1.0:
        raise ScenarioError(f"expected a fraction in (0, 1], got {eff!r}", field="workload.compute_efficiency")
    use_tf32 = precision == "fp32" and kind in ("conv", "depthwise") and cudnn_tf32
    peak = gpu.peak_flops_per_s["tf32"] if use_tf32 else gpu.peak_for(precision)
    compute = flops / (peak * eff) if flops else 0.0
    memory = n_bytes / (gpu.memory_bandwidth_Bps * gpu.memory_efficiency)
    return max(compute, memory) + kernels * gpu.kernel_launch_s


def optimizer_work(workload: Workload, optimizer: str = "auto") -> tuple[float, int]:
    """(bytes, kernels) of the optimizer step over fp32 parameters: its multi-tensor passes and launches.
    fp16-amp adds GradScaler's unscale (read and write every gradient)."""
    name = resolve_optimizer(workload, optimizer)
    params = workload.params
    n_elems = sum(p.numel for p in params)
    passes = _PASSES[name] + (2 if workload.precision == "fp16-amp" and name != "none" else 0)
    n_bytes = passes * 4.0 * n_elems
    launches_per_op = max(math.ceil(n_elems / _MTA_ELEMS_PER_LAUNCH),
                          math.ceil(len(params) / _MTA_TENSORS_PER_LAUNCH), 1)
    return n_bytes, _FOREACH_OPS[name] * launches_per_op


def optimizer_s(workload: Workload, gpu: GPUSpec, optimizer: str = "auto", fit: ClassFit | None = None) -> float:
    """Memory-bound optimizer step over fp32 parameters, plus its multi-tensor kernel launches (at the
    catalog's memory efficiency and launch cost, or the per-class ``fit``'s)."""
    n_bytes, kernels = optimizer_work(workload, optimizer)
    if fit is not None:
        return optimizer_times(n_bytes, kernels, gpu, fit).total_s
    return n_bytes / (gpu.memory_bandwidth_Bps * gpu.memory_efficiency) + kernels * gpu.kernel_launch_s


def _measured_segments(workload: Workload) -> tuple[tuple[float, tuple[int, ...]], ...]:
    """Group parameters by ready time, in hook-firing order; times are made non-decreasing (a hook
    cannot fire before the previous one), and a tail without readiness runs to ``backward_s``."""
    measured = workload.measured
    assert measured is not None
    index = {p.name: i for i, p in enumerate(workload.params)}
    order = [index[n] for n in measured.ready_order if n in index]
    seen = set(order)
    missing = [i for i in range(len(index)) if i not in seen]
    names = [p.name for p in workload.params]
    segments: list[tuple[float, tuple[int, ...]]] = []
    current: list[int] = []
    t_prev, t_current = 0.0, 0.0
    for i in order:
        t = max(measured.grad_ready_s.get(names[i], t_current), t_current)
        if current and t > t_current:
            segments.append((t_current - t_prev, tuple(current)))
            t_prev, current = t_current, []
        current.append(i)
        t_current = t
    end = max(measured.backward_s, t_current)
    if current:
        segments.append((t_current - t_prev, tuple(current)))
        t_prev = t_current
    # Parameters the profile never saw ready (unused in its run) count as ready when backward ends.
    if end > t_prev or missing:
        segments.append((end - t_prev, tuple(missing)))
    return tuple(segments)


def step_compute(workload: Workload, gpu: GPUSpec, efficiency: float | None = None,
                 optimizer: str = "auto", cudnn_tf32: bool = True,
                 recompute: frozenset[int] = frozenset(), fit: ClassFit | None = None) -> StepCompute:
    """Forward, backward segments and optimizer time of ``workload`` on ``gpu``.

    ``efficiency`` overrides the catalog's fraction of peak FLOP/s (unused for measured profiles);
    ``fit``, when given and ``efficiency`` is not, prices each layer by its kernel class
    (``hardware.kernel_classes``) instead; ``cudnn_tf32`` mirrors ``torch.backends.cudnn.allow_tf32``
    (PyTorch's default: True). ``recompute``: layers (indices into ``workload.layers``) whose forward runs
    again just before their backward (activation checkpointing). ``optimizer`` prices the step where it is
    estimated; a profile's measured optimizer time holds for the optimizer it ran, scaled by the estimates'
    ratio otherwise.
    """
    if workload.measured is not None:
        m = workload.measured
        measured_segments = _measured_segments(workload)
        if recompute:
            # the measured forward spread over the layers by their estimates; the recomputed share is added to
            # backward, each segment stretched alike (the profile does not time the layers one by one)
            share = _forward_share(workload, gpu, efficiency, cudnn_tf32, recompute)
            stretch = 1.0 + m.forward_s * share / m.backward_s if m.backward_s > 0 else 1.0
            measured_segments = tuple((duration * stretch, ready) for duration, ready in measured_segments)
        opt = m.optimizer_s
        measured_with = resolve_optimizer(workload)
        wanted = resolve_optimizer(workload, optimizer)
        if wanted != measured_with:
            before = optimizer_s(workload, gpu, measured_with)
            opt = m.optimizer_s * optimizer_s(workload, gpu, wanted) / before if before > 0 else \
                optimizer_s(workload, gpu, wanted)
        return StepCompute(m.forward_s, measured_segments, opt)
    order = workload.execution_order
    if sorted(order) != list(range(len(workload.layers))):
        raise ValueError(f"workload {workload.name!r}: forward_order is not a permutation of its layers")
    first_param: list[int] = []
    offset = 0
    for layer in workload.layers:
        first_param.append(offset)
        offset += len(layer.params)
    forward = 0.0
    segments: list[tuple[float, tuple[int, ...]]] = []
    pending = 0.0
    elapsed = 0.0
    layer_done = [0.0] * offset  # per parameter: when its layer's backward ends
    per_class = fit if efficiency is None else None

    def layer_s(layer: Layer, backward: bool) -> float:
        if per_class is not None:
            return layer_seconds(layer, gpu, workload.precision, per_class, backward, cudnn_tf32,
                                 workload.channels_last)[2]
        if backward:
            return roofline_s(layer.backward_flops, layer.backward_bytes, 2 * layer.kernels, gpu,
                              workload.precision, efficiency, layer.kind, cudnn_tf32)
        return roofline_s(layer.forward_flops, layer.forward_bytes, layer.kernels, gpu,
                          workload.precision, efficiency, layer.kind, cudnn_tf32)

    for li in order:
        forward += layer_s(workload.layers[li], False)
    for li in reversed(order):
        layer = workload.layers[li]
        cost = layer_s(layer, True)
        if li in recompute:
            cost += layer_s(layer, False)
        pending += cost
        elapsed += cost
        for i in range(first_param[li], first_param[li] + len(layer.params)):
            layer_done[i] = elapsed
        if layer.params:
            # Without a recorded order (zoo models): within a module the hooks fire last-registered
            # first, right for a Linear (bias before weight). Autograd gives norms' and convs' weights
            # first; imported models carry autograd's own order (grad_ready_order), used below.
            start = first_param[li]
            ready = tuple(range(start + len(layer.params) - 1, start - 1, -1))
            segments.append((pending, ready))
            pending = 0.0
    if pending > 0.0 or not segments:
        segments.append((pending, ()))
    opt = optimizer_s(workload, gpu, optimizer, per_class)
    if workload.grad_ready_order:
        recorded = _recorded_segments(workload.grad_ready_order, workload.unused_params, layer_done, elapsed)
        return StepCompute(forward, recorded, opt, unused=workload.unused_params)
    return StepCompute(forward, tuple(segments), opt)


def _forward_share(workload: Workload, gpu: GPUSpec, efficiency: float | None, cudnn_tf32: bool,
                   layers: frozenset[int]) -> float:
    """The estimated forward time of ``layers`` as a fraction of the whole forward's estimate."""
    times = [roofline_s(layer.forward_flops, layer.forward_bytes, layer.kernels, gpu, workload.precision,
                        efficiency, layer.kind, cudnn_tf32) for layer in workload.layers]
    total = sum(times)
    return sum(times[i] for i in layers) / total if total > 0 else 0.0


def _recorded_segments(order: tuple[int, ...], unused: tuple[int, ...], layer_done: list[float],
                       total: float) -> tuple[tuple[float, tuple[int, ...]], ...]:
    """Segments that follow a recorded gradient-ready order exactly. A gradient is ready when its
    layer's backward ends, and never before the one recorded before it (hooks fire in order).
    Unused parameters join the first hook, as DDP marks them ready there."""
    segments: list[tuple[float, tuple[int, ...]]] = []
    current, t_prev, t_current = list(unused), 0.0, 0.0
    has_used = False
    for i in order:
        t = max(layer_done[i], t_current)
        if has_used and t > t_current:
            segments.append((t_current - t_prev, tuple(current)))
            t_prev, current = t_current, []
        current.append(i)
        has_used = True
        t_current = t
    segments.append((t_current - t_prev, tuple(current)))
    if total > t_current:
        segments.append((total - t_current, ()))
    return tuple(segments)


def memory_per_gpu(workload: Workload, optimizer: str = "auto", gradient_as_bucket_view: bool = False,
                   activation_bytes: float | None = None) -> dict[str, float]:
    """Bytes per GPU at the peak of a DDP step, by part, and their ``total``.

    ``activation_bytes`` replaces the workload's activations (activation checkpointing keeps fewer). DDP's
    buckets hold a second copy of every gradient unless ``gradient_as_bucket_view``, allocated when DDP is
    built and alive for good. The optimizer's states are ``STATE_BYTES_PER_PARAM`` of the optimizer chosen.

    Where the workload carries a world-size-1 step's peak by part (measured, or PyTorch's MemTracker on
    fake tensors), the parts are that peak's: the gradients and activations live at that moment and the
    rest ("other": temporaries, autocast's copies, workspaces), plus the buckets. The peak is the larger of
    that moment and the end of backward (every gradient, no activation), which checkpointing can make the
    larger. Otherwise every part counts in full, as all live at the start of backward would: PyTorch AMP
    keeps fp32 parameters and gradients, so with Adam the model states are 4 + 4 + 8 = 16 bytes per
    parameter (the facts file's 2 + 2 + 12, split differently), and autocast's cache of 16-bit weight copies
    (2 bytes per parameter, alive from forward to the end of backward) counts with the activations.
    """
    name = resolve_optimizer(workload, optimizer)
    n = workload.n_params
    gradients = float(workload.grad_bytes)
    states = float(STATE_BYTES_PER_PARAM[name] * n)
    buckets = 0.0 if gradient_as_bucket_view else gradients
    peak = workload.peak_memory
    if peak is not None:
        parts = peak.parts
        if resolve_optimizer(workload, peak.optimizer or "auto") == name:
            states = parts["optimizer_states"]
        activations = parts["activations"] if activation_bytes is None else activation_bytes
        at_peak = {"parameters": parts["parameters"], "gradients": parts["gradients"], "optimizer_states": states,
                   "ddp_buckets": buckets, "activations": activations, "other": parts["other"]}
        end_of_backward = dict(at_peak, gradients=max(gradients, parts["gradients"]), activations=0.0)
        memory = max(at_peak, end_of_backward, key=lambda m: sum(m.values()))
    else:
        activations = float(workload.activation_bytes) if activation_bytes is None else activation_bytes
        memory = {
            "parameters": float(sum(p.bytes for p in workload.params) + workload.buffer_bytes),
            "gradients": gradients,
            "optimizer_states": states,
            "ddp_buckets": buckets,
            "activations": activations + (2.0 * n if workload.precision != "fp32" else 0.0),
        }
        if workload.transient_bytes:
            memory["other"] = float(workload.transient_bytes)
    memory["total"] = sum(memory.values())
    return memory
