"""The validated scenario: dataclasses in SI units, one per YAML section.

YAML field names carry no unit suffix because the unit is written in the value ("450GB/s");
the dataclass field names here do (``bandwidth_Bps``, ``latency_s``), so code never guesses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddpsim.calibration.file import Calibration

PRECISIONS = ("fp32", "bf16-amp", "fp16-amp")
INTER_NODE_TYPES = ("rail-fat-tree", "fat-tree", "ethernet", "none")
ALGORITHMS = ("auto", "ring", "tree", "hierarchical")
PROTOCOLS = ("auto", "simple", "ll", "ll128")
COMM_HOOKS = ("none", "fp16", "bf16")
MODES = ("auto", "detailed", "fast")

MIB = 1024 * 1024
DEFAULT_BUCKET_CAP_MB = 25
DEFAULT_FIRST_BUCKET_BYTES = 1 * MIB


@dataclass(frozen=True)
class WorkloadSpec:
    """What runs on each GPU.

    model: a zoo name ("resnet50"), "torch:package.module:factory" or "profile:measured.json".
    batch_size: samples per GPU per micro-step.
    precision: fp32 | bf16-amp | fp16-amp (autocast; gradients stay fp32 as in PyTorch AMP).
    seq_len: tokens per sample for language models (None: the model's default).
    compute_efficiency: fraction of the GPU's peak FLOP/s reached (None: the catalog's default).
    """

    model: str
    batch_size: int
    precision: str = "fp32"
    seq_len: int | None = None
    compute_efficiency: float | None = None


@dataclass(frozen=True)
class IntraNodeSpec:
    """Links between GPUs of one node: bandwidth per GPU per direction, latency per hop."""

    type: str
    bandwidth_Bps: float
    latency_s: float


@dataclass(frozen=True)
class InterNodeSpec:
    """The network between nodes. rail-fat-tree: one NIC per GPU, NIC i of every node on rail i."""

    type: str
    nic_bandwidth_Bps: float
    latency_s: float
    oversubscription: float = 1.0
    nics_per_node: int | None = None


@dataclass(frozen=True)
class TopologyLink:
    a: str
    b: str
    bandwidth_Bps: float
    latency_s: float


@dataclass(frozen=True)
class CustomTopologySpec:
    """A user graph: ``gpus`` in rank order (each a vertex name), full-duplex links between vertices."""

    gpus: tuple[str, ...]
    links: tuple[TopologyLink, ...]
    gpus_per_node: int


@dataclass(frozen=True)
class ClusterSpec:
    gpu: str
    nodes: int
    gpus_per_node: int
    intra_node: IntraNodeSpec
    inter_node: InterNodeSpec
    topology: CustomTopologySpec | None = None

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class DDPSpec:
    """DistributedDataParallel's arguments, with PyTorch's semantics.

    bucket_cap_mb: MiB; None means the argument was left at its default (25 MiB, first bucket 1 MiB).
    An explicit value gives the first bucket the same cap, as PyTorch does.
    """

    bucket_cap_mb: float | None = None
    gradient_as_bucket_view: bool = False
    find_unused_parameters: bool = False
    static_graph: bool = False
    comm_hook: str = "none"
    grad_accumulation_steps: int = 1
    broadcast_buffers: bool = True

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
    algorithm: str = "auto"
    protocol: str = "auto"


@dataclass(frozen=True)
class OverheadSpec:
    """DDP costs beyond compute and wire time; defaults are used until a calibration replaces them.

    The defaults of ``bucket_launch_s`` (40 us) and ``compute_slowdown`` (2.0) are what ``ddpsim
    calibrate`` fitted on 4 x H200 over NVLink (validation/data, caps 5 and 50, both world sizes);
    the other terms default to "no effect": the same fit's in-flight limit (1) and buffer sync (2 ms)
    describe that machine and ResNet-50's BatchNorm buffers more than DDP in general.

    bucket_launch_s: CPU + kernel launch cost of one bucket's all-reduce on the comm stream.
    copy_bandwidth_Bps: device-memory bandwidth of the gradient copies into and out of buckets
      (None: 70% of the GPU's memory bandwidth).
    compute_slowdown: factor >= 1; compute runs this many times slower while an all-reduce occupies
      SMs (1 = no effect). Every slowdown in a scenario is such a factor.
    comm_slowdown: factor >= 1; an all-reduce runs this many times slower while compute kernels hold
      the SMs (measured inside real DDP steps: several times slower on NVLink than the same call alone).
    allreduce_stretch: every all-reduce inside DDP takes this many times what the network alone
      delivers, with or without compute beside it.
    max_inflight_buckets: the launch path blocks once this many all-reduces are outstanding
      (None: never blocks).
    bucket_cpu_s: time the thread running backward spends launching each bucket's all-reduce; it
      delays the backward kernels queued after the launch when the GPU is not far ahead of the CPU.
    buffer_sync_s: DDP's per-step broadcast of module buffers (BatchNorm statistics) before forward,
      beyond its wire time: per-tensor copies launched from the CPU (only models with buffers).
    """

    bucket_launch_s: float = 40e-6
    copy_bandwidth_Bps: float | None = None
    compute_slowdown: float = 2.0
    comm_slowdown: float = 1.0
    allreduce_stretch: float = 1.0
    max_inflight_buckets: int | None = None
    bucket_cpu_s: float = 0.0
    buffer_sync_s: float = 0.0


@dataclass(frozen=True)
class SimulationSpec:
    """How to simulate.

    mode: detailed (every rank and every transfer on the event engine), fast (identical ranks
      folded into one, collectives priced phase by phase), auto (detailed up to 64 GPUs).
    iterations: steady-state steps to simulate (more than one only matters with jitter).
    jitter_cv: per-rank, per-step compute time coefficient of variation (lognormal).
    straggler_rank / straggler_slowdown: one rank whose compute takes this many times longer.
    degraded_link_factor: one inter-node link (rank 0's NIC uplink) runs at this fraction of bandwidth.
    """

    mode: str = "auto"
    seed: int = 0
    iterations: int = 1
    jitter_cv: float = 0.0
    straggler_rank: int | None = None
    straggler_slowdown: float = 1.0
    degraded_link_factor: float = 1.0


@dataclass(frozen=True)
class Scenario:
    workload: WorkloadSpec
    cluster: ClusterSpec
    ddp: DDPSpec = field(default_factory=DDPSpec)
    collective: CollectiveSpec = field(default_factory=CollectiveSpec)
    overheads: OverheadSpec = field(default_factory=OverheadSpec)
    simulation: SimulationSpec = field(default_factory=SimulationSpec)
    calibration_path: str | None = None
    calibration: Calibration | None = None
    price_per_gpu_hour: float | None = None
    source: str = "<memory>"
    base_dir: str = "."
