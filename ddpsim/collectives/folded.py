"""All-reduce prices on a large uniform rail-optimised cluster, from the few nodes that differ.

FAST mode prices an all-reduce's pipelined phase by max-min fair rates, re-shared as flows finish
(``CollectiveModel._unit_transfer_s``). Both are unique and depend only on which flows cross which
links, their sizes and the links' capacities. Hence, exactly:

1. Parts of a phase that share no link are priced apart; the phase ends when the later part does.
2. A map of the cluster onto itself that carries flows onto flows of the same size and links onto
   links of the same capacity changes no rate: flows it carries onto one another get the same rate
   and end together. A smaller cluster on which every flow crosses links loaded as its own are in the
   whole cluster therefore prices it as the whole cluster does.

On N nodes of g GPUs, one NIC per GPU on rail i, leaves of p nodes per rail joined by a spine (or
one leaf per rail), c = g channels:

* Ring and pipelined hierarchical: node i's flows go to node i+1 (a ring's first cross node i's own
  links, PXN). With one leaf per rail every node is like every other; with p dividing N, node i is
  like node i + p. A cluster of 2 nodes (one leaf per rail) or 2p nodes (two leaves per rail) loads
  every link as the whole one does: the phase is priced there, with the whole cluster's chunk
  (S/(n c) per ring step, S 2(N-1)/(gN) per rail ring) and step count 2(n-1).
* Tree and NVLS: the flows inside a node (the channel chains, the switch's) share no link with the
  flows between nodes (head to head, on the head's own rail: no PXN hop). The node's flows are
  priced on one node; the network's on one rail, GPU 0 of every node (each channel has its own rail,
  and every rail is built alike). Its flows all carry S/(2c), so the last ends when the most loaded
  link has carried its flows: counting flows per link is enough, no flow need be listed.

Latency paths are counted in closed form: hops inside a node and hops across nodes, each of one
latency on these fabrics (the spine's links add none). ``tests/test_folded.py`` checks every price
against the every-rank model. Anything else (custom graphs, node groups, other networks, a last leaf
partly filled, a degraded link, DETAILED mode) is priced on every rank.
"""

from __future__ import annotations

import functools
import heapq
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import NamedTuple

import networkx as nx
import numpy as np

from ddpsim.collectives.model import CollectiveModel, _pipelined_hierarchical, _PricedPhase
from ddpsim.collectives.nvls import NvlsSpec
from ddpsim.collectives.protocols import ProtocolTable
from ddpsim.collectives.schedules import (
    NVLS,
    Phase,
    Transfer,
    build_schedule,
    hierarchical_schedule,
    nvls_schedule,
    tree_schedule,
)
from ddpsim.network import LinkMatrix
from ddpsim.scenario.schema import ClusterSpec
from ddpsim.topology import TRANSPORTS, Route, Topology, build_topology

_NET = TRANSPORTS.index("net")


