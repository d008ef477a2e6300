"""How concurrent transfers share directed links over time (the contention model)."""

from ddpsim.network.fairshare import LinkMatrix, max_min_rates
from ddpsim.network.flows import FlowBatch, FlowNetwork

__all__ = ["FlowBatch", "FlowNetwork", "LinkMatrix", "max_min_rates"]
