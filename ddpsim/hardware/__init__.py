"""GPUs: the catalog of datasheet figures and the per-layer compute-time model."""

from ddpsim.hardware.catalog import GPUS, GPUSpec, get_gpu, gpu_names
from ddpsim.hardware.compute import StepCompute, memory_per_gpu, optimizer_s, step_compute

__all__ = ["GPUS", "GPUSpec", "StepCompute", "get_gpu", "gpu_names", "memory_per_gpu", "optimizer_s", "step_compute"]
