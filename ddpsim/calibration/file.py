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
from ddpsim.scenario.provenance import bandwidth_text, inter_node_source, intra_node_source, overheads_source
from ddpsim.scenario.schema import OverheadSpec, Scenario
from ddpsim.spread import Z90
from ddpsim.topology.link_kinds import INTER_NODE_LINK_CLASS, link_class_of_type
from ddpsim.units import format_time

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


# the value of every fitted DDP overhead term at which it changes nothing
NO_EFFECT: dict[str, Any] = {
    "bucket_launch_s": 0.0,
    "compute_slowdown": 1.0,
    "comm_slowdown": 1.0,
    "allreduce_stretch": 1.0,
    "idle_start_wait_s": 0.0,
    "bucket_cpu_s": 0.0,
    "buffer_sync_s": 0.0,
    "max_inflight_buckets": None,
}
# The fitted terms that multiply or delay communication. A calibration fitted with
# ``--comm-terms-fitted-models-only`` (not the default) leaves them at no effect for a model its overheads
# were not fitted on: they absorb what is particular to the fitted models (GPT-2's launch-to-launch host
# time lands in the all-reduce stretch), and a communication-bound model pays them on every byte. Leave one
# model out (benchmarks/overheads_across_models.py), mean error carried -> not carried: campaign A (4 x H200)
# NVLink 23.7 -> 8.3%, shared memory 4.5 -> 5.4%, sockets 12.1 -> 6.2%; K (h100x4-overlap-2026-11-27) NVLink
# 37.8 -> 7.1%, shared memory 8.5 -> 7.3%; O NVLink 13.3 -> 13.4%. Not the default: on the held-out
# communication-bound mlp-wide (h100x4-mlp-wide-2026-11-27, measured after the option was built), predicted
# by validation/calibration-h200x4.json, whose fit includes the communication-bound mlp-heavy, the carried
# terms were right and leaving them out was not (shared memory 2.9 -> 9.0%, NVLink 3.2 -> 4.7% mean).
FITTED_MODELS_ONLY_KEY = "comm_terms_fitted_models_only"
NOT_CARRIED: tuple[str, ...] = ("allreduce_stretch", "comm_slowdown", "idle_start_wait_s")
OTHER_MODEL_NOTE = ("a fit's terms carry between models only as far as the models are alike: leave one model "
                    "out, NVLink, 23.7% mean error with the other models' terms and 8.3% without their "
                    "communication terms (--comm-terms-fitted-models-only), but a held-out communication-bound "
                    "model 3.2% with them and 4.7% without; docs/model.md")


