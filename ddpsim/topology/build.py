"""Build a cluster's link graph from a ``ClusterSpec`` and route between GPUs.

Every physical link is full duplex, so it becomes two directed links with their own capacity; a
directed link's integer id indexes ``Topology.capacity_Bps`` and every per-link array downstream.
A GPU's network endpoint that is not full duplex adds one more link both directions cross
(``_EndpointBudget``).

Preset clusters are routed structurally (table look-ups, no graph search) because a 16,384-GPU
cluster must build and route in seconds; custom graphs fall back to shortest paths by hop count.

Latency conventions: a preset's per-hop latency is split evenly over the two links of a switched
hop (GPU->switch->GPU) so that one GPU-to-GPU hop costs exactly the configured latency; likewise an
inter-node route costs the configured network latency once, whatever the switch levels crossed.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np

from ddpsim.errors import ScenarioError
from ddpsim.scenario.link_kinds import INTRA_NODE_TYPES, NCCL_TRANSPORTS, nccl_transport_of_type
from ddpsim.scenario.schema import (
    INTER_NODE_TYPES,
    ClusterSpec,
    CustomTopologySpec,
    InterNodeSpec,
)

# How a GPU-to-GPU hop is carried, the key protocol latencies are looked up by (NCCL's NVLINK,
# PCI and NET hardware classes, plus host shared memory which has its own measured behaviour).
TRANSPORTS = NCCL_TRANSPORTS
_HUB_NAME = {"nvswitch": "nvsw", "pcie": "pcie", "shm": "host", "socket": "host"}


@dataclass(frozen=True)
class Route:
    """Directed link ids from source GPU to destination GPU, and the summed link latency."""

    link_ids: tuple[int, ...]
    latency_s: float


class _LinkTable:
    """Directed links accumulated while a topology is built (ids are list positions)."""

    def __init__(self) -> None:
        self.src: list[str] = []
        self.dst: list[str] = []
        self.bandwidth_Bps: list[float] = []
        self.latency_s: list[float] = []
        self.link_class: list[str] = []

    def add(self, u: str, v: str, bandwidth_Bps: float, latency_s: float, link_class: str) -> int:
        """One directed link; its id."""
        self.src.append(u)
        self.dst.append(v)
        self.bandwidth_Bps.append(bandwidth_Bps)
        self.latency_s.append(latency_s)
        self.link_class.append(link_class)
        return len(self.src) - 1

    def add_duplex(self, a: str, b: str, bandwidth_Bps: float, latency_s: float, link_class: str) -> tuple[int, int]:
        return (self.add(a, b, bandwidth_Bps, latency_s, link_class),
                self.add(b, a, bandwidth_Bps, latency_s, link_class))


class Topology:
    """A built cluster: the graph, GPUs in rank order, directed link arrays and routes.

    Attributes:
        graph: ``nx.DiGraph`` (a preset's is assembled on first use: routing never needs it, and at
            131,072 GPUs it took most of the build's time and memory); edges carry bandwidth_Bps, latency_s, link_class ("intra"|"inter")
            and link_id (the index into the per-link arrays).
        gpu_vertices: vertex name of each rank, in rank order.
        node_sizes: GPUs of each node in rank order (ranks node-major); ``gpus_per_node`` is the
            first node's, which is every node's unless ``uniform`` is False.
        capacity_Bps: per directed link, bytes/s.
        latency_s: per directed link, seconds.
        link_class: per directed link, "intra" or "inter".
        intra_transport: how GPUs of one node talk ("nvlink", "pci", "shm" or "net").
        nics_per_node: distinct network ports a node's GPUs send through (0 on one node; 1 for
            custom graphs, whose ports are not known; the fewest of any node where nodes differ, as
            NCCL keeps the fewest channels any rank found): how many rings NCCL would spread over.
    """

    def __init__(
        self,
        *,
        graph: nx.DiGraph | None = None,
        vertices: dict[str, dict[str, object]] | None = None,
        gpu_vertices: Sequence[str],
        gpus_per_node: int,
        links: _LinkTable,
        router: Callable[[int, int], tuple[int, ...] | Route],
        intra_transport: str,
        description: str,
        nics_per_node: int = 1,
        node_sizes: Sequence[int] | None = None,
    ) -> None:
        if graph is None and vertices is None:
            raise ValueError("a topology needs its graph or its vertices")
        self._graph = graph
        self._vertices = vertices
        self.gpu_vertices: tuple[str, ...] = tuple(gpu_vertices)
        self.gpus_per_node = gpus_per_node
        self.world_size = len(self.gpu_vertices)
        if node_sizes is None:
            node_sizes = (gpus_per_node,) * (self.world_size // gpus_per_node)
        if sum(node_sizes) != self.world_size:
            raise ValueError(f"node sizes {tuple(node_sizes)} do not add up to {self.world_size} GPUs")
        self.node_sizes: tuple[int, ...] = tuple(node_sizes)
        self.uniform = len(set(self.node_sizes)) == 1
        self.nodes = len(self.node_sizes)
        self.node_first_rank: tuple[int, ...] = tuple(int(x) for x in np.cumsum((0, *self.node_sizes[:-1])))
        self._node_of_rank: tuple[int, ...] = tuple(n for n, size in enumerate(self.node_sizes) for _ in range(size))
        self.capacity_Bps = np.asarray(links.bandwidth_Bps, dtype=np.float64)
        self.latency_s = np.asarray(links.latency_s, dtype=np.float64)
        self.link_class: tuple[str, ...] = tuple(links.link_class)
        self.intra_transport = intra_transport
        self.description = description
        self.nics_per_node = nics_per_node if self.nodes > 1 else 0
        self._links = links
        self._router = router
        self._routes: dict[tuple[int, int], Route] = {}

    @property
    def graph(self) -> nx.DiGraph:
        if self._graph is None:
            assert self._vertices is not None
            self._graph = _assemble_graph(self._vertices, self._links)
        return self._graph

    @property
    def n_links(self) -> int:
        return len(self.capacity_Bps)

    def node_of(self, rank: int) -> int:
        return self._node_of_rank[rank]

    def route(self, src_rank: int, dst_rank: int) -> Route:
        """The directed links a transfer from ``src_rank`` to ``dst_rank`` crosses (cached)."""
        key = (src_rank, dst_rank)
        cached = self._routes.get(key)
        if cached is not None:
            return cached
        if not (0 <= src_rank < self.world_size and 0 <= dst_rank < self.world_size):
            raise IndexError(f"rank pair {key} outside world of {self.world_size}")
        found = self._router(src_rank, dst_rank)
        if isinstance(found, Route):
            route = found  # the router priced its own latency (a PXN route: see _PresetRouter)
        else:
            lat = self.latency_s
            route = Route(found, float(sum(lat[i] for i in found)))
        self._routes[key] = route
        return route

    def transport(self, src_rank: int, dst_rank: int) -> str:
        """The transport class of a hop: the node's intra transport, or "net" across nodes."""
        if self.node_of(src_rank) == self.node_of(dst_rank):
            return self.intra_transport
        return "net"

    def link_names(self, ids: Iterable[int]) -> list[str]:
        """Human-readable "u->v" names of directed links, for reports."""
        return [f"{self._links.src[i]}->{self._links.dst[i]}" for i in ids]

    def link_endpoints(self, link_id: int) -> tuple[str, str]:
        return self._links.src[link_id], self._links.dst[link_id]

    def nic_uplink(self, rank: int) -> int | None:
        """The first inter-node link a rank's traffic to another node enters (None on one node)."""
        if self.nodes < 2:
            return None
        other = self.node_first_rank[(self.node_of(rank) + 1) % self.nodes]
        for link_id in self.route(rank, other).link_ids:
            if self.link_class[link_id] == "inter":
                return link_id
        return None

    def with_capacity(self, capacity_Bps: np.ndarray) -> Topology:
        """A copy whose links have the given capacities (e.g. a degraded link); routes are shared."""
        capacity = np.asarray(capacity_Bps, dtype=np.float64)
        if capacity.shape != self.capacity_Bps.shape:
            raise ValueError(f"expected {self.capacity_Bps.shape} capacities, got {capacity.shape}")
        if not np.all(capacity > 0):
            raise ValueError("link capacities must be positive")
        links = _LinkTable()
        links.src, links.dst = self._links.src, self._links.dst
        links.bandwidth_Bps = [float(c) for c in capacity]
        links.latency_s, links.link_class = self._links.latency_s, self._links.link_class
        graph = None
        if self._graph is not None or self._vertices is None:
            graph = self.graph.copy()
            for i in np.flatnonzero(capacity != self.capacity_Bps):
                graph.edges[links.src[i], links.dst[i]]["bandwidth_Bps"] = float(capacity[i])
        twin = Topology(
            graph=graph,
            vertices=self._vertices,
            gpu_vertices=self.gpu_vertices,
            gpus_per_node=self.gpus_per_node,
            links=links,
            router=self._router,
            intra_transport=self.intra_transport,
            description=self.description,
            nics_per_node=self.nics_per_node,
            node_sizes=self.node_sizes,
        )
        twin._routes = self._routes  # routes depend on structure only, never on capacity
        return twin

    def __repr__(self) -> str:
        return f"Topology({self.description}, {self.world_size} GPUs, {self.n_links} directed links)"


