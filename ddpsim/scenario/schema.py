"""The validated scenario: dataclasses in SI units, one per YAML section, and the one description of
every field.

Each field's ``metadata`` holds a ``FieldSpec``: its YAML key, how its value is written (unit kind),
its default, its bounds and a one-line doc. The loader (``load.py``) reads a section generically from
these specs, and ``fields_markdown()`` writes the README's field table from them, so a field is
declared in one place. YAML field names carry no unit suffix because the unit is written in the value
("450GB/s"); the dataclass field names do (``bandwidth_Bps``, ``latency_s``), so code never guesses.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ddpsim.topology.link_kinds import INTRA_NODE_TYPES
from ddpsim.units import parse_bandwidth_Bps, parse_size_bytes, parse_time_s

if TYPE_CHECKING:
    from ddpsim.calibration.file import Calibration

# Each vocabulary is declared once, here (link types in ddpsim/topology/link_kinds.py).
PRECISIONS = ("fp32", "bf16-amp", "fp16-amp")
INTER_NODE_TYPES = ("rail-fat-tree", "fat-tree", "ethernet", "none")
ALGORITHMS = ("auto", "ring", "tree", "hierarchical")
PROTOCOLS = ("auto", "simple", "ll", "ll128")
COMM_HOOKS = ("none", "fp16", "bf16")
MODES = ("auto", "detailed", "fast")
STRATEGIES = ("ddp", "zero1", "zero2", "zero3")
SHARD_DTYPES = ("auto", "fp32", "bf16", "fp16")
SHARD_GROUPS = ("world", "node")

MIB = 1024 * 1024
DEFAULT_BUCKET_CAP_MB = 25
DEFAULT_FIRST_BUCKET_BYTES = 1 * MIB

# Upper limits, checked when the scenario is read, before anything is allocated: beyond them a
# simulation would exhaust memory or time rather than answer.
MAX_WORLD_SIZE = 1_048_576
MAX_GPUS_PER_NODE = 1024
MAX_CUSTOM_GPUS = 4096  # a custom graph is routed with networkx, pair by pair
MAX_CUSTOM_LINKS = 65_536
MAX_PER_RANK_GPUS = 16_384  # every rank its own process (detailed mode, jitter, a straggler): ~1 GB
MAX_RANK_STEPS = 1_000_000  # simulated ranks x iterations: each keeps a trace in memory

# How a value is written in YAML; ``fields_markdown`` shows these words.
KIND_TEXT = {
    "text": "text",
    "int": "integer",
    "number": "number",
    "bool": "true / false",
    "choice": "one of",
    "bandwidth": 'bandwidth ("450GB/s", "400Gbps")',
    "time": 'time ("3us", "1.5ms")',
    "mib": 'MiB (5) or a size ("25MB", "25MiB")',
    "path": "file path",
    "section": "section",
    "list": "list",
}
_PARSERS = {"bandwidth": parse_bandwidth_Bps, "time": parse_time_s, "size": parse_size_bytes}

META = "ddpsim"


@dataclass(frozen=True)
class FieldSpec:
    """One YAML field: key, kind, default (as written in YAML), bounds and doc.

    ``default`` is ``REQUIRED``, ``None`` (optional: absent means "not set") or a value as a user
    would write it ("40us", 2.0). ``low_rule`` / ``high_rule`` phrase a bound for messages.
    """

    key: str
    kind: str
    doc: str
    default: Any = None
    choices: tuple[str, ...] = ()
    minimum: float | None = None  # inclusive
    above: float | None = None  # exclusive lower bound
    maximum: float | None = None  # inclusive
    low_rule: str = ""  # how a value below the lower bound is told ("is a factor >= 1")
    high_rule: str = ""  # how a value above the upper bound is told
    default_text: str = ""  # when the default is not a plain value ("by type", "one per GPU")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def si_default(self) -> Any:
        """The default in the dataclass's unit (what a missing field becomes)."""
        if self.default is None or self.default is REQUIRED:
            return None
        parser = _PARSERS.get(self.kind)
        return parser(self.default) if parser is not None else self.default


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