@dataclass(frozen=True)
class Calibration:
    """A checked calibration. ``source`` names where it came from, for messages and provenance."""

    source: str
    digest: str
    link_classes: dict[str, Any] = field(compare=False, repr=False)
    overheads: dict[str, Any] = field(compare=False, repr=False)
    calibration_subset: dict[str, Any] = field(compare=False, repr=False)
    data_dir: str | None = None
    noise: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # a pooled calibration's measured spread between allocations per link class (pool.py); absent in
    # files fitted on one allocation, whose interval is that allocation's noise alone
    allocation_spread: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def step_interval(self, link_class: str, step_s: float) -> tuple[float, float, float] | None:
        """p10, p50, p90 of the step time one would measure: the measured step-to-step and
        launch-to-launch spreads of this link class and, in a pooled calibration, the spread of the
        allocations' offsets and of the runs around them (lognormal sigmas, added in quadrature)."""
        entry = self.noise.get(link_class) or {}
        spread = self.allocation_spread.get(link_class) or {}
        # the runs' spread around their allocation's offset was measured over launches: it holds the
        # launch noise, and replaces it
        residual = spread.get("residual_sigma")
        sigmas = [entry.get("step_sigma"), entry.get("launch_sigma") if residual is None else residual,
                  spread.get("sigma")]
        if all(s is None for s in sigmas):
            return None
        sigma = math.sqrt(sum(s * s for s in sigmas if s is not None))
        return step_s * math.exp(-Z90 * sigma), step_s, step_s * math.exp(Z90 * sigma)

    def link_fit(self, link_class: str, world_size: int, nodes: int) -> LinkFit | None:
        """The fit for a link class: the network's for this exact shape where that shape was measured;
        an intra-node class's for this many GPUs per node where that many were measured."""
        return self._link_entry(link_class, world_size, nodes)[0]

    def _link_entry(self, link_class: str, world_size: int, nodes: int) -> tuple[LinkFit | None, str]:
        fitted = self.link_classes.get(link_class)
        if fitted is None:
            return None, ""
        where = f"link_classes.{link_class}"
        if link_class == INTER_NODE_LINK_CLASS:
            key = f"{nodes}x{world_size // nodes}"
            if key in fitted.get("by_shape", {}):
                fitted, where = fitted["by_shape"][key], f"{where}.by_shape.{key}"
        else:
            per_node = str(world_size // nodes)
            if per_node in fitted.get("by_world_size", {}):
                fitted, where = fitted["by_world_size"][per_node], f"{where}.by_world_size.{per_node}"
        return _link_fit(fitted, self.source, where), where

    def overhead_values(self, link_class: str, world_size: int) -> dict[str, Any]:
        return _overheads(self._overhead_entry(link_class, world_size), self.source, f"overheads.{link_class}")

    def comm_terms_fitted_models_only(self, link_class: str, world_size: int) -> bool:
        """Whether the communication terms of this class apply only to the models they were fitted on."""
        return bool(self._overhead_entry(link_class, world_size).get(FITTED_MODELS_ONLY_KEY, False))

    def overhead_models(self, link_class: str, world_size: int) -> list[str] | None:
        """The models the overheads of this class were fitted on (None: the file does not say, as
        calibrations written before 2026-11-27 do not)."""
        return _models(self._overhead_entry(link_class, world_size), self.source, f"overheads.{link_class}")

    def _overhead_entry(self, link_class: str, world_size: int) -> dict[str, Any]:
        fitted = self.overheads.get(link_class) or {}
        return dict(fitted.get("by_world_size", {}).get(str(world_size), fitted))


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
        _models(entry, source, f"overheads.{name}")
        _flag(entry, source, f"overheads.{name}")
        for world, sub in (entry.get("by_world_size") or {}).items():
            _overheads(sub, source, f"overheads.{name}.by_world_size.{world}")
            _models(sub, source, f"overheads.{name}.by_world_size.{world}")
            _flag(sub, source, f"overheads.{name}.by_world_size.{world}")
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
        noise=_noise(data.get("noise") or {}, source),
        allocation_spread=_allocation_spread(data.get("allocation_spread") or {}, source),
    )


