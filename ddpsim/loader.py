"""Scenario YAML -> validated ``Scenario``. Every error names the file and the field.

Sections are read generically from the FieldSpecs in ``schema.py`` (key, kind, default, bounds);
what stays explicit here is what one field cannot say alone: intra-node defaults by link type,
``bucket_cap_mb``'s "default"/MiB rules, the custom topology, and checks across fields (the
straggler below the world size, the cluster size limits).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import os
from collections.abc import Iterable
from typing import Any

import yaml

from ddpsim.calibration.file import read_calibration
from ddpsim.calibration.shipped import is_shipped_name
from ddpsim.errors import ScenarioError
from ddpsim.hardware.catalog import get_gpu
from ddpsim.hardware.custom_gpu import custom_gpu
from ddpsim.scenario.schema import (
    FREE_TEXT_KEYS,
    INTRA_DEFAULTS,
    MAX_CUSTOM_GPUS,
    MAX_CUSTOM_LINKS,
    MAX_PER_RANK_GPUS,
    MAX_RANK_STEPS,
    MAX_WORLD_SIZE,
    MIB,
    ClusterSpec,
    CollectiveSpec,
    CustomTopologySpec,
    DDPSpec,
    FieldSpec,
    InterNodeSpec,
    IntraNodeSpec,
    NodeGroupSpec,
    OverheadSpec,
    ParallelSpec,
    Scenario,
    SimulationSpec,
    TopologyLink,
    WorkloadSpec,
    field_specs,
)
from ddpsim.units import UnitError, parse_bandwidth_Bps, parse_size_bytes, parse_time_s

_QUANTITY_PARSERS = {"bandwidth": parse_bandwidth_Bps, "time": parse_time_s}
_NOT_GIVEN: Any = object()


def _keys(cls: type) -> set[str]:
    return {fs.key for _name, fs in field_specs(cls)}


def _section_keys() -> set[str]:
    return {fs.key for _name, fs in field_specs(Scenario) if fs.kind == "section"}


class _Reader:
    """Typed access to one mapping of the YAML, with the dotted path for error messages."""

    def __init__(self, data: Any, path: str, file: str, allowed: Iterable[str],
                 defaulted: set[str] | None = None) -> None:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ScenarioError(f"expected a mapping, got {type(data).__name__}", file=file, field=path or None)
        allowed = set(allowed)
        for key in data:
            if key not in allowed:
                near = difflib.get_close_matches(str(key), sorted(allowed), n=1)
                hint = f"; did you mean '{near[0]}'?" if near else f"; valid fields: {', '.join(sorted(allowed))}"
                raise ScenarioError(f"unknown field{hint}", file=file, field=self._join(path, str(key)))
        self.data, self.path, self.file = data, path, file
        # dotted names of the fields this scenario left to ddpsim's defaults, shared by every
        # section's reader: `ddpsim run` says which values nobody wrote down
        self.defaulted: set[str] = set() if defaulted is None else defaulted

    @staticmethod
    def _join(path: str, key: str) -> str:
        return f"{path}.{key}" if path else key

    def error(self, key: str, message: str) -> ScenarioError:
        return ScenarioError(message, file=self.file, field=self._join(self.path, key))

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def section(self, cls: type, key: str) -> _Reader:
        return _Reader(self.data.get(key), self._join(self.path, key), self.file, _keys(cls), self.defaulted)

    def value(self, fs: FieldSpec, default: Any = _NOT_GIVEN) -> Any:
        """The field's value in SI units, checked against its kind and bounds; its default if absent."""
        key = fs.key
        fallback = fs.si_default() if default is _NOT_GIVEN else default
        if key not in self.data:
            if fs.required:
                raise self.error(key, "missing required field")
            self.defaulted.add(self._join(self.path, key))
            return fallback
        raw = self.data[key]
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            if fs.required:
                raise self.error(key, "missing required field (the value is empty)")
            if raw is None and fallback is None:
                return None  # `straggler_rank: null` is how YAML says "not set"
            # an empty value is a typo more often than a wish for the default: say so
            return self._fail(key, "empty value; omit the field to get its default")
        parsed = self._parse(fs, raw)
        if isinstance(parsed, float | int) and not isinstance(parsed, bool):
            self._check_bounds(fs, parsed, raw)
        return parsed

    def _fail(self, key: str, message: str) -> Any:
        raise self.error(key, message)

    def _parse(self, fs: FieldSpec, raw: Any) -> Any:
        key = fs.key
        if fs.kind in ("text", "path"):
            if not isinstance(raw, str):
                return self._fail(key, f"expected {'a file path' if fs.kind == 'path' else 'text'} ({fs.doc}), "
                                       f"got {raw!r}")
            return raw.strip()
        if fs.kind == "int":
            if isinstance(raw, bool) or not isinstance(raw, int):
                return self._fail(key, f"expected an integer, got {raw!r}")
            return raw
        if fs.kind == "number":
            if isinstance(raw, bool) or not isinstance(raw, int | float):
                return self._fail(key, f"expected a number, got {raw!r}")
            if not math.isfinite(raw):
                return self._fail(key, f"expected a finite number, got {raw!r}")
            return float(raw)
        if fs.kind == "bool":
            if not isinstance(raw, bool):
                return self._fail(key, f"expected true or false, got {raw!r}")
            return raw
        if fs.kind == "choice":
            if isinstance(raw, bool) and {"on", "off"} <= set(fs.choices):
                # YAML 1.1 reads on/off (yes/no) as booleans: `nvls: off`, as the docs write it, is "off"
                return "on" if raw else "off"
            value = raw if isinstance(raw, str) else str(raw).lower()
            if value not in fs.choices:
                near = difflib.get_close_matches(value, fs.choices, n=1)
                hint = f" (did you mean '{near[0]}'?)" if near else ""
                return self._fail(key, f"expected one of {', '.join(fs.choices)}, got {value!r}{hint}")
            return value
        if fs.kind in _QUANTITY_PARSERS:
            try:
                return _QUANTITY_PARSERS[fs.kind](raw)
            except UnitError as exc:
                return self._fail(key, str(exc))
        if fs.kind == "mib":
            return self._mib(key, raw)
        raise AssertionError(f"no reader for kind {fs.kind!r}")  # a schema bug, not a user error

    def _mib(self, key: str, raw: Any) -> float | None:
        """bucket_cap_mb: "default" (PyTorch's), a plain number of MiB as in PyTorch, or a size."""
        if raw == "default":
            return None
        if isinstance(raw, bool) or not isinstance(raw, int | float | str):
            return self._fail(key, f"expected MiB or a size like '25MB', got {raw!r}")
        if isinstance(raw, str):
            try:
                return float(raw)  # "5" means 5 MiB, as a bare 5 does (and "nan" fails as not finite)
            except ValueError:
                pass
            try:
                return parse_size_bytes(raw) / MIB
            except UnitError as exc:
                return self._fail(key, f"{exc} (a plain number means MiB, as in PyTorch)")
        return float(raw)

    def _check_bounds(self, fs: FieldSpec, value: float, raw: Any) -> None:
        shown = raw if fs.kind in ("int", "number") else repr(raw)
        if not math.isfinite(value):
            self._fail(fs.key, f"expected a finite value, got {shown}")
        if fs.above is not None and value <= fs.above:
            rule = "must be positive" if fs.above == 0 else f"must be above {_fmt(fs.above)}"
            self._fail(fs.key, f"{fs.low_rule or rule}, got {shown}")
        if fs.minimum is not None and value < fs.minimum:
            if fs.low_rule:
                rule = fs.low_rule
            elif fs.minimum == 0:
                rule = "must not be negative"
            elif value <= 0 and fs.kind in _QUANTITY_PARSERS:
                rule = "must be positive"
            else:
                rule = f"must be at least {_fmt(fs.minimum)}"
            self._fail(fs.key, f"{rule}, got {shown}")
        if fs.maximum is not None and value > fs.maximum:
            self._fail(fs.key, f"{fs.high_rule or f'must be at most {_fmt(fs.maximum)}'}, got {shown}")


