"""The validated scenario: dataclasses in SI units, one per YAML section, and the one description of
every field.

Each field's ``metadata`` holds a ``FieldSpec``: its YAML key, how its value is written (unit kind),
its default, its bounds and a one-line doc. The loader (``load.py``) reads a section generically from
these specs, and ``fields_markdown()`` writes the README's field table from them, so a field is
declared in one place. YAML field names carry no unit suffix because the unit is written in the value
("450GB/s"); the dataclass field names do (``bandwidth_Bps``, ``latency_s``), so code never guesses.
``FieldSpec`` and ``spec()`` live in ``fields.py`` and the overhead terms in ``overheads.py`` (the
Calibration checks those without knowing the Scenario); both are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpsim.scenario.fields import (
    BANDWIDTH_BOUNDS,
    FACTOR_BOUNDS,
    KIND_TEXT,
    LATENCY_BOUNDS,
    REQUIRED,
    section,
    spec,
)
from ddpsim.scenario.fields import META as META
from ddpsim.scenario.fields import FieldSpec as FieldSpec
from ddpsim.scenario.fields import field_specs as field_specs
from ddpsim.scenario.link_kinds import INTRA_NODE_TYPES
from ddpsim.scenario.overheads import OverheadSpec as OverheadSpec

if TYPE_CHECKING:
    from ddpsim.calibration.file import Calibration

# Each vocabulary is declared once, here (link types in ddpsim/scenario/link_kinds.py).
PRECISIONS = ("fp32", "bf16-amp", "fp16-amp")
# sgd is torch.optim.SGD's default (no momentum, no state); `ddpsim measure`'s @optimizer=sgd trains with
# momentum 0.9, which is sgd_momentum here (a profile names its own)
OPTIMIZERS = ("auto", "sgd", "sgd_momentum", "adam", "adamw", "sgd_momentum_fused", "adam_fused", "adamw_fused",
              "none")
INTER_NODE_TYPES = ("rail-fat-tree", "fat-tree", "ethernet", "none")
ALGORITHMS = ("auto", "ring", "tree", "hierarchical")
PROTOCOLS = ("auto", "simple", "ll", "ll128")
COMM_HOOKS = ("none", "fp16", "bf16")
NVLS_MODES = ("auto", "on", "off")
MODES = ("auto", "detailed", "fast")
STRATEGIES = ("ddp", "zero1", "zero2", "zero3")
SHARD_DTYPES = ("auto", "fp32", "bf16", "fp16")
SHARD_GROUPS = ("world", "node")

MIB = 1024 * 1024
SCALE_JITTER_CV = 0.056  # simulation.scale_jitter_cv's default; its doc says where it was measured
DEFAULT_BUCKET_CAP_MB = 25
DEFAULT_FIRST_BUCKET_BYTES = 1 * MIB

# Upper limits, checked when the scenario is read, before anything is allocated: beyond them a
# simulation would exhaust memory or time rather than answer.
MAX_WORLD_SIZE = 1_048_576
MAX_GPUS_PER_NODE = 1024
MAX_CUSTOM_GPUS = 16_384  # as MAX_PER_RANK_GPUS; routes are searched on demand, per source (topology.build)
MAX_CUSTOM_LINKS = 262_144
MAX_PER_RANK_GPUS = 16_384  # every rank its own process (detailed mode, jitter, a straggler): ~1 GB
MAX_RANK_STEPS = 1_000_000  # simulated ranks x iterations: each keeps a trace in memory

@dataclass(frozen=True)
class WorkloadSpec:
    """What runs on each GPU."""

    model: str = spec("model", "text", 'a zoo name ("resnet50"), "torch:package.module:factory", "hf:GPT2Config" (a '
                      'Hugging Face config or model class, config.json or cached hub name), "profile:measured.json" '
                      'or "trace:step.json.gz" (a torch.profiler trace)', REQUIRED)
    batch_size: int = spec("batch_size", "int", "samples per GPU per micro-step", REQUIRED,
                           minimum=1, maximum=1_048_576)
    precision: str = spec("precision", "choice", "autocast; gradients stay fp32 as in PyTorch AMP", "fp32",
                          choices=PRECISIONS)
    seq_len: int | None = spec("seq_len", "int", "tokens per sample for language models", None,
                               minimum=1, maximum=1_048_576, default_text="the model's")
    optimizer: str = spec(
        "optimizer", "choice", "the optimizer trained with: its states' bytes per parameter (sgd 0, sgd_momentum 4, "
        "adam/adamw 8) and its step's time where estimated; auto = a profile's own, else adamw for language "
        "models and sgd_momentum otherwise. ddpsim measure's @optimizer=sgd is sgd_momentum (momentum 0.9)",
        "auto", choices=OPTIMIZERS)
    memory_format: str = spec(
        "memory_format", "choice", "the convolutions' activation layout: channels_first (NCHW, PyTorch's default: "
        "cuDNN transposes around each 16-bit tensor-core convolution) or channels_last (NHWC, "
        "model.to(memory_format=torch.channels_last): no transposes)", "channels_first",
        choices=("channels_first", "channels_last"))
    activation_checkpointing: str = spec(
        "activation_checkpointing", "text", "none, full (every block recomputes its forward in backward, keeping "
        "only its input) or every_K (every K-th block, torchtitan's selective layer AC); blocks are "
        "parallel.unit's modules", "none")
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
assert tuple(INTRA_DEFAULTS) == INTRA_NODE_TYPES, "one default per link kind of scenario/link_kinds.py"
_BANDWIDTH_BY_TYPE = "by type: " + ", ".join(f"{t} {bw}" for t, (bw, _lat) in INTRA_DEFAULTS.items())
_LATENCY_BY_TYPE = "by type: " + ", ".join(f"{t} {lat}" for t, (_bw, lat) in INTRA_DEFAULTS.items())


@dataclass(frozen=True)
class IntraNodeSpec:
    """Links between GPUs of one node: bandwidth per GPU per direction, latency per hop."""

    type: str = spec("type", "choice", "the links between the GPUs of a node", "nvswitch",
                     code_default=False, choices=INTRA_NODE_TYPES)
    bandwidth_Bps: float = spec("bandwidth", "bandwidth", "per GPU per direction", None, code_default=False,
                                default_text=_BANDWIDTH_BY_TYPE, **BANDWIDTH_BOUNDS)
    latency_s: float = spec("latency", "time", "per hop", None, code_default=False, default_text=_LATENCY_BY_TYPE,
                            **LATENCY_BOUNDS)
    nvls: str = spec("nvls", "choice", "NVLink SHARP (NCCL's NVLS and NVLS tree): auto = on for an nvswitch node of "
                     "GPUs that have it (H100/H200 SXM, B200), as NCCL enables it; on = the same, an error where "
                     "the GPU or link lacks it; off = NCCL_NVLS_ENABLE=0", "auto", choices=NVLS_MODES)


@dataclass(frozen=True)
class InterNodeSpec:
    """The network between nodes. rail-fat-tree: one NIC per GPU, NIC i of every node on rail i."""

    type: str = spec("type", "choice", "rail-fat-tree: NIC i of every node on rail i", "rail-fat-tree",
                     code_default=False, choices=INTER_NODE_TYPES)
    nic_bandwidth_Bps: float = spec("nic_bandwidth", "bandwidth", "per NIC per direction", "400Gbps",
                                    code_default=False, **BANDWIDTH_BOUNDS)
    latency_s: float = spec("latency", "time", "per network hop", "5us", code_default=False, **LATENCY_BOUNDS)
    oversubscription: float = spec("oversubscription", "number", "ratio of the fabric (1 = non-blocking): a leaf's "
                                   "uplinks to the spine carry 1/oversubscription of what its ports inject", 1.0,
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
    nodes_per_leaf: int | None = spec(
        "nodes_per_leaf", "int", "nodes under one leaf switch (rail-fat-tree: per rail); leaves join through a "
        "spine whose uplinks carry 1/oversubscription of what a leaf's ports inject", None, minimum=1,
        maximum=MAX_WORLD_SIZE, default_text="rail-fat-tree: every node (one leaf per rail, no spine between "
        "nodes); fat-tree, ethernet: 1 (every flow through the spine)")
    leaves_per_spine: int | None = spec(
        "leaves_per_spine", "int", "leaves joined by one spine group (rail-fat-tree: a rail's leaves); spine groups "
        "join through a third tier (core) whose uplinks carry 1/spine_oversubscription of what a group's leaves "
        "send up", None, minimum=1, maximum=MAX_WORLD_SIZE, default_text="every leaf (one spine, no third tier)")
    spine_oversubscription: float = spec(
        "spine_oversubscription", "number", "ratio of the second tier (1 = non-blocking): a spine group's uplinks "
        "to the core carry 1/spine_oversubscription of what its leaves send up (with leaves_per_spine)", 1.0,
        minimum=1.0, maximum=1000.0, low_rule="is a ratio >= 1 (1 = non-blocking)")


@dataclass(frozen=True)
class TopologyLink:
    a: str = spec("a", "text", "a vertex name", REQUIRED)
    b: str = spec("b", "text", "another vertex name", REQUIRED)
    bandwidth_Bps: float = spec("bandwidth", "bandwidth", "per direction", REQUIRED, **BANDWIDTH_BOUNDS)
    latency_s: float = spec("latency", "time", "of the link", "1us", **LATENCY_BOUNDS)


@dataclass(frozen=True)
class CustomTopologySpec:
    """A user graph: ``gpus`` in rank order (each a vertex name), full-duplex links between vertices."""

    gpus: tuple[str, ...] = spec("gpus", "list", "vertex names of the GPUs, in rank order", REQUIRED)
    links: tuple[TopologyLink, ...] = spec("links", "list", "full-duplex links: {a, b, bandwidth, latency}",
                                           REQUIRED)
    gpus_per_node: int = spec("gpus_per_node", "int", "GPUs per node", REQUIRED, minimum=1,
                              maximum=MAX_GPUS_PER_NODE, default_text="all of them")


@dataclass(frozen=True)
class NodeGroupSpec:
    """Nodes alike: how many, their GPUs and their links (``cluster.node_groups``, for uneven clusters).
    The loader fills what a group leaves out from the cluster's fields (None: the cluster's).

    Ranks are numbered node-major in the order the groups are written, as a launcher numbers them
    when its host list follows that order."""

    count: int = spec("count", "int", "nodes in this group", REQUIRED, minimum=1, maximum=MAX_WORLD_SIZE)
    gpus_per_node: int = spec("gpus_per_node", "int", "GPUs of each node of the group", REQUIRED, minimum=1,
                              maximum=MAX_GPUS_PER_NODE)
    gpu: str | None = spec("gpu", "text", "a GPU of the catalog", None, default_text="cluster.gpu")
    nic_bandwidth_Bps: float | None = spec("nic_bandwidth", "bandwidth", "per NIC per direction", None,
                                           default_text="cluster.inter_node.nic_bandwidth", **BANDWIDTH_BOUNDS)
    intra_bandwidth_Bps: float | None = spec("intra_bandwidth", "bandwidth", "between the GPUs of each node of the group, "
                                      "per GPU per direction (the links are cluster.intra_node.type)", None,
                                      default_text="cluster.intra_node.bandwidth", **BANDWIDTH_BOUNDS)


@dataclass(frozen=True)
class ClusterSpec:
    gpu: str = spec("gpu", "text", "a GPU of the catalog (V100, V100-16GB, A100, A100-40GB, H100-SXM, H100-PCIe, "
                    "H100-NVL, H200, B200, GB200, MI300X) or your own as a mapping {name, peak_tflops: {fp32, bf16, "
                    "tf32, fp16}, memory_bandwidth, memory, nvlink_bandwidth}; with node_groups, the kind of groups "
                    "that name none (omit it if all do)", REQUIRED)
    nodes: int = spec("nodes", "int", "nodes", 1, code_default=False, minimum=1, maximum=MAX_WORLD_SIZE)
    gpus_per_node: int = spec("gpus_per_node", "int", "GPUs per node", 8, code_default=False, minimum=1,
                              maximum=MAX_GPUS_PER_NODE)
    intra_node: IntraNodeSpec = section("intra_node", "the links inside a node", optional=True)
    inter_node: InterNodeSpec = section("inter_node", "the network between nodes", optional=True)
    topology: CustomTopologySpec | None = section(
        "topology", "a custom graph instead of nodes, gpus_per_node, intra_node and inter_node", lambda: None)
    # the loader fills every group's gpu and nic_bandwidth; None: nodes x gpus_per_node alike
    node_groups: tuple[NodeGroupSpec, ...] | None = spec(
        "node_groups", "list", "nodes of different GPU counts, GPU kinds or NICs, instead of nodes and "
        "gpus_per_node: [{count, gpus_per_node, gpu, nic_bandwidth, intra_bandwidth}], ranks node-major in this "
        "order", None,
        default_text="not set")

    @property
    def node_sizes(self) -> tuple[int, ...]:
        """GPUs of each node, in rank order."""
        if self.node_groups is None:
            return (self.gpus_per_node,) * self.nodes
        return tuple(group.gpus_per_node for group in self.node_groups for _ in range(group.count))

    @property
    def uniform(self) -> bool:
        """Every node has as many GPUs (of whatever kind): the schedules' node-major arithmetic holds."""
        return len(set(self.node_sizes)) == 1

    @property
    def rank_gpus(self) -> tuple[str, ...]:
        """The GPU kind of each rank, in rank order."""
        if self.node_groups is None:
            return (self.gpu,) * self.world_size
        return tuple(group.gpu or self.gpu for group in self.node_groups
                     for _ in range(group.count * group.gpus_per_node))

    @property
    def world_size(self) -> int:
        if self.node_groups is not None:
            return sum(group.count * group.gpus_per_node for group in self.node_groups)
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
    forward_host_per_tensor_s: float = spec(
        "forward_host_per_tensor", "time", "FSDP2's host work per parameter tensor of a unit before its forward, "
        "which holds up compute (its pre-forward hooks, unsharding, copy-out): 170us, the median of (FSDP2 - DDP "
        "forward) / tensors over launches fsdp_nvlink and fsdp_socket of validation/data/h200x2-fsdp-2026-11-27 "
        "(2 x H200)", "170us", **LATENCY_BOUNDS)
    regather_host_per_tensor_s: float = spec(
        "regather_host_per_tensor", "time", "zero3: the same before a unit's backward, where it gathers again: "
        "120us, the median of (ZeRO-3 - ZeRO-2 backward) / tensors over the same launches", "120us",
        **LATENCY_BOUNDS)


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
    scale_jitter_cv: float = spec(
        "scale_jitter_cv", "number", "the per-rank jitter_cv `ddpsim scale` simulates where neither jitter_cv nor "
        "jitter_from_profile is set, its curve without jitter beside it (0: none): 0.056, the median step-time "
        "coefficient of variation of the 176 measured profiles under validation/data/*/profiles (47 campaign folders, "
        "H100 and H200; each profile's step p10..p90 read as a lognormal, as jitter_from_profile reads it; "
        "quartiles 0.024 and 0.095, GPT-2 124M's own median 0.056)", SCALE_JITTER_CV, minimum=0.0, maximum=10.0)
    straggler_rank: int | None = spec("straggler_rank", "int", "one rank whose compute is slower", None, minimum=0,
                                      maximum=MAX_WORLD_SIZE - 1, default_text="none")
    straggler_slowdown: float = spec("straggler_slowdown", "number", "the straggler's compute takes this many times "
                                     "longer", 1.0, **FACTOR_BOUNDS)
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


# lists whose items are mappings of their own fields (the README's table gives one row per item field)
_LIST_ITEMS: dict[str, type] = {"links": TopologyLink, "node_groups": NodeGroupSpec}


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
        if fs.kind == "list" and fs.key in _LIST_ITEMS:
            rows.append([f"`{dotted}`", kind, _default_text(fs), "", fs.doc])
            rows += [[f"`{dotted}[i].{f.key}`", KIND_TEXT[f.kind], _default_text(f), _range_text(f), f.doc]
                     for _n, f in field_specs(_LIST_ITEMS[fs.key])]
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
