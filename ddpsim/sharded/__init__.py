"""Sharded data parallelism (ZeRO-1 as DDP + ZeroRedundancyOptimizer; ZeRO-2/3 as FSDP2 ``fully_shard``):
the wrapping units, memory per GPU, all-gather / reduce-scatter prices and the per-rank step."""

from ddpsim.sharded.memory import SHARDED_STRATEGIES, memory_by_strategy, recommend_strategy, sharded_memory
from ddpsim.sharded.units import ShardUnit, shard_units

__all__ = ["SHARDED_STRATEGIES", "ShardUnit", "memory_by_strategy", "recommend_strategy", "shard_units",
           "sharded_memory"]
