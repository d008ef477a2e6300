"""NCCL protocol parameters (LL, LL128, Simple): latencies and bandwidth efficiency.

Defaults are NCCL's own tuning tables (``src/graph/tuning.cc``, NCCL 2.28): a base latency per
(algorithm, protocol), a hardware latency per hop per (transport, algorithm, protocol) and the
fraction of link bandwidth each protocol delivers. A calibration fitted on measured runs replaces
them with its own table (``dataclasses.replace`` or the constructor).

How hop latencies meet the scenario's link latencies (``hop_latency_mode``):
- "scaled" (default): the scenario's link latency is the Simple-protocol ring hop; other
  (algorithm, protocol) pairs scale it by NCCL's ratio for that transport, e.g. LL on NVLink
  costs 0.6/3.4 of it. Editing the scenario's latency keeps its meaning; protocols keep NCCL's
  relative ordering.
- "absolute": the table's hop latency is the whole hop latency (NCCL's own model); the scenario's
  link latencies are ignored. What a calibration fitted on nccl-tests output produces.
- "additive": link latency plus the table's hop latency.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PROTOCOL_NAMES = ("ll", "ll128", "simple")
HOP_LATENCY_MODES = ("scaled", "absolute", "additive")
_US = 1e-6


def _nccl_base_latency_s() -> dict[tuple[str, str], float]:
    us = {("ring", "ll"): 6.6, ("ring", "ll128"): 14.0, ("ring", "simple"): 8.4,
          ("tree", "ll"): 6.8, ("tree", "ll128"): 14.0, ("tree", "simple"): 8.4}
    return {key: value * _US for key, value in us.items()}


def _nccl_hop_latency_s() -> dict[tuple[str, str, str], float]:
    table = {
        "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)},
        "pci": {"tree": (1.0, 1.9, 6.0), "ring": (1.0, 2.5, 5.7)},
        "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0)},
    }
    table["shm"] = table["pci"]  # NCCL's SHM transport is costed on its PCI latencies
    return {
        (transport, algorithm, protocol): value * _US
        for transport, by_algorithm in table.items()
        for algorithm, values in by_algorithm.items()
        for protocol, value in zip(PROTOCOL_NAMES, values, strict=True)
    }


def _nccl_efficiency() -> dict[str, float]:
    return {"ll": 0.5, "ll128": 0.92, "simple": 1.0}


@dataclass(frozen=True)
class ProtocolTable:
    """Latency and bandwidth parameters of NCCL's protocols.

    base_latency_s: per (algorithm, protocol), paid once per collective (launch, setup).
    hop_latency_s: per (transport, algorithm, protocol), NCCL's hardware latency of one hop;
        transports are "nvlink", "pci", "shm", "net". How it is used: ``hop_latency_mode``.
    bandwidth_efficiency: per protocol, fraction of link bandwidth carrying payload.
    transport_efficiency: per (transport, protocol), overrides ``bandwidth_efficiency`` for one
        link class (a calibration may fit, say, shared memory separately).
    hop_latency_mode: "scaled" | "absolute" | "additive" (see the module docstring).

    Hierarchical all-reduce is made of rings, so it is priced with the ring's entries.
    """

    base_latency_s: dict[tuple[str, str], float] = field(default_factory=_nccl_base_latency_s)
    hop_latency_s: dict[tuple[str, str, str], float] = field(default_factory=_nccl_hop_latency_s)
    bandwidth_efficiency: dict[str, float] = field(default_factory=_nccl_efficiency)
    transport_efficiency: dict[tuple[str, str], float] = field(default_factory=dict)
    hop_latency_mode: str = "scaled"

    def __post_init__(self) -> None:
        if self.hop_latency_mode not in HOP_LATENCY_MODES:
            raise ValueError(f"hop_latency_mode must be one of {HOP_LATENCY_MODES}, got {self.hop_latency_mode!r}")
        for key, value in {**self.bandwidth_efficiency, **self.transport_efficiency}.items():
            if not 0 < value <= 1:
                raise ValueError(f"bandwidth efficiency {key} must be in (0, 1], got {value}")

    @classmethod
    def ideal(cls) -> ProtocolTable:
        """No protocol overhead: only the topology's latencies and full bandwidth (for closed forms)."""
        return cls(
            base_latency_s={},
            hop_latency_s={},
            bandwidth_efficiency=dict.fromkeys(PROTOCOL_NAMES, 1.0),
            hop_latency_mode="additive",
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form: tuple keys joined with "/" ("nvlink/ring/simple")."""
        return {
            "base_latency_s": {"/".join(k): v for k, v in self.base_latency_s.items()},
            "hop_latency_s": {"/".join(k): v for k, v in self.hop_latency_s.items()},
            "bandwidth_efficiency": dict(self.bandwidth_efficiency),
            "transport_efficiency": {"/".join(k): v for k, v in self.transport_efficiency.items()},
            "hop_latency_mode": self.hop_latency_mode,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProtocolTable:
        """Read ``to_dict``'s form; entries it leaves out keep NCCL's defaults.

        Raises KeyError, TypeError or ValueError on unknown fields or malformed keys.
        """
        unknown = set(data) - {"base_latency_s", "hop_latency_s", "bandwidth_efficiency",
                               "transport_efficiency", "hop_latency_mode"}
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
            transport_efficiency=keyed("transport_efficiency", 2),
            hop_latency_mode=str(data.get("hop_latency_mode", default.hop_latency_mode)),
        )

    @staticmethod
    def _family(algorithm: str) -> str:
        return "tree" if algorithm == "tree" else "ring"

    def base_latency(self, algorithm: str, protocol: str) -> float:
        return self.base_latency_s.get((self._family(algorithm), protocol), 0.0)

    def efficiency(self, protocol: str, transport: str | None = None) -> float:
        if transport is not None and (transport, protocol) in self.transport_efficiency:
            return self.transport_efficiency[(transport, protocol)]
        return self.bandwidth_efficiency.get(protocol, 1.0)

    def hop_latency(self, transport: str, algorithm: str, protocol: str, link_latency_s: float) -> float:
        """Latency of one GPU-to-GPU hop whose links add up to ``link_latency_s``."""
        family = self._family(algorithm)
        table = self.hop_latency_s.get((transport, family, protocol))
        if self.hop_latency_mode == "absolute":
            return link_latency_s if table is None else table
        if self.hop_latency_mode == "additive":
            return link_latency_s + (table or 0.0)
        reference = self.hop_latency_s.get((transport, "ring", "simple"))
        if table is None or not reference:
            return link_latency_s
        return link_latency_s * (table / reference)
