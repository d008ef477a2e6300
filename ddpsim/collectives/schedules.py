"""All-reduce algorithms as schedules: phases of concurrent rank-to-rank transfers.

Ranks are numbered node-major (rank = node * gpus_per_node + local index), so NCCL's ring order
(ranks of a node contiguous, nodes in order) is simply rank order. Nodes of different sizes
(``node_sizes``) keep that order: NCCL searches each node's own ring over its local GPUs and chains
the nodes, each node's last GPU of a channel sending to the next node's first (``connectRings`` in
src/graph/connect.cc), on the fewest channels any rank found (init.cc takes the minimum nChannels
over ranks), which is what the ring and the tree below do per node.

Latency accounting: a phase without ``latency_path`` is a synchronous step; every transfer pays its
own hop latency and the step ends with the slowest transfer. A phase with ``latency_path`` is
pipelined: its bandwidth cost is ``repeat`` x its slowest transfer, and its latency is the summed
hop latencies along ``latency_path`` once for all repetitions. The tree streams every edge at once
(path: up the deepest branch and back down); the ring's steps overlap in NCCL's chunked pipeline,
so a chunk's 2(n-1) hops, not 2(n-1) times the slowest hop, set its latency (NCCL's own model:
2(n-1) hops of which about 2N cross nodes).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

ALGORITHMS = ("ring", "tree", "hierarchical")
# NVLink SHARP: only where the node has it (``CollectiveModel(nvls_efficiency=...)``), so not in ALGORITHMS
NVLS = "nvls"


class Transfer(NamedTuple):
    """``count`` identical flows of ``nbytes`` from ``src_rank`` to ``dst_rank`` (channels that
    share a pair are merged so that large schedules stay small)."""

    src_rank: int
    dst_rank: int
    nbytes: float
    count: int = 1  # type: ignore[assignment]  # a NamedTuple field named like tuple.count


@dataclass(frozen=True)
class Phase:
    """Transfers that run concurrently; ``repeat`` identical phases follow one another.

    latency_path: for pipelined phases, the (src, dst) hops whose latencies add up to the latency
    of all ``repeat`` repetitions together; None for synchronous steps (see the module docstring).
    """

    transfers: tuple[Transfer, ...]
    repeat: int = 1
    latency_path: tuple[tuple[int, int], ...] | None = None
    label: str = ""


def _check(n_ranks: int, gpus_per_node: int) -> int:
    if n_ranks < 1 or gpus_per_node < 1 or n_ranks % gpus_per_node:
        raise ValueError(f"{n_ranks} ranks do not split into nodes of {gpus_per_node} GPUs")
    return n_ranks // gpus_per_node


def _layout(n_ranks: int, gpus_per_node: int, node_sizes: Sequence[int] | None) -> tuple[list[int], list[int]]:
    """(GPUs of each node, first rank of each node): ``node_sizes`` where given, else equal nodes."""
    if node_sizes is None:
        sizes = [gpus_per_node] * _check(n_ranks, gpus_per_node)
    else:
        sizes = list(node_sizes)
        if not sizes or min(sizes) < 1 or sum(sizes) != n_ranks:
            raise ValueError(f"node sizes {sizes} do not add up to {n_ranks} ranks")
    return sizes, [0, *itertools.accumulate(sizes[:-1])]


def channel_orders(gpus_per_node: int, channels: int) -> list[list[int]]:
    """Local GPU order of each channel: channel k starts at GPU k*g/c and wraps around.

    NCCL runs several rings (channels) at once, each leaving a node through a different NIC;
    rotating the node-local order gives every channel its own entry and exit GPU, hence its own
    NIC on rail-optimised and multi-NIC nodes, while keeping ranks of a node contiguous.
    """
    if channels < 1:
        raise ValueError(f"channels must be >= 1, got {channels}")
    g = gpus_per_node
    return [[(k * g // channels + i) % g for i in range(g)] for k in range(channels)]


def ring_pairs(gpus_per_node: int, channels: int, n_nodes: int) -> tuple[Counter[tuple[int, int]], Counter[tuple[int, int]]]:
    """Flows per step of a multi-channel ring, by local GPU pair: (inside a node, node to next node).

    With one node the ring closes inside it (its last GPU sends to its first).
    """
    local: Counter[tuple[int, int]] = Counter()
    across: Counter[tuple[int, int]] = Counter()
    for order in channel_orders(gpus_per_node, channels):
        local.update(zip(order, order[1:], strict=False))
        (local if n_nodes == 1 else across)[(order[-1], order[0])] += 1
    return local, across


def ring_schedule(n_ranks: int, nbytes: float, gpus_per_node: int = 1, channels: int = 1,
                  node_sizes: Sequence[int] | None = None) -> list[Phase]:
    """Ring all-reduce: 2(n-1) identical steps; on each of ``channels`` rings every rank sends
    S/(n*channels) to its successor (ranks of a node contiguous, nodes in order)."""
    sizes, firsts = _layout(n_ranks, gpus_per_node, node_sizes)
    n_nodes = len(sizes)
    if n_ranks < 2:
        return []
    chunk = nbytes / (n_ranks * channels)
    step: list[Transfer] = []
    pairs = {g: ring_pairs(g, channels, n_nodes) for g in set(sizes)}
    for node, g in enumerate(sizes):
        base, succ = firsts[node], firsts[(node + 1) % n_nodes]
        local, _ = pairs[g]
        step.extend(Transfer(base + a, base + b, chunk, m) for (a, b), m in local.items() if a != b)
        if n_nodes > 1:
            # channel k leaves this node from its last GPU and enters the next at that node's first
            exits = channel_orders(g, channels)
            entries = channel_orders(sizes[(node + 1) % n_nodes], channels)
            across = Counter((out[-1], into[0]) for out, into in zip(exits, entries, strict=True))
            step.extend(Transfer(base + a, succ + b, chunk, m) for (a, b), m in across.items())
    # the latency critical path: 2(n-1) consecutive hops of channel 0 (rank order), starting on an
    # inter-node hop so that the window holds the most of them
    steps = 2 * (n_ranks - 1)
    start = sizes[0] - 1 if n_nodes > 1 else 0
    path = tuple(((start + k) % n_ranks, (start + k + 1) % n_ranks) for k in range(steps))
    return [Phase(tuple(step), repeat=steps, latency_path=path, label="ring reduce-scatter + all-gather")]


def btree_parents(n: int) -> list[int]:
    """Parent of each rank in NCCL's binary tree (``ncclGetBtree``); the root 0 has parent -1.

    The tree is built on the binary representation of ranks: a rank's parent clears its lowest set
    bit and sets the next one up (or just clears it when that would leave the range), which gives
    the root a single child and every other inner vertex at most two.
    """
    parents = [-1] * n
    for rank in range(1, n):
        bit = rank & -rank
        up = (rank ^ bit) | (bit << 1)
        parents[rank] = up if up < n else rank ^ bit
    return parents


def double_binary_tree(n: int) -> tuple[list[int], list[int]]:
    """NCCL's two complementary trees over n vertices (``ncclGetDtree``): parents per vertex.

    The second tree mirrors the first (n even) or shifts it by one (n odd), so that a vertex
    that is inner in one tree is a leaf in the other and the two trees share the load evenly.
    """
    first = btree_parents(n)
    if n % 2:
        second = [-1] * n
        for rank in range(n):
            up = first[(rank - 1) % n]
            second[rank] = -1 if up == -1 else (up + 1) % n
    else:
        second = [-1 if first[n - 1 - r] == -1 else n - 1 - first[n - 1 - r] for r in range(n)]
    return first, second


def _depths(parents: list[int]) -> list[int]:
    depth = [0] * len(parents)
    for v in range(len(parents)):
        chain = []
        u = v
        while parents[u] != -1 and depth[u] == 0:
            chain.append(u)
            u = parents[u]
        base = depth[u]
        for w in reversed(chain):
            base += 1
            depth[w] = base
    return depth


def tree_local_pairs(gpus_per_node: int, channels: int) -> Counter[tuple[int, int]]:
    """Flows inside a node of the multi-channel tree, by local GPU pair (both trees, both ways)."""
    pairs: Counter[tuple[int, int]] = Counter()
    for order in channel_orders(gpus_per_node, channels):
        for child, parent in zip(order[1:], order, strict=False):
            pairs[(child, parent)] += 2  # reduce towards the head, once per tree
            pairs[(parent, child)] += 2  # broadcast away from it
    return pairs


def tree_schedule(n_ranks: int, gpus_per_node: int, nbytes: float, channels: int = 1,
                  node_sizes: Sequence[int] | None = None) -> list[Phase]:
    """NCCL-style tree all-reduce as one pipelined phase.

    Inside a node the GPUs form a chain headed by the channel's first GPU; across nodes the heads
    form NCCL's double binary tree. Each channel carries S/channels, half on each tree: every tree
    edge moves S/(2·channels) up (reduce) and as much down (broadcast). NCCL pipelines reduction and
    broadcast in small chunks, so in steady state every edge streams at once; modelled as all flows
    concurrent, plus the latency of filling and draining the pipeline: up the deepest path and
    back down (2 x depth hops).
    """
    sizes, firsts = _layout(n_ranks, gpus_per_node, node_sizes)
    if n_ranks < 2:
        return []
    half = nbytes / (2 * channels)
    local = {g: tree_local_pairs(g, channels) for g in set(sizes)}
    transfers = [Transfer(firsts[node] + a, firsts[node] + b, half, m)
                 for node, g in enumerate(sizes) for (a, b), m in local[g].items()]
    heads = _channel_heads(sizes, firsts, channels)
    transfers.extend(Transfer(src, dst, half, m) for (src, dst), m in _head_tree_pairs(heads).items())
    # the deepest node's chunk enters at the far end of its channel 0 chain
    up_path = _deepest_up_path(heads, lambda node: _chain_to_head(sizes[node], firsts[node], channels))
    down_path = [(dst, src) for src, dst in reversed(up_path)]
    return [Phase(tuple(transfers), latency_path=tuple(up_path + down_path), label="double binary tree")]


def _channel_heads(sizes: Sequence[int], firsts: Sequence[int], channels: int) -> list[list[int]]:
    """Each node's channel heads (each channel's first GPU, as a global rank): they join the trees across nodes."""
    return [[firsts[node] + order[0] for order in channel_orders(g, channels)] for node, g in enumerate(sizes)]


def _chain_to_head(g: int, first: int, channels: int) -> list[tuple[int, int]]:
    """Channel 0's chain inside a node of ``g`` GPUs, from its far end to its head, as global ranks."""
    order = channel_orders(g, channels)[0]
    return [(first + order[p], first + order[p - 1]) for p in range(g - 1, 0, -1)]


