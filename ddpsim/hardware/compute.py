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
from ddpsim.workload.model import Layer, Workload
from ddpsim.workload.zoo import LANGUAGE_MODELS

OPTIMIZERS = ("auto", "sgd", "sgd-fused", "adam", "adamw", "adam-fused", "adamw-fused", "none")

# fp32 passes over the parameters per step. PyTorch's default on CUDA is the foreach implementation,
# one pass per operand of each _foreach_ op:
#   SGD momentum: buf.mul_ (2) + buf.add_(g) (3) + p.add_(buf) (3) = 8.
#   AdamW: p.mul_(1-lr*wd) (2), m.lerp_(g) (3), v.mul_ (2), v.addcmul_(g,g) (3), sqrt(v) (2), div_ (2),
#   add_(eps) (2), p.addcdiv_(m, denom) (4) = 20; Adam skips the decay pass.
# The fused kernels touch each operand once: SGD reads p, g, m and writes p, m (5); Adam reads
# p, g, m, v and writes p, m, v (7).
_PASSES = {"sgd": 8, "sgd-fused": 5, "adam": 18, "adamw": 20, "adam-fused": 7, "adamw-fused": 7, "none": 0}
_FOREACH_OPS = {"sgd": 3, "sgd-fused": 1, "adam": 8, "adamw": 9, "adam-fused": 1, "adamw-fused": 1, "none": 0}
_STATE_BYTES_PER_PARAM = {"sgd": 4, "sgd-fused": 4, "adam": 8, "adamw": 8, "adam-fused": 8,
                          "adamw-fused": 8, "none": 0}
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
    """"auto": AdamW for language models (zoo LMs, or any workload with a sequence length),
    SGD with momentum otherwise, as the validation harness trains them."""
    name = optimizer.strip().lower()
    if name == "auto":
        return "adamw" if workload.name in LANGUAGE_MODELS or workload.seq_len is not None else "sgd"
    if name not in _PASSES:
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
                 optimizer: str = "auto", cudnn_tf32: bool = True, fit: ClassFit | None = None) -> StepCompute:
    """Forward, backward segments and optimizer time of ``workload`` on ``gpu``.

    ``efficiency`` overrides the catalog's fraction of peak FLOP/s (unused for measured profiles);
    ``fit``, when given and ``efficiency`` is not, prices each layer by its kernel class
    (``hardware.kernel_classes``) instead; ``cudnn_tf32`` mirrors ``torch.backends.cudnn.allow_tf32``
    (PyTorch's default: True).
    """
    if workload.measured is not None:
        m = workload.measured
        return StepCompute(m.forward_s, _measured_segments(workload), m.optimizer_s)
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
            return layer_seconds(layer, gpu, workload.precision, per_class, backward, cudnn_tf32)[2]
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


def memory_per_gpu(workload: Workload, optimizer: str = "auto",
                   gradient_as_bucket_view: bool = False) -> dict[str, float]:
    """Bytes per GPU at the peak of a DDP step.

    PyTorch AMP keeps fp32 parameters and gradients, so with Adam the model states are
    4 + 4 + 8 = 16 bytes per parameter: the same 16 bytes/param as the facts file's mixed-precision
    figure (2 + 2 + 12), split differently. DDP's buckets hold a second copy of every gradient unless
    ``gradient_as_bucket_view``. Autocast's cache of 16-bit weight copies (2 bytes/param, alive
    from forward to the end of backward) is counted with the activations.
    """
    name = resolve_optimizer(workload, optimizer)
    n = workload.n_params
    parameters = float(sum(p.bytes for p in workload.params) + workload.buffer_bytes)
    gradients = float(workload.grad_bytes)
    states = float(_STATE_BYTES_PER_PARAM[name] * n)
    buckets = 0.0 if gradient_as_bucket_view else gradients
    activations = float(workload.activation_bytes) + (2.0 * n if workload.precision != "fp32" else 0.0)
    memory = {
        "parameters": parameters,
        "gradients": gradients,
        "optimizer_states": states,
        "ddp_buckets": buckets,
        "activations": activations,
    }
    memory["total"] = sum(memory.values())
    return memory
