"""All-reduce algorithms as schedules of transfers, their costs, and NCCL-like selection."""

from ddpsim.collectives.model import AUTO_ALGORITHMS, CollectiveModel
from ddpsim.collectives.protocols import PROTOCOL_NAMES, ProtocolTable
from ddpsim.collectives.schedules import (
    ALGORITHMS,
    Phase,
    Transfer,
    build_schedule,
    double_binary_tree,
    hierarchical_schedule,
    ring_schedule,
    tree_schedule,
)

__all__ = [
    "ALGORITHMS",
    "AUTO_ALGORITHMS",
    "PROTOCOL_NAMES",
    "CollectiveModel",
    "Phase",
    "ProtocolTable",
    "Transfer",
    "build_schedule",
    "double_binary_tree",
    "hierarchical_schedule",
    "ring_schedule",
    "tree_schedule",
]
