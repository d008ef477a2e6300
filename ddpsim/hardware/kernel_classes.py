"""Compute time per kind of kernel: each layer's work priced by the class that governs it, on the unit of the
GPU that runs it.

A layer belongs to one class (``CLASSES``). Matrix work (``conv``, ``matmul``, ``attention``) runs on tensor
cores where the GPU has them for the precision (``GPUSpec.tensor_keys``: bf16/fp16 on A100 and later, TF32 for
the fp32 convolutions cuDNN runs at TF32 by default, fp16 only on V100) and on CUDA cores otherwise (fp32
matmuls, which PyTorch keeps off TF32 by default; every fp32 or bf16 convolution and matmul on V100). It is
priced by its FLOPs at that unit's datasheet peak times the class's efficiency on that unit, bounded below by
its bytes at the memory bandwidth; memory-bound work (``depthwise`` convolutions, ``embedding`` lookups,
``norm``s, ``elementwise`` ops and the optimizer) by its bytes at the bandwidth times the class's efficiency.
A matrix kernel of F FLOPs reaches ``efficiency x F / (F + peak x half_s)``: ``half_s`` is a time (the ramp
and tail of a kernel that has not filled the GPU), so the FLOPs at which a kernel reaches half its efficiency
scale with the unit's peak, small on CUDA cores, large on Hopper's tensor cores. A layer takes at least its
kernels x a fixed host/launch cost. The efficiencies and times are FITTED on measurements from several GPU
kinds (the project's H100/H200 profiles and published single-GPU figures of V100 and A100:
``benchmarks/fit_compute_classes.py`` writes ``hardware/data/compute_classes.json``; nothing there is
hand-edited); the fit's spread over its models is the estimate's interval.

The same split carries a measured profile to another GPU kind (``transfer_factors``): each class's
share of the estimated step on the measured GPU scales by the ratio that governs it (peak tensor
throughput at the precision, memory bandwidth, the host's launch rate), from the catalog's figures
of both kinds.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources

from ddpsim.hardware.catalog import GPUSpec
from ddpsim.workload.model import Layer, Workload

TENSOR_CLASSES = ("conv", "matmul", "attention")
MEMORY_CLASSES = ("depthwise", "embedding", "norm", "elementwise")
CLASSES = TENSOR_CLASSES + MEMORY_CLASSES
# the buckets a step's time falls in for a transfer: what scales with tensor throughput, with memory
# bandwidth, with the host's launch rate
GOVERNORS = ("tensor", "memory", "launch")
DATA_FILE = "data/compute_classes.json"
# the classes that may run on CUDA cores (fp32 without TF32, or a precision the GPU has no tensor cores for);
# attention there is priced as a matmul
CUDA_CORE_CLASSES = ("conv", "matmul")
_PRECISION_KEY = {"fp32": "fp32", "bf16-amp": "bf16", "fp16-amp": "fp16"}

_NORM_WORDS = ("norm", "bn", "ln_", "ln", "layernorm", "rmsnorm", "batchnorm", "groupnorm")
_EMBED_WORDS = ("embed", "wte", "wpe", "tok_emb", "pos_emb", "embedding")


def layer_class(layer: Layer) -> str:
    """The class of a layer: the importer's kind where it names one, else read from the module's name
    (``*.ln_1``, ``bn2``: norm; ``wte``, ``embeddings.word``: embedding); FLOPs without a kind are matmuls,
    and what is left is elementwise (activations, pooling, the loss, residual adds)."""
    if layer.kind in CLASSES:
        return layer.kind
    if layer.forward_flops > 0:
        return "matmul"
    leaf = layer.name.rsplit(".", 1)[-1].lower()
    words = [leaf, layer.name.lower()]
    if any(leaf == w or leaf.startswith(w) for w in _NORM_WORDS) or "norm" in words[1].rsplit(".", 1)[-1]:
        return "norm"
    if any(w in leaf for w in _EMBED_WORDS):
        return "embedding"
    return "elementwise"


@dataclass(frozen=True)
class ClassFit:
    """Per-class efficiencies (fractions of peak FLOP/s or of memory bandwidth), the per-kernel cost,
    and the fit's spread: measured / estimated steps of its models at p10 and p90 (the interval)."""

    efficiency: dict[str, float]
    launch_s: float
    # the seconds at the unit's peak at which a matrix kernel reaches half its class's efficiency: small
    # matrix products leave SMs idle for a kernel's ramp and tail (eager GPT-2 small runs at ~10% of peak, a
    # 1B LLaMA at ~28%, on the same H100); a time, so the same ramp costs more FLOPs on a faster unit
    half_s: float
    # the host's cost of calling one module in forward (nn.Module.__call__, its hooks, autocast's dispatch),
    # on top of its kernels' launches: what makes a small eager model host-bound
    module_s: float
    ratio_p10: float
    ratio_p90: float
    fitted_on: tuple[str, ...]
    source: str  # the data file, the command that wrote it
    # fractions of the CUDA-core fp32 peak that convolutions (cuDNN's Winograd/FFT algorithms count the direct
    # convolution's FLOPs, so this may pass 1) and matmuls reach where no tensor core runs them
    cuda_efficiency: dict[str, float] = field(default_factory=dict)
    # the GPU kinds each unit's efficiencies were fitted on ("tensor", "cuda-conv", "cuda-matmul", "memory")
    support: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # cuDNN's NCHW <-> NHWC transposes around a 16-bit tensor-core convolution, in passes over the bytes the
    # convolution itself moves (2 would be one read and one write of all of them)
    nchw_transpose: float = 2.0

    def describe(self, gpu: GPUSpec | None = None, precision: str = "") -> str:
        effs = ", ".join(f"{c} {self.efficiency[c]:.2f}" for c in CLASSES)
        cuda = ", ".join(f"{c} {self.cuda_efficiency[c]:.2f}" for c in CUDA_CORE_CLASSES if c in self.cuda_efficiency)
        text = (f"per-class efficiencies (tensor cores and memory: {effs}; CUDA cores: {cuda}; half of it for a "
                f"matrix kernel of {self.half_s * 1e6:.2g} us at the unit's peak) and "
                f"{self.launch_s * 1e6:.1f} us per kernel + {self.module_s * 1e6:.1f} us per module call, fitted on "
                f"{len(self.fitted_on)} groups ({self.source}); measured steps of models outside the "
                f"fit fell within x{self.ratio_p10:.2f}..x{self.ratio_p90:.2f} of such an estimate (p10..p90)")
        if gpu is not None and precision:
            text += "; " + self.support_note(gpu, precision)
        return text

    def support_note(self, gpu: GPUSpec, precision: str) -> str:
        """Which unit runs this precision's matrix work on ``gpu``, and the GPU kinds its efficiency rests on;
        a kind that is not among them is named as resting on others' fits, never silently."""
        notes = []
        for cls in CUDA_CORE_CLASSES:
            key, unit = compute_path(gpu, precision, cls)
            rest = "tensor" if unit == "tensor" else f"cuda-{cls}"
            kinds = self.support.get(rest, ())
            peak = f"{gpu.peak_flops_per_s[key] / 1e12:g} TF"
            if unit == "tensor":
                where = f"{cls} on tensor cores at {key} ({peak})"
            elif key == "fp32":
                where = f"{cls} on CUDA cores at fp32 ({peak})"
            else:
                where = f"{cls} on CUDA cores ({gpu.name} has no {key} tensor cores; {peak})"
            if not kinds:
                where += ": NO measurement of this unit supports its efficiency"
            elif not _covers(gpu.name, kinds):
                where += f": fitted on {', '.join(kinds)} only, none of them {gpu.name}"
            else:
                where += f": fitted on {', '.join(kinds)}"
            notes.append(where)
        return "; ".join(notes)


