"""Closed forms of this package's all-reduce schedules, the independent check of the flow model's prices (used by
the tests only, so kept out of the wheel): ``closed_form_s`` on uniform links, ``model_closed_form_s`` on a
``CollectiveModel``'s topology with its protocol costs.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ddpsim.collectives.model import CollectiveModel, _check_algorithm, _check_protocol
from ddpsim.collectives.schedules import (
    NVLS,
    channel_orders,
    ring_pairs,
    tree_depth,
    tree_local_pairs,
    tree_max_degree,
)


def _most_switched(pairs: dict[tuple[int, int], int]) -> int:
    """Most flows on one GPU's switch up- or down-link, for flows per local GPU pair."""
    out: dict[int, int] = {}
    into: dict[int, int] = {}
    for (a, b), m in pairs.items():
        out[a] = out.get(a, 0) + m
        into[b] = into.get(b, 0) + m
    return max([*out.values(), *into.values()], default=0)


def model_closed_form_s(model: CollectiveModel, nbytes: float, algorithm: str, protocol: str = "simple") -> float:
    """The uncontended closed form on this topology's links (see ``closed_form_s``).

    Intra-node bandwidth and latency are read off the route rank 0 -> 1, inter-node ones off
    the route the algorithm's first inter-node transfer takes; protocol costs applied, with
    NCCL's multi-node terms (ring intra-node hops floored at the net overhead, the ring
    plateau, protocol factors, LL caps; ``ProtocolTable``) derived here apart from the flow
    model, so that the FAST and DETAILED prices can be checked against it. It prices every
    network hop at the endpoint's one-way rate (the budget of ``cluster.inter_node.duplex_factor``,
    at least 0.5, is never below it): the budget is sharing between a GPU's two directions, which
    only the flow model prices, so with a factor below 1 a ring with one GPU per node and every
    tree across nodes are slower in FAST and DETAILED than here.
    """
    topo, table = model.topology, model.protocol_table
    algorithm, protocol = _check_algorithm(algorithm), _check_protocol(protocol)
    g, nodes, n = topo.gpus_per_node, topo.nodes, topo.world_size
    # Transfers are priced at the initial fair rates (the slowest flow of a step). FAST and
    # DETAILED re-share bandwidth when flows end, so where flows of different classes share
    # a link (a PXN ring whose NIC-bound hop shares NVLink with NVLink-bound hops) they can
    # be a little faster than this form (2 % in the tests); equal wherever flows end together.
    if n < 2:
        return 0.0
    if not topo.uniform:
        raise ValueError("the closed form reads one node's links for every node: it needs nodes of equal size")

    def hop(src: int, dst: int) -> tuple[float, float]:
        route = topo.route(src, dst)
        transport = topo.transport(src, dst)
        bandwidth = float(np.min(topo.capacity_Bps[list(route.link_ids)])) * table.efficiency(protocol, transport)
        return bandwidth, table.hop_latency(transport, algorithm, protocol, route.latency_s)

    intra_Bps, intra_s = hop(0, 1) if g > 1 else (1.0, 0.0)
    if algorithm == NVLS:
        if model.nvls_efficiency is None:
            raise ValueError("nvls needs NVLink SHARP (nvls_efficiency)")
        intra_Bps *= model.nvls_efficiency
    if algorithm == "ring":
        intra_s = max(intra_s, table.ring_intra_floor_s(protocol, nodes))
    switched = True
    if g >= 3:
        switched = bool(set(topo.route(1, 0).link_ids) & set(topo.route(1, 2).link_ids))
    # PXN: the ring's hop out of a node first crosses an intra-node link (rail-optimised fabric)
    pxn = nodes > 1 and any(topo.link_class[i] == "intra" for i in topo.route(g - 1, g).link_ids)

    def form(alg: str, size: float) -> float:
        inter = (hop(g - 1, g) if alg == "ring" else hop(0, g)) if nodes > 1 else (intra_Bps, intra_s)
        return closed_form_s(alg, n, size, intra_Bps, intra_s, nodes,
                             inter_bandwidth_Bps=inter[0], inter_latency_s=inter[1], intra_switched=switched,
                             channels=model.channels, pxn=pxn)

    plateau = table.plateau(algorithm, protocol, nodes, n, model.channels, nbytes)
    latency_s = form(algorithm, 0.0)
    transfer_s = form(algorithm, nbytes) - latency_s  # the closed forms are affine in the size
    if algorithm == "tree" and table.tree_chain_bound and transfer_s > 0:
        # the ring's intra-node hops only: each of its 2(n-1) steps moves S/(nc) per flow
        local, _ = ring_pairs(g, model.channels, 1 if pxn else nodes)
        flows = max(local.values(), default=0) if not switched else _most_switched(local)
        ring_s = 2 * (n - 1) * flows * nbytes / (n * model.channels) / intra_Bps
        transfer_s = max(transfer_s, ring_s * n / (n - 1))
    transfer_s /= table.algorithm_efficiency.get(algorithm, 1.0) * table.protocol_factor(algorithm, protocol, nodes)
    cap_Bps = table.ll_bus_cap_Bps(protocol, nodes)
    if np.isfinite(cap_Bps) and transfer_s > 0:
        transfer_s = max(transfer_s, nbytes / (cap_Bps * (0.5 if algorithm == "tree" else n / (2 * (n - 1)))))
    if algorithm == NVLS and transfer_s > 0:
        transfer_s = max(transfer_s, nbytes * 2 * (n - 1) / n / model._nvls_tree_bus_cap_Bps())
    transfer_s /= table.size_correction(algorithm, protocol, nbytes)
    return (table.base_latency(algorithm, protocol) + latency_s) * plateau + transfer_s


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
    pxn: bool = False,
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
      ``pxn`` (rail-optimised fabrics, NCCL's PXN): a channel's hop out of a node first crosses
      the intra-node link to the GPU on the next node's rail, so the node-local flows are those of
      a ring closed inside the node (u = c on a switch) and each node's exit NIC is its channel's
      first GPU.
    tree: one pipelined phase: 2·((g-1)·α_intra + D·α_inter) + S/(2c)·max(u/B_intra, v/B_inter),
      D the depth of the deeper of NCCL's two trees over the nodes, u the most S/(2c) flows one
      intra-node link carries (a mid-chain GPU on a switch sends up and down for both trees: 4 per
      channel) and v the most on one NIC (a head's edges over both trees).
    hierarchical, pipelined (chunks flow through the three phases at once, NCCL-style):
      2(g-1)·α_intra + 2(N-1)·α_inter + max(2(g-1)/g·S/B_intra, 2(N-1)/N·S/g/B_inter).
    nvls (NVLink SHARP; ``bandwidth_Bps`` already times NCCL's NVLS efficiency): one switch hop, and
      across nodes the tree's: α_intra + 2·D·α_inter + max((g+1)/g·S/B_intra, v·S/(2c)/B_inter),
      every GPU's switch link carrying S (g+1)/g each way and the heads' NICs the tree's flows.
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
        if pxn and nodes > 1:
            local = ring_pairs(g, channels, 1)[0]
            across = Counter()
            for order in channel_orders(g, channels):
                across[(order[0], order[0])] += 1
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
    if algorithm == NVLS:
        latency = (intra_s if g > 1 else 0.0) + 2 * tree_depth(nodes) * inter_s
        switch_s = nbytes * (g + 1) / g / intra_Bps if g > 1 else 0.0
        net_s = 0.0
        if nodes > 1:
            per_head = Counter(order[0] for order in channel_orders(g, channels))
            net_s = tree_max_degree(nodes) * max(per_head.values()) * nbytes / (2 * channels) / inter_Bps
        return latency + max(switch_s, net_s)
    latency = 2 * (g - 1) * intra_s + 2 * (nodes - 1) * inter_s
    intra_transfer = 2 * (g - 1) / g * nbytes / intra_Bps if g > 1 else 0.0
    inter_transfer = 2 * (nodes - 1) / nodes * (nbytes / g) / inter_Bps if nodes > 1 else 0.0
    return latency + max(intra_transfer, inter_transfer)
