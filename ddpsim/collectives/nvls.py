"""Whether NCCL runs NVLink SHARP (NVLS) on a cluster, and at what efficiency.

NCCL enables NVLS by default (``NCCL_NVLS_ENABLE`` 2: wherever supported) when the node's GPUs hang
off NVSwitches that reduce in the switch (NVLink 4 and later: H100/H200 SXM, B200) and its topology
search finds at least two NVLS channels; across nodes without CollNet (SHARP on InfiniBand) it runs
the NVLS tree. Its cost model rates the switch's bandwidth by ``nvlsEfficiency`` per GPU generation
(Hopper 0.85, Blackwell 0.74: the catalog's ``GPUSpec.nvls_efficiency``). Read from NVIDIA/nccl
``src/graph/search.cc``, ``src/graph/tuning.cc`` (2.19-2.28) and ``src/tuning/nvls.cc`` (2.29);
written from those facts, not copied. The scenario's ``cluster.intra_node.nvls`` says whether it is
on (see ``docs/nvls.md``).
"""

from __future__ import annotations

from typing import NamedTuple

from ddpsim.errors import ScenarioError
from ddpsim.hardware.catalog import get_gpu
from ddpsim.scenario.schema import ClusterSpec

FIELD = "cluster.intra_node.nvls"


class NvlsSpec(NamedTuple):
    """NVLink SHARP of a node as NCCL's model rates it (catalog values of the GPU).

    efficiency: ``nvlsEfficiency``, on the switch's share of the NVLink rate.
    tree_channel_Bps: ceiling of one NVLS tree channel's bus bandwidth, (2 nodes, 3 or more); () none.
    """

    efficiency: float
    tree_channel_Bps: tuple[float, ...] = ()


def nvls_of(cluster: ClusterSpec) -> NvlsSpec | None:
    """NCCL's NVLS figures for this cluster's GPUs where NVLS runs, else None.

    ``nvls`` auto: on where the hardware has it; on: the same, but a ScenarioError where it does not
    (the user said their cluster runs it); off: never (NCCL_NVLS_ENABLE=0).
    """
    mode = cluster.intra_node.nvls
    if mode == "off":
        return None
    # a single node group names its own GPU kind, which may not be cluster.gpu
    gpu = get_gpu(cluster.rank_gpus[0] if cluster.node_groups else cluster.gpu)
    lacks = ""
    if cluster.topology is not None:
        lacks = "a custom topology does not say where its NVSwitches are"
    elif cluster.node_groups is not None and len(cluster.node_groups) > 1:
        lacks = "its node_groups differ, and ddpsim models NVLS on alike nodes only"
    elif cluster.intra_node.type != "nvswitch":
        lacks = f"intra_node.type is {cluster.intra_node.type}, and NVLS reduces in an NVSwitch"
    elif gpu.nvls_efficiency <= 0:
        lacks = f"{gpu.name} has no NVLink SHARP (H100/H200 SXM and B200 have it)"
    elif cluster.gpus_per_node < 2:
        lacks = "a node of one GPU has nothing to reduce in its switch"
    if not lacks:
        return NvlsSpec(gpu.nvls_efficiency, gpu.nvls_tree_channel_Bps)
    if mode == "on":
        raise ScenarioError(f"nvls is on, but {lacks}", field=FIELD)
    return None
