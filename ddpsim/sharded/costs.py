"""Per-layer compute seconds and the sharded optimizer step, from the compute model already in place."""

from __future__ import annotations

import math
from dataclasses import replace

from ddpsim.hardware.catalog import GPUSpec
from ddpsim.hardware.compute import StepCompute, optimizer_s, roofline_s
from ddpsim.workload.model import Workload


def layer_seconds(workload: Workload, gpu: GPUSpec, compute: StepCompute,
                  efficiency: float | None) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Forward and backward seconds per layer (indexed like ``workload.layers``).

    The roofline of each layer, as ``step_compute`` prices it, scaled so the layers add up to the step's
    forward and backward (a measured profile times only the whole forward, so its time is spread over
    the layers in proportion to their estimates).
    """
    forward = [roofline_s(layer.forward_flops, layer.forward_bytes, layer.kernels, gpu, workload.precision,
                          efficiency, layer.kind) for layer in workload.layers]
    backward = [roofline_s(layer.backward_flops, layer.backward_bytes, 2 * layer.kernels, gpu, workload.precision,
                           efficiency, layer.kind) for layer in workload.layers]

    def scaled(values: list[float], total_s: float) -> tuple[float, ...]:
        estimate = sum(values)
        if estimate <= 0:
            return tuple(total_s / len(values) for _ in values) if values else ()
        return tuple(v * total_s / estimate for v in values)

    return scaled(forward, compute.forward_s), scaled(backward, compute.backward_s)


def sharded_optimizer_s(workload: Workload, gpu: GPUSpec, full_step_s: float, n_shards: int) -> float:
    """The optimizer on 1/n of every parameter (FSDP2 shards each on dim 0; ZeroRedundancyOptimizer gives
    each rank whole parameters adding up to about 1/n). Memory-bound passes shrink n-fold, the multi-tensor
    kernel launches do not: the model's estimate on the shards over its estimate on the whole, applied to
    the step's optimizer time (measured, where a profile gave it)."""
    if n_shards <= 1:
        return full_step_s
    whole = optimizer_s(workload, gpu)
    shards = replace(workload, layers=tuple(
        replace(layer, params=tuple(replace(p, numel=math.ceil(p.numel / n_shards)) for p in layer.params))
        for layer in workload.layers))
    return full_step_s * optimizer_s(shards, gpu) / whole if whole > 0 else 0.0
