"""The calibration as a value: read once at the boundary and checked there (``apply.py`` applies it).

A calibration file (written by ``ddpsim calibrate``) holds, per link class, the fitted link
bandwidth and latency and the protocol table, and the fitted DDP overhead terms. The scenario's
link types pick the class through ``scenario.link_kinds``. This module knows the overhead terms
(``scenario/overheads.py``) but not the Scenario, which holds a Calibration.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ddpsim.calibration.shipped import is_shipped_name, shipped_path
from ddpsim.collectives.protocols import ProtocolTable
from ddpsim.errors import ScenarioError
from ddpsim.hardware.catalog import get_gpu, gpu_names
from ddpsim.jsonfile import read_json_object
from ddpsim.scenario.link_kinds import INTER_NODE_LINK_CLASS
from ddpsim.scenario.overheads import OverheadSpec
from ddpsim.spread import Z90

SCHEMA = "ddpsim.calibration/3"
# version 2 did not record what it was measured on (measured_on): read as it is, its GPU kind unchecked
_SCHEMA_V2 = "ddpsim.calibration/2"
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
    # the network's endpoint: the share of its one-way rate each direction keeps when a GPU sends and receives
    # across nodes at once (1: full duplex), and how it was measured (network fits only)
    duplex_factor: float = 1.0
    duplex_source: str = "not recorded"


@dataclass(frozen=True)
class NoiseSigmas:
    """A link class's measured spread of the step, as lognormal sigmas (None: not measured)."""

    step_sigma: float | None = None  # step to step within a launch
    launch_sigma: float | None = None  # launch to launch of the same configuration


@dataclass(frozen=True)
class AllocationSpread:
    """A pooled calibration's measured spread between machine allocations for a link class (lognormal sigmas):
    of the allocations' offsets (``sigma``) and of the runs around them (``residual_sigma``, which holds the
    launch noise), and the same after a probe re-centred the pool on the allocation."""

    sigma: float | None = None
    residual_sigma: float | None = None
    sigma_after_probe: float | None = None
    residual_sigma_after_probe: float | None = None


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
# ``calibrate(comm_terms_fitted_models_only=True)`` (not the default) leaves them at no effect for a model its overheads
# were not fitted on: they absorb what is particular to the fitted models (GPT-2's launch-to-launch host
# time lands in the all-reduce stretch), and a communication-bound model pays them on every byte. Leave one
# model out (validation/evidence/stages/overheads_across_models.py), mean error carried -> not carried: campaign A (4 x H200)
# NVLink 23.7 -> 8.3%, shared memory 4.5 -> 5.4%, sockets 12.1 -> 6.2%; K (h100x4-overlap-2026-11-27) NVLink
# 37.8 -> 7.1%, shared memory 8.5 -> 7.3%; O NVLink 13.3 -> 13.4%. Not the default: on the held-out
# communication-bound mlp-wide (h100x4-mlp-wide-2026-11-27, measured after the option was built), predicted
# by ddpsim/calibration/shipped/x4-h200.json, whose fit includes the communication-bound mlp-heavy, the carried
# terms were right and leaving them out was not (shared memory 2.9 -> 9.0%, NVLink 3.2 -> 4.7% mean).
FITTED_MODELS_ONLY_KEY = "comm_terms_fitted_models_only"
NOT_CARRIED: tuple[str, ...] = ("allreduce_stretch", "comm_slowdown", "idle_start_wait_s")
OTHER_MODEL_NOTE = ("a fit's terms carry between models only as far as the models are alike: leave one model "
                    "out, NVLink, 23.7% mean error with the other models' terms and 8.3% without their "
                    "communication terms (calibrate(comm_terms_fitted_models_only=True)), but a held-out communication-bound "
                    "model 3.2% with them and 4.7% without; docs/model.md")


@dataclass(frozen=True)
class MeasuredOn:
    """What a calibration was measured on: its GPU kind (the catalog's name), the GPU counts of its runs and
    its link classes. A calibration drives only scenarios and data of its own GPU kind unless allowed."""

    gpu: str
    gpu_counts: tuple[int, ...]
    link_classes: tuple[str, ...]


