"""NCCL protocol parameters (LL, LL128, Simple): latencies and bandwidth efficiency.

Defaults are NCCL's own tuning tables (``src/graph/tuning.cc``, NCCL 2.28): a base latency per
(algorithm, protocol), a hardware latency per hop per (transport, algorithm, protocol) and the
fraction of link bandwidth each protocol delivers. A calibration fitted on measured runs replaces
them with its own table (``dataclasses.replace`` or the constructor).

How hop latencies meet the scenario's link latencies (``hop_latency_mode``):
- "scaled" (default): the scenario's link latency is the Simple-protocol ring hop; other
  (algorithm, protocol) pairs scale it by NCCL's ratio for that transport, e.g. LL on NVLink
  costs 0.6/3.4 of it. Editing the scenario's latency keeps its meaning; protocols keep NCCL's
  relative ordering. Exception, ``reference_link_latency_s``: for a transport listed there the
  listed link latency is the one at which NCCL's table holds, and the hop scales by
  link / reference. Default: "net" at 5 us, the scenario loader's default inter-node latency
  (``loader.py``), so a default scenario pays NCCL's NET hops (Simple 14 us, LL 2.7 us):
  a network link's wire latency is a small part of what NCCL's NET hop costs (proxy thread,
  NIC doorbells, flush), and reading 5 us as the whole Simple hop halved multi-node latency.
- "absolute": the table's hop latency is the whole hop latency (NCCL's own model); the scenario's
  link latencies are ignored. What a calibration fitted on nccl-tests output produces.
- "additive": link latency plus the table's hop latency.

Achievable bandwidth (``transport_efficiency`` defaults): a link's datasheet bandwidth is not what
NCCL's Simple protocol reaches over it. Defaults per transport, LL128 and LL scaled from them by
``bandwidth_efficiency`` (0.92, 0.5):
- NVLink 0.79: our own measurement, validation/data/h200x4-2026-11-26/allreduce.jsonl: 4 x H200,
  1 GiB all-reduce, busbw 356.6 GB/s against the 450 GB/s datasheet per direction (0.79; 2 GPUs
  gave 330.4, 0.73). External A100/V100 data were NOT used to set it (they are the held-out check).
- NET 0.94: ../shared/reference/ddp-nccl-facts.md section 4, "400 Gb/s InfiniBand per NIC:
  46-49 GB/s" (nccl-tests issues #290, #267, #347): 47/50 = 0.94.
- pci, shm: no default (1.0): no measurement to set one.
A calibration replaces the whole ``transport_efficiency`` map with its fitted one (``fit_link_class``
passes it to the constructor; ``from_dict`` takes a given map as is), so calibrated tables behave
exactly as before these defaults existed.

Tree bandwidth, as NCCL's cost model prices it (NVIDIA/nccl ``src/graph/tuning.cc``, read at NCCL
2.19-2.28; derived, not copied):
- ``ncclTopoTuneModel``: a tree's bus bandwidth is its channels x per-channel bandwidth x 0.92
  (capped per channel), and its algorithm bandwidth is half of that, whatever the node count. The
  tree graph uses at most the ring graph's channels (``src/init.cc``: treeGraph.maxChannels =
  ringGraph.nChannels) at the same per-channel bandwidth, so NCCL prices a tree as moving 2S per
  rank through the bandwidth a ring channel gets: the intra-node chain, whose GPUs forward the
  reduction up and the broadcast down, limits it. A ring moves 2(n-1)/n S through it, so inside one
  node NCCL's ring always wins on bandwidth.
  Here: ``algorithm_efficiency`` ({"tree": 0.92}) divides the tree's bandwidth, and
  ``tree_chain_bound`` floors the tree's transfer time at 2S / (the ring's bus bandwidth on the
  same topology and protocol): the flow model alone lets a chain use both directions of direct
  links (nvlink-ring) or lets few inter-node edges outrun the chain (2 nodes), which NCCL's model
  and measurements do not show.
- ``ncclTopoGetAlgoTime``: a per-size correction of tree bandwidth for medium sizes (0.4-1.0 by
  protocol and power-of-two size, 64 B to 256 MiB; 1.0 above). ``tree_size_correction`` holds
  (bytes, factor) knots per protocol, linear in log2 size between knots, constant before the
  first knot, 1.0 after the last; the default knots reproduce NCCL's steps (one flat segment per
  power of two: factor k applies to sizes with floor(log2(size / 64)) == k, k < 23).

Multi-node terms of NCCL's model (tuning.cc, NCCL 2.19-2.28 ``ncclTopoTuneModel`` and
``ncclTopoGetAlgoTime``; the formulas are ours, written from those facts):
- ``net_overhead_s``: "inter-node rings still have to launch nsteps * net overhead": on more than
  one node every intra-node hop of a ring costs at least the network post overhead, 1 us on
  x86 Intel (and the fallback; 2 us on AMD), three times that for Simple.
- ``ring_plateau_factor``: ring Simple all-reduce across nodes, once every channel's share per rank
  is at least 64 bytes (``ring_plateau_min_bytes``: nBytes / (nChannels * nRanks) >= 64), pays
  its whole latency (base + hops) times 1.4 (compute capability >= 8.0; 1.9 on older GPUs).
- ``ll_max_bus_Bps``: LL bus bandwidth caps across nodes (``llMaxBws``, x86 Intel row: 39.0 GB/s
  on 2 nodes, 20.4 GB/s from 3 nodes), for ring and tree alike.
- ``algorithm_protocol_efficiency``: per (algorithm, protocol, "one-node"|"multi-node") a further
  factor on ``bandwidth_efficiency``: ring LL across nodes is a quarter of the bus bandwidth
  (our 0.5 x 0.5), tree LL is busBw x 0.92 / 3.8 (0.5 x 0.526 on top of the tree's 0.92), tree
  LL128 is 7/9 on one node and 120/128 across nodes (on top of 0.92, instead of LL128's 0.92).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ddpsim.collectives.nccl_tuning import NCCL_TREE_CORRECTION_STEPS, PROTOCOL_NAMES, NcclTuning

HOP_LATENCY_MODES = ("scaled", "absolute", "additive")
_US = 1e-6


def _nccl_base_latency_s() -> dict[tuple[str, str], float]:
    us = {("ring", "ll"): 6.6, ("ring", "ll128"): 14.0, ("ring", "simple"): 8.4,
          ("tree", "ll"): 6.8, ("tree", "ll128"): 14.0, ("tree", "simple"): 8.4,
          ("nvls", "simple"): 0.0}
    return {key: value * _US for key, value in us.items()}


def _nccl_hop_latency_s() -> dict[tuple[str, str, str], float]:
    table = {
        "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)},
        "pci": {"tree": (1.0, 1.9, 6.0), "ring": (1.0, 2.5, 5.7)},
        "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0)},
    }
    table["shm"] = table["pci"]  # NCCL's SHM transport is costed on its PCI latencies
    out = {
        (transport, algorithm, protocol): value * _US
        for transport, by_algorithm in table.items()
        for algorithm, values in by_algorithm.items()
        for protocol, value in zip(PROTOCOL_NAMES, values, strict=True)
    }
    # NVLS and NVLS tree, Simple only (NCCL 2.23-2.29 hwLat): 25 us through the switch; a NET hop of the
    # NVLS tree 20.9 us (NCCL's NVLS proper across nodes needs CollNet, which ddpsim does not model)
    out[("nvlink", "nvls", "simple")] = 25.0 * _US
    out[("net", "nvls", "simple")] = 20.9 * _US
    return out


def _nccl_efficiency() -> dict[str, float]:
    return {"ll": 0.5, "ll128": 0.92, "simple": 1.0}


# Achievable fraction of datasheet bandwidth under the Simple protocol, per transport (sources in
# the module docstring): NVLink from our H200 runs, NET from published 400G InfiniBand busbw.
ACHIEVABLE_SIMPLE_FRACTION = {"nvlink": 0.79, "net": 0.94}


def _default_transport_efficiency() -> dict[tuple[str, str], float]:
    protocol = _nccl_efficiency()
    return {(transport, p): fraction * protocol[p]
            for transport, fraction in ACHIEVABLE_SIMPLE_FRACTION.items() for p in PROTOCOL_NAMES}


def _nccl_algorithm_efficiency() -> dict[str, float]:
    # tuning.cc, ncclTopoTuneModel: tree bus bandwidth x 0.92 on top of the protocol's factor
    return {"tree": 0.92}


_STEP_EDGE = 1 - 1e-9  # a knot just below the next power of two keeps each step flat


def _nccl_tree_size_correction() -> dict[str, tuple[tuple[float, float], ...]]:
    # NCCL's steps as knots: each step flat from 64 B x 2^k to just below 64 B x 2^(k+1)
    return {
        protocol: tuple(knot for k, factor in enumerate(steps)
                        for knot in ((64.0 * 2**k, factor), (64.0 * 2 ** (k + 1) * _STEP_EDGE, factor)))
        for protocol, steps in NCCL_TREE_CORRECTION_STEPS.items()
    }


def _nccl_reference_link_latency_s() -> dict[str, float]:
    # the scenario loader's default inter-node latency (loader.py, "5us"): a default
    # scenario pays exactly NCCL's NET hop latencies (module docstring)
    return {"net": 5.0 * _US}


def _nccl_net_overhead_s() -> dict[str, float]:
    # tuning.cc getNetOverhead: 1 us on x86 Intel and by default (2 us on AMD); x3 for Simple
    return {"ll": 1.0 * _US, "ll128": 1.0 * _US, "simple": 3.0 * _US}


def _nccl_algorithm_protocol_efficiency() -> dict[tuple[str, str, str], float]:
    # relative to bandwidth_efficiency (LL 0.5, LL128 0.92) and, for trees, algorithm_efficiency 0.92
    # (tuning.cc ncclTopoTuneModel "model refinements", all-reduce)
    return {
        ("ring", "ll", "multi-node"): 0.25 / 0.5,  # ring LL: busBw / 4 across nodes
        ("tree", "ll", "one-node"): (1 / 3.8) / 0.5,  # tree LL: busBw x 0.92 / 3.8
        ("tree", "ll", "multi-node"): (1 / 3.8) / 0.5,
        ("tree", "ll128", "one-node"): (7 / 9) / 0.92,  # tree LL128: x 7/9 on one node
        ("tree", "ll128", "multi-node"): (120 / 128) / 0.92,  # x 120/128 across nodes
    }


# tuning.cc llMaxBws, x86 Intel row (the default CPU), bus bandwidth in bytes/s: 2 nodes, >= 3 nodes
NCCL_LL_MAX_BUS_BPS = (39.0e9, 20.4e9)
# tuning.cc ncclTopoGetAlgoTime: "Plateau effect of ring", x1.4 for compute capability >= 8.0
NCCL_RING_PLATEAU_FACTOR = 1.4
NCCL_RING_PLATEAU_MIN_BYTES = 64.0
SCOPES = ("one-node", "multi-node")


@dataclass(frozen=True)
class ProtocolTable:
    """Latency and bandwidth parameters of NCCL's protocols.

    base_latency_s: per (algorithm, protocol), paid once per collective (launch, setup).
    hop_latency_s: per (transport, algorithm, protocol), NCCL's hardware latency of one hop;
        transports are "nvlink", "pci", "shm", "net". How it is used: ``hop_latency_mode``.
    bandwidth_efficiency: per protocol, fraction of link bandwidth carrying payload.
    transport_efficiency: per (transport, protocol), overrides ``bandwidth_efficiency`` for one
        link class (a calibration may fit, say, shared memory separately). Defaults: achievable
        fractions of datasheet bandwidth on NVLink and NET (module docstring).
    hop_latency_mode: "scaled" | "absolute" | "additive" (see the module docstring).
    algorithm_efficiency: per algorithm ("ring", "tree", "hierarchical"), a further bandwidth
        factor (NCCL: 0.92 for tree; absent means 1.0).
    tree_size_correction: per protocol, (bytes, factor) knots of the tree's size-dependent
        bandwidth correction (absent protocol: no correction).
    tree_chain_bound: price a tree no faster than 2S through the ring's bus bandwidth (NCCL's
        chain-limited tree; see the module docstring).
    reference_link_latency_s: per transport, the link latency at which ``hop_latency_s`` holds in
        "scaled" mode (absent: the transport's ring Simple hop).
    net_overhead_s: per protocol, the least an intra-node hop of a multi-node ring costs.
    ring_plateau_factor, ring_plateau_min_bytes: NCCL's ring Simple latency plateau across nodes.
    ll_max_bus_Bps: LL bus bandwidth caps across nodes, (2 nodes, 3 or more nodes); () for none.
    algorithm_protocol_efficiency: per (algorithm, protocol, scope), scope "one-node" or
        "multi-node", a bandwidth factor on top of the protocol's (may exceed 1 a little: NCCL's
        tree LL128 across nodes is 120/128 against LL128's 0.92).
    protocols: the protocols NCCL may pick on this system (it enables LL128 only on some; a
        calibration keeps those NCCL's own log showed it running).
    nccl_tuning: NCCL's own cost table as its log printed it for one shape (``nccl_tuning.py``);
        where it holds for the simulated shape, ``CollectiveModel.choose`` picks from it as NCCL
        does. None (NCCL's logged table unknown): the choice is played from this table's model.

    Hierarchical all-reduce is made of rings, so it is priced with the ring's entries; NVLS ("nvls")
    has its own (Simple only), its bandwidth factor is the GPU's (``CollectiveModel(nvls_efficiency)``).
    """

    base_latency_s: dict[tuple[str, str], float] = field(default_factory=_nccl_base_latency_s)
    hop_latency_s: dict[tuple[str, str, str], float] = field(default_factory=_nccl_hop_latency_s)
    bandwidth_efficiency: dict[str, float] = field(default_factory=_nccl_efficiency)
    transport_efficiency: dict[tuple[str, str], float] = field(default_factory=_default_transport_efficiency)
    hop_latency_mode: str = "scaled"
    algorithm_efficiency: dict[str, float] = field(default_factory=_nccl_algorithm_efficiency)
    tree_size_correction: dict[str, tuple[tuple[float, float], ...]] = field(
        default_factory=_nccl_tree_size_correction)
    tree_chain_bound: bool = True
    reference_link_latency_s: dict[str, float] = field(default_factory=_nccl_reference_link_latency_s)
    net_overhead_s: dict[str, float] = field(default_factory=_nccl_net_overhead_s)
    ring_plateau_factor: float = NCCL_RING_PLATEAU_FACTOR
    ring_plateau_min_bytes: float = NCCL_RING_PLATEAU_MIN_BYTES
    ll_max_bus_Bps: tuple[float, ...] = NCCL_LL_MAX_BUS_BPS
    algorithm_protocol_efficiency: dict[tuple[str, str, str], float] = field(
        default_factory=_nccl_algorithm_protocol_efficiency)
    protocols: tuple[str, ...] = PROTOCOL_NAMES
    nccl_tuning: NcclTuning | None = None

    def __post_init__(self) -> None:
        if not self.protocols or any(p not in PROTOCOL_NAMES for p in self.protocols):
            raise ValueError(f"protocols must be a non-empty subset of {PROTOCOL_NAMES}, got {self.protocols}")
        if self.hop_latency_mode not in HOP_LATENCY_MODES:
            raise ValueError(f"hop_latency_mode must be one of {HOP_LATENCY_MODES}, got {self.hop_latency_mode!r}")
        efficiencies: dict[Any, float] = {**self.bandwidth_efficiency, **self.transport_efficiency,
                                          **self.algorithm_efficiency}
        for key, value in efficiencies.items():
            if not 0 < value <= 1:
                raise ValueError(f"bandwidth efficiency {key} must be in (0, 1], got {value}")
        for protocol, knots in self.tree_size_correction.items():
            sizes = [size for size, _ in knots]
            if not knots or any(b <= a for a, b in zip(sizes, sizes[1:], strict=False)) or sizes[0] <= 0:
                raise ValueError(f"tree_size_correction[{protocol!r}] needs knots of increasing positive size")
            if any(not 0 < factor <= 1 for _, factor in knots):
                raise ValueError(f"tree_size_correction[{protocol!r}] factors must be in (0, 1]")
        for key, value in self.algorithm_protocol_efficiency.items():
            if len(key) != 3 or key[2] not in SCOPES or not 0 < value <= 2:
                raise ValueError(f"algorithm_protocol_efficiency {key}: scope one of {SCOPES}, factor in (0, 2]")
        if any(v <= 0 for v in self.reference_link_latency_s.values()):
            raise ValueError("reference_link_latency_s must be positive")
        if any(v < 0 for v in self.net_overhead_s.values()):
            raise ValueError("net_overhead_s must be non-negative")
        if self.ring_plateau_factor < 1 or self.ring_plateau_min_bytes < 0:
            raise ValueError("ring_plateau_factor must be >= 1 and ring_plateau_min_bytes >= 0")
        if len(self.ll_max_bus_Bps) not in (0, 2) or any(v <= 0 for v in self.ll_max_bus_Bps):
            raise ValueError("ll_max_bus_Bps must be () or (2 nodes, 3+ nodes) positive bandwidths")

    @classmethod
    def ideal(cls) -> ProtocolTable:
        """No protocol overhead: only the topology's latencies and full bandwidth (for closed forms)."""
        return cls(
            base_latency_s={},
            hop_latency_s={},
            bandwidth_efficiency=dict.fromkeys(PROTOCOL_NAMES, 1.0),
            transport_efficiency={},
            hop_latency_mode="additive",
            algorithm_efficiency={},
            tree_size_correction={},
            tree_chain_bound=False,
            reference_link_latency_s={},
            net_overhead_s={},
            ring_plateau_factor=1.0,
            ll_max_bus_Bps=(),
            algorithm_protocol_efficiency={},
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form: tuple keys joined with "/" ("nvlink/ring/simple")."""
        return {
            "base_latency_s": {"/".join(k): v for k, v in self.base_latency_s.items()},
            "hop_latency_s": {"/".join(k): v for k, v in self.hop_latency_s.items()},
            "bandwidth_efficiency": dict(self.bandwidth_efficiency),
            "transport_efficiency": {"/".join(k): v for k, v in self.transport_efficiency.items()},
            "hop_latency_mode": self.hop_latency_mode,
            "algorithm_efficiency": dict(self.algorithm_efficiency),
            "tree_size_correction": {p: [list(k) for k in knots] for p, knots in self.tree_size_correction.items()},
            "tree_chain_bound": self.tree_chain_bound,
            "reference_link_latency_s": dict(self.reference_link_latency_s),
            "net_overhead_s": dict(self.net_overhead_s),
            "ring_plateau_factor": self.ring_plateau_factor,
            "ring_plateau_min_bytes": self.ring_plateau_min_bytes,
            "ll_max_bus_Bps": list(self.ll_max_bus_Bps),
            "algorithm_protocol_efficiency": {"/".join(k): v for k, v in self.algorithm_protocol_efficiency.items()},
            "protocols": list(self.protocols),
            # only where a log gave it, so that tables without one keep their exact earlier form
            **({"nccl_tuning": self.nccl_tuning.to_dict()} if self.nccl_tuning is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProtocolTable:
        """Read ``to_dict``'s form; entries it leaves out keep NCCL's defaults.

        A given ``transport_efficiency``, ``algorithm_efficiency`` or ``tree_size_correction`` map is
        taken as is (a calibration's fitted transport map replaces the default achievable fractions
        wholesale, and ``to_dict`` round-trips exactly); a missing one keeps the defaults.

        Raises KeyError, TypeError or ValueError on unknown fields or malformed keys.
        """
        unknown = set(data) - {"base_latency_s", "hop_latency_s", "bandwidth_efficiency",
                               "transport_efficiency", "hop_latency_mode", "algorithm_efficiency",
                               "tree_size_correction", "tree_chain_bound", "reference_link_latency_s",
                               "net_overhead_s", "ring_plateau_factor", "ring_plateau_min_bytes", "ll_max_bus_Bps",
                               "algorithm_protocol_efficiency", "protocols", "nccl_tuning"}
        if unknown:
            raise KeyError(f"unknown protocol table fields: {', '.join(sorted(unknown))}")

        def keyed(name: str, parts: int) -> dict[Any, float]:
            out: dict[Any, float] = {}
            for key, value in dict(data.get(name, {})).items():
                split = tuple(str(key).split("/"))
                if len(split) != parts:
                    raise ValueError(f"{name} key {key!r} should have {parts} parts joined by '/'")
                out[split if parts > 1 else split[0]] = float(value)
            return out

        default = cls()
        return cls(
            base_latency_s={**default.base_latency_s, **keyed("base_latency_s", 2)},
            hop_latency_s={**default.hop_latency_s, **keyed("hop_latency_s", 3)},
            bandwidth_efficiency={**default.bandwidth_efficiency, **keyed("bandwidth_efficiency", 1)},
            transport_efficiency=(keyed("transport_efficiency", 2) if "transport_efficiency" in data
                                  else default.transport_efficiency),
            hop_latency_mode=str(data.get("hop_latency_mode", default.hop_latency_mode)),
            algorithm_efficiency=({str(k): float(v) for k, v in dict(data["algorithm_efficiency"]).items()}
                                  if "algorithm_efficiency" in data else default.algorithm_efficiency),
            tree_size_correction=({str(p): tuple((float(size), float(factor)) for size, factor in knots)
                                   for p, knots in dict(data["tree_size_correction"]).items()}
                                  if "tree_size_correction" in data else default.tree_size_correction),
            tree_chain_bound=bool(data.get("tree_chain_bound", default.tree_chain_bound)),
            reference_link_latency_s=(keyed("reference_link_latency_s", 1) if "reference_link_latency_s" in data
                                      else default.reference_link_latency_s),
            net_overhead_s=keyed("net_overhead_s", 1) if "net_overhead_s" in data else default.net_overhead_s,
            ring_plateau_factor=float(data.get("ring_plateau_factor", default.ring_plateau_factor)),
            ring_plateau_min_bytes=float(data.get("ring_plateau_min_bytes", default.ring_plateau_min_bytes)),
            ll_max_bus_Bps=tuple(float(v) for v in data.get("ll_max_bus_Bps", default.ll_max_bus_Bps)),
            algorithm_protocol_efficiency=(keyed("algorithm_protocol_efficiency", 3)
                                           if "algorithm_protocol_efficiency" in data
                                           else default.algorithm_protocol_efficiency),
            protocols=tuple(str(p) for p in data.get("protocols", default.protocols)),
            nccl_tuning=NcclTuning.from_dict(data["nccl_tuning"]) if data.get("nccl_tuning") is not None else None,
        )

    @staticmethod
    def _family(algorithm: str) -> str:
        return algorithm if algorithm in ("tree", "nvls") else "ring"

    def base_latency(self, algorithm: str, protocol: str) -> float:
        return self.base_latency_s.get((self._family(algorithm), protocol), 0.0)

    def efficiency(self, protocol: str, transport: str | None = None) -> float:
        if transport is not None and (transport, protocol) in self.transport_efficiency:
            return self.transport_efficiency[(transport, protocol)]
        return self.bandwidth_efficiency.get(protocol, 1.0)

    def algorithm_factor(self, algorithm: str, protocol: str, nbytes: float) -> float:
        """Bandwidth factor of an algorithm at one size: ``algorithm_efficiency`` times, for a tree,
        the size correction (linear in log2 size between knots)."""
        return self.algorithm_efficiency.get(algorithm, 1.0) * self.size_correction(algorithm, protocol, nbytes)

    def size_correction(self, algorithm: str, protocol: str, nbytes: float) -> float:
        """The tree's size-dependent bandwidth factor (1.0 for other algorithms)."""
        knots = self.tree_size_correction.get(protocol) if algorithm == "tree" else None
        if not knots or nbytes <= 0:
            return 1.0
        if nbytes > knots[-1][0]:
            return 1.0  # no correction after the last knot
        sizes = np.log2([size for size, _ in knots])
        values = [value for _, value in knots]
        return float(np.interp(np.log2(nbytes), sizes, values))  # constant before the first knot

    def protocol_factor(self, algorithm: str, protocol: str, nodes: int) -> float:
        """``algorithm_protocol_efficiency`` for this algorithm's family and node count (1.0 if absent)."""
        scope = "multi-node" if nodes > 1 else "one-node"
        return self.algorithm_protocol_efficiency.get((self._family(algorithm), protocol, scope), 1.0)

    def ll_bus_cap_Bps(self, protocol: str, nodes: int) -> float:
        """NCCL's LL bus bandwidth cap across ``nodes`` nodes (inf where none applies)."""
        if protocol != "ll" or nodes < 2 or not self.ll_max_bus_Bps:
            return float("inf")
        return self.ll_max_bus_Bps[0] if nodes == 2 else self.ll_max_bus_Bps[1]

    def ring_intra_floor_s(self, protocol: str, nodes: int) -> float:
        """The least an intra-node hop of a ring costs on ``nodes`` nodes (NCCL's net overhead)."""
        return self.net_overhead_s.get(protocol, 0.0) if nodes > 1 else 0.0

    def plateau(self, algorithm: str, protocol: str, nodes: int, n_ranks: int, channels: int,
                nbytes: float) -> float:
        """NCCL's latency factor for ring Simple across nodes once each channel's share per rank
        reaches ``ring_plateau_min_bytes`` (1.0 otherwise)."""
        if algorithm != "ring" or protocol != "simple" or nodes < 2:
            return 1.0
        return self.ring_plateau_factor if nbytes / (channels * n_ranks) >= self.ring_plateau_min_bytes else 1.0

    def hop_latency(self, transport: str, algorithm: str, protocol: str, link_latency_s: float) -> float:
        """Latency of one GPU-to-GPU hop whose links add up to ``link_latency_s``."""
        family = self._family(algorithm)
        table = self.hop_latency_s.get((transport, family, protocol))
        if self.hop_latency_mode == "absolute":
            return link_latency_s if table is None else table
        if self.hop_latency_mode == "additive":
            return link_latency_s + (table or 0.0)
        reference = self.reference_link_latency_s.get(transport) or self.hop_latency_s.get((transport, "ring", "simple"))
        if table is None or not reference:
            return link_latency_s
        return link_latency_s * (table / reference)
