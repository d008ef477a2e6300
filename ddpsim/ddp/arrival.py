"""The wait of a bucket's all-reduce, launched during backward, for the last rank's NCCL kernel.

Why a small bucket costs more than its wire time and NCCL's latency on more GPUs (issue #42 item 3):
DDP launches a bucket's all-reduce from the backward thread as soon as its last gradient is copied in.
The NCCL stream waits on an event recorded on the compute stream, so the NCCL kernel becomes eligible
exactly when the bucket's last copy-in ends, at the moment the next backward kernel becomes eligible
too. That kernel fills the SMs; the NCCL kernel (one CTA per channel, all of which must be resident for
the ring to move) gets its SMs only as the running compute kernel drains: after a wait between 0 and
the compute kernel's duration ``K`` (``ddp-nccl-facts.md`` section 6: small all-reduces launched during a
convolution backward completed milliseconds after launch instead of tens of microseconds). An
all-reduce cannot start before the NCCL kernels of all n ranks are resident; the ranks that got their
SMs first hold them, spinning, until the last one arrives.

With each rank's wait independent and uniform on [0, K], the last of n arrives after K n / (n + 1) on
average and a rank's own wait is K / 2, so a rank's NCCL kernel holds its SMs, before any byte moves, for

    E[max] - E[own] = K (n - 1) / (2 (n + 1))          (order statistics of the uniform distribution)

on average: 0 at n = 1, K/6 at 2, 3K/10 at 4, 7K/18 at 8, 15K/34 at 16, K/2 as n grows. While it holds
them the compute stream runs slower (``overheads.compute_slowdown``, the existing in-flight term), which
is how the cost reaches the step. A bucket launched after backward's last kernel waits for no compute
kernel and pays nothing here. One queued behind the previous bucket's all-reduce on DDP's one NCCL stream
becomes eligible when that kernel ends, while the compute kernel's remaining CTAs wait for the SMs it frees:
it waits the same way (tried the other way, a wait on an idle stream only: the uncalibrated held-out
campaigns A to D gave 6.5 / 9.0 / 7.2 / 5.8% mean error against 6.4 / 8.7 / 7.1 / 5.8% for this one; the
choice rests on the scheduler argument, both are in the report of the change).

``K`` is the mean backward kernel: the backward's time over its kernels, counted as the compute model
counts them (``ddpsim.hardware.compute``: two backward kernels per forward kernel of each layer, input and
weight gradient). A workload without layers (a measured profile alone) takes its autograd nodes (the
torch importer's or the profile's count; each node's backward runs about one kernel: ResNet-50 has 337
nodes for 161 parameter tensors, ``validation/data/option-cost-h100-2026-11-26``), else
``ddpsim.ddp.options.NODES_PER_PARAM_TENSOR`` per parameter tensor. No constant here is fitted: the
formula is the uniform distribution's order statistics, K comes from the compute model and its kernel count.
"""

from __future__ import annotations

from ddpsim.ddp.options import NODES_PER_PARAM_TENSOR


def expected_arrival_wait_s(kernel_s: float, world_size: int) -> float:
    """Mean time a rank's NCCL kernel holds its SMs waiting for the last of ``world_size`` ranks, when each
    rank's kernel starts after a uniform wait on [0, ``kernel_s``]: K (n - 1) / (2 (n + 1))."""
    if kernel_s < 0:
        raise ValueError(f"kernel_s must be >= 0, got {kernel_s}")
    if world_size <= 1:
        return 0.0
    return kernel_s * (world_size - 1) / (2 * (world_size + 1))


def mean_backward_kernel_s(backward_s: float, backward_kernels: int, autograd_nodes: int | None,
                           n_param_tensors: int) -> float:
    """Backward time per backward kernel: the compute model's kernel count where it has one (> 0), else the
    workload's autograd nodes, else the harness models' median nodes per parameter tensor."""
    if backward_kernels > 0:
        return backward_s / backward_kernels
    nodes = autograd_nodes if autograd_nodes else NODES_PER_PARAM_TENSOR * max(1, n_param_tensors)
    return backward_s / nodes