def _fmt(value: float) -> str:
    """A bound as people write it: 1,048,576 rather than 1.04858e+06."""
    if float(value).is_integer() and abs(value) < 1e16:
        return f"{int(value):,}"
    return f"{value:g}"


def read_fields(cls: type, r: _Reader, defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every plain field of ``cls`` read from ``r`` (sections and lists are the caller's)."""
    defaults = defaults or {}
    values = {}
    for name, fs in field_specs(cls):
        if fs.kind in ("section", "list"):
            continue
        values[name] = r.value(fs, defaults.get(name, _NOT_GIVEN))
    return values


def _spec(cls: type, name: str) -> FieldSpec:
    return dict(field_specs(cls))[name]


def _intra(r: _Reader) -> IntraNodeSpec:
    kind = r.value(_spec(IntraNodeSpec, "type"))
    bandwidth, latency = INTRA_DEFAULTS[kind]
    defaults = {"bandwidth_Bps": parse_bandwidth_Bps(bandwidth), "latency_s": parse_time_s(latency)}
    return IntraNodeSpec(**read_fields(IntraNodeSpec, r, defaults))


def _topology(r: _Reader) -> CustomTopologySpec:
    gpus_spec, links_spec = _spec(CustomTopologySpec, "gpus"), _spec(CustomTopologySpec, "links")
    gpus = r.data.get("gpus")
    if gpus is None:
        raise r.error("gpus", "missing required field")
    if not isinstance(gpus, list) or not gpus or not all(isinstance(g, str) and g.strip() for g in gpus):
        raise r.error("gpus", f"expected a non-empty list of {gpus_spec.doc}")
    if len(gpus) > MAX_CUSTOM_GPUS:
        raise r.error("gpus", f"lists {len(gpus)} GPUs; a custom graph may have at most {MAX_CUSTOM_GPUS}")
    if len(set(gpus)) != len(gpus):
        raise r.error("gpus", "lists a GPU twice")
    links_raw = r.data.get("links")
    if links_raw is None:
        raise r.error("links", "missing required field")
    if not isinstance(links_raw, list) or not links_raw:
        raise r.error("links", f"expected a non-empty list of {links_spec.doc.split(': ', 1)[1]}")
    if len(links_raw) > MAX_CUSTOM_LINKS:
        raise r.error("links", f"lists {len(links_raw)} links; a custom graph may have at most {MAX_CUSTOM_LINKS}")
    links = []
    for i, item in enumerate(links_raw):
        link_reader = _Reader(item, f"{r.path}.links[{i}]", r.file, _keys(TopologyLink), r.defaulted)
        link = TopologyLink(**read_fields(TopologyLink, link_reader))
        if link.a == link.b:
            raise link_reader.error("b", f"a link must join two different vertices, got {link.a!r} twice")
        links.append(link)
    per_node_spec = _spec(CustomTopologySpec, "gpus_per_node")
    if "gpus_per_node" in r.data:
        per_node = r.value(per_node_spec)
    else:
        # the schema marks it required so that no number stands in its table; absent, it is "all of
        # them" (one node), as the README says
        r.defaulted.add(r._join(r.path, "gpus_per_node"))
        per_node = len(gpus)
    if len(gpus) % per_node:
        raise r.error("gpus_per_node", f"{len(gpus)} GPUs do not split into nodes of {per_node}")
    return CustomTopologySpec(gpus=tuple(gpus), links=tuple(links), gpus_per_node=per_node)


def _node_groups(r: _Reader, gpu: str | None, nic_Bps: float, intra_Bps: float) -> tuple[NodeGroupSpec, ...]:
    """``cluster.node_groups``: each group's GPU kind checked against the catalog, its gaps filled from
    ``cluster.gpu``, ``cluster.inter_node.nic_bandwidth`` and ``cluster.intra_node.bandwidth``."""
    raw = r.data.get("node_groups")
    if not isinstance(raw, list) or not raw:
        raise r.error("node_groups", "expected a non-empty list of {count, gpus_per_node, gpu, nic_bandwidth}")
    groups = []
    for i, item in enumerate(raw):
        group_reader = _Reader(item, f"{r.path}.node_groups[{i}]", r.file, _keys(NodeGroupSpec), r.defaulted)
        values = read_fields(NodeGroupSpec, group_reader)
        kind = values["gpu"] if values["gpu"] is not None else gpu
        if kind is None:
            raise group_reader.error("gpu", "missing: name the group's GPU here or give cluster.gpu")
        try:
            values["gpu"] = get_gpu(kind).name
        except ScenarioError as exc:
            # the catalog names cluster.gpu; the kind came from this group (or its default)
            where = "gpu" if group_reader.has("gpu") else "gpu (from cluster.gpu)"
            raise group_reader.error(where, exc.detail) from None
        if values["nic_bandwidth_Bps"] is None:
            values["nic_bandwidth_Bps"] = nic_Bps
        if values["intra_bandwidth_Bps"] is None:
            values["intra_bandwidth_Bps"] = intra_Bps
        groups.append(NodeGroupSpec(**values))
    if all(isinstance(item, dict) and item.get("nic_bandwidth") is not None for item in raw):
        # every group wrote its own rate: inter_node.nic_bandwidth's default reached no NIC, so it is not reported
        r.defaulted.discard(r._join(r.path, "inter_node.nic_bandwidth"))
    return tuple(groups)


def _cluster(r: _Reader) -> ClusterSpec:
    if isinstance(r.data.get("gpu"), dict):
        # a GPU the scenario describes itself: registered under its name, which the cluster then names
        own = custom_gpu(r.data["gpu"], r.file, r._join(r.path, "gpu"))
        r.data = {**r.data, "gpu": own.name}
        if own.nvlink_Bps and isinstance(r.data.get("intra_node"), dict | None):
            intra_raw = dict(r.data.get("intra_node") or {})
            intra_raw.setdefault("bandwidth", own.nvlink_Bps)
            r.data["intra_node"] = intra_raw
    topology = _topology(r.section(CustomTopologySpec, "topology")) if r.has("topology") else None
    grouped = "node_groups" in r.data
    if topology is not None and grouped:
        raise r.error("node_groups", "and cluster.topology both describe the nodes: write one of them")
    for key in ("nodes", "gpus_per_node"):
        if key in r.data and (topology is not None or grouped):
            # the graph or the groups decide both; a number beside them would be silently replaced
            owner = (f"cluster.topology ({len(topology.gpus)} GPUs in nodes of {topology.gpus_per_node}); drop it, "
                     "or write cluster.topology.gpus_per_node" if topology is not None
                     else "cluster.node_groups (each group's count and gpus_per_node); drop it")
            raise r.error(key, f"is set by {owner}")
    if grouped and "gpu" not in r.data:
        # the groups may name every kind themselves: cluster.gpu is then only their default
        plain: dict[str, Any] = {name: None if name == "gpu" else r.value(fs) for name, fs in field_specs(ClusterSpec)
                                 if fs.kind not in ("section", "list")}
    else:
        plain = read_fields(ClusterSpec, r)
    if grouped:
        r.defaulted.difference_update({r._join(r.path, "nodes"), r._join(r.path, "gpus_per_node")})
    inter_reader = r.section(InterNodeSpec, "inter_node")
    inter = InterNodeSpec(**read_fields(InterNodeSpec, inter_reader))
    intra = _intra(r.section(IntraNodeSpec, "intra_node"))
    groups = _node_groups(r, plain["gpu"], inter.nic_bandwidth_Bps, intra.bandwidth_Bps) if grouped else None
    if topology is not None:
        plain["gpus_per_node"] = topology.gpus_per_node
        plain["nodes"] = len(topology.gpus) // topology.gpus_per_node
    if groups is not None:
        # the first group stands for the cluster where one number is asked for (reports); node_sizes and
        # rank_gpus say what each node and rank has
        plain["gpu"] = plain["gpu"] or groups[0].gpu
        plain["nodes"] = sum(group.count for group in groups)
        plain["gpus_per_node"] = groups[0].gpus_per_node
        world = sum(group.count * group.gpus_per_node for group in groups)
        if world > MAX_WORLD_SIZE:
            raise r.error("node_groups", f"has {world:,} GPUs; ddpsim simulates at most {MAX_WORLD_SIZE:,}")
    problem = world_size_problem(plain["nodes"], plain["gpus_per_node"])
    if problem and groups is None:
        raise r.error("nodes", problem)
    if topology is not None and inter.duplex_factor < 1.0:
        # a custom graph's links carry their own rates; a budget shared by both directions would have
        # to be a link of the graph, and silently ignoring the number would report a full-duplex step
        raise inter_reader.error("duplex_factor", "applies to the preset networks only; with cluster.topology write "
                                 "the endpoint's shared budget as a link of the graph")
    for tier in ("nodes_per_leaf", "leaves_per_spine"):
        if topology is not None and getattr(inter, tier) is not None:
            raise inter_reader.error(tier, "applies to the preset networks only; a custom topology's "
                                     "switches are its own vertices")
    return ClusterSpec(
        **plain,
        intra_node=intra,
        inter_node=inter,
        topology=topology,
        node_groups=groups,
    )


def world_size_problem(nodes: int, gpus_per_node: int) -> str | None:
    """Why a cluster is too large to simulate, or None (also used where --nodes changes the size)."""
    world = nodes * gpus_per_node
    if world > MAX_WORLD_SIZE:
        return f"{nodes:,} nodes x {gpus_per_node:,} GPUs is {world:,} GPUs; ddpsim simulates at most {MAX_WORLD_SIZE:,}"
    return None


def simulation_problem(sim: SimulationSpec, world_size: int) -> tuple[str, str] | None:
    """(field, why) when the simulation settings do not fit ``world_size`` ranks, or None."""
    if sim.straggler_rank is not None and sim.straggler_rank >= world_size:
        return "straggler_rank", f"must be below the world size {world_size}, got {sim.straggler_rank}"
    if sim.jitter_from_profile and sim.jitter_cv > 0:
        return "jitter_from_profile", "and jitter_cv both set the jitter: set one of them"
    jitter = sim.jitter_cv > 0 or sim.jitter_from_profile
    # detailed mode runs every rank and every flow; FAST mode folds ranks (ddp.fold) but draws
    # every rank's jitter factor for every step
    if sim.mode == "detailed" and world_size > MAX_PER_RANK_GPUS:
        return "mode", (f"detailed simulates each of the {world_size:,} ranks on its own; at most "
                        f"{MAX_PER_RANK_GPUS:,} can be (use mode: fast)")
    ranks = world_size if sim.mode == "detailed" or jitter else 1
    if ranks * sim.iterations > MAX_RANK_STEPS:
        return "iterations", (f"{ranks:,} ranks x {sim.iterations:,} iterations is more than "
                              f"{MAX_RANK_STEPS:,} rank-steps (each a drawn jitter factor)")
    return None


def _simulation(r: _Reader, world_size: int) -> SimulationSpec:
    sim = SimulationSpec(**read_fields(SimulationSpec, r))
    problem = simulation_problem(sim, world_size)
    if problem:
        raise r.error(*problem)
    return sim


def _set_dotted(data: dict, dotted: str, value: Any, file: str) -> None:
    keys = dotted.split(".")
    if any(not key for key in keys):
        raise ScenarioError(f"--set expects a dotted field name, got {dotted!r}", file=file, field=dotted or "--set")
    sections = _section_keys()
    node = data
    for key in keys[:-1]:
        if key not in sections and node is data:
            near = difflib.get_close_matches(key, sorted(sections), n=1)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            raise ScenarioError(f"unknown section '{key}' in --set{hint}", file=file, field=dotted)
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise ScenarioError(f"'{key}' is not a section", file=file, field=dotted)
        node = child
    node[keys[-1]] = value


def apply_overrides(data: dict, overrides: Iterable[str], file: str) -> dict:
    """Apply ``a.b=value`` strings (values parsed as YAML scalars) to a copy of the raw scenario."""
    data = copy.deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise ScenarioError(f"--set expects field=value, got {item!r}", file=file, field=item)
        dotted, text = item.split("=", 1)
        if not text.strip():
            # `--set cluster.nodes=` is a value lost in a shell script, not a request for the default
            raise ScenarioError("--set gives an empty value; write the value (or null to unset)", file=file,
                                field=dotted.strip() or item)
        try:
            bomb = _alias_bomb(yaml.compose(text, Loader=_YAML_LOADER))
            value = yaml.load(text, Loader=_YAML_LOADER)
        except yaml.YAMLError:
            bomb, value = None, text
        if bomb:
            raise ScenarioError(f"the --set value's aliases (*name) expand it to {bomb[1]:,} values, more than the "
                                f"{MAX_EXPANDED_VALUES:,} a scenario may hold (an alias bomb?)", file=file,
                                field=dotted.strip() or item)
        if dotted.strip() == "calibration" and isinstance(value, str) and not is_shipped_name(value):
            # typed on the command line: relative to the current folder, not to the scenario's (a bundled
            # scenario's folder is inside the installed package)
            value = os.path.abspath(value)
        _set_dotted(data, dotted.strip(), value, file)
    return data


def scenario_from_dict(data: Any, file: str = "<memory>", base_dir: str = ".", allow_other_gpu: bool = False) -> Scenario:
    """The checked scenario. ``allow_other_gpu``: its calibration may have been measured on another GPU kind
    than the cluster's (``--allow-other-gpu``; apply.check_gpu refuses it otherwise)."""
    root = _Reader(data, "", file, _keys(Scenario) | set(FREE_TEXT_KEYS))
    for key in FREE_TEXT_KEYS:
        value = root.data.get(key)
        if value is not None and not isinstance(value, str | int | float) or isinstance(value, bool):
            # a title is printed in reports: a list or mapping there is a misplaced section
            raise root.error(key, f"expected text ({FREE_TEXT_KEYS[key]}), got {value!r}")
    for key in ("workload", "cluster"):
        if not root.has(key):
            raise root.error(key, "missing required section")
    cluster = _cluster(root.section(ClusterSpec, "cluster"))
    plain = read_fields(Scenario, root)
    calibration_path = plain["calibration_path"]
    calibration = None
    if calibration_path is not None:
        # read once here, at the boundary; the simulation gets the value, never the path
        # a shipped calibration's name (pooled:H200) unless a file of that name exists beside the scenario
        resolved = calibration_path if os.path.isabs(calibration_path) else os.path.join(base_dir, calibration_path)
        if is_shipped_name(calibration_path) and not os.path.exists(resolved):
            resolved = calibration_path
        try:
            calibration = read_calibration(resolved)
        except ScenarioError as exc:
            if exc.file is not None:
                raise
            raise ScenarioError(exc.detail, file=file, field="calibration") from None
        if allow_other_gpu:
            calibration = dataclasses.replace(calibration, other_gpu_allowed=True)
    parallel_reader, collective_reader = root.section(ParallelSpec, "parallel"), root.section(CollectiveSpec, "collective")
    parallel = ParallelSpec(**read_fields(ParallelSpec, parallel_reader))
    collective = CollectiveSpec(**read_fields(CollectiveSpec, collective_reader))
    if cluster.node_groups is not None:
        if parallel.strategy in ("zero2", "zero3") and (not cluster.uniform or len(set(cluster.rank_gpus)) > 1):
            raise parallel_reader.error("strategy", "the sharded step is simulated on alike nodes only; "
                                        "cluster.node_groups differ in GPU count or kind")
        if collective.algorithm == "hierarchical" and not cluster.uniform:
            raise collective_reader.error("algorithm", "hierarchical pairs GPU i of every node; cluster.node_groups "
                                          "have nodes of different GPU counts (use ring, tree or auto)")
    return Scenario(
        workload=WorkloadSpec(**read_fields(WorkloadSpec, root.section(WorkloadSpec, "workload"))),
        cluster=cluster,
        ddp=DDPSpec(**read_fields(DDPSpec, root.section(DDPSpec, "ddp"))),
        parallel=parallel,
        collective=collective,
        overheads=OverheadSpec(**read_fields(OverheadSpec, root.section(OverheadSpec, "overheads"))),
        simulation=_simulation(root.section(SimulationSpec, "simulation"), cluster.world_size),
        calibration_path=calibration_path,
        calibration=calibration,
        price_per_gpu_hour=plain["price_per_gpu_hour"],
        defaulted_fields=frozenset(root.defaulted),
        source=file,
        base_dir=base_dir,
    )


def _duplicate_key(node: yaml.Node | None, path: str = "",
                   seen_nodes: set[int] | None = None) -> tuple[str, int, int] | None:
    """(dotted key, first line, second line) of the first key written twice in one mapping, or None.

    PyYAML keeps the last of two equal keys silently (``batch_size: 64`` then ``batch_size: 2`` ran
    with 2), so the composed node tree is walked before the values are built. An alias is the node it
    names, not a copy: each node is walked once (``seen_nodes``), so nine levels of nine aliases (an
    alias bomb, 9^9 paths) take as many steps as the file has nodes."""
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if node is None or id(node) in seen_nodes:
        return None
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *defaults` merges on purpose; keys written beside it override it
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            dotted = f"{path}.{key}" if path else key
            line = key_node.start_mark.line + 1
            if key in seen:
                return dotted, seen[key], line
            seen[key] = line
            found = _duplicate_key(value_node, dotted, seen_nodes)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found = _duplicate_key(item, f"{path}[{index}]", seen_nodes)
            if found:
                return found
    return None


# values a scenario may expand to through aliases: a 16,384-GPU custom graph written out is about 200,000;
# past this, every later step (validation, its messages, the result's copy of the scenario) would walk
# each alias's copy again, and nine levels of nine aliases are 435 million values
MAX_EXPANDED_VALUES = 2_000_000


def _expanded_values(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many values ``node`` stands for once every alias in it is replaced by what it names; each node
    is counted once (``sizes`` keeps the counts), so this takes as many steps as the file has nodes."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    sizes[id(node)] = 1  # an alias that names its own ancestor: counted once, never recursed into
    total = 1
    if isinstance(node, yaml.SequenceNode):
        total += sum(_expanded_values(item, sizes) for item in node.value)
    elif isinstance(node, yaml.MappingNode):
        total += sum(_expanded_values(k, sizes) + _expanded_values(v, sizes) for k, v in node.value)
    sizes[id(node)] = total
    return total


def _alias_bomb(root: yaml.Node | None) -> tuple[str, int] | None:
    """(the top-level key holding the most, the values its value expands to; "" and the whole document's
    where it is not a mapping) where aliases make the document stand for more than MAX_EXPANDED_VALUES
    values; None otherwise."""
    if root is None:
        return None
    sizes: dict[int, int] = {}
    total = _expanded_values(root, sizes)
    if total <= MAX_EXPANDED_VALUES:
        return None
    if isinstance(root, yaml.MappingNode) and root.value:
        key_node, value_node = max(root.value, key=lambda kv: sizes.get(id(kv[1]), 0))
        if isinstance(key_node, yaml.ScalarNode):
            return str(key_node.value), sizes[id(value_node)]
    return "", total


# libyaml's safe loader where PyYAML has it: the Python one takes about 20 s for a 16,384-GPU custom
# graph's 41,000 links; same documents, same safe constructors
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_scenario_dict(path: str) -> dict:
    """The raw YAML mapping of a scenario file (before overrides and validation)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        composed = yaml.compose(text, Loader=_YAML_LOADER)
        bomb = _alias_bomb(composed)
        if bomb:
            raise ScenarioError(f"its aliases (*name) expand it to {bomb[1]:,} values, more than the "
                                f"{MAX_EXPANDED_VALUES:,} a scenario may hold (an alias bomb?); write the values "
                                "out or use fewer aliases", file=path, field=bomb[0] or None)
        duplicate = _duplicate_key(composed)
        data = yaml.load(text, Loader=_YAML_LOADER)
    except FileNotFoundError:
        raise ScenarioError("file not found", file=path) from None
    except IsADirectoryError:
        raise ScenarioError("is a folder, not a scenario file", file=path) from None
    except UnicodeDecodeError:
        raise ScenarioError("not a text file (expected YAML)", file=path) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ScenarioError(f"not valid YAML{where}", file=path) from None
    if duplicate:
        key, first, second = duplicate
        raise ScenarioError(f"written twice (lines {first} and {second}); YAML would keep only the last",
                            file=path, field=key)
    if not isinstance(data, dict):
        raise ScenarioError("expected a mapping with workload and cluster sections", file=path)
    return data


def load_scenario(path: str, overrides: Iterable[str] = (), allow_other_gpu: bool = False) -> Scenario:
    """Read a scenario file, apply ``--set`` overrides, validate, and return it in SI units."""
    data = apply_overrides(read_scenario_dict(path), overrides, path)
    return scenario_from_dict(data, file=path, base_dir=os.path.dirname(os.path.abspath(path)),
                              allow_other_gpu=allow_other_gpu)