@dataclass(frozen=True)
class Calibration:
    """A checked calibration. ``source`` names where it came from, for messages and provenance."""

    source: str
    digest: str
    link_classes: dict[str, Any] = field(compare=False, repr=False)
    overheads: dict[str, Any] = field(compare=False, repr=False)
    calibration_subset: dict[str, Any] = field(compare=False, repr=False)
    data_dir: str | None = None
    noise: dict[str, NoiseSigmas] = field(default_factory=dict, compare=False, repr=False)
    # a pooled calibration's measured spread between allocations per link class (validation/pool.py); absent
    # in files fitted on one allocation, whose interval is that allocation's noise alone
    allocation_spread: dict[str, AllocationSpread] = field(default_factory=dict, compare=False, repr=False)
    # measured reduce-scatter and all-gather curves per link class, collective and shape (sharded_fit.py)
    collectives: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # None: a file written before calibrations recorded their GPU (it cannot be checked against a scenario's)
    measured_on: MeasuredOn | None = None
    # the user allowed this calibration on another GPU kind (--allow-other-gpu); the run says so in a from: row
    other_gpu_allowed: bool = False
    # the GPU kinds of a probe of another kind it was re-centred on (calibrate --recentre --allow-other-gpu,
    # ``probed_from.other_gpu``): its link rates are theirs, whatever measured_on says
    probed_other_gpu: tuple[str, ...] = ()

    def step_interval(self, link_class: str, step_s: float) -> tuple[float, float, float] | None:
        """p10, p50, p90 of the step time one would measure: the measured step-to-step and
        launch-to-launch spreads of this link class and, in a pooled calibration, the spread of the
        allocations' offsets and of the runs around them (lognormal sigmas, added in quadrature)."""
        sigmas = [sigma for _, sigma in self.interval_parts(link_class)]
        if not sigmas:
            return None
        sigma = math.sqrt(sum(s * s for s in sigmas))
        return step_s * math.exp(-Z90 * sigma), step_s, step_s * math.exp(Z90 * sigma)

    def interval_parts(self, link_class: str) -> list[tuple[str, float]]:
        """The lognormal sigmas ``step_interval`` adds, each named by the calibration field it comes from, so
        that a user reads how much of an interval is noise within a launch, between launches, and between
        machine allocations."""
        entry = self.noise.get(link_class) or NoiseSigmas()
        spread = self.allocation_spread.get(link_class) or AllocationSpread()
        # the runs' spread around their allocation's offset was measured over launches: it holds the
        # launch noise, and replaces it
        residual = spread.residual_sigma
        named = [(f"noise.{link_class}.step_sigma", entry.step_sigma),
                 (f"allocation_spread.{link_class}.residual_sigma", residual) if residual is not None
                 else (f"noise.{link_class}.launch_sigma", entry.launch_sigma),
                 (f"allocation_spread.{link_class}.sigma (between allocations)", spread.sigma)]
        return [(name, sigma) for name, sigma in named if sigma is not None]

    @property
    def link_class_names(self) -> tuple[str, ...]:
        """The link classes this calibration fitted (``link_classes.<name>``), sorted."""
        return tuple(sorted(self.link_classes))

    def has_overheads(self, link_class: str) -> bool:
        """Whether DDP overheads were fitted for this link class (``overheads.<link class>``)."""
        return link_class in self.overheads

    def measured_shapes(self, link_class: str) -> tuple[str, ...]:
        """The node shapes (``2x2``) a network class was swept on; empty when not recorded."""
        return tuple(str(s) for s in (self.link_classes.get(link_class) or {}).get("shapes") or [])

    def measured_world_sizes(self, link_class: str) -> tuple[int, ...]:
        """The GPU counts per node a one-node class was swept on; empty when not recorded."""
        return tuple(int(w) for w in (self.link_classes.get(link_class) or {}).get("world_sizes") or [])

    def link_fit(self, link_class: str, world_size: int, nodes: int) -> LinkFit | None:
        """The fit for a link class: the network's for this exact shape where that shape was measured;
        an intra-node class's for this many GPUs per node where that many were measured."""
        return self.link_fit_at(link_class, world_size, nodes)[0]

    def link_fit_at(self, link_class: str, world_size: int, nodes: int) -> tuple[LinkFit | None, str]:
        """``link_fit`` and where in the file it is (``link_classes.nvlink.by_world_size.2``), for sources."""
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

    def collective_curve(self, link_class: str, collective: str, world_size: int, nodes: int) -> dict[str, Any] | None:
        """The measured curve of a reduce-scatter or all-gather on exactly this shape (None: not measured);
        ``sharded_fit.curve_time_s`` prices a size on it."""
        return (self.collectives.get(link_class) or {}).get(collective, {}).get(f"{nodes}x{world_size // nodes}")

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
    if data.get("schema") == _SCHEMA_V2 and "measured_on" not in data:
        data = {**data, "schema": SCHEMA}
    if data.get("schema") != SCHEMA:
        raise ScenarioError(f"expected schema '{SCHEMA}'", file=source, field="schema")
    _known_keys(data, CALIBRATION_KEYS, source, "")
    link_classes = data.get("link_classes")
    if not isinstance(link_classes, dict):
        raise ScenarioError("expected a 'link_classes' mapping", file=source, field="link_classes")
    overheads = data.get("overheads") or {}
    if not isinstance(overheads, dict):
        raise ScenarioError("expected an 'overheads' mapping", file=source, field="overheads")
    for name, entry in link_classes.items():
        if not isinstance(entry, dict):
            raise ScenarioError("expected a mapping", file=source, field=f"link_classes.{name}")
        _checked_link_entry(entry, source, f"link_classes.{name}")
        for part_key in ("by_world_size", "by_shape"):
            parts = entry.get(part_key) or {}
            if not isinstance(parts, dict):
                raise ScenarioError("expected a mapping", file=source, field=f"link_classes.{name}.{part_key}")
            for part, sub in parts.items():
                where = f"link_classes.{name}.{part_key}.{part}"
                if not isinstance(sub, dict):
                    raise ScenarioError("expected a mapping", file=source, field=where)
                _checked_link_entry(sub, source, where, nested=True)
    for name, entry in overheads.items():
        if not isinstance(entry, dict):
            raise ScenarioError("expected a mapping", file=source, field=f"overheads.{name}")
        _known_keys(entry, OVERHEAD_ENTRY_KEYS, source, f"overheads.{name}.")
        _overheads(entry, source, f"overheads.{name}")
        _models(entry, source, f"overheads.{name}")
        _flag(entry, source, f"overheads.{name}")
        for world, sub in (entry.get("by_world_size") or {}).items():
            if isinstance(sub, dict):
                _known_keys(sub, OVERHEAD_ENTRY_KEYS - {"by_world_size"}, source, f"overheads.{name}.by_world_size.{world}.")
            _overheads(sub, source, f"overheads.{name}.by_world_size.{world}")
            _models(sub, source, f"overheads.{name}.by_world_size.{world}")
            _flag(sub, source, f"overheads.{name}.by_world_size.{world}")
    _collectives(data.get("collectives") or {}, source)
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
        noise={name: NoiseSigmas(**sigmas) for name, sigmas in _sigmas(
            data.get("noise") or {}, source, "noise", ("step_sigma", "launch_sigma")).items()},
        allocation_spread={name: AllocationSpread(**sigmas) for name, sigmas in _sigmas(
            data.get("allocation_spread") or {}, source, "allocation_spread",
            ("sigma", "residual_sigma", "sigma_after_probe", "residual_sigma_after_probe")).items()},
        collectives=data.get("collectives") or {},
        measured_on=_measured_on(data.get("measured_on"), source),
        probed_other_gpu=_probed_other_gpu(data.get("probed_from"), source),
    )