def spec(key: str, kind: str, doc: str, default: Any = None, *, code_default: bool = True, **bounds: Any) -> Any:
    """A dataclass field described by a FieldSpec; its Python default is the YAML default in SI.

    ``code_default=False`` keeps the field required in Python (an earlier field has no default, or the
    default depends on another field, as intra-node bandwidth on the link type).
    """
    field_spec = FieldSpec(key, kind, doc, default, **bounds)
    metadata = {META: field_spec}
    if field_spec.required or not code_default:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=field_spec.si_default(), metadata=metadata)


def section(key: str, doc: str, factory: Any = None, *, optional: bool | None = None) -> Any:
    """A nested section; ``optional`` (default: it has a factory) says whether YAML may omit it."""
    omittable = factory is not None if optional is None else optional
    metadata = {META: FieldSpec(key, "section", doc, None if omittable else REQUIRED)}
    if factory is None:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default_factory=factory, metadata=metadata)


def field_specs(cls: type) -> list[tuple[str, FieldSpec]]:
    """(attribute name, FieldSpec) of every YAML field of a dataclass, in declaration order."""
    return [(f.name, f.metadata[META]) for f in dataclasses.fields(cls) if META in f.metadata]


_FACTOR: dict[str, Any] = {"minimum": 1.0, "maximum": 1000.0, "low_rule": "is a factor >= 1"}
_BANDWIDTH: dict[str, Any] = {"minimum": 1e3, "maximum": 1e15}  # 1 kB/s to 1 PB/s: beyond, times underflow or explode
_LATENCY: dict[str, Any] = {"minimum": 0.0, "maximum": 3600.0}


@dataclass(frozen=True)
class WorkloadSpec:
    """What runs on each GPU."""

    model: str = spec("model", "text", 'a zoo name ("resnet50"), "torch:package.module:factory" or '
                      '"profile:measured.json"', REQUIRED)
    batch_size: int = spec("batch_size", "int", "samples per GPU per micro-step", REQUIRED,
                           minimum=1, maximum=1_048_576)
    precision: str = spec("precision", "choice", "autocast; gradients stay fp32 as in PyTorch AMP", "fp32",
                          choices=PRECISIONS)
    seq_len: int | None = spec("seq_len", "int", "tokens per sample for language models", None,
                               minimum=1, maximum=1_048_576, default_text="the model's")
    compute_efficiency: float | None = spec(
        "compute_efficiency", "number", "fraction of the GPU's peak FLOP/s reached", None, above=0.0,
        maximum=1.0, high_rule="is a fraction of peak and must be at most 1", default_text="the GPU catalog's")


# Sensible defaults per link type, so a scenario may write just `intra_node: {type: nvswitch}`.
INTRA_DEFAULTS = {
    "nvswitch": ("450GB/s", "3us"),
    "nvlink-ring": ("150GB/s", "3us"),
    "pcie": ("32GB/s", "5us"),
    "shm": ("28GB/s", "8us"),
    "socket": ("4GB/s", "30us"),
}
assert tuple(INTRA_DEFAULTS) == INTRA_NODE_TYPES, "one default per link kind of topology/link_kinds.py"
_BANDWIDTH_BY_TYPE = "by type: " + ", ".join(f"{t} {bw}" for t, (bw, _lat) in INTRA_DEFAULTS.items())
_LATENCY_BY_TYPE = "by type: " + ", ".join(f"{t} {lat}" for t, (_bw, lat) in INTRA_DEFAULTS.items())


@dataclass(frozen=True)
class IntraNodeSpec:
    """Links between GPUs of one node: bandwidth per GPU per direction, latency per hop."""

    type: str = spec("type", "choice", "the links between the GPUs of a node", "nvswitch",
                     code_default=False, choices=INTRA_NODE_TYPES)
    bandwidth_Bps: float = spec("bandwidth", "bandwidth", "per GPU per direction", None, code_default=False,
                                default_text=_BANDWIDTH_BY_TYPE, **_BANDWIDTH)
    latency_s: float = spec("latency", "time", "per hop", None, code_default=False, default_text=_LATENCY_BY_TYPE,
                            **_LATENCY)


