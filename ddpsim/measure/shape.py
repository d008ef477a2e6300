"""A launch's shape (nodes x GPUs per node, emulated nodes on one host) and the environment it needs before
init_process_group; stdlib only, shared by the DDP worker and the FSDP harness."""
from __future__ import annotations

import os
from typing import Any


def parse_node_gpus(text: str | None) -> list[int] | None:
    """'3,1' -> [3, 1]: emulated nodes of uneven GPU counts (None when not given)."""
    if not text:
        return None
    counts = [int(x) for x in str(text).split(",") if x.strip()]
    if not counts or min(counts) < 1:
        raise SystemExit(f"--node-gpus {text!r}: expected GPU counts per emulated node, e.g. 3,1")
    return counts


def shape_setup(gpus_per_node: int | None, out: str, launch_id: str, inter_node_transport: str | None = None,
                node_gpus: list[int] | None = None) -> tuple[dict[str, Any], str | None]:
    """Before init_process_group: this rank's NCCL_HOSTID when several 'nodes' share one host, and its own
    NCCL_DEBUG_FILE when NCCL_DEBUG is set.  ``node_gpus`` (one host only) emulates nodes of uneven GPU
    counts, in rank order.  Returns the shape fields every record carries."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    if node_gpus:
        if sum(node_gpus) != world or local_world != world:
            raise SystemExit(f"--node-gpus {node_gpus} must sum to the world ({world}) of one host")
        # the node of each local rank: ranks fill the emulated nodes in order
        owner = [n for n, count in enumerate(node_gpus) for _ in range(count)]
        os.environ["NCCL_HOSTID"] = f"ddpsim-{os.environ.get('GROUP_RANK', '0')}-node{owner[local_rank]}"
        uniform = len(set(node_gpus)) == 1
        G: int | None = node_gpus[0] if uniform else None
        emulated = len(node_gpus) > 1
    else:
        G = int(gpus_per_node) if gpus_per_node else local_world
        if G < 1 or local_world % G or world % G:
            raise SystemExit(f"--gpus-per-node {G} must divide the ranks of this host ({local_world}) and the world ({world})")
        emulated = G < local_world
    if emulated and not node_gpus and G is not None:
        # NCCL hashes this string instead of the host name: ranks with different ids are different nodes,
        # so P2P/SHM are not used between them and NCCL's network transport carries their traffic
        os.environ["NCCL_HOSTID"] = f"ddpsim-{os.environ.get('GROUP_RANK', '0')}-node{local_rank // G}"
    nccl_log_path = None
    if os.environ.get("NCCL_DEBUG"):
        if not os.environ.get("NCCL_DEBUG_FILE"):
            os.makedirs(os.path.join(out, "logs"), exist_ok=True)
            os.environ["NCCL_DEBUG_FILE"] = os.path.join(os.path.abspath(out), "logs",
                                                         f"nccl_{launch_id}_r{rank:d}.log")
        nccl_log_path = os.environ["NCCL_DEBUG_FILE"]
        if "%" in nccl_log_path:
            nccl_log_path = None  # a pattern (%h, %p) set from outside: not parsed
    nodes = len(node_gpus) if node_gpus else world // (G or 1)  # G is None for uneven nodes only
    inter = None
    if nodes > 1:
        inter = inter_node_transport or (os.environ.get("NCCL_NET") or "unknown").lower()
    fields: dict[str, Any] = {"nodes": nodes, "gpus_per_node": G, "nodes_emulated": emulated,
              "nccl_hostid": os.environ.get("NCCL_HOSTID") if emulated else None,
              "inter_node_transport": inter}
    if node_gpus:
        # gpus_per_node is null for uneven nodes: a reader that needs one number refuses the record
        fields["node_gpus"] = list(node_gpus)
    return fields, nccl_log_path


def shape_label(shape: dict[str, Any]) -> str:
    """'2x2' for even nodes, '3+1' for uneven ones."""
    if shape.get("node_gpus") and shape["gpus_per_node"] is None:
        return "+".join(str(c) for c in shape["node_gpus"])
    return f"{shape['nodes']:d}x{shape['gpus_per_node']:d}"