def build_topology(cluster: ClusterSpec, *, nodes_per_leaf: int | None = None) -> Topology:
    """Build the link graph of a cluster.

    ``nodes_per_leaf`` (default ``cluster.inter_node.nodes_per_leaf``) shapes the network's leaves:
    how many nodes share a leaf switch (on a rail-optimised fabric, one leaf per rail per group of
    nodes). Unset, a fat-tree or ethernet network gets 1, which sends every inter-node flow through
    the spine, so oversubscription always applies (the conservative reading of a fat tree whose radix
    the scenario does not give), and a rail-optimised one gets every node, one leaf per rail.
    """
    if cluster.topology is not None:
        return _build_custom(cluster, cluster.topology)
    if nodes_per_leaf is None:
        nodes_per_leaf = cluster.inter_node.nodes_per_leaf
    return _build_preset(cluster, nodes_per_leaf)


def _gpu(node: int, index: int) -> str:
    return f"n{node}.g{index}"


def _check_positive(value: float, field: str, what: str) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ScenarioError(f"{what} must be a positive finite number, got {value!r}", field=field)


def _check_latency(value: float, field: str) -> None:
    if not (value >= 0 and np.isfinite(value)):
        raise ScenarioError(f"latency must be non-negative and finite, got {value!r}", field=field)


