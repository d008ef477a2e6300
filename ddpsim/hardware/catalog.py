"""GPU catalog: datasheet peak numbers (dense, no structured sparsity) and model defaults.

Peaks are per GPU, in FLOP/s, keyed by precision: "fp32" (CUDA cores, what PyTorch uses for fp32
matmuls unless ``allow_tf32``), "tf32", "bf16", "fp16" (tensor cores). Memory in bytes, bandwidth in
bytes/s, both decimal as on datasheets (80 GB HBM is in fact 80 GiB on A100/H100: we use the GiB
figure there because that is what ``torch.cuda.mem_get_info`` reports).

``default_compute_efficiency`` is the fraction of peak that eager PyTorch training matmuls reach
(typically 40-65 %); ``memory_efficiency`` the fraction of bandwidth elementwise kernels reach;
``kernel_launch_s`` the fixed per-kernel GPU cost (launch, tail, and sync gaps), which dominates
small-batch models. All three are defaults a calibration replaces.

``nvls_efficiency``: NVLink SHARP (NVLS, the NVSwitch reducing in the switch) as NCCL's cost model
rates it per GPU generation (NVIDIA/nccl ``nvlsEfficiency``, read at NCCL 2.23-2.29: Volta and Ampere
0, Hopper 0.85, Blackwell 0.74); 0 for a GPU without it (no NVLink 4 NVSwitch: V100, A100, H100 PCIe).
``nvls_tree_channel_Bps``: NCCL's ceiling on one NVLS tree channel's bus bandwidth (``perChMaxNVLSTreeBws``,
2 nodes and 3 or more: Hopper 57.7 and 45.5 GB/s, Blackwell 96 and 80 GB/s as read at NCCL 2.27-2.29).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from ddpsim.errors import ScenarioError

GIB = 1024**3


@dataclass(frozen=True)
class GPUSpec:
    """One GPU model; see the module docstring for units and sources."""

    name: str
    peak_flops_per_s: dict[str, float]
    memory_bandwidth_Bps: float
    memory_bytes: float
    default_compute_efficiency: float
    kernel_launch_s: float
    sm_count: int
    memory_efficiency: float = 0.8
    nvls_efficiency: float = 0.0
    nvls_tree_channel_Bps: tuple[float, ...] = ()
    aliases: tuple[str, ...] = field(default=(), compare=False)
    # NVLink (or Infinity Fabric) bandwidth per GPU per direction, datasheet total / 2; 0: none
    nvlink_Bps: float = 0.0
    # where the figures come from (datasheet and version), for the `from:` rows
    datasheet: str = field(default="", compare=False)
    # substrings of torch.cuda.get_device_name() that name this GPU (a profile's fingerprint)
    device_names: tuple[str, ...] = field(default=(), compare=False)
    # the keys of ``peak_flops_per_s`` that tensor (matrix) cores run; the others are CUDA-core rates
    # (V100 has fp16 tensor cores only: its "tf32" and "bf16" are its fp32 CUDA-core rate)
    tensor_keys: tuple[str, ...] = ("tf32", "bf16", "fp16")

    def __hash__(self) -> int:
        # The peak dict makes the generated hash fail; a GPU is identified by its name (sweep caches).
        return hash(self.name)

    def peak_for(self, precision: str) -> float:
        """Peak FLOP/s for a workload precision: fp32 -> "fp32" (PyTorch's default keeps fp32
        matmuls off TF32), bf16-amp -> "bf16", fp16-amp -> "fp16"."""
        key = {"fp32": "fp32", "bf16-amp": "bf16", "fp16-amp": "fp16"}.get(precision, precision)
        if key not in self.peak_flops_per_s:
            raise ScenarioError(f"{self.name} has no peak for precision {precision!r}", field="workload.precision")
        return self.peak_flops_per_s[key]


def _tf(x: float) -> float:
    return x * 1e12


GPUS: dict[str, GPUSpec] = {
    # NVIDIA Tesla V100 SXM2 32GB datasheet: FP32 15.7 TF, tensor (FP16) 125 TF, HBM2 900 GB/s, 80 SMs.
    # No bf16 or tf32 tensor cores: PyTorch runs bf16 autocast at roughly the fp32 rate.
    "V100": GPUSpec(
        "V100",
        {"fp32": _tf(15.7), "tf32": _tf(15.7), "bf16": _tf(15.7), "fp16": _tf(125)},
        memory_bandwidth_Bps=900e9,
        memory_bytes=32 * GIB,
        default_compute_efficiency=0.6,
        kernel_launch_s=5e-6,
        sm_count=80,
        aliases=("V100-SXM2", "V100-SXM2-32GB", "V100-32GB", "Tesla-V100"),
        nvlink_Bps=150e9,
        datasheet="NVIDIA Tesla V100 datasheet (SXM2, 2020): FP32 15.7 TF, FP16 tensor 125 TF, 900 GB/s, "
                  "NVLink 300 GB/s",
        device_names=("V100-SXM2-32GB", "V100-32GB"),
        tensor_keys=("fp16",),
    ),
    # NVIDIA Tesla V100 SXM2 16GB: the same datasheet, 16 GB HBM2.
    "V100-16GB": GPUSpec(
        "V100-16GB",
        {"fp32": _tf(15.7), "tf32": _tf(15.7), "bf16": _tf(15.7), "fp16": _tf(125)},
        memory_bandwidth_Bps=900e9,
        memory_bytes=16 * GIB,
        default_compute_efficiency=0.6,
        kernel_launch_s=5e-6,
        sm_count=80,
        aliases=("V100-SXM2-16GB",),
        nvlink_Bps=150e9,
        datasheet="NVIDIA Tesla V100 datasheet (SXM2 16GB): FP32 15.7 TF, FP16 tensor 125 TF, 900 GB/s",
        device_names=("V100-SXM2-16GB", "V100-16GB", "V100"),
        tensor_keys=("fp16",),
    ),
    # NVIDIA A100 datasheet (SXM4 80GB): FP32 19.5 TF, TF32 156 TF, BF16/FP16 312 TF (dense),
    # HBM2e 2,039 GB/s, 108 SMs.
    "A100": GPUSpec(
        "A100",
        {"fp32": _tf(19.5), "tf32": _tf(156), "bf16": _tf(312), "fp16": _tf(312)},
        memory_bandwidth_Bps=2039e9,
        memory_bytes=80 * GIB,
        default_compute_efficiency=0.55,
        kernel_launch_s=4e-6,
        sm_count=108,
        aliases=("A100-SXM", "A100-80GB", "A100-SXM4-80GB", "A100-SXM-80GB"),
        nvlink_Bps=300e9,
        datasheet="NVIDIA A100 Tensor Core GPU datasheet (SXM 80GB): FP32 19.5 TF, TF32 156 TF, BF16 312 TF "
                  "dense, HBM2e 2,039 GB/s, NVLink 600 GB/s",
        device_names=("A100-SXM4-80GB", "A100 80GB", "A100-80GB"),
    ),
    # NVIDIA A100 40GB (SXM4): same compute, HBM2 1,555 GB/s.
    "A100-40GB": GPUSpec(
        "A100-40GB",
        {"fp32": _tf(19.5), "tf32": _tf(156), "bf16": _tf(312), "fp16": _tf(312)},
        memory_bandwidth_Bps=1555e9,
        memory_bytes=40 * GIB,
        default_compute_efficiency=0.55,
        kernel_launch_s=4e-6,
        sm_count=108,
        aliases=("A100-SXM4-40GB",),
        nvlink_Bps=300e9,
        datasheet="NVIDIA A100 Tensor Core GPU datasheet (SXM 40GB): HBM2 1,555 GB/s, NVLink 600 GB/s",
        device_names=("A100-SXM4-40GB", "A100-PCIE-40GB", "A100 40GB", "A100"),
    ),
    # NVIDIA H100 datasheet (SXM5 80GB): FP32 67 TF, TF32 494.7 TF, BF16/FP16 989.4 TF (dense; the
    # datasheet's 1,979 is with sparsity), HBM3 3.35 TB/s, 132 SMs.
    "H100": GPUSpec(
        "H100",
        {"fp32": _tf(67), "tf32": _tf(494.7), "bf16": _tf(989.4), "fp16": _tf(989.4)},
        memory_bandwidth_Bps=3.35e12,
        memory_bytes=80 * GIB,
        default_compute_efficiency=0.5,
        kernel_launch_s=4e-6,
        sm_count=132,
        nvls_efficiency=0.85,
        nvls_tree_channel_Bps=(57.7e9, 45.5e9),
        aliases=("H100-SXM", "H100-SXM5", "H100-80GB", "H100-SXM5-80GB"),
        nvlink_Bps=450e9,
        datasheet="NVIDIA H100 Tensor Core GPU datasheet (SXM): FP32 67 TF, TF32 989 TF and BF16 1,979 TF with "
                  "sparsity (half dense), HBM3 3.35 TB/s, NVLink 900 GB/s",
        device_names=("H100 80GB HBM3", "H100 SXM"),
    ),
    # NVIDIA H100 PCIe 80GB: FP32 51 TF, TF32 378 TF, BF16 756 TF dense, HBM2e 2.0 TB/s, 114 SMs.
    "H100-PCIe": GPUSpec(
        "H100-PCIe",
        {"fp32": _tf(51), "tf32": _tf(378), "bf16": _tf(756), "fp16": _tf(756)},
        memory_bandwidth_Bps=2.0e12,
        memory_bytes=80 * GIB,
        default_compute_efficiency=0.5,
        kernel_launch_s=4e-6,
        sm_count=114,
        nvlink_Bps=300e9,
        datasheet="NVIDIA H100 Tensor Core GPU datasheet (PCIe 80GB, 2022): FP32 51 TF, TF32 756 TF and BF16 "
                  "1,513 TF with sparsity, HBM2e 2.0 TB/s, NVLink bridge 600 GB/s",
        device_names=("H100 PCIe",),
    ),
    # NVIDIA H100 NVL (PCIe card, 94 GB): FP32 60 TF, TF32 835 TF and BF16 1,671 TF with sparsity
    # (dense: half), HBM3 3.9 TB/s, NVLink bridge 600 GB/s.
    "H100-NVL": GPUSpec(
        "H100-NVL",
        {"fp32": _tf(60), "tf32": _tf(417.5), "bf16": _tf(835.5), "fp16": _tf(835.5)},
        memory_bandwidth_Bps=3.9e12,
        memory_bytes=94e9,
        default_compute_efficiency=0.5,
        kernel_launch_s=4e-6,
        sm_count=132,
        nvlink_Bps=300e9,
        datasheet="NVIDIA H100 Tensor Core GPU datasheet (H100 NVL): FP32 60 TF, TF32 835 TF and BF16 1,671 TF "
                  "with sparsity, 94 GB HBM3 at 3.9 TB/s, NVLink 600 GB/s",
        device_names=("H100 NVL",),
    ),
    # NVIDIA H200 datasheet (SXM): same GH100 compute as H100 SXM, HBM3e 141 GB at 4.8 TB/s.
    "H200": GPUSpec(
        "H200",
        {"fp32": _tf(67), "tf32": _tf(494.7), "bf16": _tf(989.4), "fp16": _tf(989.4)},
        memory_bandwidth_Bps=4.8e12,
        memory_bytes=141e9,
        default_compute_efficiency=0.5,
        kernel_launch_s=4e-6,
        sm_count=132,
        nvls_efficiency=0.85,
        nvls_tree_channel_Bps=(57.7e9, 45.5e9),
        aliases=("H200-SXM", "H200-141GB"),
        nvlink_Bps=450e9,
        datasheet="NVIDIA H200 Tensor Core GPU datasheet (SXM): FP32 67 TF, TF32 989 TF and BF16 1,979 TF with "
                  "sparsity, 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s",
        device_names=("H200",),
    ),
    # NVIDIA HGX B200 datasheet, per GPU (the 8-GPU figures / 8, sparsity removed): FP32 75 TF,
    # TF32 1.1 PF, BF16/FP16 2.25 PF dense, HBM3e 180 GB at 8 TB/s; 148 SMs.
    "B200": GPUSpec(
        "B200",
        {"fp32": _tf(75), "tf32": _tf(1100), "bf16": _tf(2250), "fp16": _tf(2250)},
        memory_bandwidth_Bps=8.0e12,
        memory_bytes=180e9,
        default_compute_efficiency=0.45,
        kernel_launch_s=4e-6,
        sm_count=148,
        nvls_efficiency=0.74,
        nvls_tree_channel_Bps=(96e9, 80e9),
        aliases=("B200-SXM", "HGX-B200"),
        nvlink_Bps=900e9,
        datasheet="NVIDIA HGX B200 datasheet (8 GPUs, per GPU): FP32 75 TF, TF32 2.2 PF and BF16 4.5 PF with "
                  "sparsity, 180 GB HBM3e at 8 TB/s, NVLink 5 1.8 TB/s",
        device_names=("B200",),
    ),
    # NVIDIA GB200 NVL72 datasheet, per Blackwell GPU (the rack's figures / 72, sparsity removed): FP32
    # 5,760 / 72 = 80 TF; BF16 360 PF sparse / 72 = 5 PF sparse, 2.5 PF dense; TF32 180 PF sparse / 72 =
    # 1.25 PF dense; 13.4 TB HBM3e / 72 = 186 GB at 576 / 72 = 8 TB/s; NVLink 5 1.8 TB/s.
    "GB200": GPUSpec(
        "GB200",
        {"fp32": _tf(80), "tf32": _tf(1250), "bf16": _tf(2500), "fp16": _tf(2500)},
        memory_bandwidth_Bps=8.0e12,
        memory_bytes=186e9,
        default_compute_efficiency=0.45,
        kernel_launch_s=4e-6,
        sm_count=148,
        nvls_efficiency=0.74,
        nvls_tree_channel_Bps=(96e9, 80e9),
        aliases=("GB200-NVL72", "GB200-NVL"),
        nvlink_Bps=900e9,
        datasheet="NVIDIA GB200 NVL72 datasheet (72 GPUs): FP32 5,760 TF, TF32 180 PF and BF16 360 PF with "
                  "sparsity, up to 13.4 TB HBM3e at 576 TB/s, NVLink 130 TB/s",
        device_names=("GB200",),
    ),
    # AMD Instinct MI300X datasheet: FP32 matrix 163.4 TF, TF32 653.7 TF, BF16/FP16 1,307.4 TF dense
    # (2,614.9 with sparsity), 192 GB HBM3 at 5.3 TB/s, 304 CUs, Infinity Fabric 7 x 128 GB/s.
    # PyTorch runs it through ROCm; RCCL's NVLS has no equivalent (nvls_efficiency 0).
    "MI300X": GPUSpec(
        "MI300X",
        {"fp32": _tf(163.4), "tf32": _tf(653.7), "bf16": _tf(1307.4), "fp16": _tf(1307.4)},
        memory_bandwidth_Bps=5.3e12,
        memory_bytes=192e9,
        default_compute_efficiency=0.4,
        kernel_launch_s=6e-6,
        sm_count=304,
        aliases=("AMD-MI300X", "Instinct-MI300X"),
        nvlink_Bps=448e9,
        datasheet="AMD Instinct MI300X accelerator datasheet: FP32 matrix 163.4 TF, TF32 653.7 TF, BF16 1,307.4 "
                  "TF dense, 192 GB HBM3 at 5.3 TB/s, Infinity Fabric 896 GB/s",
        device_names=("MI300X",),
    ),
}


def _key(name: str) -> str:
    """Spelling-insensitive key: "h100_sxm", "H100 SXM" and "H100-SXM" are the same GPU."""
    return re.sub(r"[\s_\-]+", "", name.strip().lower())


_INDEX: dict[str, str] = {}
for _canonical, _spec in GPUS.items():
    for _alias in (_canonical, *_spec.aliases):
        _INDEX[_key(_alias)] = _canonical


# GPUs that scenarios describe themselves (ddpsim/hardware/custom_gpu.py), by name, in this process
_CUSTOM: dict[str, GPUSpec] = {}


def register_custom_gpu(spec: GPUSpec) -> None:
    """Make a scenario's own GPU known by its name; a name of the catalog is refused (ValueError)."""
    if _key(spec.name) in _INDEX:
        raise ValueError(f"{spec.name!r} is a GPU of the catalog; give your own GPU another name")
    _CUSTOM[_key(spec.name)] = spec


