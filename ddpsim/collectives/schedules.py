"""All-reduce algorithms as schedules: phases of concurrent rank-to-rank transfers.

Ranks are numbered node-major (rank = node * gpus_per_node + local index), so NCCL's ring order
(ranks of a node contiguous, nodes in order) is simply rank order.

Latency accounting: a phase without ``latency_path`` is a synchronous step; every transfer pays its
own hop latency and the step ends with the slowest transfer. A phase with ``latency_path`` is a
pipelined pattern (the tree): all its transfers stream concurrently, and the pipeline's fill and
drain cost the summed hop latencies along ``latency_path`` once, instead of per transfer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

ALGORITHMS = ("ring", "tree", "hierarchical")


class Transfer(NamedTuple):
    src_rank: int
    dst_rank: int
    nbytes: float


@dataclass(frozen=True)
class Phase:
    """Transfers that run concurrently; ``repeat`` identical phases follow one another.

    latency_path: for pipelined phases, the (src, dst) hops whose latencies add up to the phase's
    latency; None for synchronous steps (see the module docstring).
    """

    transfers: tuple[Transfer, ...]
    repeat: int = 1
    latency_path: tuple[tuple[int, int], ...] | None = None
    label: str = ""


def _check(n_ranks: int, gpus_per_node: int) -> int:
    if n_ranks < 1 or gpus_per_node < 1 or n_ranks % gpus_per_node:
        raise ValueError(f"{n_ranks} ranks do not split into nodes of {gpus_per_node} GPUs")
    return n_ranks // gpus_per_node


def ring_schedule(n_ranks: int, nbytes: float) -> list[Phase]:
    """Ring all-reduce: 2(n-1) identical steps, each rank sends S/n to the next rank."""
    if n_ranks < 2:
        return []
    chunk = nbytes / n_ranks
    step = tuple(Transfer(r, (r + 1) % n_ranks, chunk) for r in range(n_ranks))
    return [Phase(step, repeat=2 * (n_ranks - 1), label="ring reduce-scatter + all-gather")]


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


def tree_schedule(n_ranks: int, gpus_per_node: int, nbytes: float) -> list[Phase]:
    """NCCL-style tree all-reduce as one pipelined phase.

    Inside a node the GPUs form a chain headed by local GPU 0; across nodes the heads form NCCL's
    double binary tree. Each of the two trees carries S/2: every tree edge moves S/2 up (reduce)
    and S/2 down (broadcast). NCCL pipelines the reduction and the broadcast in small chunks, so
    in steady state every edge streams at once; modelled as all flows concurrent, plus the latency
    of filling and draining the pipeline: up the deepest path and back down (2 x depth hops).
    """
    n_nodes = _check(n_ranks, gpus_per_node)
    if n_ranks < 2:
        return []
    g = gpus_per_node
    half = nbytes / 2
    trees = double_binary_tree(n_nodes)
    transfers: list[Transfer] = []
    for parents in trees:
        for node in range(n_nodes):
            base = node * g
            for i in range(1, g):
                transfers.append(Transfer(base + i, base + i - 1, half))
                transfers.append(Transfer(base + i - 1, base + i, half))
            if parents[node] != -1:
                head, parent_head = base, parents[node] * g
                transfers.append(Transfer(head, parent_head, half))
                transfers.append(Transfer(parent_head, head, half))
    # the deepest node of the deeper tree, entered at the far end of its chain
    best_depth, best_tree, best_node = -1, 0, 0
    for t, parents in enumerate(trees):
        depths = _depths(parents)
        deepest = max(range(n_nodes), key=depths.__getitem__)
        if depths[deepest] > best_depth:
            best_depth, best_tree, best_node = depths[deepest], t, deepest
    up_path: list[tuple[int, int]] = []
    base = best_node * g
    up_path.extend((base + i, base + i - 1) for i in range(g - 1, 0, -1))
    node, parents = best_node, trees[best_tree]
    while parents[node] != -1:
        up_path.append((node * g, parents[node] * g))
        node = parents[node]
    down_path = [(dst, src) for src, dst in reversed(up_path)]
    return [Phase(tuple(transfers), latency_path=tuple(up_path + down_path), label="double binary tree")]


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


def build_schedule(algorithm: str, n_ranks: int, gpus_per_node: int, nbytes: float) -> list[Phase]:
    """The schedule of one all-reduce of ``nbytes`` per rank."""
    if algorithm == "ring":
        _check(n_ranks, gpus_per_node)
        return ring_schedule(n_ranks, nbytes)
    if algorithm == "tree":
        return tree_schedule(n_ranks, gpus_per_node, nbytes)
    if algorithm == "hierarchical":
        return hierarchical_schedule(n_ranks, gpus_per_node, nbytes)
    raise ValueError(f"unknown algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}")