def _assemble_graph(vertices: dict[str, dict[str, object]], links: _LinkTable) -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(vertices.items())
    graph.add_edges_from(
        (u, v, {"bandwidth_Bps": bw, "latency_s": lat, "link_class": cls, "link_id": i})
        for i, (u, v, bw, lat, cls) in enumerate(
            zip(links.src, links.dst, links.bandwidth_Bps, links.latency_s, links.link_class, strict=True)
        )
    )
    return graph


class _PresetRouter:
    """Structural routes: switch or ring inside a node, up to a leaf (and spine) across nodes.

    ``pxn`` (rail-optimised fabrics): traffic between GPUs on different rails never changes rail
    through the spine. As NCCL's PXN does (``../shared/reference/ddp-nccl-facts.md`` section 3; NCCL
    keeps ring traffic on one rail), it first crosses the node's own links to the GPU that sits on
    the destination's rail, then leaves through that GPU's NIC. Such a route's latency is the
    network part alone: NCCL's NET hop latency, which the scenario's network latency stands for,
    was measured with PXN on and already holds the NVLink crossing. A node with fewer GPUs than the
    destination's rail number has no GPU on that rail: its traffic leaves on its own rail and
    changes rail through the spine.
    """

    def __init__(self, node_sizes: Sequence[int], ring: bool) -> None:
        self.ring = ring
        self.size = list(node_sizes)
        # per rank: its node, its index in the node, and the node's first rank
        self.node = [n for n, g in enumerate(node_sizes) for _ in range(g)]
        self.local = [i for g in node_sizes for i in range(g)]
        first = np.cumsum((0, *node_sizes[:-1])).tolist()
        self.base = [first[n] for n in self.node]
        world = len(self.node)
        # intra: GPU->hub and hub->GPU for switched nodes, next/previous link for rings
        self.up = [-1] * world
        self.down = [-1] * world
        # inter: links from a GPU up to its leaf and back down, the leaf it hangs off
        self.to_leaf: list[tuple[int, ...]] = [()] * world
        self.from_leaf: list[tuple[int, ...]] = [()] * world
        self.leaf_of = [-1] * world
        self.leaf_up: list[int] = []
        self.leaf_down: list[int] = []
        # the third tier (inter_node.leaves_per_spine): each leaf's spine group, its links to the core
        self.group_of_leaf: list[int] = []
        self.group_up: list[int] = []
        self.group_down: list[int] = []
        self.pxn = False
        self.link_latency_s: list[float] = []  # the link table's latencies (for PXN routes)

    def __call__(self, src: int, dst: int) -> tuple[int, ...] | Route:
        if src == dst:
            return ()
        if self.node[src] == self.node[dst]:
            return self._intra(src, dst)
        rail = self.local[dst]
        if self.pxn and self.local[src] != rail and rail < self.size[self.node[src]]:
            proxy = self.base[src] + rail  # the source node's GPU on the destination's rail
            network = self._network(proxy, dst)
            return Route(self._intra(src, proxy) + network, float(sum(self.link_latency_s[i] for i in network)))
        return self._network(src, dst)

    def _network(self, src: int, dst: int) -> tuple[int, ...]:
        """From ``src``'s NIC to ``dst``: up to the leaf, through the spine where the leaves differ, and
        through the core where their spine groups differ."""
        leaf_src, leaf_dst = self.leaf_of[src], self.leaf_of[dst]
        if leaf_src == leaf_dst:
            return self.to_leaf[src] + self.from_leaf[dst]
        if self.group_of_leaf:
            group_src, group_dst = self.group_of_leaf[leaf_src], self.group_of_leaf[leaf_dst]
            if group_src != group_dst:
                return self.to_leaf[src] + (self.leaf_up[leaf_src], self.group_up[group_src],
                                            self.group_down[group_dst], self.leaf_down[leaf_dst]) + self.from_leaf[dst]
        return self.to_leaf[src] + (self.leaf_up[leaf_src], self.leaf_down[leaf_dst]) + self.from_leaf[dst]

    def _intra(self, src: int, dst: int) -> tuple[int, ...]:
        """Links between two GPUs of one node: through the hub, or the shorter way round the ring."""
        if not self.ring:
            return (self.up[src], self.down[dst])
        g = self.size[self.node[src]]
        base, local_src, local_dst = self.base[src], self.local[src], self.local[dst]
        forward = (local_dst - local_src) % g
        # the shorter way round; ties go forward so routes are deterministic
        if forward <= g - forward:
            return tuple(self.up[base + (local_src + k) % g] for k in range(forward))
        return tuple(self.down[base + (local_src - k) % g] for k in range(g - forward))


