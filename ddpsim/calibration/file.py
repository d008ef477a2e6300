"""Read a calibration file (written by ``ddpsim calibrate``) and apply it to a scenario.

A calibration holds, per link class, the fitted link bandwidth and latency and the protocol table,
and the fitted DDP overhead terms. The scenario's link types pick the class: nvswitch and
nvlink-ring use "nvlink", shm "shm", socket "socket", pcie "pcie".
"""

from __future__ import annotations

import os
from dataclasses import fields, replace
from typing import Any

from ddpsim.errors import ScenarioError
from ddpsim.jsonfile import read_json_object
from ddpsim.scenario.schema import OverheadSpec, Scenario

SCHEMA = "ddpsim.calibration/1"
LINK_CLASS_OF_INTRA_TYPE = {
    "nvswitch": "nvlink",
    "nvlink-ring": "nvlink",
    "shm": "shm",
    "socket": "socket",
    "pcie": "pcie",
}


def read_calibration(path: str) -> dict[str, Any]:
    data = read_json_object(path, "calibration", field="calibration")
    if data.get("schema") != SCHEMA:
        raise ScenarioError(f"expected schema '{SCHEMA}'", file=path, field="schema")
    if not isinstance(data.get("link_classes"), dict):
        raise ScenarioError("expected a 'link_classes' mapping", file=path, field="link_classes")
    return data


def link_entry(data: dict[str, Any], link_class: str, world_size: int, nodes: int) -> dict[str, Any] | None:
    """The fit for a link class, the one of this exact world size where it was measured on one node."""
    fitted = data["link_classes"].get(link_class)
    if fitted is None:
        return None
    if nodes == 1:
        return fitted.get("by_world_size", {}).get(str(world_size), fitted)
    return fitted


def apply_calibration(scenario: Scenario) -> tuple[Scenario, Any]:
    """Return the scenario with calibrated link and overhead values, and the protocol table (or None)."""
    if scenario.calibration_path is None:
        return scenario, None
    path = scenario.calibration_path
    if not os.path.isabs(path):
        path = os.path.join(scenario.base_dir, path)
    data = read_calibration(path)
    link_class = LINK_CLASS_OF_INTRA_TYPE[scenario.cluster.intra_node.type]
    fitted = link_entry(data, link_class, scenario.cluster.world_size, scenario.cluster.nodes)
    if fitted is None:
        known = ", ".join(sorted(data["link_classes"]))
        raise ScenarioError(
            f"has no fit for link class '{link_class}' (it has: {known})", file=path, field="link_classes"
        )
    where = f"link_classes.{link_class}"
    intra = replace(
        scenario.cluster.intra_node,
        bandwidth_Bps=_number(fitted, "bandwidth_Bps", path, where, positive=True),
        latency_s=_number(fitted, "latency_s", path, where),
    )
    overheads = scenario.overheads
    fitted_overheads = data.get("overheads", {}).get(link_class)
    if fitted_overheads:
        fitted_overheads = fitted_overheads.get("by_world_size", {}).get(str(scenario.cluster.world_size), fitted_overheads)
        overheads = replace(overheads, **_overheads(fitted_overheads, path, f"overheads.{link_class}"))
    cluster = replace(scenario.cluster, intra_node=intra)
    collective = scenario.collective
    if collective.algorithm == "auto" and fitted.get("algorithm") and scenario.cluster.nodes == 1:
        # the algorithm NCCL ran when the link class was measured, on one node
        collective = replace(collective, algorithm=str(fitted["algorithm"]))
    protocol_table = _protocol_table(fitted.get("protocol_table"), path)
    return replace(scenario, cluster=cluster, overheads=overheads, collective=collective), protocol_table


def _number(entry: dict[str, Any], key: str, path: str, where: str, positive: bool = False) -> float:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or (positive and value == 0):
        expected = "a positive number" if positive else "a number >= 0"
        raise ScenarioError(f"expected {expected}, got {value!r}", file=path, field=f"{where}.{key}")
    return float(value)


def _overheads(entry: dict[str, Any], path: str, where: str) -> dict[str, Any]:
    """The fitted overhead terms, checked as strictly as the scenario's own ``overheads`` section."""
    known = {f.name for f in fields(OverheadSpec)}
    values: dict[str, Any] = {}
    for key in known & set(entry):
        value = entry[key]
        if key == "max_inflight_buckets":
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ScenarioError(f"expected null or an integer >= 1, got {value!r}", file=path, field=f"{where}.{key}")
            values[key] = value
        elif key == "copy_bandwidth_Bps" and value is None:
            values[key] = None
        else:
            values[key] = _number(entry, key, path, where, positive=key == "copy_bandwidth_Bps")
    return values


def _protocol_table(data: Any, path: str) -> Any:
    if data is None:
        return None
    from ddpsim.collectives import ProtocolTable

    try:
        return ProtocolTable.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise ScenarioError(f"bad protocol table: {exc}", file=path, field="link_classes.protocol_table") from None