def _head_tree_pairs(heads: list[list[int]]) -> Counter[tuple[int, int]]:
    """Flows between nodes of NCCL's double binary tree, one per tree edge, direction and channel,
    between the channels' head GPUs, by (src rank, dst rank)."""
    across: Counter[tuple[int, int]] = Counter()
    for k in range(len(heads[0])):
        for parents in double_binary_tree(len(heads)):
            for node, parent in enumerate(parents):
                if parent != -1:
                    across[(heads[node][k], heads[parent][k])] += 1
                    across[(heads[parent][k], heads[node][k])] += 1
    return across


def _deepest_up_path(heads: list[list[int]], local: Callable[[int], list[tuple[int, int]]]) -> list[tuple[int, int]]:
    """A chunk's way up: the ``local(node)`` hops inside the deepest node of the deeper of NCCL's two
    trees, then its channel 0 heads' tree edges to the root."""
    trees = double_binary_tree(len(heads))
    best_depth, best_tree, best_node = -1, 0, 0
    for t, parents in enumerate(trees):
        depths = _depths(parents)
        deepest = max(range(len(heads)), key=depths.__getitem__)
        if depths[deepest] > best_depth:
            best_depth, best_tree, best_node = depths[deepest], t, deepest
    path = list(local(best_node))
    node, parents = best_node, trees[best_tree]
    while parents[node] != -1:
        path.append((heads[node][0], heads[parents[node]][0]))
        node = parents[node]
    return path