@dataclass(frozen=True)
class InterNodeSpec:
    """The network between nodes. rail-fat-tree: one NIC per GPU, NIC i of every node on rail i."""

    type: str = spec("type", "choice", "rail-fat-tree: NIC i of every node on rail i", "rail-fat-tree",
                     code_default=False, choices=INTER_NODE_TYPES)
    nic_bandwidth_Bps: float = spec("nic_bandwidth", "bandwidth", "per NIC per direction", "400Gbps",
                                    code_default=False, **_BANDWIDTH)
    latency_s: float = spec("latency", "time", "per network hop", "5us", code_default=False, **_LATENCY)
    oversubscription: float = spec("oversubscription", "number", "ratio of the fabric (1 = non-blocking)", 1.0,
                                   minimum=1.0, maximum=1000.0, low_rule="is a ratio >= 1 (1 = non-blocking)")
    nics_per_node: int | None = spec("nics_per_node", "int", "NICs of a node", None, minimum=1,
                                     maximum=MAX_GPUS_PER_NODE, default_text="one per GPU")
    duplex_factor: float = spec(
        "duplex_factor", "number",
        "per-direction rate of a GPU's network endpoint while it sends and receives at once, as a fraction "
        "of its one-way rate (1: full duplex, as an InfiniBand/RoCE NIC; about 0.5 to 0.65 for NCCL's socket "
        "transport on one host, measured by the harness's --net-probe; preset networks only: a custom topology "
        "writes it as a link)", 1.0,
        minimum=0.5, maximum=1.0, low_rule="is at least 0.5 (0.5: half duplex, both directions share one rate)",
        high_rule="is a fraction and must be at most 1")


@dataclass(frozen=True)
class TopologyLink:
    a: str = spec("a", "text", "a vertex name", REQUIRED)
    b: str = spec("b", "text", "another vertex name", REQUIRED)
    bandwidth_Bps: float = spec("bandwidth", "bandwidth", "per direction", REQUIRED, **_BANDWIDTH)
    latency_s: float = spec("latency", "time", "of the link", "1us", **_LATENCY)


@dataclass(frozen=True)
class CustomTopologySpec:
    """A user graph: ``gpus`` in rank order (each a vertex name), full-duplex links between vertices."""

    gpus: tuple[str, ...] = spec("gpus", "list", "vertex names of the GPUs, in rank order", REQUIRED)
    links: tuple[TopologyLink, ...] = spec("links", "list", "full-duplex links: {a, b, bandwidth, latency}",
                                           REQUIRED)
    gpus_per_node: int = spec("gpus_per_node", "int", "GPUs per node", REQUIRED, minimum=1,
                              maximum=MAX_GPUS_PER_NODE, default_text="all of them")


