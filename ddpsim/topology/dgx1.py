"""The DGX-1 (V100) NVLink hybrid cube mesh, and what NCCL's rings get out of it for the first k GPUs.

A DGX-1V is not a switch: each V100 has 6 NVLink2 links of 25 GB/s per direction, wired to 4 of the other
7 GPUs, some pairs with two links (NV2) and some with one (NV1), and none to the other 3 (those go
through PCIe and the CPUs' SMP link). The link counts are ``nvidia-smi topo -m`` of a DGX-1, as printed in
the PyTorch DDP benchmark's README (pytorch/pytorch benchmarks/distributed/ddp/README.md) and NVIDIA's
DGX-1 documentation: GPU0 NV1 GPU1, NV1 GPU2, NV2 GPU3, NV2 GPU4, ...

NCCL builds its rings (one channel each) from NVLinks only: each ring leaves every GPU on one link, so the
ring bandwidth a GPU gets per direction is its NVLinks to the other GPUs of the job times the link rate,
limited by the GPU with the fewest. For the first 2, 4 and 8 GPUs (CUDA_VISIBLE_DEVICES order): 1, 4 and 6
links, 25, 100 and 150 GB/s. Measured bus bandwidth on V100 hybrid cube meshes is 0.85-0.9 of that
(vTrain's V100 all-reduce tables at 128 MiB: 22.5, 85.1, 132 GB/s at 2, 4, 8 GPUs; ../shared/external).
"""

from __future__ import annotations

NVLINK2_BPS = 25e9  # per link per direction (V100 datasheet: 300 GB/s total over 6 links, both directions)

# links between GPU i and GPU j of a DGX-1V (0: none, through PCIe and the SMP link)
DGX1_NVLINKS: tuple[tuple[int, ...], ...] = (
    (0, 1, 1, 2, 2, 0, 0, 0),
    (1, 0, 2, 1, 0, 2, 0, 0),
    (1, 2, 0, 2, 0, 0, 1, 0),
    (2, 1, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 1, 1, 2),
    (0, 2, 0, 0, 1, 0, 2, 1),
    (0, 0, 1, 0, 1, 2, 0, 2),
    (0, 0, 0, 1, 2, 1, 2, 0),
)


def ring_links(gpus: int) -> int:
    """NVLinks per GPU that NCCL's rings over the first ``gpus`` GPUs can use: the fewest any of them has to
    the others. 0 for 1 GPU."""
    if not 1 <= gpus <= len(DGX1_NVLINKS):
        raise ValueError(f"a DGX-1 has 1 to {len(DGX1_NVLINKS)} GPUs, got {gpus}")
    members = range(gpus)
    return min(sum(DGX1_NVLINKS[i][j] for j in members) for i in members)


def ring_bandwidth_Bps(gpus: int) -> float:
    """Per GPU per direction: the NVLink rate NCCL's rings over the first ``gpus`` GPUs can use."""
    return ring_links(gpus) * NVLINK2_BPS