def _per_node(cluster: ClusterSpec, group_field: str, cluster_Bps: float) -> list[float]:
    """Each node's rate of one kind (NIC or intra-node link): its group's where the cluster has groups
    and the group gives one."""
    if cluster.node_groups is None:
        return [cluster_Bps] * cluster.nodes
    rates = []
    for group in cluster.node_groups:
        rate = getattr(group, group_field)
        rates += [cluster_Bps if rate is None else rate] * group.count
    return rates


def _build_preset(cluster: ClusterSpec, nodes_per_leaf: int | None) -> Topology:
    n_nodes, g = cluster.nodes, cluster.gpus_per_node
    if not (isinstance(n_nodes, int) and n_nodes >= 1):
        raise ScenarioError(f"expected a whole number of nodes >= 1, got {n_nodes!r}", field="cluster.nodes")
    if not (isinstance(g, int) and g >= 1):
        raise ScenarioError(f"expected a whole number >= 1, got {g!r}", field="cluster.gpus_per_node")
    if nodes_per_leaf is not None and nodes_per_leaf < 1:
        raise ValueError(f"nodes_per_leaf must be >= 1, got {nodes_per_leaf}")
    intra, inter = cluster.intra_node, cluster.inter_node
    if intra.type not in INTRA_NODE_TYPES:
        raise ScenarioError(f"expected one of {', '.join(INTRA_NODE_TYPES)}, got {intra.type!r}",
                            field="cluster.intra_node.type")
    _check_positive(intra.bandwidth_Bps, "cluster.intra_node.bandwidth", "bandwidth")
    _check_latency(intra.latency_s, "cluster.intra_node.latency")

    sizes = cluster.node_sizes
    n_nodes = len(sizes)
    ring = intra.type == "nvlink-ring"
    router = _PresetRouter(sizes, ring)
    links = _LinkTable()
    vertices: dict[str, dict[str, object]] = {}
    gpus = [_gpu(node, i) for node, size in enumerate(sizes) for i in range(size)]
    for rank, name in enumerate(gpus):
        vertices[name] = {"kind": "gpu", "rank": rank, "node": router.node[rank]}

    firsts = np.cumsum((0, *sizes[:-1])).tolist()
    intra_Bps = _per_node(cluster, "intra_bandwidth_Bps", intra.bandwidth_Bps)
    for node, size in enumerate(sizes):
        base, node_intra_Bps = firsts[node], intra_Bps[node]
        _check_positive(node_intra_Bps, "cluster.intra_node.bandwidth", "bandwidth")
        if ring:
            # direct GPU-GPU links; a 2-GPU "ring" is one duplex link used both ways round
            pairs = [(i, (i + 1) % size) for i in range(size if size > 2 else size - 1)]
            for i, j in pairs:
                fwd, back = links.add_duplex(_gpu(node, i), _gpu(node, j), node_intra_Bps, intra.latency_s, "intra")
                router.up[base + i], router.down[base + j] = fwd, back
                if size == 2:
                    router.up[base + j], router.down[base + i] = back, fwd
        else:
            hub = f"n{node}.{_HUB_NAME[intra.type]}"
            vertices[hub] = {"kind": "switch", "node": node}
            half_latency_s = intra.latency_s / 2
            for i in range(size):
                router.up[base + i], router.down[base + i] = links.add_duplex(
                    _gpu(node, i), hub, node_intra_Bps, half_latency_s, "intra")

    nics = 0
    if n_nodes > 1:
        nics = _build_inter(cluster, router, links, vertices, nodes_per_leaf)

    shape = f"{n_nodes}x{g}" if len(set(sizes)) == 1 else "+".join(
        f"{group.count}x{group.gpus_per_node}" for group in cluster.node_groups or ())
    description = f"{shape} {intra.type}" + (f" + {inter.type}" if n_nodes > 1 else "")
    return Topology(vertices=vertices, gpu_vertices=gpus, gpus_per_node=sizes[0], links=links, router=router,
                    intra_transport=nccl_transport_of_type(intra.type), description=description, nics_per_node=nics,
                    node_sizes=sizes)