def _probed_other_gpu(data: Any, source: str) -> tuple[str, ...]:
    if data is None:
        return ()
    if not isinstance(data, dict):
        raise ScenarioError("expected a mapping", file=source, field="probed_from")
    kinds = data.get("other_gpu") or []
    if not isinstance(kinds, list) or not all(isinstance(k, str) and k for k in kinds):
        raise ScenarioError(f"expected a list of GPU kinds, got {kinds!r}", file=source, field="probed_from.other_gpu")
    return tuple(kinds)


def _measured_on(data: Any, source: str) -> MeasuredOn | None:
    if data is None:
        return None
    if not isinstance(data, dict) or set(data) - {"gpu", "gpu_counts", "link_classes"}:
        raise ScenarioError("expected a mapping of gpu, gpu_counts and link_classes", file=source, field="measured_on")
    gpu, counts, classes = data.get("gpu"), data.get("gpu_counts"), data.get("link_classes")
    if not isinstance(gpu, str):
        raise ScenarioError(f"expected a GPU of the catalog ({', '.join(gpu_names())}), got {gpu!r}", file=source,
                            field="measured_on.gpu")
    try:
        gpu = get_gpu(gpu).name  # the catalog's own name: H100-SXM and H100 are one kind
    except ScenarioError as exc:
        raise ScenarioError(exc.detail, file=source, field="measured_on.gpu") from None
    if not isinstance(counts, list) or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in counts):
        raise ScenarioError(f"expected a list of GPU counts >= 1, got {counts!r}", file=source,
                            field="measured_on.gpu_counts")
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        raise ScenarioError(f"expected a list of link class names, got {classes!r}", file=source,
                            field="measured_on.link_classes")
    return MeasuredOn(str(gpu), tuple(counts), tuple(classes))


