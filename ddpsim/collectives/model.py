"""Price an all-reduce on a topology: a fast phase-by-phase model and a detailed one (the closed forms that
check them are in validation/closed_forms.py).

FAST: each phase's flows get max-min fair rates (computed once per algorithm: rates do not depend
on message size), identical consecutive phases are priced once and multiplied. A pipelined phase
(every preset schedule: ring, tree, pipelined hierarchical) lasts its path latency plus the time
until its last flow ends, bandwidth re-shared as flows finish (``_unit_transfer_s``, once per
algorithm and protocol); a synchronous phase lasts its hop latency plus its slowest flow at the
initial rates.

DETAILED: every transfer of every phase becomes a flow on a ``FlowNetwork`` (rates re-shared
whenever a flow starts or ends, and shared with any other traffic on that network); a phase starts
when the previous one has fully finished. The two modes agree exactly for an isolated all-reduce
made of pipelined phases.

NCCL's cost model (``src/graph/tuning.cc``) enters through ``ProtocolTable`` (latencies, protocol
factors, multi-node terms) and ``choose``, which picks what NCCL's own estimate
(``tuning_time_s``) says, as NCCL does.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import numpy as np
import simpy

from ddpsim.collectives.nccl_tuning import NcclTuning
from ddpsim.collectives.nvls import NvlsSpec
from ddpsim.collectives.protocols import PROTOCOL_NAMES, ProtocolTable
from ddpsim.collectives.schedules import (
    ALGORITHMS,
    NVLS,
    Phase,
    Transfer,
    build_schedule,
)
from ddpsim.network import FlowBatch, FlowNetwork, LinkMatrix, max_min_rates
from ddpsim.topology import TRANSPORTS, Topology

# NCCL's automatic choice weighs Ring and Tree, and NVLS where the node has NVLink SHARP (scanned
# last, as NCCL's algorithm order has it); hierarchical is there when asked for by name.
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
    # a folded cluster's phase (``collectives.folded``) gives its latency path as distinct hops, how often
    # each occurs and whether it stays in a node, and which flows stay in a node; None: read off the phase
    path_weight: np.ndarray | None = None
    path_intra: np.ndarray | None = None
    local: np.ndarray | None = None
    matrix: LinkMatrix | None = None  # the flows x links incidence where built as arrays (else from link_ids)


class CollectiveModel:
    """All-reduce times on one topology, under one protocol table (NCCL's defaults if None).

    channels: parallel rings/trees, each leaving a node through its own NIC (None: one per
    network port of a node, as NCCL spreads its channels over NICs; 1 on a single node).
    nvls: NVLink SHARP on this topology's nodes, as NCCL rates it for the GPU (``nvls.nvls_of``
    reads it off a scenario); None: no NVLS (NCCL_NVLS_ENABLE=0, or a node without it). With it,
    "nvls" is an algorithm and ``choose`` weighs it.
    """

    def __init__(self, topology: Topology, protocol_table: ProtocolTable | None = None,
                 channels: int | None = None, nvls: NvlsSpec | None = None) -> None:
        self.topology = topology
        self.protocol_table = ProtocolTable() if protocol_table is None else protocol_table
        self.channels = max(1, topology.nics_per_node) if channels is None else channels
        if self.channels < 1:
            raise ValueError(f"channels must be >= 1, got {channels}")
        if nvls is not None and not 0 < nvls.efficiency <= 1:
            raise ValueError(f"NVLS efficiency must be in (0, 1], got {nvls.efficiency}")
        self.nvls = nvls
        self.nvls_efficiency = None if nvls is None else nvls.efficiency
        self._structures: dict[str, list[_PricedPhase]] = {}
        self._times: dict[tuple[str, str, float], float] = {}
        self._coefficients: dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._seconds_per_byte: dict[tuple[str, str, bool], float] = {}
        self._stretch_base: dict[tuple[str, str], float] = {}
        self._path_intra: dict[int, np.ndarray] = {}
        self._unit_s: dict[tuple[str, str, int], float] = {}
        self._matrices: dict[int, LinkMatrix] = {}

    # -- choosing -------------------------------------------------------------------------------
    def choose(self, nbytes: float, algorithm: str = "auto", protocol: str = "auto") -> tuple[str, str]:
        """The (algorithm, protocol) NCCL's tuning would pick: the least ``tuning_time_s``, which is
        NCCL's own estimate, not necessarily the fastest price here (NCCL runs its pick even where
        another would be faster). Ties keep NCCL's order (ring before tree, LL before LL128 before
        Simple). A forced algorithm with protocol "auto" still gets the protocol NCCL would pick."""
        algorithms = self.auto_algorithms if algorithm == "auto" else (_check_algorithm(algorithm),)
        protocols = self.protocol_table.protocols if protocol == "auto" else (_check_protocol(protocol),)
        if algorithms == (NVLS,):
            return NVLS, "simple"  # NCCL runs NVLS with the Simple protocol only
        if len(algorithms) * len(protocols) == 1:
            return algorithms[0], protocols[0]
        tuning = self._nccl_tuning()
        if tuning is not None:
            # NCCL's own logged table for this shape: its belief (e.g. a 10 Gbps NIC it assumed),
            # whatever the measured links say, is what it picks by
            picked = tuning.choose(nbytes, algorithms, protocols)
            if picked is not None:
                return picked
        best: tuple[float, str, str] | None = None
        for alg in algorithms:
            for proto in protocols:
                if alg == NVLS and proto != "simple":
                    continue
                time_s = self.tuning_time_s(nbytes, alg, proto)
                if best is None or time_s < best[0]:
                    best = (time_s, alg, proto)
        assert best is not None
        return best[1], best[2]

    @property
    def auto_algorithms(self) -> tuple[str, ...]:
        """What ``choose`` weighs under "auto": ring and tree, and NVLS where the nodes have it."""
        return AUTO_ALGORITHMS + ((NVLS,) if self.nvls_efficiency is not None else ())

    def tuning_time_s(self, nbytes: float, algorithm: str, protocol: str) -> float:
        """NCCL's estimate of an all-reduce, the one its choice minimises.

        Where the protocol table carries NCCL's logged table for this shape, it is that table's
        time (``NcclTuning.time_s``, NCCL's own formula on NCCL's own numbers). Otherwise:

        NCCL prices every algorithm on the channels its topology search found (tuning.cc
        ``ncclTopoTuneModel``): one bus bandwidth, which a tree gets x 0.92 and the protocol's
        factor, capped for LL, as an algorithm bandwidth of half of it, times its size correction.
        Rings (and hierarchical) are priced here as they run; a tree's estimate is its latency plus
        the size through that bandwidth, with the ring's Simple bus bandwidth on this topology as
        NCCL's searched one. It differs from the tree's own price where the flow model sees the
        tree move less over the network than NCCL's model assumes (2 nodes: half the ring's NIC
        bytes), where NCCL still picks as its model says.
        """
        algorithm, protocol = _check_algorithm(algorithm), _check_protocol(protocol)
        tuning = self._nccl_tuning()
        if tuning is not None:
            logged_s = tuning.time_s(nbytes, algorithm, protocol)
            if logged_s is not None:
                return logged_s
        if algorithm != "tree":
            return self.allreduce_time_s(nbytes, algorithm, protocol)
        topo, table = self.topology, self.protocol_table
        n, nodes = topo.world_size, topo.nodes
        if n < 2:
            return 0.0
        ring_spb = self._transfer_seconds_per_byte("ring", "simple") * self.bandwidth_stretch(nbytes, "ring", "simple")
        if ring_spb <= 0:
            return self.allreduce_time_s(nbytes, algorithm, protocol)
        bus_Bps = 2 * (n - 1) / n / ring_spb
        simple = table.bandwidth_efficiency.get("simple", 1.0)
        factor = (table.bandwidth_efficiency.get(protocol, 1.0) / simple * table.algorithm_efficiency.get("tree", 1.0)
                  * table.protocol_factor("tree", protocol, nodes))
        tree_bus_Bps = min(bus_Bps * factor, table.ll_bus_cap_Bps(protocol, nodes))
        algbw_Bps = 0.5 * tree_bus_Bps * table.size_correction("tree", protocol, nbytes)
        return self.allreduce_time_s(0.0, "tree", protocol) + nbytes / algbw_Bps

    def _nccl_tuning(self) -> NcclTuning | None:
        """NCCL's logged table where it was logged for this very shape (a table describes one
        communicator: its ranks, nodes and channels), else None."""
        tuning = self.protocol_table.nccl_tuning
        topo = self.topology
        return tuning if tuning is not None and tuning.applies_to(topo.world_size, topo.nodes) else None

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
        _, _, efficiency = self._protocol_coefficients(algorithm, protocol)
        stretch = self.bandwidth_stretch(nbytes, algorithm, protocol)
        total_s = self.base_latency_s(nbytes, algorithm, protocol)
        for index, priced in enumerate(structure):
            hop_s, fill_s = self._phase_latency_s(priced, nbytes, algorithm, protocol)
            if priced.path_latency_s is not None:
                # pipelined: no per-flow latency, so the phase lasts until its last flow ends,
                # bandwidth re-shared as flows finish (as DETAILED mode runs it)
                phase_s = fill_s + nbytes * stretch * self._unit_transfer_s(algorithm, protocol, index)
            else:
                rates = self._rates(priced)
                transfer_s = priced.fraction * nbytes * stretch / (rates * efficiency[priced.transport])
                phase_s = fill_s + float(np.max(hop_s + transfer_s))
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
            matrix = self._matrix(priced)
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
        _, _, efficiency = self._protocol_coefficients(algorithm, _check_protocol(protocol))
        stretch = self.bandwidth_stretch(nbytes, algorithm, protocol)
        base_s = self.base_latency_s(nbytes, algorithm, protocol)
        if base_s > 0:
            yield env.timeout(base_s)
        for index, priced in enumerate(structure):
            wire_bytes = priced.fraction * nbytes * stretch / efficiency[priced.transport]
            hop_s, fill_s = self._phase_latency_s(priced, nbytes, algorithm, protocol)
            batch = FlowBatch(_phase_links(priced), wire_bytes, hop_s, priced.count)
            # one key per phase: its batches differ only by the factor nbytes * stretch
            key = (id(self), algorithm, protocol, index) if exclusive else None
            yield from network.run_repeated(batch, priced.phase.repeat, fill_s, replay_key=key)
        return algorithm, protocol

    def bandwidth_stretch(self, nbytes: float, algorithm: str, protocol: str) -> float:
        """Factor (>= 1, or a little below for NCCL's tree LL128 across nodes) on the algorithm's
        transfer times beyond link and protocol efficiency.

        In NCCL's order (tuning.cc ``ncclTopoTuneModel``, then ``ncclTopoGetAlgoTime``):
        1. for a tree under ``tree_chain_bound``: max(1, chain / flow), chain = 2S through the ring's
           bus bandwidth inside a node = the ring's intra-node transfer time x n/(n-1), flow = the
           tree's own transfer time (NCCL prices a tree at half the bandwidth of its channels, the
           same channels a ring gets; the intra-node chain is what halves it, so only the ring's
           intra-node hops set the bound; beyond the node, the flow model's NIC contention gives
           NCCL's inter-node tree bandwidth);
        2. / ``algorithm_efficiency`` (NCCL's 0.92 for trees), / ``protocol_factor`` (ring LL a
           quarter of the bus bandwidth across nodes, tree LL 1/3.8, tree LL128 7/9 or 120/128);
        3. LL across nodes: no faster than NCCL's LL bus bandwidth cap (``ll_bus_cap_Bps``, as an
           algorithm bandwidth: x n/(2(n-1)) for rings, x 1/2 for trees);
        4. / the tree's size correction.
        Steps 1-3 do not depend on the size and are cached.
        """
        table = self.protocol_table
        key = (algorithm, protocol)
        base = self._stretch_base.get(key)
        if base is None:
            topo = self.topology
            n, nodes = topo.world_size, topo.nodes
            base = 1.0
            if algorithm == "tree" and table.tree_chain_bound:
                tree_spb = self._transfer_seconds_per_byte("tree", protocol)
                ring_spb = self._transfer_seconds_per_byte("ring", protocol, intra_only=True)
                base = max(1.0, ring_spb * n / (n - 1) / tree_spb) if tree_spb > 0 and n > 1 else 1.0
            base /= table.algorithm_efficiency.get(algorithm, 1.0) * table.protocol_factor(algorithm, protocol, nodes)
            cap_Bps = table.ll_bus_cap_Bps(protocol, nodes)
            spb = self._transfer_seconds_per_byte(algorithm, protocol)
            if np.isfinite(cap_Bps) and spb > 0 and n > 1:
                algbw_cap = cap_Bps * (0.5 if algorithm == "tree" else n / (2 * (n - 1)))
                base = max(base, 1.0 / (spb * algbw_cap))
            tree_cap_Bps = self._nvls_tree_bus_cap_Bps() if algorithm == NVLS else float("inf")
            if np.isfinite(tree_cap_Bps) and spb > 0:
                base = max(base, 2 * (n - 1) / n / (spb * tree_cap_Bps))
            self._stretch_base[key] = base
        return base / table.size_correction(algorithm, protocol, nbytes)

    def _nvls_tree_bus_cap_Bps(self) -> float:
        """NCCL's ceiling on an NVLS tree's bus bandwidth: its channels (one per head, i.e. per NIC
        here) times the GPU's per-channel ceiling for 2 nodes or for 3 and more (inf on one node)."""
        nodes = self.topology.nodes
        if self.nvls is None or nodes < 2 or not self.nvls.tree_channel_Bps:
            return float("inf")
        return self.channels * self.nvls.tree_channel_Bps[0 if nodes == 2 else -1]

    def base_latency_s(self, nbytes: float, algorithm: str, protocol: str) -> float:
        """The once-per-call latency: the table's base latency, times NCCL's ring plateau factor
        where it applies (``ProtocolTable.plateau``)."""
        return self.protocol_table.base_latency(algorithm, protocol) * self._plateau(nbytes, algorithm, protocol)

    def _plateau(self, nbytes: float, algorithm: str, protocol: str) -> float:
        topo = self.topology
        return self.protocol_table.plateau(algorithm, protocol, topo.nodes, topo.world_size, self.channels, nbytes)

    def _phase_latency_s(self, priced: _PricedPhase, nbytes: float, algorithm: str,
                         protocol: str) -> tuple[np.ndarray, float]:
        """Latency of one repetition of a phase: (per-transfer hop latency, fill latency).

        Synchronous phases: every transfer its own hop latency, no fill. Pipelined phases: no
        per-transfer latency; the latency path's hops summed and spread over the repetitions. For
        a ring on several nodes (NCCL's ``ncclTopoTuneModel``): each intra-node hop costs at least
        the net overhead, and the ring plateau multiplies the whole path.
        """
        slope, offset, _ = self._protocol_coefficients(algorithm, protocol)
        if priced.path_latency_s is None:
            return slope[priced.transport] * priced.link_latency_s + offset[priced.transport], 0.0
        assert priced.path_transport is not None and priced.phase.latency_path is not None
        path_s = slope[priced.path_transport] * priced.path_latency_s + offset[priced.path_transport]
        topo = self.topology
        floor_s = self.protocol_table.ring_intra_floor_s(protocol, topo.nodes) if algorithm == "ring" else 0.0
        if floor_s > 0:
            intra = self._path_intra.get(id(priced)) if priced.path_intra is None else priced.path_intra
            if intra is None:
                intra = np.array([topo.node_of(s) == topo.node_of(d) for s, d in priced.phase.latency_path],
                                 dtype=bool)
                self._path_intra[id(priced)] = intra
            path_s = np.where(intra, np.maximum(path_s, floor_s), path_s)
        if priced.path_weight is not None:
            path_s = path_s * priced.path_weight
        total = float(np.sum(path_s)) * self._plateau(nbytes, algorithm, protocol)
        return np.zeros(len(priced.fraction)), total / priced.phase.repeat

    # -- internals ------------------------------------------------------------------------------
    def _transfer_seconds_per_byte(self, algorithm: str, protocol: str, intra_only: bool = False) -> float:
        """The bandwidth part of an all-reduce per byte (FAST mode's transfer terms, no stretch);
        ``intra_only``: the slowest transfer between GPUs of one node at the initial fair rates
        (0 if there are none), as the tree's chain bound reads it."""
        key = (algorithm, protocol, intra_only)
        cached = self._seconds_per_byte.get(key)
        if cached is None:
            _, _, efficiency = self._protocol_coefficients(algorithm, protocol)
            node_of = self.topology.node_of
            cached = 0.0
            for index, priced in enumerate(self._structure(algorithm)):
                if not intra_only and priced.path_latency_s is not None:
                    cached += priced.phase.repeat * self._unit_transfer_s(algorithm, protocol, index)
                    continue
                if intra_only:
                    # rates on the node's own links only (network links unbounded): NCCL reads the
                    # ring's bandwidth inside a node off the node's topology whatever the NICs carry;
                    # sharing with the NIC's speed made a faster NIC slow the tree
                    local = priced.local
                    if local is None:
                        local = np.array([node_of(t.src_rank) == node_of(t.dst_rank) for t in priced.phase.transfers])
                    if not local.any():
                        continue
                    rates = max_min_rates(self._matrix(priced), self._intra_capacity_Bps(), priced.count)
                    per_byte = (priced.fraction / (rates * efficiency[priced.transport]))[local]
                else:
                    per_byte = priced.fraction / (self._rates(priced) * efficiency[priced.transport])
                if len(per_byte):
                    cached += priced.phase.repeat * float(np.max(per_byte))
            self._seconds_per_byte[key] = cached
        return cached

    def schedule(self, algorithm: str, nbytes: float) -> list[Phase]:
        """The algorithm's phases for an all-reduce of ``nbytes`` on this topology, as simulated
        (hierarchical as one pipeline)."""
        topo = self.topology
        if algorithm == NVLS and self.nvls_efficiency is None:
            raise ValueError("nvls needs NVLink SHARP: an nvswitch node of H100/H200/B200 with cluster.intra_node.nvls "
                             "not off")
        phases = build_schedule(_check_algorithm(algorithm), topo.world_size, topo.gpus_per_node, nbytes, self.channels,
                                None if topo.uniform else topo.node_sizes)
        if algorithm == "hierarchical":
            phases = _pipelined_hierarchical(phases, topo.gpus_per_node, topo.nodes)
        return phases

    def _structure(self, algorithm: str) -> list[_PricedPhase]:
        cached = self._structures.get(algorithm)
        if cached is not None:
            return cached
        topo = self.topology
        transport_code = {name: i for i, name in enumerate(TRANSPORTS)}
        structure = []
        phases = self.schedule(algorithm, 1.0)
        for phase in phases:
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

    def _unit_transfer_s(self, algorithm: str, protocol: str, index: int) -> float:
        """Seconds until the last flow of a pipelined phase ends, per byte all-reduced (before the
        bandwidth stretch): max-min rates, re-shared each time flows finish (progressive filling
        with completions). Equal to the slowest flow at the initial rates when all flows end
        together (every symmetric schedule on one link class); shorter when some end early and
        free bandwidth for the rest (a ring's PXN flows, NIC-bound, beside NVLink-bound ones)."""
        key = (algorithm, protocol, index)
        cached = self._unit_s.get(key)
        if cached is not None:
            return cached
        priced = self._structure(algorithm)[index]
        _, _, efficiency = self._protocol_coefficients(algorithm, protocol)
        wire = priced.fraction / efficiency[priced.transport]
        remaining = wire.copy()
        active = np.flatnonzero(wire > 0)
        rates = self._rates(priced)
        elapsed = 0.0
        first = True
        while len(active):
            if not first:
                rates = np.full(len(wire), np.inf)
                rates[active] = max_min_rates(_rows(self._matrix(priced), active), self.topology.capacity_Bps,
                                              priced.count[active])
            first = False
            left = remaining[active] / rates[active]
            step = float(np.min(left))
            elapsed += step
            remaining[active] -= rates[active] * step
            # flows within a relative 1e-9 of their end finish now (rounding would leave crumbs)
            active = active[remaining[active] > 1e-9 * wire[active]]
        self._unit_s[key] = elapsed
        return elapsed

    def _intra_capacity_Bps(self) -> np.ndarray:
        cached = self.__dict__.get("_intra_capacity")
        if cached is None:  # the link classes as an array once: a tuple of 100,000 names took a while each call
            topo = self.topology
            cached = self.__dict__["_intra_capacity"] = np.where(np.asarray(topo.link_class) == "intra",
                                                                 topo.capacity_Bps, 1e30)
        return cached

    def _rates(self, priced: _PricedPhase) -> np.ndarray:
        if priced.rate_Bps is None:
            priced.rate_Bps = max_min_rates(self._matrix(priced), self.topology.capacity_Bps, priced.count)
        return priced.rate_Bps

    def _matrix(self, priced: _PricedPhase) -> LinkMatrix:
        matrix = self._matrices.get(id(priced)) if priced.matrix is None else priced.matrix
        if matrix is None:
            matrix = self._matrices[id(priced)] = LinkMatrix.from_lists(priced.link_ids)
        return matrix

    def _protocol_coefficients(self, algorithm: str, protocol: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per transport: hop latency = slope * link latency + offset, and bandwidth efficiency.

        Every hop-latency mode is affine in the link latency, so two evaluations recover it and
        whole phases are then priced with array arithmetic.
        """
        key = (algorithm, protocol)
        cached = self._coefficients.get(key)
        if cached is None:
            if algorithm == NVLS and protocol != "simple":
                raise ValueError(f"NCCL runs NVLS with the simple protocol only, not {protocol!r}")
            table = self.protocol_table
            offset = np.array([table.hop_latency(t, algorithm, protocol, 0.0) for t in TRANSPORTS])
            slope = np.array([table.hop_latency(t, algorithm, protocol, 1.0) for t in TRANSPORTS]) - offset
            efficiency = np.array([table.efficiency(protocol, t) for t in TRANSPORTS])
            if algorithm == NVLS and self.nvls_efficiency is not None:
                # NCCL's nvlsEfficiency: what the switch's reduction leaves of the NVLink rate,
                # on the switch traffic only (the NICs of an NVLS tree run at their own rate)
                efficiency[TRANSPORTS.index("nvlink")] *= self.nvls_efficiency
            cached = self._coefficients[key] = (slope, offset, efficiency)
        return cached


def _phase_links(priced: _PricedPhase) -> LinkMatrix:
    """The phase's flow x link incidence, built once per phase (DETAILED mode reuses it per bucket)."""
    matrix = priced.__dict__.get("_link_matrix")
    if matrix is None:
        matrix = priced.__dict__["_link_matrix"] = LinkMatrix.from_lists(priced.link_ids)
    return matrix


def _rows(matrix: LinkMatrix, rows: np.ndarray) -> LinkMatrix:
    """The flows ``rows`` (increasing) of a flows x links incidence, as their own matrix."""
    lengths = np.diff(matrix.indptr)
    keep = np.zeros(len(lengths), dtype=bool)
    keep[rows] = True
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths[rows], out=indptr[1:])
    return LinkMatrix(indptr, matrix.indices[np.repeat(keep, lengths)])


