"""How much slower compute runs while a sharded step's collective is in flight, by the link its kernels drive.

Measured, not fitted: the harness's overlap bench (``ddpsim measure --overlap-bench``) times a model's own
backward alone and beside back-to-back 25 MiB all-reduces on 2 and 4 H100 (``compute_slowdown_ratio`` in
``validation/data/h100x4-overlap-2026-11-27*/overlap.jsonl``, five models): median 1.374 over NVLink (16 runs,
1.21 to 1.70), 1.282 over shared memory (6 runs, 1.13 to 1.38), 1.024 over sockets (10 runs, 1.02 to 1.10).
Physically: over NVLink and shared memory NCCL's kernels move the data themselves, one thread block per
channel on its own SM, loading and storing through NVLink or host memory, so they take SMs and HBM bandwidth
from the compute kernels beside them; over sockets a host proxy thread moves the data and the kernels mostly
wait. A sharded step has a collective in flight for most of its compute, the bench's condition, which is why
the bench's ratio is the term here; DDP's ``overheads.compute_slowdown`` (2.0, fitted on 4 x H200 DDP steps
with a standard error of 1.0) stays DDP's. Measured on H100 only: another GPU kind gets the H100 figure, and
the row that reports it says so. A multi-node shard group's rings still cross NVLink inside each node: the
NVLink figure. PCIe peer-to-peer copies are SM-driven like shared memory's: the shared-memory figure.
"""

from __future__ import annotations

MEASURED_ON = "2 and 4 x H100, validation/data/h100x4-overlap-2026-11-27 and -27b (overlap bench)"
COMPUTE_SLOWDOWN_BY_LINK = {"nvlink": 1.374, "shm": 1.282, "pcie": 1.282, "socket": 1.024}


def sharded_compute_slowdown(link_class: str) -> float:
    """The measured slowdown of compute beside a collective over ``link_class`` (an intra-node class)."""
    return COMPUTE_SLOWDOWN_BY_LINK.get(link_class, COMPUTE_SLOWDOWN_BY_LINK["nvlink"])