def nvls_schedule(n_ranks: int, gpus_per_node: int, nbytes: float, heads: int = 1) -> list[Phase]:
    """NVLink SHARP all-reduce (NCCL's NVLS on one node, NVLS tree across nodes) as one pipelined phase.

    The NVSwitch reduces and multicasts: each GPU of a node sends its whole buffer S into the switch
    and gets its 1/g shard back reduced, then stores that shard once into the switch, which copies
    it to every GPU (multimem loads and stores). Every GPU's link to the switch carries S + S/g each
    way, i.e. S (g+1)/g, the bandwidth NCCL's NVLS graph search reserves (a channel's head GPU twice
    its share, the other GPUs once). Written as flows between GPU pairs of a node: S (g+1)/(g (g-1))
    from each GPU to each other, which loads every up- and down-link of a switch exactly so.

    Across nodes (NVLS tree) each of ``heads`` channels takes S/heads through its head GPU's NIC,
    over NCCL's double binary tree between nodes (half on each tree, every edge both ways), as the
    tree algorithm does; the switch traffic inside each node is as above.

    Latency, as NCCL's model counts it: one switch hop, plus up and down the deepest tree path.
    """
    n_nodes = _check(n_ranks, gpus_per_node)
    g = gpus_per_node
    if n_ranks < 2:
        return []
    transfers: list[Transfer] = []
    if g > 1:
        pair = nbytes * (g + 1) / (g * (g - 1))
        transfers = [Transfer(node * g + a, node * g + b, pair) for node in range(n_nodes)
                     for a in range(g) for b in range(g) if a != b]
    head_ranks = _channel_heads([g] * n_nodes, [node * g for node in range(n_nodes)], heads)
    if n_nodes > 1:
        half = nbytes / (2 * heads)
        transfers.extend(Transfer(src, dst, half, m) for (src, dst), m in _head_tree_pairs(head_ranks).items())
    head = head_ranks[0][0]
    # the multicast hop into the head's shard, inside the deepest node
    local = [((head + 1) % g, head)] if g > 1 else []
    up_path = _deepest_up_path(head_ranks, lambda node: [(node * g + a, node * g + b) for a, b in local])
    down_path = [(dst, src) for src, dst in reversed(up_path[len(local):])]
    return [Phase(tuple(transfers), latency_path=tuple(up_path + down_path),
                  label="NVLS" if n_nodes == 1 else "NVLS tree")]


