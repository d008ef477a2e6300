"""Scenario YAML -> validated ``Scenario``. Every error names the file and the field."""

from __future__ import annotations

import copy
import difflib
import os
from collections.abc import Callable, Iterable
from typing import Any

import yaml

from ddpsim.errors import ScenarioError
from ddpsim.scenario.schema import (
    ALGORITHMS,
    COMM_HOOKS,
    INTER_NODE_TYPES,
    MODES,
    PRECISIONS,
    PROTOCOLS,
    ClusterSpec,
    CollectiveSpec,
    CustomTopologySpec,
    DDPSpec,
    InterNodeSpec,
    IntraNodeSpec,
    OverheadSpec,
    Scenario,
    SimulationSpec,
    TopologyLink,
    WorkloadSpec,
)
from ddpsim.topology.link_kinds import INTRA_NODE_TYPES
from ddpsim.units import UnitError, parse_bandwidth_Bps, parse_size_bytes, parse_time_s

_SECTIONS = {
    "workload": {"model", "batch_size", "precision", "seq_len", "compute_efficiency"},
    "cluster": {"gpu", "nodes", "gpus_per_node", "intra_node", "inter_node", "topology"},
    "ddp": {
        "bucket_cap_mb",
        "gradient_as_bucket_view",
        "find_unused_parameters",
        "static_graph",
        "comm_hook",
        "grad_accumulation_steps",
        "broadcast_buffers",
    },
    "collective": {"algorithm", "protocol"},
    "overheads": {
        "bucket_launch",
        "copy_bandwidth",
        "compute_slowdown",
        "comm_slowdown",
        "max_inflight_buckets",
        "buffer_sync",
        "bucket_cpu",
        "allreduce_stretch",
    },
    "simulation": {
        "mode",
        "seed",
        "iterations",
        "jitter_cv",
        "straggler_rank",
        "straggler_slowdown",
        "degraded_link_factor",
    },
    "calibration": None,
    "price_per_gpu_hour": None,
    "name": None,
    "description": None,
}
_INTRA_KEYS = {"type", "bandwidth", "latency"}
_INTER_KEYS = {"type", "nic_bandwidth", "latency", "oversubscription", "nics_per_node"}
_TOPOLOGY_KEYS = {"gpus", "links", "gpus_per_node"}
_LINK_KEYS = {"a", "b", "bandwidth", "latency"}

# Sensible defaults per link type, so a scenario may write just `intra_node: {type: nvswitch}`.
_INTRA_DEFAULTS = {
    "nvswitch": ("450GB/s", "3us"),
    "nvlink-ring": ("150GB/s", "3us"),
    "pcie": ("32GB/s", "5us"),
    "shm": ("28GB/s", "8us"),
    "socket": ("4GB/s", "30us"),
}