def _sigmas(data: Any, source: str, section: str, keys: tuple[str, ...]) -> dict[str, dict[str, float | None]]:
    """A section of lognormal sigmas per link class (``noise``, ``allocation_spread``): a mapping of mappings
    whose listed keys, where present, are numbers (the others record how they were measured)."""
    if not isinstance(data, dict):
        raise ScenarioError("expected a mapping", file=source, field=section)
    out: dict[str, dict[str, float | None]] = {}
    for name, entry in data.items():
        if not isinstance(entry, dict):
            raise ScenarioError("expected a mapping", file=source, field=f"{section}.{name}")
        out[str(name)] = {key: None if entry.get(key) is None else _number(entry, key, source, f"{section}.{name}")
                          for key in keys}
    return out


def _collectives(data: Any, source: str) -> None:
    """``collectives.<class>.<reduce_scatter|all_gather>.<shape>``: measured curves of sharded data parallel's collectives."""
    if not isinstance(data, dict):
        raise ScenarioError("expected a mapping", file=source, field="collectives")
    for link_class, by_collective in data.items():
        if not isinstance(by_collective, dict):
            raise ScenarioError("expected a mapping", file=source, field=f"collectives.{link_class}")
        for collective, by_shape in by_collective.items():
            where = f"collectives.{link_class}.{collective}"
            if collective not in SHARDED_COLLECTIVES or not isinstance(by_shape, dict):
                raise ScenarioError(f"expected {' or '.join(SHARDED_COLLECTIVES)}, each a mapping of shapes",
                                    file=source, field=where)
            for shape, entry in by_shape.items():
                if not isinstance(entry, dict):
                    raise ScenarioError("expected a mapping", file=source, field=f"{where}.{shape}")
                _number(entry, "bandwidth_Bps", source, f"{where}.{shape}", positive=True)
                _number(entry, "call_floor_s", source, f"{where}.{shape}")


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
    """Read and check a calibration file, or a shipped one by its name (``pooled:H200``, ``shipped.py``);
    the only place a calibration touches the disk. A shipped one's source is its name."""
    if is_shipped_name(path):
        data = read_json_object(shipped_path(path), "calibration", field="calibration")
        return calibration_from_dict(data, path)
    return calibration_from_dict(read_json_object(path, "calibration", field="calibration"), path)


def read_calibration_dict(path: str) -> dict[str, Any]:
    """A calibration file's content (a shipped one by its name), checked: what a tool that writes a new
    calibration from it (``calibrate --recentre``) starts from."""
    data = read_json_object(shipped_path(path) if is_shipped_name(path) else path, "calibration", field="calibration")
    calibration_from_dict(data, path)
    return data


def _link_fit(entry: dict[str, Any], source: str, where: str) -> LinkFit:
    algorithm = entry.get("algorithm")
    if algorithm is not None and algorithm not in ("ring", "tree", "hierarchical"):
        raise ScenarioError(f"expected ring, tree or hierarchical, got {algorithm!r}", file=source, field=f"{where}.algorithm")
    floor = entry.get("call_floor_s", 0.0)
    duplex = entry.get("duplex_factor", 1.0)
    if isinstance(duplex, bool) or not isinstance(duplex, int | float) or not 0.5 <= duplex <= 1:
        raise ScenarioError(f"expected a fraction in [0.5, 1], got {duplex!r}", file=source, field=f"{where}.duplex_factor")
    return LinkFit(
        bandwidth_Bps=_number(entry, "bandwidth_Bps", source, where, positive=True),
        latency_s=_number(entry, "latency_s", source, where),
        algorithm=algorithm,
        protocol_table=_protocol_table(entry.get("protocol_table"), source, where),
        call_floor_s=_number({"call_floor_s": floor}, "call_floor_s", source, where),
        duplex_factor=float(duplex),
        duplex_source=str(entry.get("duplex_source", "not recorded")),
    )


def _checked_link_entry(entry: dict[str, Any], source: str, where: str, nested: bool = False) -> None:
    """A link class's entry (or one world size's or shape's): known keys only, its fit and its per-protocol
    fits in range (a zero bus bandwidth would price a transfer at infinite time or be divided by)."""
    _known_keys(entry, LINK_ENTRY_KEYS - {"by_world_size", "by_shape"} if nested else LINK_ENTRY_KEYS, source,
                f"{where}.")
    _link_fit(entry, source, where)
    fits = entry.get("protocol_fits")
    if fits is None:
        return
    if not isinstance(fits, dict):
        raise ScenarioError("expected a mapping of protocol to fit", file=source, field=f"{where}.protocol_fits")
    for protocol, fit in fits.items():
        here = f"{where}.protocol_fits.{protocol}"
        if not isinstance(fit, dict):
            raise ScenarioError("expected a mapping", file=source, field=here)
        _number(fit, "bus_bandwidth_Bps", source, here, positive=True)
        for key in ("base_latency_s", "hop_latency_s"):
            if key in fit:
                _number(fit, key, source, here)


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


