"""The calibration as a value: read once at the boundary, checked there, applied without I/O.

A calibration file (written by ``ddpsim calibrate``) holds, per link class, the fitted link
bandwidth and latency and the protocol table, and the fitted DDP overhead terms. The scenario's
link types pick the class through ``topology.link_kinds``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ddpsim.collectives.protocols import ProtocolTable
from ddpsim.errors import ScenarioError
from ddpsim.jsonfile import read_json_object
from ddpsim.scenario.schema import OverheadSpec, Scenario
from ddpsim.topology.link_kinds import link_class_of_type

SCHEMA = "ddpsim.calibration/2"
# version 1 stored compute_slowdown and comm_slowdown as the extra fraction (0 = no effect)
_SCHEMA_V1 = "ddpsim.calibration/1"
_FACTOR_TERMS = ("compute_slowdown", "comm_slowdown")


@dataclass(frozen=True)
class LinkFit:
    """One link class's fitted values, for one world size where it was measured on one node."""

    bandwidth_Bps: float
    latency_s: float
    algorithm: str | None
    protocol_table: ProtocolTable | None
    call_floor_s: float
    raw: dict[str, Any] = field(compare=False, repr=False)


@dataclass(frozen=True)
class Calibration:
    """A checked calibration. ``source`` names where it came from, for messages and provenance."""

    source: str
    digest: str
    link_classes: dict[str, Any] = field(compare=False, repr=False)
    overheads: dict[str, Any] = field(compare=False, repr=False)
    calibration_subset: dict[str, Any] = field(compare=False, repr=False)
    data_dir: str | None = None

    def link_fit(self, link_class: str, world_size: int, nodes: int) -> LinkFit | None:
        """The fit for a link class, the one of this exact world size where it was measured on one node."""
        fitted = self.link_classes.get(link_class)
        if fitted is None:
            return None
        if nodes == 1:
            fitted = fitted.get("by_world_size", {}).get(str(world_size), fitted)
        return _link_fit(fitted, self.source, f"link_classes.{link_class}")

    def overhead_values(self, link_class: str, world_size: int) -> dict[str, Any]:
        fitted = self.overheads.get(link_class) or {}
        fitted = fitted.get("by_world_size", {}).get(str(world_size), fitted)
        return _overheads(fitted, self.source, f"overheads.{link_class}")


def calibration_from_dict(data: dict[str, Any], source: str) -> Calibration:
    """Check every entry now, so that a bad file fails when it is read, naming the file and field."""
    if data.get("schema") == _SCHEMA_V1:
        data = _upgrade_v1(data)
    if data.get("schema") != SCHEMA:
        raise ScenarioError(f"expected schema '{SCHEMA}'", file=source, field="schema")
    link_classes = data.get("link_classes")
    if not isinstance(link_classes, dict):
        raise ScenarioError("expected a 'link_classes' mapping", file=source, field="link_classes")
    overheads = data.get("overheads") or {}
    if not isinstance(overheads, dict):
        raise ScenarioError("expected an 'overheads' mapping", file=source, field="overheads")
    for name, entry in link_classes.items():
        if not isinstance(entry, dict):
            raise ScenarioError("expected a mapping", file=source, field=f"link_classes.{name}")
        _link_fit(entry, source, f"link_classes.{name}")
        for world, sub in (entry.get("by_world_size") or {}).items():
            _link_fit(sub, source, f"link_classes.{name}.by_world_size.{world}")
    for name, entry in overheads.items():
        if not isinstance(entry, dict):
            raise ScenarioError("expected a mapping", file=source, field=f"overheads.{name}")
        _overheads(entry, source, f"overheads.{name}")
        for world, sub in (entry.get("by_world_size") or {}).items():
            _overheads(sub, source, f"overheads.{name}.by_world_size.{world}")
    subset = data.get("calibration_subset") or {}
    data_dir = data.get("data_dir")
    if isinstance(data_dir, str) and not os.path.isabs(data_dir) and os.path.exists(source):
        # stored relative to the calibration file's folder, so the pair can move together
        data_dir = os.path.join(os.path.dirname(os.path.abspath(source)), data_dir)
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    return Calibration(
        source=source,
        digest=digest,
        link_classes=link_classes,
        overheads=overheads,
        calibration_subset=subset if isinstance(subset, dict) else {},
        data_dir=data_dir if isinstance(data_dir, str) else None,
    )


