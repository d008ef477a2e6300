"""The Result of a simulated step: breakdown, per-bucket and per-link records, JSON (its traces: ddpsim.report.trace)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ddpsim.schemas import document


@dataclass(frozen=True)
class BucketRecord:
    """One bucket of the simulated steady-state step; times in seconds from the step's start."""

    index: int
    bytes: int  # bytes the all-reduce moves (after a compression hook)
    grad_bytes: int
    n_params: int
    ready_s: float
    launch_s: float
    start_s: float
    end_s: float
    # the bucket's parameters in the order their gradients fill it, as the workload names them (the torch
    # module path, the profile's names, the zoo's torchvision / Hugging Face names); None where it has none
    param_names: list[str | None] = field(default_factory=list)


@dataclass(frozen=True)
class LinkRecord:
    link: str
    busy_s: float
    utilization: float


@dataclass(frozen=True)
class CollectiveRecord:
    """One all-gather, reduce-scatter or all-reduce of a sharded step; times from the step's start."""

    kind: str
    unit: str
    bytes: float
    protocol: str
    start_s: float
    end_s: float


# Result fields a sharded strategy fills; a ddp result leaves them out of its JSON, which stays as it was.
SHARDED_FIELDS = ("strategy", "collectives", "memory_by_strategy", "recommended_strategy")


@dataclass(frozen=True)
class Result:
    """Everything ``ddpsim run`` reports; ``to_dict`` is the ``--json`` contract. Built once, by
    ``simulation.simulate``, from the engine's traces; never changed after.

    ``step_time_s`` is the median over the simulated iterations (``step_times_s``), each measured
    from the end of the previous step on the slowest rank. The breakdown (forward, backward,
    communication, buckets) is rank 0's last step, and with gradient accumulation its last
    micro-step; ``compute_only_s`` is the whole step's compute: every micro-step plus the optimizer.
    """

    scenario: str
    model: str
    gpu: str
    world_size: int
    nodes: int
    gpus_per_node: int
    algorithm: str
    protocol: str
    mode: str
    bucket_cap_mb: float | None
    step_time_s: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    comm_time_s: float
    exposed_comm_s: float
    compute_only_s: float
    copy_s: float
    buckets: list[BucketRecord]
    links: list[LinkRecord] = field(default_factory=list)
    step_times_s: list[float] = field(default_factory=list)
    critical_rank: int = 0
    samples_per_s: float = 0.0
    tokens_per_s: float | None = None
    memory_bytes: dict[str, float] = field(default_factory=dict)
    gpu_memory_bytes: float = 0.0
    fits_in_memory: bool = True
    warnings: list[str] = field(default_factory=list)
    events: int = 0
    wall_s: float = 0.0
    mode_reason: str = ""  # why this mode ran (auto's threshold or the scenario) and which ranks were simulated
    simulated_ranks: int = 0  # ranks run on the engine after folding identical and dropping dominated ones
    # where each input came from: the scenario file, or which calibration entry (never a silent default)
    value_sources: dict[str, str] = field(default_factory=dict)
    # p10 / p90 of the step one would measure, from the calibration's measured noise (None: no noise fit)
    step_time_p10_s: float | None = None
    step_time_p90_s: float | None = None
    # per simulated rank (and, up to 64 GPUs, every rank it stands for): ddpsim.ddp.fold
    rank_timelines: dict[int, list[tuple[float, float, str]]] = field(default_factory=dict, repr=False)
    # The rest of rank 0's last step, so that forward + backward + comm_wait + copy_out + step_optimizer
    # (+ accumulation) is its step: the wait after backward compute for the last all-reduces, the copy
    # of the averaged gradients out of the buckets, the optimizer as that rank ran it (jitter included)
    # and the no_sync micro-steps before the last one.
    comm_wait_s: float = 0.0
    copy_out_s: float = 0.0
    step_optimizer_s: float = 0.0
    accumulation_s: float = 0.0
    # data parallelism (parallel.strategy) and, for the sharded ones, every collective of rank 0's step
    strategy: str = "ddp"
    collectives: list[CollectiveRecord] = field(default_factory=list)
    memory_by_strategy: dict[str, float] = field(default_factory=dict)  # total bytes per GPU per strategy
    recommended_strategy: str | None = None  # the cheapest strategy that fits (None: none fits)
    # every scenario field as simulated: after defaults and after the calibration replaced what it fits
    # (value_sources says which); ddpsim.schemas.resolved_scenario
    resolved_scenario: dict[str, Any] = field(default_factory=dict)

    @property
    def overlap_fraction(self) -> float:
        """Share of communication hidden behind compute."""
        if self.comm_time_s <= 0:
            return 1.0
        return max(0.0, 1.0 - self.exposed_comm_s / self.comm_time_s)

    def percentile_s(self, q: float) -> float:
        times = sorted(self.step_times_s) or [self.step_time_s]
        position = (len(times) - 1) * q / 100.0
        low = int(position)
        high = min(low + 1, len(times) - 1)
        return times[low] + (times[high] - times[low]) * (position - low)

    def to_dict(self) -> dict[str, Any]:
        """The ``run-result`` document (ddpsim/schemas/run-result.schema.json)."""
        data = asdict(self)
        data.pop("rank_timelines")
        if self.strategy == "ddp":
            for key in SHARDED_FIELDS:
                data.pop(key)
        data["overlap_fraction"] = self.overlap_fraction
        data["step_time_p50_s"] = self.percentile_s(50)
        data["step_time_p95_s"] = self.percentile_s(95)
        data["step_time_p99_s"] = self.percentile_s(99)
        return document("run-result", data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)
