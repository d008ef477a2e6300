"""Reading what NCCL printed (NCCL_DEBUG=INFO, one NCCL_DEBUG_FILE per rank).

NCCL writes its debug file line-buffered, so a reader in the same process sees every line up to the
last completed call.  Only rank 0 of a communicator prints the per-call TUNING lines
("AllReduce: 4096 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}"), so rank 0 parses its own file.
Standard library only; every function returns None/empty when the file or the lines are missing (CPU/gloo
runs have no NCCL log at all).
"""
from __future__ import annotations

import os
import re

# "comm 0x... rank 0 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0"
RE_NODES = re.compile(r"nRanks (\d+) nNodes (\d+) localRanks (\d+)")
# "Channel 00/0 : 0[0] -> 2[2] [send] via NET/Socket/0" and "... via P2P/CUMEM/read" / "via SHM/direct/direct"
RE_VIA = re.compile(r"\bvia ((?:NET|P2P|SHM|COLLNET)/[A-Za-z0-9_]+)")
RE_TREES = re.compile(r"\bTrees\b")
RE_TUNING = re.compile(r"(AllReduce): (\d+) Bytes -> Algo (\w+) proto (\w+)(?: channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\})?")
RE_ALGO_ENV = re.compile(r"NCCL_ALGO set by environment to (\S+)")
RE_VERSION = re.compile(r"NCCL version (\S+)")
RE_SOCKET_IF = re.compile(r"NET/Socket : Using (.*)$")


def read_from(path: str | None, offset: int = 0) -> str:
    if not path or not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        f.seek(offset)
        return f.read()


def size_of(path: str | None) -> int:
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


def topology(text: str, nodes_expected: int | None = None) -> dict:
    """What NCCL printed about the first communicator in ``text``: nNodes, localRanks, the transports it
    connected through, its Trees lines.  ``nnodes_verified``: NCCL's nNodes == nodes_expected (None when
    NCCL printed nothing: CPU/gloo, or NCCL_DEBUG not INFO)."""
    n_nodes = local_ranks = n_ranks = None
    m = RE_NODES.search(text)
    if m:
        n_ranks, n_nodes, local_ranks = (int(x) for x in m.groups())
    via = sorted({v for v in RE_VIA.findall(text)})
    trees = [ln.split("NCCL INFO", 1)[-1].strip() for ln in text.splitlines() if RE_TREES.search(ln)][:4]
    ver = RE_VERSION.search(text)
    sock = None
    for ln in text.splitlines():
        s = RE_SOCKET_IF.search(ln)
        if s:
            sock = s.group(1).strip()
            break
    net = sorted({v.split("/", 1)[1] for v in via if v.startswith("NET/")})
    return {
        "nccl_nranks_seen": n_ranks,
        "nccl_nnodes_seen": n_nodes,
        "nccl_local_ranks_seen": local_ranks,
        "nccl_nnodes_verified": (None if n_nodes is None or nodes_expected is None else n_nodes == nodes_expected),
        "nccl_transports_seen": via,
        "nccl_inter_node_transport_seen": ("/".join(net).lower() if net else None),
        "nccl_trees_lines": trees,
        "nccl_version_printed": ver.group(1) if ver else None,
        "nccl_socket_interface": sock,
    }


def tuning_choices(text: str) -> dict[int, dict]:
    """bytes -> {"algo", "proto", "channels", "calls", "mixed"} from the per-call TUNING lines of all-reduces.
    The most frequent (algo, proto) per size wins; ``mixed`` says NCCL chose more than one."""
    counts: dict[int, dict[tuple, int]] = {}
    chans: dict[tuple, int] = {}
    for m in RE_TUNING.finditer(text):
        nbytes = int(m.group(2))
        key = (m.group(3).upper(), m.group(4).upper())
        counts.setdefault(nbytes, {})
        counts[nbytes][key] = counts[nbytes].get(key, 0) + 1
        if m.group(5) is not None:
            chans[(nbytes,) + key] = int(m.group(6)) - int(m.group(5)) + 1
    out = {}
    for nbytes, c in counts.items():
        (algo, proto), n = max(c.items(), key=lambda kv: kv[1])
        out[nbytes] = {"algo": algo, "proto": proto, "channels": chans.get((nbytes, algo, proto)),
                       "calls": sum(c.values()), "mixed": len(c) > 1}
    return out


def algo_env_seen(text: str) -> list[str]:
    return RE_ALGO_ENV.findall(text)


def trim(text: str, max_lines: int = 400) -> str:
    """A short excerpt for committing: every line but the per-call TUNING lines (summarised by their count),
    at most ``max_lines`` lines."""
    kept, dropped = [], 0
    for ln in text.splitlines():
        if RE_TUNING.search(ln) or " Bytes -> Algo " in ln:
            dropped += 1
            continue
        kept.append(ln)
    head = kept[:max_lines]
    if len(kept) > len(head):
        # never end inside a communicator's init: its tuning table without the 'N coll channels' line that
        # closes it reads as a truncated log; cut at the start of that communicator instead
        done = max((i for i, ln in enumerate(head) if " coll channels" in ln), default=-1)
        starts = [i for i, ln in enumerate(head) if "Init START" in ln and i > done]
        if starts:
            head = head[:starts[0]]
    tail = [f"# ddpsim: {len(kept) - len(head):d} more lines cut"] if len(kept) > len(head) else []
    return "\n".join(head + tail + [f"# ddpsim: {dropped:d} per-call TUNING lines cut (summarised in the records)"]) + "\n"
