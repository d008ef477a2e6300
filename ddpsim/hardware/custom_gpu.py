"""A GPU the scenario describes itself (``cluster.gpu`` as a mapping) instead of naming a catalog entry.

    cluster:
      gpu: {name: H100-96GB-500W, peak_tflops: {bf16: 989, fp32: 67}, memory_bandwidth: 2.4TB/s,
            memory: 96GB, nvlink_bandwidth: 450GB/s}

``peak_tflops`` are dense (no sparsity) per precision: ``fp32`` and ``bf16`` required, ``tf32`` defaults to
half of ``bf16`` (as on every NVIDIA datasheet since Ampere), ``fp16`` to ``bf16``. ``memory`` is the size
the GPU reports, ``nvlink_bandwidth`` per direction (the datasheet's total / 2; it becomes the default of
``cluster.intra_node.bandwidth``). Optional: ``sm_count`` (default 132), ``kernel_launch`` (default 4us).
The efficiencies are the per-kernel-class fit's, as for any catalog GPU.
"""

from __future__ import annotations

import math
from typing import Any

from ddpsim.errors import ScenarioError
from ddpsim.hardware.catalog import GPUSpec, register_custom_gpu
from ddpsim.units import parse_bandwidth_Bps, parse_size_bytes, parse_time_s

_KEYS = ("name", "peak_tflops", "memory_bandwidth", "memory", "nvlink_bandwidth", "sm_count", "kernel_launch")
_PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


def custom_gpu(data: dict[str, Any], file: str | None, field: str) -> GPUSpec:
    """The GPUSpec of a ``cluster.gpu`` mapping, registered under its name so that every part of the
    simulator finds it as it finds a catalog GPU; a bad value raises ScenarioError naming its field."""

    def error(key: str, message: str) -> ScenarioError:
        return ScenarioError(message, file=file, field=f"{field}.{key}")

    unknown = [k for k in data if k not in _KEYS]
    if unknown:
        raise error(str(unknown[0]), f"unknown field; a GPU of your own has {', '.join(_KEYS)}")
    for key in ("name", "peak_tflops", "memory_bandwidth", "memory"):
        if data.get(key) is None:
            raise error(key, "missing required field of a GPU of your own")
    name = data["name"]
    if not isinstance(name, str) or not name.strip():
        raise error("name", f"expected the GPU's name as text, got {name!r}")
    peaks_raw = data["peak_tflops"]
    if not isinstance(peaks_raw, dict):
        raise error("peak_tflops", "expected a mapping of precision to dense TFLOP/s, e.g. {bf16: 989, fp32: 67}")
    peaks: dict[str, float] = {}
    for key, value in peaks_raw.items():
        if key not in _PRECISIONS:
            raise error(f"peak_tflops.{key}", f"expected one of {', '.join(_PRECISIONS)}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
            raise error(f"peak_tflops.{key}", f"expected a positive number of TFLOP/s, got {value!r}")
        peaks[key] = float(value) * 1e12
    for key in ("fp32", "bf16"):
        if key not in peaks:
            raise error(f"peak_tflops.{key}", "missing: a GPU of your own needs its fp32 and bf16 peaks")
    peaks.setdefault("tf32", peaks["bf16"] / 2)
    peaks.setdefault("fp16", peaks["bf16"])

    def quantity(key: str, parse: Any, default: float | None = None) -> float:
        if data.get(key) is None:
            assert default is not None
            return default
        try:
            value = float(parse(data[key]))
        except (ValueError, TypeError) as err:
            raise error(key, str(err)) from None
        if value <= 0 or not math.isfinite(value):
            hint = " (leave the field out for a GPU without NVLink)" if key == "nvlink_bandwidth" else ""
            raise error(key, f"expected a positive finite value, got {data[key]!r}{hint}")
        return value

    sms = data.get("sm_count", 132)
    if isinstance(sms, bool) or not isinstance(sms, int) or sms < 1:
        raise error("sm_count", f"expected a positive integer, got {sms!r}")
    spec = GPUSpec(
        name.strip(),
        peaks,
        memory_bandwidth_Bps=quantity("memory_bandwidth", parse_bandwidth_Bps),
        memory_bytes=quantity("memory", parse_size_bytes),
        default_compute_efficiency=0.5,
        kernel_launch_s=quantity("kernel_launch", parse_time_s, 4e-6),
        sm_count=sms,
        # 0 is refused (not read as "unset", which would leave the intra-node link at its default); a GPU
        # without NVLink leaves the field out
        nvlink_Bps=quantity("nvlink_bandwidth", parse_bandwidth_Bps, 0.0),
        datasheet=f"described by the scenario ({field})",
    )
    try:
        register_custom_gpu(spec)
    except ValueError as err:
        raise error("name", str(err)) from None
    return spec
