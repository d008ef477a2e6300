"""Network endpoint probe (worker --net-probe, in a launch across emulated or real nodes): schema
``ddpsim.netprobe/1``.

Why: the ring's measured bus bandwidth across nodes differs by shape on one host (2x2 5.1 GB/s per
hop, 2x1 3.9, 4x1 3.5 on the H200 campaign), so one bandwidth per network cannot transfer between
shapes. In 2x2 a rank either sends or receives across the network (NCCL's ring: 1 -> 2 and 3 -> 0);
in 2x1 and 4x1 every rank does both at once. The hypothesis: a rank's network endpoint (NCCL's
proxy and socket threads on the socket transport) has a per-direction rate and a smaller budget for
both directions together. This probe measures that directly with NCCL point-to-point transfers
between ranks of different nodes, each pattern alone:

- ``one_way``: rank 0 -> the first rank of node 1 (one direction of one endpoint);
- ``two_way``: the same pair both ways at once (both directions of both endpoints);
- ``one_way_pairs``: every rank of node 0 sends to its peer on node 1, nothing comes back (several
  endpoints, one direction each: a host-wide limit shows here);
- ``shift_all``: every rank sends to the same local rank of the next node and receives from the
  previous one (every endpoint both ways: what 2x1 and 4x1 rings do);
- ``ring_net_hops``: the network hops of NCCL's ring over ranks in order (r -> r+1 across nodes).

Then the same two endpoints (rank 0 and the first rank of node 1, a two-rank group) with NCCL's
collectives, whose channels, chunking and protocols are the ones DDP's all-reduces use:
``collective_one_way`` broadcasts from rank 0 (a chain: bytes flow one way only) and
``collective_two_way`` all-reduces (a two-rank ring: S each way), each timed the same way; their
per-flow rate is S / time.

Each pattern: ``reps`` timed transfers of ``nbytes`` after a warm-up (the first transfer between a
pair builds its connection), timed on the wall clock between barriers (the slowest rank decides),
reported as the median seconds and the per-flow rate. Standard library + torch only.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from .common import median_of, quantile, synchronize

MiB = 1024 * 1024


def patterns(world_size: int, gpus_per_node: int) -> dict[str, list[tuple[int, int]]]:
    """Pattern name -> (source rank, destination rank) flows; every flow crosses nodes."""
    g, nodes = gpus_per_node, world_size // gpus_per_node
    if nodes < 2:
        return {}
    out = {
        "one_way": [(0, g)],
        "two_way": [(0, g), (g, 0)],
        "shift_all": [(r, (r + g) % world_size) for r in range(world_size)],
        "ring_net_hops": [(r, (r + 1) % world_size) for r in range(world_size)
                          if r // g != ((r + 1) % world_size) // g],
    }
    if g > 1 or nodes > 3:
        # several endpoints sending one way at once (4x1: 0 -> 1 and 2 -> 3)
        out["one_way_pairs"] = ([(i, g + i) for i in range(g)] if g > 1
                                else [(r, r + 1) for r in range(0, world_size - 1, 2)])
    if nodes == 2:
        # two nodes: each rank's ring_net/shift partner is the same peer both ways
        out["shift_all"] = sorted(set(out["shift_all"]))
    return out


def _transfer(flows: list[tuple[int, int]], rank: int, buffers: list[torch.Tensor | None], device: torch.device) -> None:
    ops = []
    for k, (src, dst) in enumerate(flows):
        buffer = buffers[k]  # a buffer on the ranks of the flow only
        if rank == src and buffer is not None:
            ops.append(dist.P2POp(dist.isend, buffer, dst))
        elif rank == dst and buffer is not None:
            ops.append(dist.P2POp(dist.irecv, buffer, src))
    if ops:
        for req in dist.batch_isend_irecv(ops):
            req.wait()
    synchronize(device)


def probe(device: torch.device, world_size: int, gpus_per_node: int, nbytes: int = 256 * MiB, reps: int = 5,
          budget_s: float = 30.0) -> list[dict]:
    """One record per pattern (every rank calls this; rank 0 writes the records)."""
    rank = dist.get_rank()
    cuda = device.type == "cuda"
    if not cuda:
        nbytes = min(nbytes, 256 * 1024)
    spent_s = 0.0  # the sum of all-reduced (slowest-rank) times: the same on every rank, so all stop together
    out = []
    for name, flows in patterns(world_size, gpus_per_node).items():
        buffers = [torch.ones(nbytes // 4, dtype=torch.float32, device=device) if rank in f else None for f in flows]
        # the first transfer also builds the connections
        times, total_s = _timed(functools.partial(_transfer, flows, rank, buffers, device), device, reps, warmup=1)
        spent_s += total_s
        del buffers
        out.append(_record("net_p2p", name, flows, nbytes, times,
                           "dist.batch_isend_irecv, wall clock between barriers, slowest rank, median of reps"))
        if spent_s > budget_s:
            break
    if patterns(world_size, gpus_per_node):
        out += _collectives(device, gpus_per_node, nbytes, reps)
    return out


def _timed(call: Callable[[], object], device: torch.device, reps: int, warmup: int,
           group: dist.ProcessGroup | None = None) -> tuple[list[float], float]:
    """``reps`` timed calls after ``warmup`` untimed ones, each between barriers on the wall clock and
    taken from the slowest rank; and the sum of every call's time (the same on every rank)."""
    times, total_s = [], 0.0
    for i in range(warmup + reps):
        dist.barrier(group=group)
        t0 = time.perf_counter()
        call()
        synchronize(device)
        elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=group)
        total_s += float(elapsed.item())
        if i >= warmup:
            times.append(float(elapsed.item()))
    return times, total_s


def _record(bench: str, name: str, flows: list[tuple[int, int]], nbytes: int, times: list[float], method: str) -> dict:
    t = median_of(times)
    return {"bench": bench, "pattern": name, "flows": [list(f) for f in flows], "bytes": nbytes,
            "time_s_median": t, "time_s_p10": quantile(times, 0.1), "time_s_p90": quantile(times, 0.9),
            "reps": len(times), "flow_GBps": nbytes / t / 1e9, "method": method}


def _collectives(device: torch.device, gpus_per_node: int, nbytes: int, reps: int) -> list[dict]:
    """Broadcast (one way) and all-reduce (both ways) between rank 0 and the first rank of node 1."""
    rank = dist.get_rank()
    pair = [0, gpus_per_node]
    group = dist.new_group(pair)  # every rank takes part in creating it
    out = []
    if rank in pair:
        buffer = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
        calls = (("collective_one_way", [(0, gpus_per_node)], lambda: dist.broadcast(buffer, 0, group=group)),
                 ("collective_two_way", [(0, gpus_per_node), (gpus_per_node, 0)],
                  lambda: dist.all_reduce(buffer, group=group)))
        for name, flows, call in calls:
            # the first calls build the group's communicator and connections
            times, _ = _timed(call, device, reps, warmup=2, group=group)
            out.append(_record("net_collective", name, flows, nbytes, times,
                               "torch.distributed broadcast / all_reduce in a two-rank group, wall clock between "
                               "barriers, slowest rank, median of reps"))
        del buffer
        dist.destroy_process_group(group)
    dist.barrier()
    return out