# What a calibration file may hold at the top level and in an ``overheads.<class>`` entry. A key outside
# these is refused: a misspelt term (bucket_lauch_s) would otherwise leave the term at no effect without
# a word. allocation_spread, pooled_from and probed_from are written by pooled calibrations (pool.py).
CALIBRATION_KEYS = frozenset({
    "schema", "link_classes", "overheads", "calibration_subset", "noise", "measured_overheads", "noise_source",
    "data_dir", "nccl_tests", "allocation_spread", "pooled_from", "probed_from", "collectives",
    # the output contract's version fields (ddpsim.schemas.document); files written before them lack them
    "kind", "schema_version", "ddpsim_version",
    # the GPU kind, GPU counts and link classes it was measured on (files written before lack it)
    "measured_on",
})
# what a link class's entry may hold (fit.py, nccl_tests.py, recentre.py write them); by_world_size and by_shape
# entries the same but for those two
LINK_ENTRY_KEYS = frozenset({
    "algorithm", "algorithm_fitted", "bandwidth_Bps", "bandwidth_probed", "by_shape", "by_world_size",
    "call_floor_s", "curves_fitted", "duplex_factor", "duplex_source", "fit_max_error_pct", "fit_mean_error_pct",
    "latency_s", "latency_structure", "protocol_fits", "protocol_table", "protocols_from", "samples", "shapes",
    "sources", "tree_fit", "world_sizes",
})
# the collectives a calibration may hold measured curves of beside the all-reduce's links (sharded_fit.py)
SHARDED_COLLECTIVES = ("reduce_scatter", "all_gather")
OVERHEAD_ENTRY_KEYS = frozenset({f.name for f in fields(OverheadSpec)} | {
    "by_world_size", "models", "warnings", FITTED_MODELS_ONLY_KEY, "calibration_mape_pct",
    "calibration_max_error_pct", "calibration_runs", "fitted_terms", "measured_terms", "standard_error",
    "at_no_effect", "pruned_terms",
})


def _known_keys(data: dict[str, Any], known: frozenset[str], source: str, where: str) -> None:
    for key in data:
        if key not in known:
            raise ScenarioError("unknown field in a calibration file (a misspelt term would be left at no effect)",
                                file=source, field=f"{where}{key}")


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
    _check_protocol_numbers(table, source, f"{where}.protocol_table")
    if table.hop_latency_mode == "absolute":
        # an absolute hop latency replaces the scenario's link latency: keep only the transports
        # this calibration measured, so the scenario's latency stays in force for the others
        fitted = {str(key).split("/")[0] for key in dict(data.get("hop_latency_s", {}))}
        table = replace(table, hop_latency_s={k: v for k, v in table.hop_latency_s.items() if k[0] in fitted})
    return table


def _check_protocol_numbers(table: ProtocolTable, source: str, where: str) -> None:
    """Rates and efficiencies positive, latencies at least 0, all finite: a zero LL bus rate or efficiency
    would divide a transfer by zero, a negative latency make a collective end before it starts."""
    positive: dict[str, Any] = {"bandwidth_efficiency": table.bandwidth_efficiency,
                                "transport_efficiency": table.transport_efficiency,
                                "algorithm_efficiency": table.algorithm_efficiency,
                                "algorithm_protocol_efficiency": table.algorithm_protocol_efficiency,
                                "ll_max_bus_Bps": dict(enumerate(table.ll_max_bus_Bps)),
                                "ring_plateau_factor": {"": table.ring_plateau_factor}}
    at_least_zero: dict[str, Any] = {"base_latency_s": table.base_latency_s, "hop_latency_s": table.hop_latency_s,
                                     "reference_link_latency_s": table.reference_link_latency_s,
                                     "net_overhead_s": table.net_overhead_s,
                                     "ring_plateau_min_bytes": {"": table.ring_plateau_min_bytes}}
    for section, strictly in ((positive, True), (at_least_zero, False)):
        for name, values in section.items():
            for key, value in values.items():
                if not math.isfinite(value) or value < 0 or (strictly and value == 0):
                    label = "/".join(key) if isinstance(key, tuple) else str(key)
                    expected = "a positive finite number" if strictly else "a finite number >= 0"
                    raise ScenarioError(f"expected {expected}, got {value!r}", file=source,
                                        field=f"{where}.{name}" + (f".{label}" if label else ""))