def gpu_from_device_name(device_name: str) -> str | None:
    """The catalog name of a CUDA device name as a profile's fingerprint records it (``NVIDIA H100 80GB
    HBM3`` -> ``H100``); None where no entry claims it. The longest matching substring wins, so that
    ``H100 PCIe`` is not read as an H100 SXM."""
    text = device_name.strip()
    best: tuple[int, str] | None = None
    for name, spec in GPUS.items():
        for needle in spec.device_names:
            if needle.lower() in text.lower() and (best is None or len(needle) > best[0]):
                best = (len(needle), name)
    return best[1] if best else None


def gpu_names() -> list[str]:
    """Canonical catalog names."""
    return list(GPUS)


def get_gpu(name: str) -> GPUSpec:
    """The catalog entry for ``name`` (case and separators ignored, aliases accepted); unknown names
    raise ScenarioError for field ``cluster.gpu`` suggesting the nearest entry."""
    canonical = _INDEX.get(_key(name))
    if canonical is not None:
        return GPUS[canonical]
    if _key(name) in _CUSTOM:
        return _CUSTOM[_key(name)]
    spellings = list(GPUS) + [a for s in GPUS.values() for a in s.aliases]
    near = difflib.get_close_matches(name, spellings, n=1, cutoff=0.4)
    if not near:
        near = difflib.get_close_matches(name.upper(), spellings, n=1, cutoff=0.4)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise ScenarioError(f"unknown GPU {name!r}{hint} Known: {', '.join(GPUS)}", field="cluster.gpu")