_CACHE: dict[str, ClassFit] = {}


def load_class_fit() -> ClassFit:
    """The shipped fit (package data), read once."""
    if "fit" not in _CACHE:
        text = resources.files("ddpsim.hardware").joinpath(DATA_FILE).read_text()
        _CACHE["fit"] = class_fit_from_json(json.loads(text))
    return _CACHE["fit"]


def class_fit_from_json(data: dict[str, object]) -> ClassFit:
    eff = data["efficiency"]
    assert isinstance(eff, dict) and set(eff) == set(CLASSES), "compute_classes.json: efficiency per class"
    fitted_on = data["fitted_on"]
    assert isinstance(fitted_on, list)
    cuda = data["cuda_efficiency"]
    assert isinstance(cuda, dict) and set(cuda) == set(CUDA_CORE_CLASSES), "compute_classes.json: cuda_efficiency"
    support = data["support"]
    assert isinstance(support, dict)
    return ClassFit(efficiency={c: float(eff[c]) for c in CLASSES}, launch_s=float(data["launch_s"]),  # type: ignore[arg-type]
                    half_s=float(data["half_s"]),  # type: ignore[arg-type]
                    module_s=float(data["module_s"]),  # type: ignore[arg-type]
                    ratio_p10=float(data["ratio_p10"]), ratio_p90=float(data["ratio_p90"]),  # type: ignore[arg-type]
                    fitted_on=tuple(str(x) for x in fitted_on), source=str(data["source"]),
                    cuda_efficiency={c: float(cuda[c]) for c in CUDA_CORE_CLASSES},
                    support={str(k): tuple(str(x) for x in v) for k, v in support.items()},
                    nchw_transpose=float(data["nchw_transpose"]))  # type: ignore[arg-type]