def tree_depth(n_nodes: int) -> int:
    """Inter-node hops from the deepest node to the root in the deeper of NCCL's two trees."""
    return max(max(_depths(parents)) for parents in double_binary_tree(n_nodes))


def tree_max_degree(n_nodes: int) -> int:
    """Most tree edges at one node over both trees (each edge is one flow per direction)."""
    degree = [0] * n_nodes
    for parents in double_binary_tree(n_nodes):
        for v, p in enumerate(parents):
            if p != -1:
                degree[v] += 1
                degree[p] += 1
    return max(degree)


def hierarchical_schedule(n_ranks: int, gpus_per_node: int, nbytes: float) -> list[Phase]:
    """Reduce-scatter inside each node, a ring all-reduce per rail across nodes, all-gather inside.

    Local GPU i of every node ends the reduce-scatter owning shard i (S/g); rail i (local GPU i of
    every node) all-reduces that shard with a ring; the all-gather spreads the shards back.
    """
    n_nodes = _check(n_ranks, gpus_per_node)
    g = gpus_per_node
    phases: list[Phase] = []
    local: tuple[Transfer, ...] = ()
    if g > 1:
        shard = nbytes / g
        local = tuple(
            Transfer(node * g + i, node * g + (i + 1) % g, shard) for node in range(n_nodes) for i in range(g)
        )
        phases.append(Phase(local, repeat=g - 1, label="intra-node reduce-scatter"))
    if n_nodes > 1:
        chunk = nbytes / (g * n_nodes)
        rails = tuple(
            Transfer(node * g + i, ((node + 1) % n_nodes) * g + i, chunk) for i in range(g) for node in range(n_nodes)
        )
        phases.append(Phase(rails, repeat=2 * (n_nodes - 1), label="inter-node ring per rail"))
    if g > 1:
        phases.append(Phase(local, repeat=g - 1, label="intra-node all-gather"))
    return phases


def build_schedule(algorithm: str, n_ranks: int, gpus_per_node: int, nbytes: float, channels: int = 1,
                   node_sizes: Sequence[int] | None = None) -> list[Phase]:
    """The schedule of one all-reduce of ``nbytes`` per rank (hierarchical ignores ``channels``:
    its per-rail rings already use every NIC; NVLS takes them as its heads). ``node_sizes``: GPUs of each node
    where they differ (hierarchical and NVLS need them equal: hierarchical's per-rail rings pair GPU i of every
    node, and NVLS is modelled on equal nodes only)."""
    if algorithm == "ring":
        return ring_schedule(n_ranks, nbytes, gpus_per_node, channels, node_sizes)
    if algorithm == "tree":
        return tree_schedule(n_ranks, gpus_per_node, nbytes, channels, node_sizes)
    if algorithm == "hierarchical":
        if node_sizes is not None and len(set(node_sizes)) > 1:
            raise ValueError("hierarchical all-reduce pairs GPU i of every node: it needs nodes of equal size")
        return hierarchical_schedule(n_ranks, gpus_per_node, nbytes)
    if algorithm == NVLS:
        if node_sizes is not None and len(set(node_sizes)) > 1:
            raise ValueError("the NVLS model needs nodes of equal size")
        return nvls_schedule(n_ranks, gpus_per_node, nbytes, channels)
    raise ValueError(f"unknown algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}")
