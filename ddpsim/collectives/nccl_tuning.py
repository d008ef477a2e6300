"""NCCL's own all-reduce cost table, as its INFO log prints it, and NCCL's choice from it.

NCCL picks an all-reduce's algorithm and protocol by the least time its own model estimates, not by
what is really fastest. Its model believes the topology it detected: on the emulated multi-node
campaigns NCCL read no NIC speed and assumed 10 Gbps (``NET[1.2]``), far slower than the loopback
really is, so a model priced on the measured bandwidths cannot agree with its choice. NCCL prints
the table behind that choice at init (``NCCL_DEBUG=INFO``, subsystem TUNING): per (algorithm,
protocol) a latency in microseconds and an algorithm bandwidth in GB/s (0.0: disabled on this
system, e.g. LL128 across the socket network). ``NcclTuning`` holds that table for one communicator
and reproduces the choice.

The selection rule, derived from NVIDIA/nccl (read at 2.19-2.28; written from these facts, not
copied):
- ``src/enqueue.cc`` ``topoGetAlgoInfo``: the (algorithm, protocol) with the least estimated time
  among the enabled ones (bandwidth > 0), scanning algorithms in NCCL's order (Tree before Ring)
  and protocols LL, LL128, Simple, keeping the first on a tie. The channel and thread reduction
  for small sizes happens after the choice and does not change it.
- ``src/graph/tuning.cc`` ``ncclTopoGetAlgoTime``: time_us = latency x (ring plateau) +
  bytes / (1000 x bandwidth x correction), where
  * correction: for Tree, ``treeCorrectionFactor[protocol][k]`` with k = floor(log2(bytes / 64)),
    k < 23 (``NCCL_TREE_CORRECTION_STEPS`` below), 1 otherwise;
  * ring plateau: ring Simple all-reduce on more than one node, once bytes / (channels x ranks)
    >= 64, latency x 1.4 (compute capability >= 8.0; 1.9 before). ``channels`` is the
    communicator's channel count ("N coll channels" in the log).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# the algorithms NCCL's table has that ddpsim simulates, in NCCL's scanning order (NCCL_ALGO_TREE 0,
# NCCL_ALGO_RING 1): a tie goes to the first
TUNED_ALGORITHMS = ("tree", "ring")
# NCCL's protocols in its scanning order (NCCL_PROTO_LL 0, LL128 1, SIMPLE 2)
PROTOCOL_NAMES = ("ll", "ll128", "simple")
_US = 1e-6
_GBPS = 1e9
# tuning.cc ``treeCorrectionFactor`` (NCCL 2.19-2.28): tree bandwidth factor per protocol, entry k
# for sizes with floor(log2(nBytes >> 6)) == k, i.e. 64 B x 2^k up to twice that; none from 512 MiB.
NCCL_TREE_CORRECTION_STEPS = {
    "ll": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "ll128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}
# tuning.cc ncclTopoGetAlgoTime "Plateau effect of ring": x1.4 from compute capability 8.0 (the
# GPUs ddpsim models: A100, H100, H200), x1.9 before
NCCL_RING_PLATEAU_FACTOR = 1.4
NCCL_RING_PLATEAU_MIN_BYTES = 64


@dataclass(frozen=True)
class NcclTuning:
    """One communicator's all-reduce table as NCCL logged it.

    latency_s / algbw_Bps: per (algorithm, protocol) for "tree" and "ring"; algbw 0 means NCCL
    disabled that pair. ranks, nodes: the communicator NCCL built the table for (a table holds only
    for that shape). channels: NCCL's channel count, which sets the ring plateau's threshold.
    net_bandwidth_Bps: the NIC speed NCCL's topology believed (``NET[x]`` in GB/s), None on one node;
    kept to say why NCCL's choice differs from what the measured network would make fastest.
    """

    ranks: int
    nodes: int
    channels: int
    latency_s: dict[tuple[str, str], float]
    algbw_Bps: dict[tuple[str, str], float]
    net_bandwidth_Bps: float | None = None
    nccl_version: str = ""
    source: str = ""
    ring_plateau_factor: float = NCCL_RING_PLATEAU_FACTOR

    def applies_to(self, world_size: int, nodes: int) -> bool:
        return self.ranks == world_size and self.nodes == nodes

    def time_s(self, nbytes: float, algorithm: str, protocol: str) -> float | None:
        """NCCL's estimated time (ncclTopoGetAlgoTime), or None where NCCL disabled the pair."""
        bandwidth_Bps = self.algbw_Bps.get((algorithm, protocol), 0.0)
        if bandwidth_Bps <= 0:
            return None
        latency_s = self.latency_s[(algorithm, protocol)]
        if algorithm == "tree":
            step = _log2_floor(int(nbytes) >> 6)
            steps = NCCL_TREE_CORRECTION_STEPS[protocol]
            if 0 <= step < len(steps):
                bandwidth_Bps *= steps[step]
        plateau = (algorithm == "ring" and protocol == "simple" and self.nodes > 1
                   and int(nbytes) // (self.channels * self.ranks) >= NCCL_RING_PLATEAU_MIN_BYTES)
        if plateau:
            latency_s *= self.ring_plateau_factor
        return latency_s + nbytes / bandwidth_Bps

    def choose(self, nbytes: float, algorithms: tuple[str, ...], protocols: tuple[str, ...]) -> tuple[str, str] | None:
        """NCCL's pick among ``algorithms`` x ``protocols`` (topoGetAlgoInfo), None if the table
        enables none of them (an algorithm NCCL's table does not have, e.g. hierarchical)."""
        best: tuple[float, str, str] | None = None
        for algorithm in TUNED_ALGORITHMS:
            if algorithm not in algorithms:
                continue
            for protocol in PROTOCOL_NAMES:
                if protocol not in protocols:
                    continue
                time_s = self.time_s(nbytes, algorithm, protocol)
                if time_s is not None and (best is None or time_s < best[0]):
                    best = (time_s, algorithm, protocol)
        return None if best is None else (best[1], best[2])

    def to_dict(self) -> dict[str, Any]:
        """JSON form, in NCCL's own units (us, GB/s) so that it reads as the log did."""
        return {
            "ranks": self.ranks,
            "nodes": self.nodes,
            "channels": self.channels,
            "allreduce_latency_us": {"/".join(k): v / _US for k, v in self.latency_s.items()},
            "allreduce_algbw_GBps": {"/".join(k): v / _GBPS for k, v in self.algbw_Bps.items()},
            "net_bandwidth_GBps": None if self.net_bandwidth_Bps is None else self.net_bandwidth_Bps / _GBPS,
            "nccl_version": self.nccl_version,
            "source": self.source,
            "ring_plateau_factor": self.ring_plateau_factor,
        }

    @classmethod
    def from_dict(cls, data: Any) -> NcclTuning:
        """Read ``to_dict``'s form. Raises KeyError, TypeError or ValueError when malformed."""
        if not isinstance(data, dict):
            raise TypeError("nccl_tuning must be a mapping")

        def keyed(name: str, scale: float) -> dict[tuple[str, str], float]:
            out = {}
            for key, value in dict(data[name]).items():
                algorithm, _, protocol = str(key).partition("/")
                if algorithm not in TUNED_ALGORITHMS or protocol not in PROTOCOL_NAMES:
                    raise ValueError(f"{name} key {key!r}: expected tree|ring/ll|ll128|simple")
                if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                    raise ValueError(f"{name}[{key!r}] must be a number >= 0, got {value!r}")
                out[(algorithm, protocol)] = float(value) * scale
            return out

        latency, bandwidth = keyed("allreduce_latency_us", _US), keyed("allreduce_algbw_GBps", _GBPS)
        if set(latency) != set(bandwidth) or not latency:
            raise ValueError("allreduce_latency_us and allreduce_algbw_GBps must name the same pairs")
        counts = {name: data[name] for name in ("ranks", "nodes", "channels")}
        for name, value in counts.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        net = data.get("net_bandwidth_GBps")
        return cls(
            ranks=counts["ranks"], nodes=counts["nodes"], channels=counts["channels"],
            latency_s=latency, algbw_Bps=bandwidth,
            net_bandwidth_Bps=None if net is None else float(net) * _GBPS,
            nccl_version=str(data.get("nccl_version", "")), source=str(data.get("source", "")),
            ring_plateau_factor=float(data.get("ring_plateau_factor", NCCL_RING_PLATEAU_FACTOR)),
        )


def _log2_floor(value: int) -> int:
    """floor(log2(value)) for value >= 1; -1 for 0 (no tree correction step applies)."""
    return value.bit_length() - 1