def _covers(gpu_name: str, kinds: tuple[str, ...]) -> bool:
    """Whether a fit's GPU kinds include this GPU (V100-16GB is a V100; A100-40GB an A100)."""
    base = gpu_name.split("-")[0]
    return any(k == gpu_name or k.split("-")[0] == base for k in kinds)


def compute_path(gpu: GPUSpec, precision: str, cls: str, cudnn_tf32: bool = True) -> tuple[str, str]:
    """(peak key, unit) of a matrix kernel of class ``cls``: PyTorch runs fp32 convolutions at TF32 by default
    (``torch.backends.cudnn.allow_tf32``), fp32 matmuls at fp32 (``torch.backends.cuda.matmul.allow_tf32`` is
    False since 1.12); the unit is "tensor" where the GPU has tensor cores for that key, else "cuda"."""
    key = _PRECISION_KEY.get(precision, precision)
    if key == "fp32" and cls == "conv" and cudnn_tf32:
        key = "tf32"
    if key not in gpu.peak_flops_per_s:
        gpu.peak_for(precision)  # raises the scenario error naming the precision
    return key, ("tensor" if key in gpu.tensor_keys else "cuda")


def matrix_efficiency(fit: ClassFit, cls: str, unit: str) -> float:
    """The efficiency of class ``cls`` on ``unit``: attention on CUDA cores is priced as a matmul there."""
    if unit == "tensor":
        return fit.efficiency[cls]
    return fit.cuda_efficiency["conv" if cls == "conv" else "matmul"]


@dataclass(frozen=True)
class ClassTimes:
    """Seconds of one pass (forward, backward or optimizer) by class, and by what governs each second."""

    by_class: dict[str, float]
    by_governor: dict[str, float]

    @property
    def total_s(self) -> float:
        return sum(self.by_governor.values())


def _add(times: dict[str, float], key: str, seconds: float) -> None:
    times[key] = times.get(key, 0.0) + seconds


def layer_seconds(layer: Layer, gpu: GPUSpec, precision: str, fit: ClassFit, backward: bool,
                  cudnn_tf32: bool = True, channels_last: bool = False) -> tuple[str, str, float]:
    """(class, governor, seconds) of a layer's forward or backward. The GPU runs the layer's work while the
    host launches its kernels ahead of it, so the layer takes the longer of the two: its work (tensor-core
    FLOPs or bytes, whichever is slower) or its kernels' launches (a host/launch-bound layer).

    A 16-bit convolution on tensor cores over NCHW activations (PyTorch's default layout) adds cuDNN's
    transposes into and out of NHWC: ``fit.nchw_transpose`` passes over what the convolution reads and writes,
    at the elementwise efficiency, two kernels more (none with ``channels_last``)."""
    cls = layer_class(layer)
    flops = layer.backward_flops if backward else layer.forward_flops
    n_bytes = layer.backward_bytes if backward else layer.forward_bytes
    kernels = (2 if backward else 1) * layer.kernels
    memory_s = n_bytes / (gpu.memory_bandwidth_Bps * fit.efficiency["elementwise" if cls in TENSOR_CLASSES else cls])
    if cls in TENSOR_CLASSES and flops > 0:
        per_kernel = flops / kernels
        key, unit = compute_path(gpu, precision, cls, cudnn_tf32)
        peak = gpu.peak_flops_per_s[key]
        efficiency = matrix_efficiency(fit, cls, unit) * per_kernel / (per_kernel + peak * fit.half_s)
        compute_s = flops / (peak * efficiency)
        governor, work = ("tensor", compute_s) if compute_s >= memory_s else ("memory", memory_s)
        if cls == "conv" and unit == "tensor" and key in ("bf16", "fp16") and not channels_last:
            work += fit.nchw_transpose * n_bytes / (gpu.memory_bandwidth_Bps * fit.efficiency["elementwise"])
            kernels += 2
    else:
        governor, work = "memory", memory_s
    launch = kernels * fit.launch_s + (0.0 if backward else fit.module_s)
    if launch > work:
        return cls, "launch", launch
    return cls, governor, work


def pass_times(workload: Workload, gpu: GPUSpec, fit: ClassFit, backward: bool, cudnn_tf32: bool = True) -> ClassTimes:
    by_class: dict[str, float] = {}
    by_governor: dict[str, float] = {g: 0.0 for g in GOVERNORS}
    for layer in workload.layers:
        cls, governor, seconds = layer_seconds(layer, gpu, workload.precision, fit, backward, cudnn_tf32,
                                               workload.channels_last)
        _add(by_class, cls, seconds)
        _add(by_governor, governor, seconds)
    return ClassTimes(by_class, by_governor)