def _pipelined_hierarchical(phases: list[Phase], g: int, nodes: int) -> list[Phase]:
    """The hierarchical schedule's phases run as one pipeline, as NCCL-style implementations do.

    The message is cut into chunks that flow through reduce-scatter, the inter-node rail rings and
    all-gather one after another, so in steady state all three phases move data at once: every
    transfer of every phase is one concurrent flow carrying all its repetitions' bytes (the
    reduce-scatter and all-gather share the node's links, the rails their NICs), and the latency is
    one chunk's path through the three phases: (g-1) intra-node hops, 2(N-1) network hops, (g-1)
    intra-node hops. The pipeline's fill and drain beyond that latency are not priced (chunks are
    small against the message where bandwidth matters).

    What the schedule itself should do (``schedules.hierarchical_schedule``, kept phase by phase
    for its readers): emit this single pipelined phase, so that DETAILED mode sees the same flows.
    """
    if len(phases) < 2:
        return phases
    transfers = tuple(Transfer(t.src_rank, t.dst_rank, t.nbytes * phase.repeat, t.count)
                      for phase in phases for t in phase.transfers)
    local = [(k, k + 1) for k in range(g - 1)]  # node 0's ring order, one chunk's reduce-scatter
    rail = [((j % nodes) * g, ((j + 1) % nodes) * g) for j in range(2 * (nodes - 1))] if nodes > 1 else []
    path = tuple(local + rail + local)
    return [Phase(transfers, repeat=1, latency_path=path, label="pipelined hierarchical")]


def _check_algorithm(algorithm: str) -> str:
    if algorithm not in ALGORITHMS and algorithm != NVLS:
        raise ValueError(f"unknown algorithm {algorithm!r}; expected one of {', '.join((*ALGORITHMS, NVLS))}")
    return algorithm


def _check_protocol(protocol: str) -> str:
    if protocol not in PROTOCOL_NAMES:
        raise ValueError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOL_NAMES)}")
    return protocol