def fold_problem(cluster: ClusterSpec) -> str | None:
    """Why this cluster's all-reduces are priced on every rank, or None where they fold."""
    inter = cluster.inter_node
    if cluster.topology is not None:
        return "a custom graph"
    if cluster.node_groups is not None:
        return "nodes of several kinds (cluster.node_groups)"
    if inter.type != "rail-fat-tree":
        return f"inter_node.type {inter.type} (folding covers rail-fat-tree)"
    g, nodes = cluster.gpus_per_node, cluster.nodes
    if g < 2:
        return "one GPU per node"
    per_leaf = inter.nodes_per_leaf or nodes
    if per_leaf < nodes and nodes % per_leaf:
        return f"{nodes} nodes do not fill leaves of {per_leaf}"
    leaves = -(-nodes // per_leaf)
    if inter.leaves_per_spine is not None and inter.leaves_per_spine < leaves and leaves % inter.leaves_per_spine:
        return f"{leaves} leaves per rail do not fill spine groups of {inter.leaves_per_spine}"
    if nodes <= _period_nodes(cluster):
        return "no more nodes than the representative cluster has"
    return None


def _tiers(cluster: ClusterSpec) -> tuple[int | None, int | None]:
    """(nodes under one leaf per rail, leaves under one spine group), each None where one holds all."""
    inter = cluster.inter_node
    per_leaf = inter.nodes_per_leaf
    if per_leaf is None or per_leaf >= cluster.nodes:
        return None, None
    per_spine = inter.leaves_per_spine
    return per_leaf, None if per_spine is None or per_spine * per_leaf >= cluster.nodes else per_spine


def _period_nodes(cluster: ClusterSpec) -> int:
    """Nodes of the representative cluster for rings: 2 (one leaf per rail), two leaves' worth, or two
    spine groups' worth."""
    per_leaf, per_spine = _tiers(cluster)
    return 2 * (per_leaf or 1) * (per_spine or 1)


class FoldedTopology(Topology):
    """The links of a folded cluster: its representative clusters' links side by side.

    ``world_size``, ``nodes`` and the rest describe the whole cluster; ``capacity_Bps``, ``latency_s``,
    ``link_class`` and ``link_names`` the representative links (each a link of the whole cluster with
    its name there). There are no per-rank routes.
    """

    def __init__(self, cluster: ClusterSpec, ring: Topology, node: Topology, rail: _RailNetwork,
                 ring_leaves: int) -> None:
        # Topology.__init__ is not run: nothing here is per rank
        self.ring, self.node, self.rail = ring, node, rail
        parts: tuple[Topology | _RailNetwork, ...] = (ring, node, rail)
        self.parts = parts
        self.ring_leaves = ring_leaves  # leaves per rail of the ring's representative cluster
        self.offsets = tuple(int(x) for x in np.cumsum([0, *(p.n_links for p in parts[:-1])]))
        self.world_size = cluster.world_size
        self.gpus_per_node = cluster.gpus_per_node
        self.nodes = cluster.nodes
        self.node_sizes = (cluster.gpus_per_node,) * cluster.nodes
        self.uniform = True
        self.capacity_Bps = np.concatenate([p.capacity_Bps for p in parts])
        self.latency_s = np.concatenate([p.latency_s for p in parts])
        self.link_class = ring.link_class + node.link_class + rail.link_class
        self.intra_transport = ring.intra_transport
        self.nics_per_node = ring.nics_per_node
        self.description = (f"{cluster.nodes}x{cluster.gpus_per_node} {cluster.intra_node.type} + "
                            f"{cluster.inter_node.type}, folded")

    @property
    def graph(self) -> nx.DiGraph:
        raise ValueError("a folded cluster has no graph: build_topology builds the whole one")

    def node_of(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def route(self, src_rank: int, dst_rank: int) -> Route:
        raise ValueError("a folded cluster has no per-rank routes: build_topology builds the whole one")

    def link_names(self, ids: Iterable[int]) -> list[str]:
        names = []
        for i in ids:
            part = int(np.searchsorted(self.offsets, i, side="right")) - 1
            names.extend(self.parts[part].link_names([i - self.offsets[part]]))
        return names

    def busiest(self, per_link: np.ndarray, count: int) -> list[tuple[str, float]]:
        """The ``count`` largest values of a per-link quantity that adds up over flows (bytes, busy
        seconds), on links of the whole cluster by name, largest first (ties by name).

        A link's value is its parts' shares, each read off the link that stands for it there: in the
        ring's cluster, node J mod its nodes and leaf K mod its leaves; in the one node, node 0; in the
        network's, rail 0 (every rail is alike, so rail 0's links stand for all). The network's links
        are many (four per node): they are visited by their own share, largest first, until that share
        plus the largest ring share cannot reach the ``count``-th value found.
        """
        ring = self.ring
        shares = []
        for part, offset in ((self.ring, 0), (self.node, self.offsets[1])):
            values = per_link[offset:offset + part.n_links]
            used = np.flatnonzero(values)
            shares.append(dict(zip(part.link_names(used.tolist()), values[used].tolist(), strict=True)))
        ring_share, node_share = shares
        rail = self.rail
        rail_values = per_link[self.offsets[2]:]
        rail_used = np.flatnonzero(rail_values)

        def value(name: str) -> float:
            total = ring_share.get(_renamed(name, ring.nodes, self.ring_leaves, spines=2), 0.0)
            total += node_share.get(_renamed(name, 1, 1), 0.0)
            link = rail.link_id(_renamed(name, None, None, to_rail_0=True))
            return total + (float(rail_values[link]) if link is not None else 0.0)

        found: dict[str, float] = {}
        for name in [*ring_share, *node_share]:
            found[name] = 0.0
        ring_most = max(ring_share.values(), default=0.0)
        found = {name: value(name) for name in found}
        kept = heapq.nlargest(count, found.values())
        heapq.heapify(kept)  # the count largest values so far, smallest on top
        for link, share in _largest_first(rail_values, rail_used, 4 * count):
            if len(kept) >= count and share + ring_most <= kept[0]:
                break  # ties with the last kept: any of them may be named
            name = rail.link_names([link])[0]
            found[name] = value(name)
            heapq.heappushpop(kept, found[name]) if len(kept) >= count else heapq.heappush(kept, found[name])
        return sorted(found.items(), key=lambda item: (-item[1], item[0]))[:count]

    def with_capacity(self, capacity_Bps: np.ndarray) -> Topology:
        raise ValueError("a folded cluster's links stand for many: degrade a link on the whole cluster")

    def __repr__(self) -> str:
        return f"FoldedTopology({self.description}, {self.world_size} GPUs, {self.n_links} representative links)"


class FoldedCollectiveModel(CollectiveModel):
    """``CollectiveModel`` of a cluster ``fold_problem`` passes, built from its representative clusters
    (FAST mode only: ``allreduce_process`` needs every rank's flows)."""

    def __init__(self, cluster: ClusterSpec, protocol_table: ProtocolTable | None = None,
                 nvls: NvlsSpec | None = None) -> None:
        problem = fold_problem(cluster)
        if problem is not None:
            raise ValueError(f"this cluster does not fold: {problem}")
        inter = cluster.inter_node
        period = _period_nodes(cluster)
        per_leaf, per_spine = _tiers(cluster)
        ring_cluster = replace(cluster, nodes=period, inter_node=replace(inter, nodes_per_leaf=per_leaf,
                                                                         leaves_per_spine=per_spine))
        node = build_topology(replace(cluster, nodes=1))
        # one GPU per node on one rail: channel 0's network (every channel's is alike, on its own rail)
        rail = _RailNetwork(cluster, per_leaf, per_spine)
        super().__init__(FoldedTopology(cluster, build_topology(ring_cluster), node, rail,
                                        ring_leaves=period // (per_leaf or period)), protocol_table,
                         nvls=nvls)
        self.folded: FoldedTopology = self.topology  # type: ignore[assignment]
        self._loads: np.ndarray | None = None  # flows per link of the tree's and NVLS's network (one rail)
        self._most_loaded: float | None = None  # the most flows per byte/s of capacity on one of its links

    def schedule(self, algorithm: str, nbytes: float) -> list[Phase]:
        raise ValueError("a folded cluster has no per-rank schedule: DETAILED mode builds the whole cluster")

    def _structure(self, algorithm: str) -> list[_PricedPhase]:
        cached = self._structures.get(algorithm)
        if cached is None:
            if algorithm == NVLS and self.nvls_efficiency is None:
                raise ValueError("nvls needs NVLink SHARP")
            build = {"ring": self._ring, "hierarchical": self._hierarchical, "tree": self._tree, NVLS: self._nvls}
            cached = self._structures[algorithm] = [build[algorithm]()]
        return cached

    # -- the algorithms ---------------------------------------------------------------------------
    def _ring(self) -> _PricedPhase:
        topo = self.folded
        n, g = topo.world_size, topo.gpus_per_node
        small = topo.ring
        phase = build_schedule("ring", small.world_size, g, 1.0, self.channels)[0]
        steps = 2 * (n - 1)
        across = -(-steps // g)  # hops k of the path that end on a node's first GPU: k = 0, g, 2g, ...
        hops = [(small.route(0, 1).latency_s, False, steps - across), (small.route(g - 1, g).latency_s, True, across)]
        return self._phase([self._flows(0, phase.transfers, small.world_size / n)], steps, hops)

    def _hierarchical(self) -> _PricedPhase:
        topo = self.folded
        n_nodes, g = topo.nodes, topo.gpus_per_node
        small = topo.ring
        small_nodes = small.nodes
        phase = _pipelined_hierarchical(hierarchical_schedule(small.world_size, g, 1.0), g, small_nodes)[0]
        # a rail ring moves 2(N-1)/N of the shard S/g: the whole cluster's N, not the representative's
        rail_scale = ((n_nodes - 1) / n_nodes) / ((small_nodes - 1) / small_nodes)
        scale = np.array([1.0 if t.src_rank // g == t.dst_rank // g else rail_scale for t in phase.transfers])
        hops = [(small.route(0, 1).latency_s, False, 2 * (g - 1)), (small.route(0, g).latency_s, True, 2 * (n_nodes - 1))]
        return self._phase([self._flows(0, phase.transfers, scale)], 1, hops)

    def _tree(self) -> _PricedPhase:
        g = self.folded.gpus_per_node
        return self._node_and_network(tree_schedule(g, g, 1.0, self.channels)[0].transfers, intra_hops=2 * (g - 1))

    def _nvls(self) -> _PricedPhase:
        g = self.folded.gpus_per_node
        return self._node_and_network(nvls_schedule(g, g, 1.0, self.channels)[0].transfers, intra_hops=1)

    def _node_and_network(self, node_transfers: tuple[Transfer, ...], intra_hops: int) -> _PricedPhase:
        """A tree-shaped phase: the flows inside one node, priced as flows, beside channel 0's head-to-head
        flows over the double binary tree of the nodes (``_network_loads``); latency: ``intra_hops``
        inside a node and up and down the deeper tree between nodes."""
        topo = self.folded
        hops = [(topo.node.route(1, 0).latency_s, False, intra_hops),
                (topo.rail.hop_latency_s, True, 2 * _tree_depth(topo.nodes))]
        return self._phase([self._flows(1, node_transfers, 1.0)], 1, hops)

    def _network_loads(self) -> np.ndarray:
        """Flows per link of the folded topology between nodes for a tree or an NVLS tree: each of them
        carries S/(2c) (``tree_schedule``, ``nvls_schedule``). As all are alike, the last ends when the
        most loaded link (flows over capacity) has carried its flows, whatever the re-sharing: that
        link's flows all get its fair share from the start and no more later, every other flow at
        least as much."""
        if self._loads is None:
            topo = self.folded
            self._loads = np.zeros(topo.n_links)
            self._loads[topo.offsets[2]:] = topo.rail.tree_loads()
        return self._loads

    def _unit_transfer_s(self, algorithm: str, protocol: str, index: int) -> float:
        unit = super()._unit_transfer_s(algorithm, protocol, index)
        if algorithm not in ("tree", NVLS) or self.folded.nodes < 2:
            return unit
        # the network's flows share no link with the node's: the phase ends with the later part
        _, _, efficiency = self._protocol_coefficients(algorithm, protocol)
        if self._most_loaded is None:
            self._most_loaded = float(np.max(self._network_loads() / self.folded.capacity_Bps))
        return max(unit, self._most_loaded / (2 * self.channels) / efficiency[_NET])

    def link_bytes(self, nbytes: float, algorithm: str, protocol: str = "simple") -> np.ndarray:
        carried = super().link_bytes(nbytes, algorithm, protocol)
        if algorithm in ("tree", NVLS) and self.folded.nodes > 1:
            _, _, efficiency = self._protocol_coefficients(algorithm, protocol)
            stretch = self.bandwidth_stretch(nbytes, algorithm, protocol)
            carried = carried + self._network_loads() * nbytes * stretch / (2 * self.channels) / efficiency[_NET]
        return carried

    # -- assembling a phase -----------------------------------------------------------------------
    def _flows(self, part_index: int, transfers: Sequence[Transfer], scale: float | np.ndarray) -> _Flows:
        """Transfers between ranks of one representative cluster (0: the ring's, 1: the node), routed
        there, bytes times ``scale``."""
        topo = self.folded
        part, offset = (topo.ring, topo.node)[part_index], topo.offsets[part_index]
        intra_code = TRANSPORTS.index(topo.intra_transport)
        routes = [part.route(t.src_rank, t.dst_rank) for t in transfers]
        local = np.array([part.node_of(t.src_rank) == part.node_of(t.dst_rank) for t in transfers], dtype=bool)
        indptr = np.zeros(len(routes) + 1, dtype=np.int64)
        np.cumsum([len(r.link_ids) for r in routes], out=indptr[1:])
        return _Flows(indptr, np.array([i + offset for r in routes for i in r.link_ids], dtype=np.int64),
                      np.array([t.nbytes for t in transfers]) * scale,
                      np.array([t.count for t in transfers], dtype=np.int64),
                      np.array([r.latency_s for r in routes]), np.where(local, intra_code, _NET), local)

    def _phase(self, parts: Sequence[_Flows], repeat: int, hops: Sequence[tuple[float, bool, int]]) -> _PricedPhase:
        """One pipelined phase of the given flows; ``hops``: (latency, crosses nodes, how many) of its
        latency path."""
        intra_code = TRANSPORTS.index(self.folded.intra_transport)
        kept = [h for h in hops if h[2] > 0]
        lengths = np.concatenate([np.diff(f.indptr) for f in parts])
        indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        return _PricedPhase(
            phase=Phase((), repeat=repeat, latency_path=(), label="folded"),
            link_ids=[],
            fraction=np.concatenate([f.fraction for f in parts]),
            count=np.concatenate([f.multiplicity for f in parts]),
            link_latency_s=np.concatenate([f.latency_s for f in parts]),
            transport=np.concatenate([f.transport for f in parts]).astype(np.int64),
            path_latency_s=np.array([h[0] for h in kept]),
            path_transport=np.array([_NET if h[1] else intra_code for h in kept], dtype=np.int64),
            path_weight=np.array([h[2] for h in kept], dtype=np.float64),
            path_intra=np.array([not h[1] for h in kept], dtype=bool),
            local=np.concatenate([f.local for f in parts]),
            matrix=LinkMatrix(indptr, np.concatenate([f.indices for f in parts])),
        )


class _Flows(NamedTuple):
    """Flows of one part of a phase: CSR routes (link ids of the folded topology) and per flow its
    bytes per byte all-reduced, multiplicity, route latency, transport index and whether it stays in a node."""

    indptr: np.ndarray
    indices: np.ndarray
    fraction: np.ndarray
    multiplicity: np.ndarray
    latency_s: np.ndarray
    transport: np.ndarray
    local: np.ndarray


class _RailNetwork:
    """One rail of a uniform rail-optimised fabric, GPU 0 of every node on it: what
    ``topology.build_topology`` builds for the cluster with one GPU per node (``tests/test_folded.py``
    holds them equal, names included), as arrays, in time that does not grow with Python loops.

    Per node: its NIC's up and down links (half the network latency each) and, where the endpoint is
    not full duplex, the endpoint link both cross; per leaf of ``per_leaf`` nodes (where there is more
    than one), its up- and downlink to its spine, at what its ports inject over the oversubscription;
    per spine group of ``per_spine`` leaves (where there is more than one), its up- and downlink to the
    core: the group's uplink carries every rail's leaves, so this rail's share, one of g alike, is a g-th.
    """

    def __init__(self, cluster: ClusterSpec, per_leaf: int | None, per_spine: int | None) -> None:
        inter = cluster.inter_node
        self.nodes = cluster.nodes
        self.per_leaf = per_leaf or self.nodes
        self.leaves = self.nodes // self.per_leaf
        self.per_spine = per_spine or self.leaves
        self.groups = self.leaves // self.per_spine
        nic_Bps, duplex = inter.nic_bandwidth_Bps, float(inter.duplex_factor)
        self.endpoint = duplex < 1.0
        self.per_node = 3 if self.endpoint else 2
        self.spine_base = self.nodes * self.per_node
        self.core_base = self.spine_base + (2 * self.leaves if self.leaves > 1 else 0)
        leaf_up_Bps = self.per_leaf * nic_Bps / inter.oversubscription
        node_capacity = [nic_Bps, nic_Bps] + ([2.0 * duplex * nic_Bps] if self.endpoint else [])
        node_latency = [inter.latency_s / 2, inter.latency_s / 2] + ([0.0] if self.endpoint else [])
        self.capacity_Bps = np.concatenate([
            np.tile(node_capacity, self.nodes), np.full(self.core_base - self.spine_base, leaf_up_Bps),
            np.full(2 * self.groups if self.groups > 1 else 0,
                    self.per_spine * leaf_up_Bps / inter.spine_oversubscription)])
        self.n_links = len(self.capacity_Bps)
        self.latency_s = np.concatenate([np.tile(node_latency, self.nodes), np.zeros(self.n_links - self.spine_base)])
        self.link_class = ("inter",) * self.n_links
        self.hop_latency_s = inter.latency_s  # a route's links' latencies add up to it, spine or not

    def link_names(self, ids: Iterable[int]) -> list[str]:
        names = []
        for i in ids:
            if i < self.spine_base:
                node, kind = divmod(i, self.per_node)
                gpu, leaf_name = f"n{node}.g0", self._leaf(node // self.per_leaf)
                names.append(f"{gpu}->{leaf_name}" if kind == 0 else f"{leaf_name}->{gpu}" if kind == 1
                             else f"{gpu}.endpoint->{gpu}.endpoint")
            elif i < self.core_base:
                leaf, down = divmod(i - self.spine_base, 2)
                spine = self._spine(leaf // self.per_spine)
                names.append(f"{spine}->{self._leaf(leaf)}" if down else f"{self._leaf(leaf)}->{spine}")
            else:
                group, down = divmod(i - self.core_base, 2)
                names.append(f"core->{self._spine(group)}" if down else f"{self._spine(group)}->core")
        return names

    def link_id(self, name: str) -> int | None:
        """The id of the link ``link_names`` calls ``name``, None where this rail has no such link."""
        match = _RAIL_LINK.fullmatch(name)
        if match is None:
            return None
        up_node, up_leaf, down_leaf, down_node, endpoint, leaf_from, spine_to, spine_from, leaf_to, group_up, \
            group_down = match.groups()
        if endpoint is not None:
            node = int(endpoint)
            return node * self.per_node + 2 if self.endpoint and node < self.nodes else None
        if up_node is not None or down_node is not None:
            node, leaf, kind = (int(up_node), up_leaf, 0) if up_node is not None else (int(down_node), down_leaf, 1)
            if node >= self.nodes or leaf != self._leaf(node // self.per_leaf):
                return None
            return node * self.per_node + kind
        if leaf_from is not None or leaf_to is not None:
            leaf_name, spine, down = (leaf_from, spine_to, 0) if leaf_from is not None else (leaf_to, spine_from, 1)
            index = int(leaf_name[len("rail0.leaf"):] or 0)
            if self.leaves < 2 or index >= self.leaves or leaf_name != self._leaf(index) \
                    or spine != self._spine(index // self.per_spine):
                return None
            return self.spine_base + 2 * index + down
        spine, down = (group_up, 0) if group_up is not None else (group_down, 1)
        index = int(spine[len("spine"):] or 0)
        if self.groups < 2 or index >= self.groups or spine != self._spine(index):
            return None
        return self.core_base + 2 * index + down

    def _leaf(self, k: int) -> str:
        return "rail0.leaf" if self.leaves == 1 else f"rail0.leaf{k}"

    def _spine(self, k: int) -> str:
        return "spine" if self.groups == 1 else f"spine{k}"

    def tree_loads(self) -> np.ndarray:
        """Flows on each link when every edge of the double binary tree over the nodes carries one flow
        each way per tree (``schedules._head_tree_pairs`` of one channel, routed; counted without listing
        the flows)."""
        degree = np.zeros(self.nodes)
        leaf_crossing = np.zeros(self.leaves)
        group_crossing = np.zeros(self.groups)
        for parents in _double_tree(self.nodes):
            child = np.flatnonzero(parents >= 0)
            parent = parents[child]
            degree += np.bincount(child, minlength=self.nodes) + np.bincount(parent, minlength=self.nodes)
            # an edge between leaves (spine groups): one flow up and one down through each end's uplink
            for per, crossing in ((self.per_leaf, leaf_crossing), (self.per_leaf * self.per_spine, group_crossing)):
                ends = [child // per, parent // per]
                apart = ends[0] != ends[1]
                for end in ends:
                    crossing += np.bincount(end[apart], minlength=len(crossing))
        per_node = [degree, degree] + ([2 * degree] if self.endpoint else [])
        return np.concatenate([np.column_stack(per_node).reshape(-1),
                               np.repeat(leaf_crossing, 2) if self.leaves > 1 else np.zeros(0),
                               np.repeat(group_crossing, 2) if self.groups > 1 else np.zeros(0)])


@functools.lru_cache(maxsize=4)
def _double_tree(n: int) -> tuple[np.ndarray, np.ndarray]:
    """NCCL's double binary tree over n vertices, parents per vertex (-1: root):
    ``schedules.double_binary_tree`` as arrays."""
    first = np.full(n, -1, dtype=np.int64)
    rank = np.arange(1, n, dtype=np.int64)
    bit = rank & -rank
    up = (rank ^ bit) | (bit << 1)
    first[1:] = np.where(up < n, up, rank ^ bit)
    every = np.arange(n, dtype=np.int64)
    if n % 2:
        above = first[(every - 1) % n]
        second = np.where(above == -1, -1, (above + 1) % n)
    else:
        mirrored = first[n - 1 - every]
        second = np.where(mirrored == -1, -1, n - 1 - mirrored)
    first.setflags(write=False)  # kept by the cache: read only
    second.setflags(write=False)
    return first, second


@functools.lru_cache(maxsize=16)
def _tree_depth(n: int) -> int:
    """Edges from the deepest vertex to the root in the deeper tree (``schedules.tree_depth``)."""
    deepest = 0
    for parents in _double_tree(n):
        at, depth = np.arange(n), 0
        while True:
            at = parents[at[at >= 0]]
            at = at[at >= 0]
            if not len(at):
                break
            depth += 1
        deepest = max(deepest, depth)
    return deepest


def _largest_first(values: np.ndarray, used: np.ndarray, head: int) -> Iterator[tuple[int, float]]:
    """(index, value) of ``used`` by decreasing value (ties by index): the first ``head`` by a partial
    sort, the rest sorted only if asked for."""
    if head < len(used):
        parted = np.argpartition(-values[used], head - 1)
        first, rest = used[parted[:head]], used[parted[head:]]
    else:
        first, rest = used, used[:0]
    for part in (first, rest):
        ordered = part[np.lexsort((part, -values[part]))]
        yield from zip(ordered.tolist(), values[ordered].tolist(), strict=True)


_RAIL_LINK = re.compile(r"n(\d+)\.g0->(rail0\.leaf\d*)|(rail0\.leaf\d*)->n(\d+)\.g0|"
                        r"n(\d+)\.g0\.endpoint->n\d+\.g0\.endpoint|(rail0\.leaf\d*)->(spine\d*)|"
                        r"(spine\d*)->(rail0\.leaf\d*)|(spine\d*)->core|core->(spine\d*)")
_TOKEN = re.compile(r"\bn(\d+)\.|leaf(\d+)|rail(\d+)|\.g(\d+)\b|spine(\d+)")


def _renamed(name: str, nodes: int | None, leaves: int | None, to_rail_0: bool = False,
             spines: int | None = None) -> str:
    """A link's name with node J as J mod ``nodes``, leaf K as K mod ``leaves`` (an unnumbered leaf
    where that is 1), spine group K as K mod ``spines`` and, ``to_rail_0``, every rail and GPU as rail 0
    and GPU 0 (None: kept)."""

    def swap(match: re.Match[str]) -> str:
        node, leaf, rail, gpu, spine = match.groups()
        if node is not None:
            return f"n{int(node) % nodes if nodes else node}."
        if leaf is not None:
            return "leaf" if leaves == 1 else f"leaf{int(leaf) % leaves if leaves else leaf}"
        if spine is not None:
            return f"spine{int(spine) % spines if spines else spine}"
        if rail is not None:
            return "rail0" if to_rail_0 else match.group(0)
        return ".g0" if to_rail_0 else match.group(0)

    return _TOKEN.sub(swap, name)