def _build_inter(cluster: ClusterSpec, router: _PresetRouter, links: _LinkTable,
                 vertices: dict[str, dict[str, object]], nodes_per_leaf: int | None) -> int:
    """Add NICs, leaves and spine; returns the number of distinct network ports per node (the fewest
    of any node)."""
    sizes = cluster.node_sizes
    n_nodes = len(sizes)
    inter = cluster.inter_node
    if inter.type not in INTER_NODE_TYPES:
        raise ScenarioError(f"expected one of {', '.join(INTER_NODE_TYPES)}, got {inter.type!r}",
                            field="cluster.inter_node.type")
    if inter.type == "none":
        raise ScenarioError(
            f"GPU {_gpu(0, 0)} cannot reach GPU {_gpu(1, 0)}: inter_node.type is none but nodes = {n_nodes}",
            field="cluster.topology")
    nics_Bps = _per_node(cluster, "nic_bandwidth_Bps", inter.nic_bandwidth_Bps)
    for nic_Bps in nics_Bps:
        _check_positive(nic_Bps, "cluster.inter_node.nic_bandwidth", "bandwidth")
    _check_latency(inter.latency_s, "cluster.inter_node.latency")
    _check_positive(inter.oversubscription, "cluster.inter_node.oversubscription", "oversubscription")
    half_latency_s = inter.latency_s / 2
    endpoint = _EndpointBudget(links, vertices, inter.duplex_factor)

    leaf_names: list[str] = []
    leaf_down_Bps: list[float] = []
    if inter.type == "rail-fat-tree":
        # rail i joins GPU i of every node on its leaves: same-rail traffic under one leaf never climbs to
        # the spine, and other traffic changes rail inside the node (PXN), never through the spine
        router.pxn = True
        router.link_latency_s = links.latency_s
        per_leaf = n_nodes if nodes_per_leaf is None else nodes_per_leaf
        groups = -(-n_nodes // per_leaf)
        groups_per_rail = groups
        rails = max(sizes)
        for i in range(rails):
            for k in range(groups):
                leaf_names.append(f"rail{i}.leaf" if groups == 1 else f"rail{i}.leaf{k}")
                members = range(k * per_leaf, min(n_nodes, (k + 1) * per_leaf))
                leaf_down_Bps.append(sum(nics_Bps[node] for node in members if sizes[node] > i))
        for rank, node in enumerate(router.node):
            i = router.local[rank]
            leaf = i * groups + node // per_leaf
            nic_Bps = nics_Bps[node]
            up, down = links.add_duplex(_gpu(node, i), leaf_names[leaf], nic_Bps, half_latency_s, "inter")
            shared = endpoint.add(_gpu(node, i), nic_Bps)
            router.to_leaf[rank], router.from_leaf[rank], router.leaf_of[rank] = (up, *shared), (down, *shared), leaf
        ports = min(sizes)
    else:
        per_leaf = 1 if nodes_per_leaf is None else nodes_per_leaf
        node_nics = [(g if inter.type == "fat-tree" else 1) if inter.nics_per_node is None else inter.nics_per_node
                     for g in sizes]
        for nics in node_nics:
            if not (isinstance(nics, int) and nics >= 1):
                raise ScenarioError(f"expected a whole number >= 1, got {nics!r}",
                                    field="cluster.inter_node.nics_per_node")
        ports = min(min(nics, g) for nics, g in zip(node_nics, sizes, strict=True))
        n_leaves = -(-n_nodes // per_leaf)
        groups_per_rail = n_leaves
        for leaf in range(n_leaves):
            leaf_names.append(f"leaf{leaf}")
            members = range(leaf * per_leaf, min(n_nodes, (leaf + 1) * per_leaf))
            leaf_down_Bps.append(sum(node_nics[node] * nics_Bps[node] for node in members))
        firsts = np.cumsum((0, *sizes[:-1])).tolist()
        for node, g in enumerate(sizes):
            leaf, nics, nic_Bps, first = node // per_leaf, node_nics[node], nics_Bps[node], firsts[node]
            if nics >= g:
                # a GPU with several NICs is modelled as one port of their summed bandwidth
                for i in range(g):
                    up, down = links.add_duplex(_gpu(node, i), leaf_names[leaf], nic_Bps * nics / g,
                                                half_latency_s, "inter")
                    shared = endpoint.add(_gpu(node, i), nic_Bps * nics / g)
                    rank = first + i
                    router.to_leaf[rank], router.from_leaf[rank], router.leaf_of[rank] = (up, *shared), (down, *shared), leaf
                continue
            node_ports = []
            for j in range(nics):
                nic = f"n{node}.nic{j}"
                vertices[nic] = {"kind": "nic", "node": node}
                node_ports.append(links.add_duplex(nic, leaf_names[leaf], nic_Bps, half_latency_s, "inter"))
            for i in range(g):
                j = i * nics // g
                # the GPU->NIC hop (PCIe) is given the NIC's rate so that it never is the bottleneck
                gpu_up, gpu_down = links.add_duplex(_gpu(node, i), f"n{node}.nic{j}", nic_Bps, 0.0, "inter")
                shared = endpoint.add(_gpu(node, i), nic_Bps)
                rank = first + i
                router.to_leaf[rank] = (gpu_up, *shared, node_ports[j][0])
                router.from_leaf[rank] = (node_ports[j][1], *shared, gpu_down)
                router.leaf_of[rank] = leaf

    for name in leaf_names:
        vertices[name] = {"kind": "leaf"}
    if len(leaf_names) > 1:
        _build_spines(inter, router, links, vertices, leaf_names, leaf_down_Bps, groups_per_rail)
    return ports


def _build_spines(inter: InterNodeSpec, router: _PresetRouter, links: _LinkTable, vertices: dict[str, dict[str, object]],
                  leaf_names: list[str], leaf_down_Bps: list[float], groups_per_rail: int) -> None:
    """Leaves up to the spine; with ``leaves_per_spine``, to spine groups joined by a core.

    A spine group (``spine<k>``) joins the leaves of nodes [k L p, (k+1) L p) (L leaves per spine, p
    nodes per leaf; on a rail-optimised fabric, those nodes' leaves of every rail). A leaf's uplink
    carries 1/``oversubscription`` of what its ports inject; a group's uplink to the core
    1/``spine_oversubscription`` of what its leaves send up. Tier links add no latency: a route costs
    the network latency once, whatever it crosses."""
    _check_positive(inter.spine_oversubscription, "cluster.inter_node.spine_oversubscription", "oversubscription")
    per_spine = inter.leaves_per_spine
    # a leaf's position among its rail's leaves (every leaf is its own rail's on other fabrics)
    group_of_leaf = [((leaf % groups_per_rail) // per_spine) if per_spine else 0 for leaf in range(len(leaf_names))]
    n_groups = max(group_of_leaf) + 1
    spines = ["spine"] if n_groups == 1 else [f"spine{k}" for k in range(n_groups)]
    for name in spines:
        vertices[name] = {"kind": "spine"}
    sent_up_Bps = [0.0] * n_groups
    for name, down_Bps, group in zip(leaf_names, leaf_down_Bps, group_of_leaf, strict=True):
        # oversubscription: a leaf's uplink carries 1/oversubscription of what its ports can inject
        up, down = links.add_duplex(name, spines[group], down_Bps / inter.oversubscription, 0.0, "inter")
        router.leaf_up.append(up)
        router.leaf_down.append(down)
        sent_up_Bps[group] += down_Bps / inter.oversubscription
    if n_groups > 1:
        vertices["core"] = {"kind": "core"}
        router.group_of_leaf = group_of_leaf
        for name, up_Bps in zip(spines, sent_up_Bps, strict=True):
            up, down = links.add_duplex(name, "core", up_Bps / inter.spine_oversubscription, 0.0, "inter")
            router.group_up.append(up)
            router.group_down.append(down)


class _EndpointBudget:
    """What a GPU's network endpoint moves in both directions together, where that is less than two
    full directions (``cluster.inter_node.duplex_factor`` < 1).

    Why: NCCL's socket transport copies every byte through the rank's proxy and socket threads, so a
    rank that sends and receives at once gets less each way than one that only sends. Measured with
    the harness's ``--net-probe`` on 4 x H200, one host, emulated nodes (validation/data/
    h200x4-multinode-2026-11-27): one flow per endpoint 3.7 to 4.5 GB/s, the same endpoints both
    ways 2.0 to 2.7 GB/s per flow. Modelled as one more directed link per endpoint, capacity
    2 x duplex_factor x the endpoint's rate, that both its outgoing and incoming routes cross, so
    max-min sharing gives each direction duplex_factor x rate when both are busy and the full rate
    when one is (hence duplex_factor >= 0.5: below, one direction alone would lose rate too). A
    self-loop on the GPU's ``<gpu>.endpoint`` vertex: it joins nothing.
    """

    def __init__(self, links: _LinkTable, vertices: dict[str, dict[str, object]], duplex_factor: float) -> None:
        self.links, self.vertices, self.duplex_factor = links, vertices, float(duplex_factor)

    def add(self, gpu: str, rate_Bps: float) -> tuple[int, ...]:
        """The link ids to add to the GPU's routes both ways: none at full duplex."""
        if self.duplex_factor >= 1.0:
            return ()
        name = f"{gpu}.endpoint"
        self.vertices[name] = {"kind": "endpoint"}
        return (self.links.add(name, name, 2.0 * self.duplex_factor * rate_Bps, 0.0, "inter"),)


class _GraphRouter:
    """Shortest paths by hop count on a custom graph, exactly those ``nx.single_source_shortest_path``
    picks (ties included), found on demand per source and kept for a bounded number of sources.

    networkx explores breadth first, vertices in discovery order and each one's successors in
    adjacency (insertion) order, and keeps the first path that reaches a vertex. Here the same
    search runs a level at a time on arrays: a level's successors in that order, the first
    occurrence of each new vertex is its discovery. A vertex's path is fixed when it is discovered,
    so the search stops at the destination's level and resumes there for a farther destination.
    Storing every path from every GPU grew as GPUs x vertices (2.5 GB at 4,096 GPUs); this keeps
    one parent link per vertex for at most ``max_sources`` sources.
    """

    def __init__(self, graph: nx.DiGraph, gpus: Sequence[str], max_sources: int = 128) -> None:
        index = {v: i for i, v in enumerate(graph.nodes)}
        self._gpu_vertex = np.array([index[v] for v in gpus], dtype=np.int64)
        succ: list[int] = []
        link: list[int] = []
        degree = np.zeros(len(index), dtype=np.int64)
        for u, adjacent in graph.adjacency():
            degree[index[u]] = len(adjacent)
            for v, data in adjacent.items():
                succ.append(index[v])
                link.append(data["link_id"])
        self._indptr = np.zeros(len(index) + 1, dtype=np.int64)
        np.cumsum(degree, out=self._indptr[1:])
        self._succ = np.array(succ, dtype=np.int64)
        self._link = np.array(link, dtype=np.int64)
        # the same adjacency as lists, for levels too small to be worth numpy's per-call cost
        self._indptr_list, self._succ_list, self._link_list = self._indptr.tolist(), succ, link
        self._src_of_link = np.zeros(max(link, default=-1) + 1, dtype=np.int64)
        self._src_of_link[self._link] = np.repeat(np.arange(len(index)), degree)
        self._max_sources = max_sources
        self._searches: OrderedDict[int, _Search] = OrderedDict()

    def __call__(self, src: int, dst: int) -> tuple[int, ...]:
        if src == dst:
            return ()
        search = self._searches.get(src)
        if search is None:
            search = self._searches[src] = _Search(int(self._gpu_vertex[src]), len(self._indptr) - 1)
            if len(self._searches) > self._max_sources:
                self._searches.popitem(last=False)
        else:
            self._searches.move_to_end(src)
        target = int(self._gpu_vertex[dst])
        while search.parent_link[target] == _UNSEEN and len(search.frontier):
            self._expand(search)
        if search.parent_link[target] == _UNSEEN:
            raise KeyError(f"GPU rank {dst} is unreachable from rank {src}")
        path: list[int] = []
        vertex = target
        while vertex != search.source:
            link_id = int(search.parent_link[vertex])
            path.append(link_id)
            vertex = int(self._src_of_link[link_id])
        return tuple(reversed(path))

    def _expand(self, search: _Search) -> None:
        """Discover the next level, in the order networkx's breadth-first search would."""
        frontier = search.frontier
        starts, ends = self._indptr[frontier], self._indptr[frontier + 1]
        lengths = ends - starts
        if lengths.sum() <= _SMALL_LEVEL:
            self._expand_small(search)
            return
        # positions of every frontier vertex's successors, frontier order then adjacency order
        offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
        successors = self._succ[offsets]
        new = search.parent_link[successors] == _UNSEEN
        successors, offsets = successors[new], offsets[new]
        _, first = np.unique(successors, return_index=True)
        order = np.sort(first)
        search.frontier = successors[order]
        search.parent_link[search.frontier] = self._link[offsets[order]]


    def _expand_small(self, search: _Search) -> None:
        """``_expand`` one vertex and successor at a time, as networkx's loop itself runs."""
        parent, indptr, succ, link = search.parent_link, self._indptr_list, self._succ_list, self._link_list
        discovered = []
        for v in search.frontier.tolist():
            for k in range(indptr[v], indptr[v + 1]):
                w = succ[k]
                if parent[w] == _UNSEEN:
                    parent[w] = link[k]
                    discovered.append(w)
        search.frontier = np.array(discovered, dtype=np.int64)


_UNSEEN = -1
_SOURCE = -2
_SMALL_LEVEL = 48  # successors in a level below which the plain loop beats the array passes


class _Search:
    """One source's breadth-first search so far: each discovered vertex's parent link, the last level."""

    def __init__(self, source: int, n_vertices: int) -> None:
        self.source = source
        self.parent_link = np.full(n_vertices, _UNSEEN, dtype=np.int64)
        self.parent_link[source] = _SOURCE
        self.frontier = np.array([source], dtype=np.int64)


def _build_custom(cluster: ClusterSpec, spec: CustomTopologySpec) -> Topology:
    gpus = list(spec.gpus)
    g = spec.gpus_per_node
    if not (isinstance(g, int) and g >= 1):
        raise ScenarioError(f"expected a whole number >= 1, got {g!r}", field="cluster.topology.gpus_per_node")
    if not gpus or len(gpus) % g:
        raise ScenarioError(f"expected a non-empty multiple of gpus_per_node ({g}) GPUs, got {len(gpus)}",
                            field="cluster.topology.gpus")
    if len(set(gpus)) != len(gpus):
        dup = next(v for v in gpus if gpus.count(v) > 1)
        raise ScenarioError(f"GPU {dup!r} is listed twice", field="cluster.topology.gpus")
    if cluster.world_size != len(gpus):
        raise ScenarioError(f"lists {len(gpus)} GPUs but the cluster has {cluster.nodes} nodes x "
                            f"{cluster.gpus_per_node} GPUs", field="cluster.topology.gpus")
    rank_of = {v: r for r, v in enumerate(gpus)}
    seen: set[frozenset[str]] = set()
    neighbours: dict[str, set[str]] = {}
    for k, link in enumerate(spec.links):
        where = f"cluster.topology.links[{k}]"
        _check_positive(link.bandwidth_Bps, f"{where}.bandwidth", "bandwidth")
        _check_latency(link.latency_s, f"{where}.latency")
        if link.a == link.b:
            raise ScenarioError(f"a link must join two different vertices, got {link.a!r} twice", field=where)
        pair = frozenset((link.a, link.b))
        if pair in seen:
            raise ScenarioError(f"duplicate link between {link.a!r} and {link.b!r}", field=where)
        seen.add(pair)
        neighbours.setdefault(link.a, set()).add(link.b)
        neighbours.setdefault(link.b, set()).add(link.a)
    for k, link in enumerate(spec.links):
        # a vertex that is no GPU and has one link carries no traffic: a misspelt name (sw0 for sw_0)
        for end, vertex in (("a", link.a), ("b", link.b)):
            if vertex not in rank_of and len(neighbours[vertex]) == 1:
                raise ScenarioError(f"vertex {vertex!r} is not in cluster.topology.gpus and no other link reaches "
                                    "it (a switch joins two or more vertices): a misspelt name?",
                                    field=f"cluster.topology.links[{k}].{end}")

    near: dict[str, set[int]] = {}

    def nodes_near(vertex: str) -> set[int]:
        # a GPU belongs to its node; another vertex to the nodes of the GPUs it touches directly
        # (once per vertex: a spine's neighbours would otherwise be walked for each of its links)
        found = near.get(vertex)
        if found is None:
            if vertex in rank_of:
                found = {rank_of[vertex] // g}
            else:
                found = {rank_of[v] // g for v in neighbours.get(vertex, ()) if v in rank_of}
            near[vertex] = found
        return found

    links = _LinkTable()
    for link in spec.links:
        near_a, near_b = nodes_near(link.a), nodes_near(link.b)
        intra = len(near_a) == 1 and near_a == near_b
        links.add_duplex(link.a, link.b, link.bandwidth_Bps, link.latency_s, "intra" if intra else "inter")
    vertices: dict[str, dict[str, object]] = {}
    for rank, v in enumerate(gpus):
        vertices[v] = {"kind": "gpu", "rank": rank, "node": rank // g}
    for v in neighbours:
        vertices.setdefault(v, {"kind": "switch"})
    graph = _assemble_graph(vertices, links)

    reachable = nx.node_connected_component(graph.to_undirected(as_view=True), gpus[0])
    for rank, v in enumerate(gpus):
        if v not in reachable:
            raise ScenarioError(f"GPU {gpus[0]!r} (rank 0) cannot reach GPU {v!r} (rank {rank})",
                                field="cluster.topology")
    return Topology(graph=graph, gpu_vertices=gpus, gpus_per_node=g, links=links,
                    router=_GraphRouter(graph, gpus), intra_transport="nvlink",
                    description=f"custom {len(gpus) // g}x{g}")