def optimizer_times(n_bytes: float, kernels: float, gpu: GPUSpec, fit: ClassFit) -> ClassTimes:
    """The optimizer's foreach kernels: memory-bound passes over the parameters, plus their launches."""
    memory = n_bytes / (gpu.memory_bandwidth_Bps * fit.efficiency["elementwise"])
    launch = kernels * fit.launch_s
    if launch > memory:
        return ClassTimes({"elementwise": launch}, {"tensor": 0.0, "memory": 0.0, "launch": launch})
    return ClassTimes({"elementwise": memory}, {"tensor": 0.0, "memory": memory, "launch": 0.0})


def governor_ratios(source: GPUSpec, target: GPUSpec, precision: str, tensor_flops_by_peak: dict[str, float]
                    ) -> dict[str, float]:
    """Target seconds per source second for each governor. ``tensor_flops_by_peak``: the tensor-core
    seconds of the estimate per peak key ("tf32" for fp32 convolutions, else the precision's), so that a
    step mixing TF32 convolutions and fp32 matmuls gets its own weighted throughput ratio."""
    total = sum(tensor_flops_by_peak.values())
    if total > 0:
        tensor = sum(share / total * source.peak_flops_per_s[key] / target.peak_flops_per_s[key]
                     for key, share in tensor_flops_by_peak.items())
    else:
        key = _PRECISION_KEY.get(precision, precision)
        tensor = source.peak_flops_per_s[key] / target.peak_flops_per_s[key]
    return {"tensor": tensor,
            "memory": source.memory_bandwidth_Bps / target.memory_bandwidth_Bps,
            "launch": target.kernel_launch_s / source.kernel_launch_s}


def tensor_seconds_by_peak(workload: Workload, gpu: GPUSpec, fit: ClassFit, cudnn_tf32: bool = True) -> dict[str, float]:
    """The estimate's tensor-governed seconds (forward and backward) per peak key."""
    out: dict[str, float] = {}
    for layer in workload.layers:
        for backward in (False, True):
            cls, governor, work = layer_seconds(layer, gpu, workload.precision, fit, backward, cudnn_tf32,
                                                workload.channels_last)
            if governor == "tensor":
                _add(out, compute_path(gpu, workload.precision, cls, cudnn_tf32)[0], work)
    return out


@dataclass(frozen=True)
class Transfer:
    """How a measured pass scales from one GPU kind to another: target / source seconds per pass, the
    governors' shares of each pass on the source, and the ratio applied per governor."""

    source: str
    target: str
    forward: float
    backward: float
    optimizer: float
    shares: dict[str, dict[str, float]]  # pass -> governor -> share of the estimated pass on the source
    ratios: dict[str, float]             # governor -> target seconds per source second

    def describe(self) -> str:
        ratios = ", ".join(f"{g} x{self.ratios[g]:.3f}" for g in GOVERNORS)
        shares = "; ".join(f"{p} " + " / ".join(f"{self.shares[p][g] * 100:.0f}%" for g in GOVERNORS)
                           for p in ("forward", "backward", "optimizer"))
        return (f"measured on {self.source}, carried to {self.target} per kind of kernel: {ratios} "
                f"(tensor throughput at the precision, memory bandwidth, launch rate, catalog figures); shares "
                f"tensor / memory / launch on {self.source}: {shares}; forward x{self.forward:.3f}, backward "
                f"x{self.backward:.3f}, optimizer x{self.optimizer:.3f}")


def transfer_factors(estimate: Workload, optimizer: ClassTimes | None, source: GPUSpec, target: GPUSpec,
                     fit: ClassFit, cudnn_tf32: bool = True) -> Transfer:
    """Per pass, sum over governors of (share on the source) x (governor ratio); ``estimate`` is the same
    model's FLOPs, bytes and kernels (zoo or importer), ``optimizer`` its optimizer pass on ``source``."""
    ratios = governor_ratios(source, target, estimate.precision,
                             tensor_seconds_by_peak(estimate, source, fit, cudnn_tf32))
    passes = {"forward": pass_times(estimate, source, fit, False, cudnn_tf32),
              "backward": pass_times(estimate, source, fit, True, cudnn_tf32)}
    if optimizer is not None:
        passes["optimizer"] = optimizer
    shares: dict[str, dict[str, float]] = {}
    factors: dict[str, float] = {}
    for name in ("forward", "backward", "optimizer"):
        times = passes.get(name)
        total = times.total_s if times is not None else 0.0
        if times is None or total <= 0:
            # nothing estimated (no optimizer): memory-bound, as an optimizer step is
            shares[name] = {"tensor": 0.0, "memory": 1.0, "launch": 0.0}
        else:
            shares[name] = {g: times.by_governor[g] / total for g in GOVERNORS}
        factors[name] = sum(shares[name][g] * ratios[g] for g in GOVERNORS)
    assert all(math.isfinite(v) and v > 0 for v in factors.values())
    return Transfer(source.name, target.name, factors["forward"], factors["backward"], factors["optimizer"],
                    shares, ratios)