def _upgrade_v1(data: dict[str, Any]) -> dict[str, Any]:
    def factors(entry: Any) -> Any:
        if not isinstance(entry, dict):
            return entry
        out = {k: factors(v) for k, v in entry.items()}
        for key in _FACTOR_TERMS:
            value = out.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[key] = value + 1.0
        return out

    return {**data, "schema": SCHEMA, "overheads": factors(data.get("overheads") or {})}


def read_calibration(path: str) -> Calibration:
    """Read and check a calibration file; the only place a calibration touches the disk."""
    return calibration_from_dict(read_json_object(path, "calibration", field="calibration"), path)


def apply_calibration(scenario: Scenario) -> tuple[Scenario, ProtocolTable | None]:
    """Return the scenario with calibrated link and overhead values, and the protocol table (or None)."""
    calibration = scenario.calibration
    if calibration is None:
        return scenario, None
    link_class = link_class_of_type(scenario.cluster.intra_node.type)
    fitted = calibration.link_fit(link_class, scenario.cluster.world_size, scenario.cluster.nodes)
    if fitted is None:
        known = ", ".join(sorted(calibration.link_classes))
        raise ScenarioError(
            f"has no fit for link class '{link_class}' (it has: {known})", file=calibration.source, field="link_classes"
        )
    intra = replace(scenario.cluster.intra_node, bandwidth_Bps=fitted.bandwidth_Bps, latency_s=fitted.latency_s)
    overheads = replace(scenario.overheads, **calibration.overhead_values(link_class, scenario.cluster.world_size))
    collective = scenario.collective
    if collective.algorithm == "auto" and fitted.algorithm and scenario.cluster.nodes == 1:
        # the algorithm NCCL ran when the link class was measured, on one node
        collective = replace(collective, algorithm=fitted.algorithm)
    cluster = replace(scenario.cluster, intra_node=intra)
    return replace(scenario, cluster=cluster, overheads=overheads, collective=collective), fitted.protocol_table


def _link_fit(entry: dict[str, Any], source: str, where: str) -> LinkFit:
    algorithm = entry.get("algorithm")
    if algorithm is not None and algorithm not in ("ring", "tree", "hierarchical"):
        raise ScenarioError(f"expected ring, tree or hierarchical, got {algorithm!r}", file=source, field=f"{where}.algorithm")
    floor = entry.get("call_floor_s", 0.0)
    return LinkFit(
        bandwidth_Bps=_number(entry, "bandwidth_Bps", source, where, positive=True),
        latency_s=_number(entry, "latency_s", source, where),
        algorithm=algorithm,
        protocol_table=_protocol_table(entry.get("protocol_table"), source, where),
        call_floor_s=_number({"call_floor_s": floor}, "call_floor_s", source, where),
        raw=entry,
    )


def _number(entry: dict[str, Any], key: str, source: str, where: str, positive: bool = False) -> float:
    value = entry.get(key)
    bad = isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
    if bad or value < 0 or (positive and value == 0):
        expected = "a positive finite number" if positive else "a finite number >= 0"
        raise ScenarioError(f"expected {expected}, got {value!r}", file=source, field=f"{where}.{key}")
    return float(value)


def _overheads(entry: dict[str, Any], source: str, where: str) -> dict[str, Any]:
    """The fitted overhead terms, checked as strictly as the scenario's own ``overheads`` section."""
    known = {f.name for f in fields(OverheadSpec)}
    values: dict[str, Any] = {}
    for key in sorted(known & set(entry)):
        value = entry[key]
        if key == "max_inflight_buckets":
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ScenarioError(f"expected null or an integer >= 1, got {value!r}", file=source, field=f"{where}.{key}")
            values[key] = value
        elif key == "copy_bandwidth_Bps" and value is None:
            values[key] = None
        else:
            values[key] = _number(entry, key, source, where, positive=key == "copy_bandwidth_Bps")
            if key in ("compute_slowdown", "comm_slowdown", "allreduce_stretch") and values[key] < 1:
                raise ScenarioError(f"is a factor >= 1, got {values[key]}", file=source, field=f"{where}.{key}")
    return values


def _protocol_table(data: Any, source: str, where: str) -> ProtocolTable | None:
    if data is None:
        return None
    try:
        return ProtocolTable.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise ScenarioError(f"bad protocol table: {exc}", file=source, field=f"{where}.protocol_table") from None
