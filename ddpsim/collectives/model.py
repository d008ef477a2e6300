"""Price an all-reduce on a topology: closed forms, a fast phase-by-phase model, a detailed one.

FAST: each phase's flows get max-min fair rates (computed once per algorithm: rates do not depend
on message size), a phase lasts its hop latency plus its slowest flow, identical consecutive phases
are priced once and multiplied. Contention between concurrent flows of a phase is modelled;
rate changes inside a phase (a flow finishing early frees bandwidth) are not.

DETAILED: every transfer of every phase becomes a flow on a ``FlowNetwork`` (rates re-shared
whenever a flow starts or ends, and shared with any other traffic on that network); a phase starts
when the previous one has fully finished. Both modes agree exactly when a phase's flows finish
together, which is the case of the symmetric schedules on the preset topologies.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import numpy as np
import simpy

from ddpsim.collectives.protocols import PROTOCOL_NAMES, ProtocolTable
from ddpsim.collectives.schedules import (
    ALGORITHMS,
    Phase,
    build_schedule,
    channel_orders,
    ring_pairs,
    tree_depth,
    tree_local_pairs,
    tree_max_degree,
)
from ddpsim.network import FlowBatch, FlowNetwork, LinkMatrix, max_min_rates
from ddpsim.topology import TRANSPORTS, Topology

# NCCL's automatic choice weighs Ring and Tree only; hierarchical is there when asked for by name.
AUTO_ALGORITHMS = ("ring", "tree")


@dataclass
class _PricedPhase:
    """One phase of a unit-size (1 byte) all-reduce, with everything that does not depend on size."""

    phase: Phase
    link_ids: list[tuple[int, ...]]
    fraction: np.ndarray  # bytes of each flow per byte all-reduced
    count: np.ndarray  # identical flows each entry stands for
    link_latency_s: np.ndarray
    transport: np.ndarray  # index into TRANSPORTS per flow
    path_latency_s: np.ndarray | None  # per hop of the latency path (pipelined phases)
    path_transport: np.ndarray | None
    rate_Bps: np.ndarray | None = None  # filled on first FAST pricing


class CollectiveModel:
    """All-reduce times on one topology, under one protocol table (NCCL's defaults if None).

    channels: parallel rings/trees, each leaving a node through its own NIC (None: one per
    network port of a node, as NCCL spreads its channels over NICs; 1 on a single node).
    """

    def __init__(self, topology: Topology, protocol_table: ProtocolTable | None = None,
                 channels: int | None = None) -> None:
        self.topology = topology
        self.protocol_table = ProtocolTable() if protocol_table is None else protocol_table
        self.channels = max(1, topology.nics_per_node) if channels is None else channels
        if self.channels < 1:
            raise ValueError(f"channels must be >= 1, got {channels}")
        self._structures: dict[str, list[_PricedPhase]] = {}
        self._times: dict[tuple[str, str, float], float] = {}
        self._coefficients: dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._seconds_per_byte: dict[tuple[str, str, bool], float] = {}
        self._chain_stretch: dict[str, float] = {}

    # -- choosing -------------------------------------------------------------------------------
    def choose(self, nbytes: float, algorithm: str = "auto", protocol: str = "auto") -> tuple[str, str]:
        """The (algorithm, protocol) with the smallest predicted time, as NCCL picks; ties keep
        NCCL's order (ring before tree, LL before LL128 before Simple)."""
        algorithms = AUTO_ALGORITHMS if algorithm == "auto" else (_check_algorithm(algorithm),)
        protocols = PROTOCOL_NAMES if protocol == "auto" else (_check_protocol(protocol),)
        best: tuple[float, str, str] | None = None
        for alg in algorithms:
            for proto in protocols:
                time_s = self.allreduce_time_s(nbytes, alg, proto)
                if best is None or time_s < best[0]:
                    best = (time_s, alg, proto)
        assert best is not None
        return best[1], best[2]

    # -- FAST mode ------------------------------------------------------------------------------
    def allreduce_time_s(self, nbytes: float, algorithm: str = "auto", protocol: str = "auto") -> float:
        """Predicted time of one all-reduce of ``nbytes`` per rank (FAST mode, cached)."""
        if algorithm == "auto" or protocol == "auto":
            algorithm, protocol = self.choose(nbytes, algorithm, protocol)
        key = (_check_algorithm(algorithm), _check_protocol(protocol), float(nbytes))
        cached = self._times.get(key)
        if cached is not None:
            return cached
        if nbytes < 0:
            raise ValueError(f"nbytes must be non-negative, got {nbytes}")
        structure = self._structure(algorithm)
        if not structure:
            return 0.0  # a single rank has nothing to exchange
        slope, offset, efficiency = self._protocol_coefficients(algorithm, protocol)
        stretch = self.bandwidth_stretch(nbytes, algorithm, protocol)
        total_s = self.protocol_table.base_latency(algorithm, protocol)
        for priced in structure:
            rates = self._rates(priced)
            transfer_s = priced.fraction * nbytes * stretch / (rates * efficiency[priced.transport])
            if priced.path_latency_s is None:
                hop_s = slope[priced.transport] * priced.link_latency_s + offset[priced.transport]
                phase_s = float(np.max(hop_s + transfer_s))
            else:
                assert priced.path_transport is not None
                path_s = slope[priced.path_transport] * priced.path_latency_s + offset[priced.path_transport]
                phase_s = float(np.sum(path_s)) / priced.phase.repeat + float(np.max(transfer_s))
            total_s += priced.phase.repeat * phase_s
        self._times[key] = total_s
        return total_s

    def bus_bandwidth_Bps(self, nbytes: float, algorithm: str = "auto", protocol: str = "auto") -> float:
        """nccl-tests' busbw of the predicted all-reduce: nbytes / time * 2(n-1)/n."""
        n = self.topology.world_size
        time_s = self.allreduce_time_s(nbytes, algorithm, protocol)
        return 0.0 if time_s == 0 else nbytes / time_s * 2 * (n - 1) / n

    def link_bytes(self, nbytes: float, algorithm: str, protocol: str = "simple") -> np.ndarray:
        """Bytes each directed link carries during one all-reduce (wire bytes: protocol and
        algorithm bandwidth factors included, as DETAILED mode sends them)."""
        _check_protocol(protocol)
        carried = np.zeros(self.topology.n_links)
        _, _, efficiency = self._protocol_coefficients(_check_algorithm(algorithm), protocol)
        stretch = self.bandwidth_stretch(nbytes, algorithm, protocol)
        for priced in self._structure(algorithm):
            matrix = LinkMatrix.from_lists(priced.link_ids)
            per_flow = priced.fraction * nbytes * stretch * priced.count / efficiency[priced.transport]
            flow_of_entry = np.repeat(np.arange(len(per_flow)), np.diff(matrix.indptr))
            carried += priced.phase.repeat * np.bincount(matrix.indices, weights=per_flow[flow_of_entry],
                                                         minlength=len(carried))
        return carried

    # -- DETAILED mode --------------------------------------------------------------------------
    def allreduce_process(
        self,
        env: simpy.Environment,
        network: FlowNetwork,
        nbytes: float,
        algorithm: str = "auto",
        protocol: str = "auto",
        exclusive: bool = False,
    ) -> Generator[simpy.Event, object, tuple[str, str]]:
        """A simpy process body: every transfer of every phase as a flow on ``network``.

        ``network`` must index links as this model's topology does. Returns (algorithm, protocol).
        ``exclusive``: nothing else uses ``network`` while this all-reduce runs (DDP's single
        communication stream). The identical repetitions of a phase (ring steps, per-rail ring
        steps) then each start on an idle network, so they take the same time and load the same
        links: the first is simulated flow by flow and the others added at once, and later
        all-reduces reuse that measurement, scaled to their size where the phase's flows share one
        latency (``FlowNetwork.run_repeated``). Without it every repetition is simulated.
        """
        if algorithm == "auto" or protocol == "auto":
            algorithm, protocol = self.choose(nbytes, algorithm, protocol)
        structure = self._structure(_check_algorithm(algorithm))
        if not structure:
            return algorithm, protocol
        slope, offset, efficiency = self._protocol_coefficients(algorithm, _check_protocol(protocol))
        stretch = self.bandwidth_stretch(nbytes, algorithm, protocol)
        base_s = self.protocol_table.base_latency(algorithm, protocol)
        if base_s > 0:
            yield env.timeout(base_s)
        for index, priced in enumerate(structure):
            wire_bytes = priced.fraction * nbytes * stretch / efficiency[priced.transport]
            if priced.path_latency_s is None:
                hop_s = slope[priced.transport] * priced.link_latency_s + offset[priced.transport]
                fill_s = 0.0
            else:
                assert priced.path_transport is not None
                hop_s = np.zeros(len(wire_bytes))
                path_s = slope[priced.path_transport] * priced.path_latency_s + offset[priced.path_transport]
                fill_s = float(np.sum(path_s)) / priced.phase.repeat  # spread over the repetitions
            batch = FlowBatch(_phase_links(priced), wire_bytes, hop_s, priced.count)
            # one key per phase: its batches differ only by the factor nbytes * stretch
            key = (id(self), algorithm, protocol, index) if exclusive else None
            yield from network.run_repeated(batch, priced.phase.repeat, fill_s, replay_key=key)
        return algorithm, protocol

    # -- closed form ----------------------------------------------------------------------------
    def closed_form_s(self, nbytes: float, algorithm: str, protocol: str = "simple") -> float:
        """The uncontended closed form on this topology's links (see module-level ``closed_form_s``).

        Intra-node bandwidth and latency are read off the route rank 0 -> 1, inter-node ones off
        the route the algorithm's first inter-node transfer takes; protocol costs applied.
        """
        topo, table = self.topology, self.protocol_table
        algorithm, protocol = _check_algorithm(algorithm), _check_protocol(protocol)
        g, nodes = topo.gpus_per_node, topo.nodes
        if topo.world_size < 2:
            return 0.0

        def hop(src: int, dst: int) -> tuple[float, float]:
            route = topo.route(src, dst)
            transport = topo.transport(src, dst)
            bandwidth = float(np.min(topo.capacity_Bps[list(route.link_ids)])) * table.efficiency(protocol, transport)
            return bandwidth, table.hop_latency(transport, algorithm, protocol, route.latency_s)

        intra_Bps, intra_s = hop(0, 1) if g > 1 else (1.0, 0.0)
        inter_Bps, inter_s = intra_Bps, intra_s
        if nodes > 1:
            inter_Bps, inter_s = hop(g - 1, g) if algorithm == "ring" else hop(0, g)
        switched = True
        if g >= 3:
            switched = bool(set(topo.route(1, 0).link_ids) & set(topo.route(1, 2).link_ids))

        def form(alg: str, size: float) -> float:
            inter = (hop(g - 1, g) if alg == "ring" else hop(0, g)) if nodes > 1 else (intra_Bps, intra_s)
            return closed_form_s(alg, topo.world_size, size, intra_Bps, intra_s, nodes,
                                 inter_bandwidth_Bps=inter[0], inter_latency_s=inter[1], intra_switched=switched,
                                 channels=self.channels)

        latency_s = form(algorithm, 0.0)
        transfer_s = form(algorithm, nbytes) - latency_s  # the closed forms are affine in the size
        factor = table.algorithm_factor(algorithm, protocol, nbytes)
        if algorithm == "tree" and table.tree_chain_bound and transfer_s > 0:
            n = topo.world_size
            # the ring's intra-node hops only: each of its 2(n-1) steps moves S/(nc) per flow
            local, _ = ring_pairs(g, self.channels, nodes)
            flows = max(local.values(), default=0) if not switched else _most_switched(local)
            ring_s = 2 * (n - 1) * flows * nbytes / (n * self.channels) / intra_Bps
            transfer_s = max(transfer_s, ring_s * n / (n - 1))
        return table.base_latency(algorithm, protocol) + latency_s + transfer_s / factor

    def bandwidth_stretch(self, nbytes: float, algorithm: str, protocol: str) -> float:
        """Factor (>= 1) on the algorithm's transfer times beyond link and protocol efficiency.

        1 / ``ProtocolTable.algorithm_factor`` (NCCL's 0.92 and size correction for trees), and for
        a tree under ``tree_chain_bound``: max(1, chain / flow), chain = 2S through the ring's bus
        bandwidth inside a node = the ring's intra-node transfer time x n/(n-1), flow = the tree's
        own transfer time (NCCL prices a tree at half the bandwidth of its channels, the same
        channels a ring gets, tuning.cc ``ncclTopoTuneModel``; the intra-node chain is what halves
        it, so only the ring's intra-node hops set the bound; beyond the node, the flow model's NIC
        contention already gives NCCL's inter-node tree bandwidth). Size enters only through the
        correction.
        """
        table = self.protocol_table
        stretch = 1.0 / table.algorithm_factor(algorithm, protocol, nbytes)
        if algorithm == "tree" and table.tree_chain_bound:
            chain = self._chain_stretch.get(protocol)
            if chain is None:
                n = self.topology.world_size
                tree_spb = self._transfer_seconds_per_byte("tree", protocol)
                ring_spb = self._transfer_seconds_per_byte("ring", protocol, intra_only=True)
                chain = max(1.0, ring_spb * n / (n - 1) / tree_spb) if tree_spb > 0 and n > 1 else 1.0
                self._chain_stretch[protocol] = chain
            stretch *= chain
        return stretch

    # -- internals ------------------------------------------------------------------------------
    def _transfer_seconds_per_byte(self, algorithm: str, protocol: str, intra_only: bool = False) -> float:
        """The bandwidth part of an all-reduce per byte (FAST mode's transfer terms, no stretch);
        ``intra_only``: counting only transfers between GPUs of one node (0 if there are none)."""
        key = (algorithm, protocol, intra_only)
        cached = self._seconds_per_byte.get(key)
        if cached is None:
            _, _, efficiency = self._protocol_coefficients(algorithm, protocol)
            g = self.topology.gpus_per_node
            cached = 0.0
            for priced in self._structure(algorithm):
                per_byte = priced.fraction / (self._rates(priced) * efficiency[priced.transport])
                if intra_only:
                    local = np.array([t.src_rank // g == t.dst_rank // g for t in priced.phase.transfers])
                    per_byte = per_byte[local]
                if len(per_byte):
                    cached += priced.phase.repeat * float(np.max(per_byte))
            self._seconds_per_byte[key] = cached
        return cached

    def schedule(self, algorithm: str, nbytes: float) -> list[Phase]:
        """The algorithm's phases for an all-reduce of ``nbytes`` on this topology."""
        topo = self.topology
        return build_schedule(_check_algorithm(algorithm), topo.world_size, topo.gpus_per_node, nbytes, self.channels)

    def _structure(self, algorithm: str) -> list[_PricedPhase]:
        cached = self._structures.get(algorithm)
        if cached is not None:
            return cached
        topo = self.topology
        transport_code = {name: i for i, name in enumerate(TRANSPORTS)}
        structure = []
        for phase in self.schedule(algorithm, 1.0):
            routes = [topo.route(t.src_rank, t.dst_rank) for t in phase.transfers]
            path_latency = path_transport = None
            if phase.latency_path is not None:
                path_latency = np.array([topo.route(s, d).latency_s for s, d in phase.latency_path])
                path_transport = np.array([transport_code[topo.transport(s, d)] for s, d in phase.latency_path],
                                          dtype=np.int64)
            structure.append(_PricedPhase(
                phase=phase,
                link_ids=[r.link_ids for r in routes],
                fraction=np.array([t.nbytes for t in phase.transfers]),
                count=np.array([t.count for t in phase.transfers], dtype=np.int64),
                link_latency_s=np.array([r.latency_s for r in routes]),
                transport=np.array([transport_code[topo.transport(t.src_rank, t.dst_rank)] for t in phase.transfers],
                                   dtype=np.int64),
                path_latency_s=path_latency,
                path_transport=path_transport,
            ))
        self._structures[algorithm] = structure
        return structure

    def _rates(self, priced: _PricedPhase) -> np.ndarray:
        if priced.rate_Bps is None:
            matrix = LinkMatrix.from_lists(priced.link_ids)
            priced.rate_Bps = max_min_rates(matrix, self.topology.capacity_Bps, priced.count)
        return priced.rate_Bps

    def _protocol_coefficients(self, algorithm: str, protocol: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per transport: hop latency = slope * link latency + offset, and bandwidth efficiency.

        Every hop-latency mode is affine in the link latency, so two evaluations recover it and
        whole phases are then priced with array arithmetic.
        """
        key = (algorithm, protocol)
        cached = self._coefficients.get(key)
        if cached is None:
            table = self.protocol_table
            offset = np.array([table.hop_latency(t, algorithm, protocol, 0.0) for t in TRANSPORTS])
            slope = np.array([table.hop_latency(t, algorithm, protocol, 1.0) for t in TRANSPORTS]) - offset
            efficiency = np.array([table.efficiency(protocol, t) for t in TRANSPORTS])
            cached = self._coefficients[key] = (slope, offset, efficiency)
        return cached


def _phase_links(priced: _PricedPhase) -> LinkMatrix:
    """The phase's flow x link incidence, built once per phase (DETAILED mode reuses it per bucket)."""
    matrix = priced.__dict__.get("_link_matrix")
    if matrix is None:
        matrix = priced.__dict__["_link_matrix"] = LinkMatrix.from_lists(priced.link_ids)
    return matrix


def _most_switched(pairs: dict[tuple[int, int], int]) -> int:
    """Most flows on one GPU's switch up- or down-link, for flows per local GPU pair."""
    out: dict[int, int] = {}
    into: dict[int, int] = {}
    for (a, b), m in pairs.items():
        out[a] = out.get(a, 0) + m
        into[b] = into.get(b, 0) + m
    return max([*out.values(), *into.values()], default=0)


def _check_algorithm(algorithm: str) -> str:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}")
    return algorithm


def _check_protocol(protocol: str) -> str:
    if protocol not in PROTOCOL_NAMES:
        raise ValueError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOL_NAMES)}")
    return protocol


def closed_form_s(
    algorithm: str,
    n_ranks: int,
    nbytes: float,
    bandwidth_Bps: float,
    latency_s: float,
    nodes: int = 1,
    *,
    inter_bandwidth_Bps: float | None = None,
    inter_latency_s: float | None = None,
    intra_switched: bool = True,
    channels: int = 1,
) -> float:
    """Uncontended all-reduce time of this package's schedules, without protocol costs.

    ``bandwidth_Bps``/``latency_s`` describe one GPU-to-GPU hop inside a node (and across nodes
    unless ``inter_*`` are given). ``intra_switched``: GPUs reach each other through a switch (one
    up-link and one down-link per GPU, as NVSwitch and PCIe), else over direct links. Every GPU
    is assumed to have its own network port.

    ring, one channel, uniform links: 2(n-1)·α + 2(n-1)/n·S/B. In general the pipelined latency
      is (2(n-1)-k)·α_intra + k·α_inter with k = 1 + (2(n-1)-1)//g inter-node hops in a chunk's
      path (0 on one node), and with c channels each step moves S/(n·c) per flow with u flows on
      a GPU's link (u = c, or c-1 when every GPU is some channel's exit):
      + 2(n-1)·max(u·S/(nc)/B_intra, S/(nc)/B_inter).
    tree: one pipelined phase: 2·((g-1)·α_intra + D·α_inter) + S/(2c)·max(u/B_intra, v/B_inter),
      D the depth of the deeper of NCCL's two trees over the nodes, u the most S/(2c) flows one
      intra-node link carries (a mid-chain GPU on a switch sends up and down for both trees: 4 per
      channel) and v the most on one NIC (a head's edges over both trees).
    hierarchical: 2(g-1)·(α_intra + S/g/B_intra) + 2(N-1)·(α_inter + S/(gN)/B_inter).
    """
    algorithm = _check_algorithm(algorithm)
    if nodes < 1 or n_ranks % nodes:
        raise ValueError(f"{n_ranks} ranks do not split into {nodes} nodes")
    if channels < 1:
        raise ValueError(f"channels must be >= 1, got {channels}")
    g = n_ranks // nodes
    intra_Bps, intra_s = bandwidth_Bps, latency_s
    inter_Bps = bandwidth_Bps if inter_bandwidth_Bps is None else inter_bandwidth_Bps
    inter_s = latency_s if inter_latency_s is None else inter_latency_s
    if n_ranks < 2:
        return 0.0

    def most_flows(pairs: dict[tuple[int, int], int], switched: bool) -> int:
        if not pairs:
            return 0
        if not switched:
            return max(pairs.values())
        out: dict[int, int] = {}
        into: dict[int, int] = {}
        for (a, b), m in pairs.items():
            out[a] = out.get(a, 0) + m
            into[b] = into.get(b, 0) + m
        return max(*out.values(), *into.values())

    if algorithm == "ring":
        local, across = ring_pairs(g, channels, nodes)
        chunk = nbytes / (n_ranks * channels)
        transfers = []
        if local:
            transfers.append(most_flows(local, intra_switched) * chunk / intra_Bps)
        if across:
            transfers.append(most_flows(across, True) * chunk / inter_Bps)
        steps = 2 * (n_ranks - 1)
        inter_hops = 1 + (steps - 1) // g if nodes > 1 else 0
        return (steps - inter_hops) * intra_s + inter_hops * inter_s + steps * max(transfers)
    if algorithm == "tree":
        intra_flows = most_flows(tree_local_pairs(g, channels), intra_switched or g == 2)
        inter_flows = 0
        if nodes > 1:
            heads: dict[int, int] = {}
            for order in channel_orders(g, channels):
                heads[order[0]] = heads.get(order[0], 0) + 1
            inter_flows = tree_max_degree(nodes) * max(heads.values())
        latency = 2 * ((g - 1) * intra_s + tree_depth(nodes) * inter_s)
        return latency + nbytes / (2 * channels) * max(intra_flows / intra_Bps, inter_flows / inter_Bps)
    total = 0.0
    if g > 1:
        total += 2 * (g - 1) * intra_s + 2 * (g - 1) / g * nbytes / intra_Bps
    if nodes > 1:
        total += 2 * (nodes - 1) * inter_s + 2 * (nodes - 1) / nodes * (nbytes / g) / inter_Bps
    return total