@dataclass(frozen=True)
class ClusterSpec:
    gpu: str = spec("gpu", "text", "a GPU of the catalog (V100, A100, A100-40GB, H100-SXM, H100-PCIe, H200, B200)",
                    REQUIRED)
    nodes: int = spec("nodes", "int", "nodes", 1, code_default=False, minimum=1, maximum=MAX_WORLD_SIZE)
    gpus_per_node: int = spec("gpus_per_node", "int", "GPUs per node", 8, code_default=False, minimum=1,
                              maximum=MAX_GPUS_PER_NODE)
    intra_node: IntraNodeSpec = section("intra_node", "the links inside a node", optional=True)
    inter_node: InterNodeSpec = section("inter_node", "the network between nodes", optional=True)
    topology: CustomTopologySpec | None = section(
        "topology", "a custom graph instead of nodes, gpus_per_node, intra_node and inter_node", lambda: None)

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class DDPSpec:
    """DistributedDataParallel's arguments, with PyTorch's semantics.

    bucket_cap_mb: MiB; None means the argument was left at its default (25 MiB, first bucket 1 MiB).
    An explicit value gives the first bucket the same cap, as PyTorch does.
    """

    bucket_cap_mb: float | None = spec(
        "bucket_cap_mb", "mib", 'omitted or "default": PyTorch\'s 25 MiB with a 1 MiB first bucket', None,
        minimum=1e-6, maximum=1e6, default_text="default")
    gradient_as_bucket_view: bool = spec("gradient_as_bucket_view", "bool", "gradients alias the buckets", False)
    find_unused_parameters: bool = spec("find_unused_parameters", "bool",
                                        "no bucket rebuild; graph walk and bitmap all-reduce each step", False)
    static_graph: bool = spec("static_graph", "bool", "DDP's static_graph", False)
    comm_hook: str = spec("comm_hook", "choice", "gradient compression hook", "none", choices=COMM_HOOKS)
    grad_accumulation_steps: int = spec("grad_accumulation_steps", "int", "no_sync() for all but the last micro-step",
                                        1, minimum=1, maximum=10_000)
    broadcast_buffers: bool = spec("broadcast_buffers", "bool", "broadcast module buffers before forward", True)

    @property
    def bucket_cap_bytes(self) -> int:
        cap_mb = DEFAULT_BUCKET_CAP_MB if self.bucket_cap_mb is None else self.bucket_cap_mb
        return int(cap_mb * MIB)

    @property
    def first_bucket_cap_bytes(self) -> int:
        if self.bucket_cap_mb is None:
            return DEFAULT_FIRST_BUCKET_BYTES
        return self.bucket_cap_bytes


@dataclass(frozen=True)
class CollectiveSpec:
    algorithm: str = spec("algorithm", "choice", "all-reduce algorithm (auto: NCCL-like cost model)", "auto",
                          choices=ALGORITHMS)
    protocol: str = spec("protocol", "choice", "NCCL protocol", "auto", choices=PROTOCOLS)


@dataclass(frozen=True)
class OverheadSpec:
    """DDP costs beyond compute and wire time; defaults are used until a calibration replaces them.

    The defaults of ``bucket_launch_s`` (40 us) and ``compute_slowdown`` (2.0) are what ``ddpsim
    calibrate`` fitted on 4 x H200 over NVLink (validation/data, caps 5 and 50, both world sizes);
    the other terms default to "no effect": the same fit's in-flight limit (1) and buffer sync (2 ms)
    describe that machine and ResNet-50's BatchNorm buffers more than DDP in general. Every slowdown
    is a factor >= 1 (1 = no effect).
    """

    bucket_launch_s: float = spec("bucket_launch", "time",
                                  "per bucket, on the communication stream before its all-reduce", "40us", **_LATENCY)
    copy_bandwidth_Bps: float | None = spec("copy_bandwidth", "bandwidth", "gradient copies into and out of buckets",
                                            None, default_text="70% of GPU memory bandwidth", **_BANDWIDTH)
    compute_slowdown: float = spec("compute_slowdown", "number",
                                   "compute runs this many times slower while an all-reduce is in flight", 2.0,
                                   **_FACTOR)
    comm_slowdown: float = spec("comm_slowdown", "number",
                                "an all-reduce runs this many times slower while compute kernels run", 1.0, **_FACTOR)
    allreduce_stretch: float = spec("allreduce_stretch", "number",
                                    "every all-reduce inside DDP takes this many times the isolated call", 1.0,
                                    **_FACTOR)
    idle_start_wait_s: float = spec("idle_start_wait", "time",
                                    "an all-reduce that starts on an idle NCCL stream waits this long for the "
                                    "other ranks; one queued behind another does not", "0us", **_LATENCY)
    max_inflight_buckets: int | None = spec("max_inflight_buckets", "int",
                                            "the launch path blocks after this many outstanding all-reduces", None,
                                            minimum=1, maximum=1_000_000, default_text="never blocks")
    bucket_cpu_s: float = spec("bucket_cpu", "time",
                               "per bucket, on the compute stream (a CPU-bound launch holding up backward)", "0us",
                               **_LATENCY)
    hook_cpu_s: float = spec("hook_cpu", "time",
                             "per bucket with a comm hook: DDP calling the Python hook and its future callback "
                             "on the backward thread (measured 135us on 4 x H200, microbench.jsonl of "
                             "validation/data/h200x4-options-2026-11-26)", "135us", **_LATENCY)
    buffer_sync_s: float = spec("buffer_sync", "time",
                                "DDP's per-step buffer broadcast beyond its wire time (BatchNorm models)", "0ms",
                                **_LATENCY)


