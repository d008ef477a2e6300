"""NCCL all-gather and reduce-scatter prices, from the all-reduce model's own tables.

NCCL runs all-gather and reduce-scatter as rings (PAT, for one GPU per node at scale since NCCL 2.23,
is not modelled). A ring all-reduce is a reduce-scatter then an all-gather over the same ring: 2(n-1)
steps of S/n bytes. A ring all-gather (or reduce-scatter) of an S-byte buffer is n-1 of those steps,
and NCCL's cost model (``tuning.cc``: nsteps = n-1 against 2(n-1), the same bus bandwidth) prices it as
the all-reduce's base latency plus half of its hop latencies and transfer time. So the price here is
``base + (allreduce(S) - base) / 2`` on the ring, with every term of ``CollectiveModel`` (protocol
efficiency, NCCL's multi-node terms, a calibration's fitted links) carried over. The protocol is the
one this price makes fastest (NCCL's logged tuning tables are for all-reduce only).

HSDP (shard within a node, replicate across): all-gather and reduce-scatter among a node's GPUs, then
an all-reduce of each reduce-scattered shard among the GPUs of the same local rank, one ring per rail
(each priced on a cluster of one GPU per node, its NIC share: the NICs of a node over its GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ddpsim.collectives import CollectiveModel
from ddpsim.collectives.curves import ProtocolFit, envelope_s
from ddpsim.scenario.schema import ClusterSpec
from ddpsim.topology import build_topology

RING = "ring"


@dataclass(frozen=True)
class Price:
    """One collective: its latency part and its transfer part (seconds when alone on the links)."""

    latency_s: float
    transfer_s: float
    protocol: str

    @property
    def seconds(self) -> float:
        return self.latency_s + self.transfer_s


def half_ring_price(model: CollectiveModel, nbytes: float, protocol: str = "auto") -> Price:
    """An all-gather or reduce-scatter of an ``nbytes`` (unsharded) buffer over ``model``'s ranks."""
    if model.topology.world_size < 2 or nbytes <= 0:
        return Price(0.0, 0.0, "none")
    protocols = model.protocol_table.protocols if protocol == "auto" else (protocol,)
    best: Price | None = None
    for proto in protocols:
        base_s = model.base_latency_s(nbytes, RING, proto)
        total_s = base_s + (model.allreduce_time_s(nbytes, RING, proto) - base_s) / 2
        zero_base_s = model.base_latency_s(0.0, RING, proto)
        latency_s = min(total_s, base_s + (model.allreduce_time_s(0.0, RING, proto) - zero_base_s) / 2)
        price = Price(latency_s, total_s - latency_s, proto)
        if best is None or price.seconds < best.seconds:
            best = price
    assert best is not None
    return best


def measured_price(entry: dict[str, Any], nbytes: float, world_size: int) -> Price:
    """An all-gather or reduce-scatter of an ``nbytes`` (unsharded) buffer on a calibration's measured curve of
    that collective (nccl-tests ``*_perf``, fitted per protocol as one pass of the ring: ``sharded_fit``), which
    replaces the half-ring price where the shape was measured. Latency part: the curve at zero bytes."""
    fits = {proto: ProtocolFit(fit["base_latency_s"], fit["hop_latency_s"], fit["bus_bandwidth_Bps"], passes=1)
            for proto, fit in entry["protocol_fits"].items()}
    total_s, proto = envelope_s(fits, nbytes, world_size, entry["call_floor_s"])
    latency_s = min(total_s, envelope_s(fits, 0.0, world_size, entry["call_floor_s"])[0])
    return Price(latency_s, total_s - latency_s, proto)


def allreduce_price(model: CollectiveModel, nbytes: float, algorithm: str = "auto", protocol: str = "auto") -> Price:
    """An all-reduce as ``CollectiveModel`` prices it (latency part: its price at zero bytes)."""
    if model.topology.world_size < 2 or nbytes <= 0:
        return Price(0.0, 0.0, "none")
    alg, proto = model.choose(nbytes, algorithm, protocol)
    total_s = model.allreduce_time_s(nbytes, alg, proto)
    latency_s = min(total_s, model.allreduce_time_s(0.0, alg, proto))
    return Price(latency_s, total_s - latency_s, proto)


@dataclass
class ShardGroups:
    """The collective models of a sharded step: the shard group's and, under HSDP, the replica group's."""

    shard: CollectiveModel
    replicate: CollectiveModel | None  # None: no replication (sharded over the whole world)


def shard_groups(cluster: ClusterSpec, world_model: CollectiveModel, shard_group: str) -> ShardGroups:
    """``world_model`` itself when sharding over the world; otherwise one node and one rail."""
    if shard_group != "node" or cluster.nodes == 1 or cluster.topology is not None:
        return ShardGroups(world_model, None)
    table = world_model.protocol_table
    node = build_topology(replace(cluster, nodes=1))
    inter = cluster.inter_node
    nics = inter.nics_per_node or cluster.gpus_per_node
    share = min(1.0, nics / cluster.gpus_per_node)
    rail_cluster = replace(cluster, gpus_per_node=1,
                           inter_node=replace(inter, nic_bandwidth_Bps=inter.nic_bandwidth_Bps * share,
                                              nics_per_node=1))
    return ShardGroups(CollectiveModel(node, table), CollectiveModel(build_topology(rail_cluster), table))