def _allocation_spread(data: Any, source: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ScenarioError("expected a mapping", file=source, field="allocation_spread")
    for name, entry in data.items():
        if not isinstance(entry, dict):
            raise ScenarioError("expected a mapping", file=source, field=f"allocation_spread.{name}")
        for key in ("sigma", "residual_sigma", "sigma_after_probe", "residual_sigma_after_probe"):
            if entry.get(key) is not None:
                _number(entry, key, source, f"allocation_spread.{name}")
    return data


def _noise(data: Any, source: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ScenarioError("expected a mapping", file=source, field="noise")
    for name, entry in data.items():
        if not isinstance(entry, dict):
            raise ScenarioError("expected a mapping", file=source, field=f"noise.{name}")
        for key in ("step_sigma", "launch_sigma"):
            value = entry.get(key)
            if value is not None:
                _number({key: value}, key, source, f"noise.{name}")
    return data


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


@dataclass(frozen=True)
class Calibrated:
    """A scenario with the calibration's values in place, its protocol table, and where each came from."""

    scenario: Scenario
    protocol_table: ProtocolTable | None
    sources: dict[str, str]


def apply_calibration(scenario: Scenario, model: str | None = None) -> Calibrated:
    """The scenario with calibrated link, network and overhead values (no file is read here).

    ``model``: the workload's name. The sources say when the fitted DDP overheads were fitted on other
    models; a calibration fitted with ``--comm-terms-fitted-models-only`` then leaves the communication
    terms (``NOT_CARRIED``) at no effect.
    None: the overheads apply whatever the model (the caller cannot name it)."""
    cluster = scenario.cluster
    sources = {"intra-node link": intra_node_source(scenario), "DDP overheads": overheads_source(scenario),
               "protocol table": "NCCL's defaults"}
    if cluster.nodes > 1:
        sources["inter-node network"] = inter_node_source(scenario)
    calibration = scenario.calibration
    if calibration is None:
        return Calibrated(scenario, None, sources)
    link_class = link_class_of_type(cluster.intra_node.type)
    cite = f"calibration {calibration.source}"
    fitted, where = calibration._link_entry(link_class, cluster.world_size, cluster.nodes)
    if fitted is None and cluster.gpus_per_node == 1 and cluster.nodes > 1:
        # one GPU per node has no intra-node link: every hop is the network's
        intra, table = cluster.intra_node, None
        sources["intra-node link"] = "none (one GPU per node)"
    elif fitted is None:
        known = ", ".join(sorted(calibration.link_classes))
        raise ScenarioError(
            f"has no fit for link class '{link_class}' (it has: {known})", file=calibration.source, field="link_classes"
        )
    else:
        intra = replace(cluster.intra_node, bandwidth_Bps=fitted.bandwidth_Bps, latency_s=fitted.latency_s)
        sources["intra-node link"] = f"{cite} {where}" + _replaced_written(scenario, {
            "cluster.intra_node.bandwidth": (cluster.intra_node.bandwidth_Bps, intra.bandwidth_Bps, bandwidth_text),
            "cluster.intra_node.latency": (cluster.intra_node.latency_s, intra.latency_s, format_time),
        })
        sources["protocol table"] = f"{cite} {where}"
        table = fitted.protocol_table
    inter = cluster.inter_node
    overhead_class = link_class
    if cluster.nodes > 1:
        network, net_where = calibration._link_entry(INTER_NODE_LINK_CLASS, cluster.world_size, cluster.nodes)
        if network is None:
            sources["inter-node network"] = f"{sources['inter-node network']} ({cite} has no '{INTER_NODE_LINK_CLASS}' fit)"
        else:
            # a ring across nodes waits on the network's hop each step: the fitted bus bandwidth is
            # the bandwidth each GPU gets through the network
            inter = replace(inter, nic_bandwidth_Bps=network.bandwidth_Bps, latency_s=network.latency_s,
                            duplex_factor=_duplex_factor(network.raw, calibration.source, net_where))
            written = cluster.inter_node
            sources["network endpoint duplex"] = (
                f"{cite} {net_where}.duplex_factor {inter.duplex_factor:.2f}: "
                f"{network.raw.get('duplex_source', 'not recorded')}"
                + _replaced_written(scenario, {"cluster.inter_node.duplex_factor":
                                               (written.duplex_factor, inter.duplex_factor, "{:g}".format)}))
            table = _with_network(table, network.protocol_table)
            sources["inter-node network"] = f"{cite} {net_where}" + _replaced_written(scenario, {
                "cluster.inter_node.nic_bandwidth": (written.nic_bandwidth_Bps, inter.nic_bandwidth_Bps, bandwidth_text),
                "cluster.inter_node.latency": (written.latency_s, inter.latency_s, format_time),
            })
            sources["protocol table"] = f"{cite} {net_where} (base latencies), {where} (intra-node hops)"
            if INTER_NODE_LINK_CLASS in calibration.overheads:
                overhead_class = INTER_NODE_LINK_CLASS
    values = calibration.overhead_values(overhead_class, cluster.world_size)
    fitted_on = calibration.overhead_models(overhead_class, cluster.world_size)
    other_model = model is not None and fitted_on is not None and model not in fitted_on
    if values and other_model and calibration.comm_terms_fitted_models_only(overhead_class, cluster.world_size):
        values = {name: (NO_EFFECT[name] if name in NOT_CARRIED else value) for name, value in values.items()}
        sources["DDP overheads"] = (f"{cite} overheads.{overhead_class} without {', '.join(NOT_CARRIED)} (no "
                                    f"effect: the calibration keeps them for the models they were fitted on, "
                                    f"{', '.join(fitted_on or [])}, not {model})")
    elif values:
        sources["DDP overheads"] = f"{cite} overheads.{overhead_class}" + (
            f" (fitted on {', '.join(fitted_on or [])}, not on {model}: carried; {OTHER_MODEL_NOTE})"
            if other_model else "")
    overheads = replace(scenario.overheads, **values)
    collective = scenario.collective
    if collective.algorithm == "auto" and fitted is not None and fitted.algorithm and cluster.nodes == 1:
        # the algorithm NCCL ran when the link class was measured, on one node
        collective = replace(collective, algorithm=fitted.algorithm)
    if cluster.topology is not None:
        _custom_topology_sources(sources, intra, inter, cluster.nodes > 1)
        inter = replace(inter, duplex_factor=1.0)
    calibrated = replace(
        scenario, cluster=replace(cluster, intra_node=intra, inter_node=inter), overheads=overheads, collective=collective
    )
    return Calibrated(calibrated, table, sources)


def _replaced_written(scenario: Scenario, fields: dict[str, tuple[float, float, Any]]) -> str:
    """The values the scenario's file wrote that the calibration's fit replaces, as text to append to a
    source line: a user who wrote a number must see that it is not the one in force. ``fields`` maps a
    dotted field to (written value, value in force, formatter). A custom topology's own links decide, so
    there the calibration's values are reported as not applied instead."""
    if scenario.cluster.topology is not None:
        return ""
    replaced = [f"{name.rsplit('.', 1)[-1]} {fmt(written)}" for name, (written, used, fmt) in fields.items()
                if name not in scenario.defaulted_fields and not math.isclose(written, used, rel_tol=1e-9)]
    if not replaced:
        return ""
    return f"; replaces the scenario's {', '.join(replaced)} (the calibration's value is in force)"


def _custom_topology_sources(sources: dict[str, str], intra: Any, inter: Any, multi_node: bool) -> None:
    """A custom graph routes over its own links: say so where the calibration fitted rates it cannot use
    (its protocol table and overheads still apply)."""
    custom = "custom topology (cluster.topology): each link's own bandwidth and latency"
    sources["intra-node link"] = (f"{custom}; not applied: {sources['intra-node link']} "
                                  f"({intra.bandwidth_Bps / 1e9:.3g} GB/s)")
    if multi_node:
        sources["inter-node network"] = (f"{custom}; not applied: {sources['inter-node network']} "
                                         f"({inter.nic_bandwidth_Bps / 1e9:.3g} GB/s)")
    if "network endpoint duplex" in sources:
        sources["network endpoint duplex"] = f"not applied (custom topology): {sources['network endpoint duplex']}"


def _with_network(intra: ProtocolTable | None, network: ProtocolTable | None) -> ProtocolTable | None:
    """The network's table (its base latencies describe a collective across nodes) plus the intra-node
    class's hop latencies and efficiencies for the hops inside a node."""
    if network is None or intra is None:
        return network or intra
    # one protocol runs a collective end to end: what NCCL enables across the network holds for it
    return replace(
        network,
        hop_latency_s={**intra.hop_latency_s, **network.hop_latency_s},
        transport_efficiency={**intra.transport_efficiency, **network.transport_efficiency},
    )


def _duplex_factor(entry: dict[str, Any], source: str, where: str) -> float:
    value = entry.get("duplex_factor", 1.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.5 <= value <= 1:
        raise ScenarioError(f"expected a fraction in [0.5, 1], got {value!r}", file=source, field=f"{where}.duplex_factor")
    return float(value)


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
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0 or (
        positive and value == 0
    ):
        expected = "a positive finite number" if positive else "a finite number >= 0"
        raise ScenarioError(f"expected {expected}, got {value!r}", file=source, field=f"{where}.{key}")
    return float(value)


def _flag(entry: dict[str, Any], source: str, where: str) -> None:
    value = entry.get(FITTED_MODELS_ONLY_KEY, False)
    if not isinstance(value, bool):
        raise ScenarioError(f"expected true or false, got {value!r}", file=source, field=f"{where}.{FITTED_MODELS_ONLY_KEY}")
    if value and entry.get("models") is None:
        # without the list the flag could never act: say so rather than carry every term silently
        raise ScenarioError(f"{FITTED_MODELS_ONLY_KEY} needs the list of fitted models", file=source,
                            field=f"{where}.models")


def _models(entry: dict[str, Any], source: str, where: str) -> list[str] | None:
    models = entry.get("models")
    if models is None:
        return None
    if not isinstance(models, list) or not models or not all(isinstance(m, str) and m for m in models):
        raise ScenarioError(f"expected a non-empty list of model names, got {models!r}", file=source,
                            field=f"{where}.models")
    return list(models)


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
        table = ProtocolTable.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ScenarioError(f"bad protocol table: {exc}", file=source, field=f"{where}.protocol_table") from None
    if table.hop_latency_mode == "absolute":
        # an absolute hop latency replaces the scenario's link latency: keep only the transports
        # this calibration measured, so the scenario's latency stays in force for the others
        fitted = {str(key).split("/")[0] for key in dict(data.get("hop_latency_s", {}))}
        table = replace(table, hop_latency_s={k: v for k, v in table.hop_latency_s.items() if k[0] in fitted})
    return table