@dataclass(frozen=True)
class ParallelSpec:
    """Data parallelism: replicated (DDP) or sharded as ZeRO stage 1 (DDP + ZeroRedundancyOptimizer), 2 or 3
    (FSDP2 ``fully_shard`` with ``reshard_after_forward`` False or True). ddpsim/sharded/ simulates the last three."""

    strategy: str = spec("strategy", "choice", "ddp: replicated; zero1: DDP with ZeroRedundancyOptimizer; zero2: "
                         "FSDP2 fully_shard(reshard_after_forward=False); zero3: fully_shard (reshard after forward)",
                         "ddp", choices=STRATEGIES)
    param_dtype: str = spec("param_dtype", "choice", "FSDP2 MixedPrecisionPolicy.param_dtype: the all-gather and "
                            "compute dtype (auto: bf16 under bf16-amp, fp16 under fp16-amp, else fp32)", "auto",
                            choices=SHARD_DTYPES)
    reduce_dtype: str = spec("reduce_dtype", "choice", "MixedPrecisionPolicy.reduce_dtype: the reduce-scatter dtype "
                             "(auto: the param_dtype, as FSDP2 does when it is unset)", "auto", choices=SHARD_DTYPES)
    unit: str = spec("unit", "text", "the fully_shard units: auto = one per transformer block (the modules under the "
                     "first numbered name, e.g. model.layers.3), the rest in the root unit; or a regular expression "
                     "whose match in a module name names its unit", "auto")
    shard_group: str = spec("shard_group", "choice", "world: shard over every GPU; node: shard within a node and "
                            "replicate across nodes (HSDP)", "world", choices=SHARD_GROUPS)


@dataclass(frozen=True)
class SimulationSpec:
    """How to simulate."""

    mode: str = spec("mode", "choice", "detailed: every rank and transfer; fast: identical ranks folded; "
                     "auto: detailed up to 64 GPUs", "auto", choices=MODES)
    seed: int = spec("seed", "int", "random seed of the jitter", 0, minimum=0, maximum=2**63 - 1)
    iterations: int = spec("iterations", "int", "steady-state steps to simulate", 1, minimum=1, maximum=100_000)
    jitter_cv: float = spec("jitter_cv", "number", "per-rank per-step compute time coefficient of variation "
                            "(lognormal)", 0.0, minimum=0.0, maximum=10.0)
    jitter_from_profile: bool = spec("jitter_from_profile", "bool", "jitter with the coefficient of variation of the "
                                     "measured profile's own step times (p10..p90) instead of jitter_cv", False)
    straggler_rank: int | None = spec("straggler_rank", "int", "one rank whose compute is slower", None, minimum=0,
                                      maximum=MAX_WORLD_SIZE - 1, default_text="none")
    straggler_slowdown: float = spec("straggler_slowdown", "number", "the straggler's compute takes this many times "
                                     "longer", 1.0, **_FACTOR)
    degraded_link_factor: float = spec("degraded_link_factor", "number", "rank 0's first network hop runs at this "
                                       "fraction of its bandwidth", 1.0, above=0.0, maximum=1.0,
                                       high_rule="is the fraction of bandwidth left, at most 1")


