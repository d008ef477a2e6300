"""A measured profile used on another GPU kind: said, and carried per kind of kernel.

A profile's fingerprint names the GPU it was measured on. Where the scenario's GPU is another kind,
the measured forward, backward (with every gradient's ready time) and optimizer seconds are scaled
by ``kernel_classes.transfer_factors``: the same model's estimate split by governor (tensor
throughput, memory bandwidth, launches) on the measured GPU, each share times its catalog ratio.
Where no estimate of the model can be built, the times stay as measured and the row says so.
"""

from __future__ import annotations

from dataclasses import replace

from ddpsim.hardware.catalog import GPUSpec, get_gpu, gpu_from_device_name
from ddpsim.hardware.compute import optimizer_work, resolve_optimizer
from ddpsim.hardware.kernel_classes import load_class_fit, optimizer_times, transfer_factors
from ddpsim.workload.model import Workload
from ddpsim.workload.resolve import class_estimate


def measured_gpu(workload: Workload) -> str | None:
    """The catalog kind the profile was measured on; None where it does not say or the catalog lacks it."""
    if workload.measured is None or not workload.measured.gpu_device:
        return None
    return gpu_from_device_name(workload.measured.gpu_device)


def carry_profile(workload: Workload, gpu: GPUSpec, optimizer: str = "auto") -> tuple[Workload, str | None]:
    """(the workload to simulate on ``gpu``, the ``from: compute`` row when the profile's GPU is another
    kind or unknown; None when it is the same kind or there is no profile)."""
    measured = workload.measured
    if measured is None or not measured.gpu_device:
        return workload, None
    source_name = gpu_from_device_name(measured.gpu_device)
    where = f"profile {measured.source}"
    if source_name is None:
        return workload, (f"{where} (measured on {measured.gpu_device}, a GPU the catalog does not name: its times "
                          f"are used as they are for {gpu.name}, not carried)")
    if source_name == gpu.name:
        return workload, None
    source = get_gpu(source_name)
    estimate, how = class_estimate(workload)
    if estimate is None:
        return workload, (f"{where} measured on {source.name}, used for {gpu.name} AS MEASURED, not carried: {how}; "
                          f"profile the model on {gpu.name} (ddpsim measure) for its own times")
    fit = load_class_fit()
    n_bytes, kernels = optimizer_work(estimate, resolve_optimizer(estimate, optimizer))
    transfer = transfer_factors(estimate, optimizer_times(n_bytes, kernels, source, fit), source, gpu, fit)
    carried = replace(
        measured,
        forward_s=measured.forward_s * transfer.forward,
        backward_s=measured.backward_s * transfer.backward,
        optimizer_s=measured.optimizer_s * transfer.optimizer,
        grad_ready_s={name: t * transfer.backward for name, t in measured.grad_ready_s.items()},
    )
    accumulate = (workload.backward_accumulate_s * transfer.backward
                  if workload.backward_accumulate_s is not None else None)
    row = f"{where}, {transfer.describe()}; split from the {how}"
    return replace(workload, measured=carried, backward_accumulate_s=accumulate), row
