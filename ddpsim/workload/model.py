"""A model as the simulator sees it: parameter tensors in registration order, grouped in layers.

Every source of workloads (the built-in zoo, the torch importer, a measured profile) produces a
``Workload``. Compute cost is carried as FLOPs and bytes (turned into seconds by ``hardware``) or,
for measured profiles, as measured seconds that override the estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


@dataclass(frozen=True)
class ParamTensor:
    """One parameter tensor that DDP reduces (``requires_grad``, shared tensors counted once)."""

    name: str
    numel: int
    dtype: str = "float32"

    @property
    def bytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class Layer:
    """A module whose own parameters (``recurse=False``) become ready together at the end of its backward.

    ``forward_flops``/``backward_flops`` are per GPU for the configured batch; ``*_bytes`` are the
    device-memory traffic of the layer's kernels (weights, activations in and out).
    """

    name: str
    params: tuple[ParamTensor, ...] = ()
    forward_flops: float = 0.0
    backward_flops: float = 0.0
    forward_bytes: float = 0.0
    backward_bytes: float = 0.0
    kernels: int = 1
    # What the FLOPs are: "conv" | "matmul" | "attention" | "" (memory bound), or a memory-bound kind the
    # importer recognises ("depthwise", "embedding", "norm"). Needed because PyTorch runs fp32
    # convolutions on TF32 tensor cores by default (cudnn.allow_tf32) but not fp32 matmuls, and because
    # each kind of kernel reaches its own fraction of the GPU's peak (hardware/kernel_classes.py).
    kind: str = ""


@dataclass(frozen=True)
class MeasuredTimes:
    """What the validation harness measured at world size 1 (the ``ddpsim.profile/1`` format).

    ``grad_ready_s`` maps a parameter name to seconds from backward start until its gradient was
    accumulated; ``ready_order`` lists parameter names in the order their hooks fired on the CPU,
    which is the order DDP rebuilds its buckets in.
    """

    forward_s: float
    backward_s: float
    optimizer_s: float
    grad_ready_s: dict[str, float]
    ready_order: tuple[str, ...]
    source: str = ""
    # how the times were taken where it matters to the reader, e.g. "rank 1 of 2 GPUs profiled at once"
    how: str = ""
    # the GPU the times were measured on, as torch.cuda.get_device_name() said it (the profile's
    # fingerprint.gpu_name); empty where the file does not say
    gpu_device: str = ""


@dataclass(frozen=True)
class PeakMemory:
    """One world-size-1 training step's peak (no DDP, no sharding), by part, measured on a GPU or estimated by
    PyTorch's MemTracker on fake tensors. ``parts`` add up to ``peak_bytes``: "parameters" (and buffers),
    "gradients" (live at the peak), "optimizer_states", "activations" (live at the peak) and "other"
    (temporaries, autocast copies, workspaces: the rest)."""

    peak_bytes: float
    parts: dict[str, float]
    optimizer: str  # the optimizer the step ran, in workload.optimizer's names
    source: str  # where the figure came from, for the report's from: row
    reserved_bytes: float | None = None  # the caching allocator's reserve at the peak (measured only)
    # The same parts at the peak of forward and backward alone (optimizer states in place, the optimizer's step
    # aside), where known: what a sharded step's peak is made of when sharding divides the states the world-size-1
    # peak was made of (PyTorch's MemTracker gives it; None: not known)
    backward_parts: dict[str, float] | None = None
    # The same step with every k-th block checkpointed (torch.utils.checkpoint, non-reentrant), by k: its own peak,
    # where the tracker ran it (the scenario asked for checkpointing)
    checkpointed: dict[int, PeakMemory] = field(default_factory=dict)


@dataclass(frozen=True)
class Workload:
    """A model plus the per-GPU batch it runs on."""

    name: str
    layers: tuple[Layer, ...]
    batch_size: int
    precision: str = "fp32"
    seq_len: int | None = None
    activation_bytes: float = 0.0
    # Where ``activation_bytes`` came from ("" with 0 bytes: nobody measured or estimated it, and the memory
    # report says so), and what autograd keeps per module (module name -> bytes; empty: not known).
    activation_source: str = ""
    activation_bytes_by_layer: dict[str, float] = field(default_factory=dict)
    # Temporaries live beside the activations at the start of backward where no measured or tracked peak gives them:
    # the zoo's language models' loss (log-softmax's fp32 gradient in and out over the logits); 0 = none counted
    transient_bytes: float = 0.0
    # the step's peak at world size 1 by part, where a measurement or PyTorch's MemTracker gave it
    peak_memory: PeakMemory | None = None
    # the optimizer the workload was measured or estimated with ("" = not known)
    optimizer: str = ""
    buffer_bytes: int = 0
    measured: MeasuredTimes | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Indices into ``layers`` in forward execution order; empty means ``layers`` order. Needed
    # because ``layers`` follow registration order (DDP's parameter order) while modules may run in
    # another order (LLaMA registers input_layernorm after self_attn but runs it first), and backward,
    # hence gradient readiness, follows execution order.
    forward_order: tuple[int, ...] = ()
    # Indices into ``params`` in the order autograd accumulated their gradients in one backward, as
    # the torch importer records it; empty means derived from ``execution_order``. Needed because the
    # order inside a module and across modules is autograd's, not registration's (LayerNorm, BatchNorm
    # and Conv get the weight's gradient before the bias's; MultiheadAttention's out_proj is used
    # without being called), and DDP rebuilds its buckets in exactly this order. A parameter absent
    # from a non-empty order gets no gradient: unused in forward.
    grad_ready_order: tuple[int, ...] = ()
    # Autograd nodes reachable from the outputs (what find_unused_parameters' graph walk visits) and
    # the outputs' bytes (what its _DDPSink clones), with where the count came from; None: not known.
    autograd_nodes: int | None = None
    autograd_nodes_source: str = ""
    output_bytes: int | None = None
    # What DDP at world size 1 added to the measured step on the profiled machine, per variant ("none",
    # "gbv" = gradient_as_bucket_view, "fp16"/"bf16" = the compress hooks): DDP's own per-rank work
    # (reducer hooks, bucket copies and launches, a hook's own work), measured with nothing on a link;
    # empty when the profile did not measure it.
    ddp_world1_extra_s: dict[str, float] = field(default_factory=dict)
    ddp_world1_cap_mb: float | None = None  # the bucket cap of that measurement (median of its rows)
    # coefficient of variation of the measured step time over the profile's steps (from its p10..p90, as a
    # lognormal); None: not measured
    step_jitter_cv: float | None = None
    # How far the backward thread ran ahead of the GPU when backward returned, with DDP's reducer on it
    # (world-size-1 DDP, plain): the host time a comm hook can add before it delays the GPU. None: not measured.
    ddp_world1_lead_s: float | None = None
    # The backward into existing gradients (AccumulateGrad adds instead of taking the new tensor): what
    # every micro-step after the first pays under gradient accumulation. None: not measured.
    backward_accumulate_s: float | None = None
    # the profile's model_source ("builtin", "module:factory", "hf:..."): what builds the same model again,
    # for the per-class split that carries a profile to another GPU kind; empty where not known
    model_source: str = ""
    # convolutions run NHWC (channels-last): cuDNN's 16-bit tensor-core kernels need no transposes around them
    channels_last: bool = False

    @property
    def unused_params(self) -> tuple[int, ...]:
        """Indices into ``params`` that get no gradient in backward (known only from a recorded order)."""
        if not self.grad_ready_order:
            return ()
        ready = set(self.grad_ready_order)
        return tuple(i for i in range(len(self.params)) if i not in ready)

    @property
    def execution_order(self) -> tuple[int, ...]:
        """Indices into ``layers`` in the order their forward runs (backward runs it reversed)."""
        return self.forward_order or tuple(range(len(self.layers)))

    @property
    def params(self) -> list[ParamTensor]:
        """Parameters in registration order (the order DDP's initial buckets reverse)."""
        return [p for layer in self.layers for p in layer.params]

    @property
    def n_params(self) -> int:
        return sum(p.numel for p in self.params)

    @property
    def grad_bytes(self) -> int:
        return sum(p.bytes for p in self.params)

    @property
    def tokens_per_sample(self) -> int | None:
        return self.seq_len