@dataclass(frozen=True)
class Scenario:
    workload: WorkloadSpec = section("workload", "what runs on each GPU")
    cluster: ClusterSpec = section("cluster", "the GPUs and their links")
    ddp: DDPSpec = section("ddp", "DistributedDataParallel's arguments", DDPSpec)
    parallel: ParallelSpec = section("parallel", "replicated or sharded data parallelism", ParallelSpec)
    collective: CollectiveSpec = section("collective", "how all-reduces run", CollectiveSpec)
    overheads: OverheadSpec = section("overheads", "DDP costs a calibration fits; defaults: the fit on "
                                      "4 x H200 NVLink", OverheadSpec)
    simulation: SimulationSpec = section("simulation", "how to simulate", SimulationSpec)
    calibration_path: str | None = spec("calibration", "path", "from `ddpsim calibrate`: its fitted links and "
                                        "overheads replace this file's for the matching link class", None)
    calibration: Calibration | None = None
    price_per_gpu_hour: float | None = spec("price_per_gpu_hour", "number", "for cost per million samples/tokens",
                                            None, minimum=0.0, maximum=1e6)
    # dotted names ("cluster.inter_node.nic_bandwidth") the file left to ddpsim's defaults
    defaulted_fields: frozenset[str] = frozenset()
    source: str = "<memory>"
    base_dir: str = "."


# Top-level keys a scenario may carry for people; the simulator ignores them.
FREE_TEXT_KEYS = {"name": "a title for reports", "description": "free text"}

_SECTION_CLASSES: dict[str, type] = {
    "workload": WorkloadSpec,
    "cluster": ClusterSpec,
    "intra_node": IntraNodeSpec,
    "inter_node": InterNodeSpec,
    "topology": CustomTopologySpec,
    "ddp": DDPSpec,
    "parallel": ParallelSpec,
    "collective": CollectiveSpec,
    "overheads": OverheadSpec,
    "simulation": SimulationSpec,
}


def section_class(key: str) -> type:
    return _SECTION_CLASSES[key]


def _number_text(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else str(value)


def _bound_text(fs: FieldSpec, value: float) -> str:
    unit = {"bandwidth": "B/s", "time": "s", "mib": " MiB"}.get(fs.kind, "")
    if unit == "B/s" and value >= 1e3:
        prefix, scale = next((p, s) for p, s in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))
                             if value >= s)
        return f"{value / scale:g}{prefix}B/s"
    return f"{_number_text(value)}{unit}"


def _range_text(fs: FieldSpec) -> str:
    if fs.kind == "choice":
        return " \\| ".join(fs.choices)
    low = ""
    if fs.above is not None:
        low = f"> {_bound_text(fs, fs.above)}"
    elif fs.minimum is not None:
        low = f">= {_bound_text(fs, fs.minimum)}"
    high = f"<= {_bound_text(fs, fs.maximum)}" if fs.maximum is not None else ""
    return ", ".join(part for part in (low, high) if part)


def _default_text(fs: FieldSpec) -> str:
    if fs.default_text:
        return fs.default_text
    if fs.required:
        return "required"
    if fs.default is None:
        return "not set"
    if isinstance(fs.default, bool):
        return str(fs.default).lower()
    return str(fs.default)


def _rows(cls: type, prefix: str) -> list[list[str]]:
    rows = []
    for _name, fs in field_specs(cls):
        dotted = f"{prefix}{fs.key}"
        if fs.kind == "section":
            rows.append([f"`{dotted}`", "section", _default_text(fs) if fs.required else "", "", fs.doc])
            rows += _rows(section_class(fs.key), dotted + ".")
            continue
        kind = KIND_TEXT[fs.kind]
        if fs.kind == "list" and fs.key == "links":
            rows.append([f"`{dotted}`", kind, _default_text(fs), "", fs.doc])
            rows += [[f"`{dotted}[i].{f.key}`", KIND_TEXT[f.kind], _default_text(f), _range_text(f), f.doc]
                     for _n, f in field_specs(TopologyLink)]
            continue
        rows.append([f"`{dotted}`", kind, _default_text(fs), _range_text(fs), fs.doc])
    return rows


def fields_markdown() -> str:
    """The README's table of every scenario field, generated from the FieldSpecs above."""
    rows = _rows(Scenario, "")
    rows += [[f"`{key}`", "text", "", "", doc] for key, doc in FREE_TEXT_KEYS.items()]
    lines = ["| field | value | default | allowed | meaning |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") if "\\|" not in cell else cell for cell in row) + " |"
              for row in rows]
    return "\n".join(lines)