class _Reader:
    """Typed access to one mapping of the YAML, with the dotted path for error messages."""

    def __init__(self, data: Any, path: str, file: str, allowed: Iterable[str]) -> None:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ScenarioError(f"expected a mapping, got {type(data).__name__}", file=file, field=path)
        allowed = set(allowed)
        for key in data:
            if key not in allowed:
                near = difflib.get_close_matches(str(key), sorted(allowed), n=1)
                hint = f"; did you mean '{near[0]}'?" if near else f"; valid fields: {', '.join(sorted(allowed))}"
                raise ScenarioError(f"unknown field{hint}", file=file, field=self._join(path, str(key)))
        self.data, self.path, self.file = data, path, file

    @staticmethod
    def _join(path: str, key: str) -> str:
        return f"{path}.{key}" if path else key

    def error(self, key: str, message: str) -> ScenarioError:
        return ScenarioError(message, file=self.file, field=self._join(self.path, key))

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def raw(self, key: str, default: Any = None, required: bool = False) -> Any:
        if key not in self.data or self.data[key] is None:
            if required:
                raise self.error(key, "missing required field")
            return default
        return self.data[key]

    def integer(self, key: str, default: int | None = None, minimum: int | None = None, required: bool = False) -> Any:
        value = self.raw(key, default, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.error(key, f"must be at least {minimum}, got {value}")
        return value

    def number(self, key: str, default: float | None = None, positive: bool = False, required: bool = False) -> Any:
        value = self.raw(key, default, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, f"expected a number, got {value!r}")
        if positive and value <= 0:
            raise self.error(key, f"must be positive, got {value}")
        if value < 0:
            raise self.error(key, f"must not be negative, got {value}")
        return float(value)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value

    def choice(self, key: str, choices: Iterable[str], default: str | None = None) -> str:
        choices = tuple(choices)
        value = self.raw(key, default, required=default is None)
        value = str(value).lower() if not isinstance(value, str) else value
        if value not in choices:
            near = difflib.get_close_matches(value, choices, n=1)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            raise self.error(key, f"expected one of {', '.join(choices)}, got {value!r}{hint}")
        return value

    def quantity(self, key: str, parse: Callable[[Any], float], default: Any = None, positive: bool = True) -> Any:
        value = self.raw(key, default, required=default is None)
        try:
            parsed = parse(value)
        except UnitError as exc:
            raise self.error(key, str(exc)) from None
        if positive and parsed <= 0:
            raise self.error(key, f"must be positive, got {value!r}")
        if parsed < 0:
            raise self.error(key, f"must not be negative, got {value!r}")
        return parsed

    def section(self, key: str, allowed: Iterable[str]) -> _Reader:
        return _Reader(self.data.get(key), self._join(self.path, key), self.file, allowed)


def _workload(r: _Reader) -> WorkloadSpec:
    model = r.raw("model", required=True)
    if not isinstance(model, str) or not model.strip():
        raise r.error("model", f"expected a model name, 'torch:module:factory' or 'profile:file.json', got {model!r}")
    efficiency = r.number("compute_efficiency", positive=True)
    if efficiency is not None and efficiency > 1:
        raise r.error("compute_efficiency", f"is a fraction of peak and must be at most 1, got {efficiency}")
    return WorkloadSpec(
        model=model.strip(),
        batch_size=r.integer("batch_size", required=True, minimum=1),
        precision=r.choice("precision", PRECISIONS, "fp32"),
        seq_len=r.integer("seq_len", minimum=1),
        compute_efficiency=efficiency,
    )


def _intra(r: _Reader) -> IntraNodeSpec:
    kind = r.choice("type", INTRA_NODE_TYPES, "nvswitch")
    bandwidth, latency = _INTRA_DEFAULTS[kind]
    return IntraNodeSpec(
        type=kind,
        bandwidth_Bps=r.quantity("bandwidth", parse_bandwidth_Bps, bandwidth),
        latency_s=r.quantity("latency", parse_time_s, latency, positive=False),
    )


def _inter(r: _Reader) -> InterNodeSpec:
    kind = r.choice("type", INTER_NODE_TYPES, "rail-fat-tree")
    oversubscription = r.number("oversubscription", 1.0, positive=True)
    if oversubscription < 1:
        raise r.error("oversubscription", f"is a ratio >= 1 (1 = non-blocking), got {oversubscription}")
    return InterNodeSpec(
        type=kind,
        nic_bandwidth_Bps=r.quantity("nic_bandwidth", parse_bandwidth_Bps, "400Gbps"),
        latency_s=r.quantity("latency", parse_time_s, "5us", positive=False),
        oversubscription=oversubscription,
        nics_per_node=r.integer("nics_per_node", minimum=1),
    )


def _topology(r: _Reader) -> CustomTopologySpec:
    gpus = r.raw("gpus", required=True)
    if not isinstance(gpus, list) or not gpus or not all(isinstance(g, str) for g in gpus):
        raise r.error("gpus", "expected a non-empty list of vertex names in rank order")
    if len(set(gpus)) != len(gpus):
        raise r.error("gpus", "lists a GPU twice")
    links_raw = r.raw("links", required=True)
    if not isinstance(links_raw, list) or not links_raw:
        raise r.error("links", "expected a non-empty list of {a, b, bandwidth, latency}")
    links = []
    for i, item in enumerate(links_raw):
        link = _Reader(item, f"{r.path}.links[{i}]", r.file, _LINK_KEYS)
        a, b = link.raw("a", required=True), link.raw("b", required=True)
        if a == b:
            raise link.error("b", f"a link must join two different vertices, got {a!r} twice")
        links.append(
            TopologyLink(
                a=str(a),
                b=str(b),
                bandwidth_Bps=link.quantity("bandwidth", parse_bandwidth_Bps),
                latency_s=link.quantity("latency", parse_time_s, "1us", positive=False),
            )
        )
    per_node = r.integer("gpus_per_node", len(gpus), minimum=1)
    if len(gpus) % per_node:
        raise r.error("gpus_per_node", f"{len(gpus)} GPUs do not split into nodes of {per_node}")
    return CustomTopologySpec(gpus=tuple(gpus), links=tuple(links), gpus_per_node=per_node)


def _cluster(r: _Reader) -> ClusterSpec:
    topology = _topology(r.section("topology", _TOPOLOGY_KEYS)) if r.has("topology") else None
    if topology is not None:
        gpus_per_node = topology.gpus_per_node
        nodes = len(topology.gpus) // gpus_per_node
    else:
        nodes = r.integer("nodes", 1, minimum=1)
        gpus_per_node = r.integer("gpus_per_node", 8, minimum=1)
    return ClusterSpec(
        gpu=str(r.raw("gpu", required=True)),
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        intra_node=_intra(r.section("intra_node", _INTRA_KEYS)),
        inter_node=_inter(r.section("inter_node", _INTER_KEYS)),
        topology=topology,
    )


def _ddp(r: _Reader) -> DDPSpec:
    cap = r.raw("bucket_cap_mb")
    if cap == "default":
        cap = None
    if cap is not None:
        if isinstance(cap, str) and _is_plain_number(cap):
            cap = float(cap)  # "5" means 5 MiB, as a bare 5 does
        elif isinstance(cap, str):
            try:
                cap = parse_size_bytes(cap) / (1024 * 1024)
            except UnitError as exc:
                raise r.error("bucket_cap_mb", f"{exc} (a plain number means MiB, as in PyTorch)") from None
        cap = r.number("bucket_cap_mb", positive=True) if not isinstance(cap, float) else cap
        if cap <= 0:
            raise r.error("bucket_cap_mb", f"must be positive, got {cap}")
    return DDPSpec(
        bucket_cap_mb=cap,
        gradient_as_bucket_view=r.boolean("gradient_as_bucket_view", False),
        find_unused_parameters=r.boolean("find_unused_parameters", False),
        static_graph=r.boolean("static_graph", False),
        comm_hook=r.choice("comm_hook", COMM_HOOKS, "none"),
        grad_accumulation_steps=r.integer("grad_accumulation_steps", 1, minimum=1),
        broadcast_buffers=r.boolean("broadcast_buffers", True),
    )


def _at_least_one(r: _Reader, key: str, default: float) -> float:
    value = r.number(key, default, positive=True)
    if value < 1:
        raise r.error(key, f"is a factor >= 1, got {value}")
    return value


def _is_plain_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _overheads(r: _Reader) -> OverheadSpec:
    defaults = OverheadSpec()
    copy_bw = r.quantity("copy_bandwidth", parse_bandwidth_Bps, None) if r.has("copy_bandwidth") else None
    return OverheadSpec(
        bucket_launch_s=r.quantity("bucket_launch", parse_time_s, defaults.bucket_launch_s, positive=False),
        copy_bandwidth_Bps=copy_bw,
        compute_slowdown=_at_least_one(r, "compute_slowdown", defaults.compute_slowdown),
        comm_slowdown=_at_least_one(r, "comm_slowdown", defaults.comm_slowdown),
        allreduce_stretch=_at_least_one(r, "allreduce_stretch", defaults.allreduce_stretch),
        max_inflight_buckets=r.integer("max_inflight_buckets", minimum=1),
        buffer_sync_s=r.quantity("buffer_sync", parse_time_s, defaults.buffer_sync_s, positive=False),
        bucket_cpu_s=r.quantity("bucket_cpu", parse_time_s, defaults.bucket_cpu_s, positive=False),
    )


def _simulation(r: _Reader, world_size: int) -> SimulationSpec:
    straggler = r.integer("straggler_rank", minimum=0)
    if straggler is not None and straggler >= world_size:
        raise r.error("straggler_rank", f"must be below the world size {world_size}, got {straggler}")
    factor = r.number("degraded_link_factor", 1.0, positive=True)
    if factor > 1:
        raise r.error("degraded_link_factor", f"is the fraction of bandwidth left, at most 1, got {factor}")
    slowdown = r.number("straggler_slowdown", 1.0, positive=True)
    if slowdown < 1:
        raise r.error("straggler_slowdown", f"is a factor >= 1, got {slowdown}")
    return SimulationSpec(
        mode=r.choice("mode", MODES, "auto"),
        seed=r.integer("seed", 0),
        iterations=r.integer("iterations", 1, minimum=1),
        jitter_cv=r.number("jitter_cv", 0.0),
        straggler_rank=straggler,
        straggler_slowdown=slowdown,
        degraded_link_factor=factor,
    )


def _set_dotted(data: dict, dotted: str, value: Any, file: str) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        if key not in _SECTIONS and node is data:
            near = difflib.get_close_matches(key, [k for k in _SECTIONS if _SECTIONS[k]], n=1)
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
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError:
            value = text
        _set_dotted(data, dotted.strip(), value, file)
    return data


def scenario_from_dict(data: Any, file: str = "<memory>", base_dir: str = ".") -> Scenario:
    root = _Reader(data, "", file, _SECTIONS)
    if not root.has("workload"):
        raise root.error("workload", "missing required section")
    if not root.has("cluster"):
        raise root.error("cluster", "missing required section")
    cluster = _cluster(root.section("cluster", _SECTIONS["cluster"]))
    calibration_path = root.raw("calibration")
    if calibration_path is not None and not isinstance(calibration_path, str):
        raise root.error("calibration", "expected the path of a calibration JSON file")
    calibration = None
    if calibration_path is not None:
        # read once here, at the boundary; the simulation gets the value, never the path
        from ddpsim.calibration.file import read_calibration

        resolved = calibration_path if os.path.isabs(calibration_path) else os.path.join(base_dir, calibration_path)
        calibration = read_calibration(resolved)
    return Scenario(
        workload=_workload(root.section("workload", _SECTIONS["workload"])),
        cluster=cluster,
        ddp=_ddp(root.section("ddp", _SECTIONS["ddp"])),
        collective=CollectiveSpec(
            algorithm=root.section("collective", _SECTIONS["collective"]).choice("algorithm", ALGORITHMS, "auto"),
            protocol=root.section("collective", _SECTIONS["collective"]).choice("protocol", PROTOCOLS, "auto"),
        ),
        overheads=_overheads(root.section("overheads", _SECTIONS["overheads"])),
        simulation=_simulation(root.section("simulation", _SECTIONS["simulation"]), cluster.world_size),
        calibration_path=calibration_path,
        calibration=calibration,
        price_per_gpu_hour=root.number("price_per_gpu_hour"),
        source=file,
        base_dir=base_dir,
    )


def read_scenario_dict(path: str) -> dict:
    """The raw YAML mapping of a scenario file (before overrides and validation)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except FileNotFoundError:
        raise ScenarioError("file not found", file=path) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ScenarioError(f"not valid YAML{where}", file=path) from None
    if not isinstance(data, dict):
        raise ScenarioError("expected a mapping with workload and cluster sections", file=path)
    return data


def load_scenario(path: str, overrides: Iterable[str] = ()) -> Scenario:
    """Read a scenario file, apply ``--set`` overrides, validate, and return it in SI units."""
    data = apply_overrides(read_scenario_dict(path), overrides, path)
    return scenario_from_dict(data, file=path, base_dir=os.path.dirname(os.path.abspath(path)))
