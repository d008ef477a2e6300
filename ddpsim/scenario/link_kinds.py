"""The one table of link kinds: a scenario's link type, NCCL's transport and the calibration class.

Three vocabularies meet here and nowhere else:
- the scenario's ``intra_node.type`` (what the hardware is: nvswitch, nvlink-ring, pcie, shm, socket);
- NCCL's transport for a hop (``P2P/NVLink``, ``P2P/PCI``, ``SHM``, ``NET``), which the protocol
  tables are keyed by: ``nvlink``, ``pci``, ``shm``, ``net``;
- the calibration's link class, which is what the harness calls the transport it forced with
  NCCL_P2P_DISABLE / NCCL_SHM_DISABLE: ``nvlink``, ``shm``, ``socket``, ``pcie``.
Between nodes every hop is NCCL's ``net`` transport; its calibration class is ``net``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LinkKind:
    intra_type: str
    nccl_transport: str
    link_class: str


LINK_KINDS: tuple[LinkKind, ...] = (
    LinkKind("nvswitch", "nvlink", "nvlink"),
    LinkKind("nvlink-ring", "nvlink", "nvlink"),
    LinkKind("pcie", "pci", "pcie"),
    LinkKind("shm", "shm", "shm"),
    LinkKind("socket", "net", "socket"),
)
NCCL_TRANSPORTS = ("nvlink", "pci", "shm", "net")
INTER_NODE_LINK_CLASS = "net"
INTRA_NODE_TYPES = tuple(kind.intra_type for kind in LINK_KINDS)
LINK_CLASSES = tuple(dict.fromkeys(kind.link_class for kind in LINK_KINDS)) + (INTER_NODE_LINK_CLASS,)


def _kind_of_type(intra_type: str) -> LinkKind:
    for kind in LINK_KINDS:
        if kind.intra_type == intra_type:
            return kind
    raise KeyError(intra_type)


def nccl_transport_of_type(intra_type: str) -> str:
    return _kind_of_type(intra_type).nccl_transport


def link_class_of_type(intra_type: str) -> str:
    return _kind_of_type(intra_type).link_class


def step_link_class(nodes: int, intra_class: str) -> str:
    """The link class a DDP step is measured and calibrated under: across nodes the network's (its
    all-reduces wait on the network), else the intra-node link's."""
    return INTER_NODE_LINK_CLASS if nodes > 1 else intra_class


def intra_type_of_class(link_class: str) -> str:
    """The scenario link type a measured link class stands for (the first listed: nvlink -> nvswitch)."""
    for kind in LINK_KINDS:
        if kind.link_class == link_class:
            return kind.intra_type
    raise KeyError(link_class)


def nccl_transport_of_class(link_class: str) -> str:
    if link_class == INTER_NODE_LINK_CLASS:
        return "net"
    return nccl_transport_of_type(intra_type_of_class(link_class))
