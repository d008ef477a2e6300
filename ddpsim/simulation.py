"""Wire a Scenario into the event engine and return a Result. Seeds are passed in; no globals.

``prepare()`` is the resolve step: it builds the workload (reading a measured profile or importing a
torch model, the only input it reads), the GPU, the buckets, the topology and the collective model,
and applies the scenario's Calibration value. ``simulate()`` of a Prepared does no file I/O.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections import OrderedDict
from collections.abc import Generator
from dataclasses import dataclass, replace
from typing import Any, TextIO

import numpy as np
import simpy

from ddpsim.calibration.apply import apply_calibration
from ddpsim.collectives import CollectiveModel
from ddpsim.collectives.folded import FoldedCollectiveModel, FoldedTopology, fold_problem
from ddpsim.collectives.nvls import NvlsSpec, nvls_of
from ddpsim.collectives.protocols import ProtocolTable
from ddpsim.ddp.arrival import expected_arrival_wait_s, mean_backward_kernel_s
from ddpsim.ddp.buckets import Bucket, bucket_layout
from ddpsim.ddp.fold import draw_factors, mode_reason, plan_ranks
from ddpsim.ddp.hooks import COMPRESS_HOOK_EXTRA_S, compress_hook_extra_s
from ddpsim.ddp.options import OptionCosts, option_costs
from ddpsim.ddp.step import RankTrace, Rendezvous, StepCosts, accumulation_micro_step, rank_step
from ddpsim.errors import ScenarioError
from ddpsim.hardware.carry import carry_profile
from ddpsim.hardware.catalog import GPUSpec, get_gpu
from ddpsim.hardware.compute import StepCompute, step_compute
from ddpsim.hardware.kernel_classes import ClassFit, load_class_fit
from ddpsim.intervals import union_length
from ddpsim.results import BucketRecord, LinkRecord, Result
from ddpsim.scenario.link_kinds import link_class_of_type, step_link_class
from ddpsim.scenario.provenance import compute_source
from ddpsim.scenario.schema import ClusterSpec, Scenario
from ddpsim.schemas import resolved_scenario
from ddpsim.sharded_simulation import (
    memory_check,
    memory_source,
    recomputed_layers_of,
    simulate_sharded,
    zero1_optimizer_s,
)
from ddpsim.topology import Topology, build_topology
from ddpsim.workload.model import Workload
from ddpsim.workload.resolve import load_workload

DETAILED_MAX_GPUS = 64  # auto mode simulates every rank and every transfer up to this size
_COPY_EFFICIENCY = 0.7  # share of peak memory bandwidth an elementwise copy kernel reaches


class _CountingEnvironment(simpy.Environment):
    """simpy's environment, counting the events it processes (for benchmarks and the Result)."""

    def __init__(self) -> None:
        super().__init__()
        self.events_processed = 0

    def step(self) -> None:
        self.events_processed += 1
        super().step()


PROGRESS_EVERY_S = 5.0  # a long simulation (the documented 100,000 steps) prints a line at least this often


class _StepProgress:
    """One line on ``stream`` every PROGRESS_EVERY_S while steps are simulated, with the time left at the
    rate so far; nothing for a simulation that ends sooner."""

    def __init__(self, stream: TextIO | None, total: int) -> None:
        self.stream, self.total = stream, total
        self.start = self.last = time.perf_counter()

    def step_done(self, done: int) -> None:
        if self.stream is None:
            return
        now = time.perf_counter()
        if now - self.last < PROGRESS_EVERY_S:
            return
        first = self.last == self.start
        self.last = now
        left_s = (now - self.start) / done * (self.total - done)
        # the first line says what sets the time, so a user who asked for 100,000 steps by mistake knows
        why = " (simulation.iterations sets this; Ctrl-C stops it)" if first else ""
        self.stream.write(f"ddpsim: simulated {done:,} of {self.total:,} steps in {now - self.start:.0f} s, "
                          f"about {left_s:.0f} s left{why}\n")
        self.stream.flush()


@dataclass(frozen=True)
class Prepared:
    """Everything a step simulation needs, built once per scenario (sweeps reuse it)."""

    scenario: Scenario
    workload: Workload
    gpu: GPUSpec
    compute: StepCompute
    buckets: tuple[Bucket, ...]
    topology: Topology
    collectives: CollectiveModel
    # where each calibrated value came from (scenario file or calibration entry), for `ddpsim run`
    sources: dict[str, str]
    # cluster.node_groups of several GPU kinds: the other kinds' GPU and compute (rank 0's are gpu, compute)
    other_kinds: tuple[tuple[GPUSpec, StepCompute], ...] = ()


def prepare(scenario: Scenario, fold: bool = True) -> Prepared:
    """Resolve the workload, the GPU, the compute profile, the buckets and the network.

    ``fold``: on a large uniform rail-optimised cluster in FAST mode, build and price the network on
    the few nodes that differ (``collectives.folded``: the same prices); False: on every rank."""
    try:
        # the workload first: apply_calibration says when the calibration's overheads were fitted on other
        # models (and, with its comm_terms_fitted_models_only, leaves their communication terms out)
        workload = load_workload(scenario.workload, scenario.base_dir)
        if scenario.workload.memory_format == "channels_last":
            workload = replace(workload, channels_last=True)
        calibrated = apply_calibration(scenario, workload.name)
        scenario, protocol_table = calibrated.scenario, calibrated.protocol_table
        kinds = list(dict.fromkeys(get_gpu(name) for name in _gpu_names(scenario.cluster)))
        gpu = kinds[0]  # rank 0's
        recompute = recomputed_layers_of(scenario, workload)
        # a profile of another GPU kind is carried per kind of kernel, and its row says so
        workload, carried = carry_profile(workload, gpu)
        optimizer = scenario.workload.optimizer
        class_fit = _class_fit(scenario)
        compute = step_compute(workload, gpu, scenario.workload.compute_efficiency, optimizer, recompute=recompute,
                               fit=class_fit)
        if len(kinds) > 1 and workload.measured is not None:
            raise ScenarioError(f"has {len(kinds)} GPU kinds but the workload's compute is a profile measured on one; "
                                "use a zoo or torch model, whose compute is estimated per kind",
                                field="cluster.node_groups")
        other_kinds = tuple((kind, step_compute(workload, kind, scenario.workload.compute_efficiency, optimizer,
                                                recompute=recompute, fit=class_fit))
                            for kind in kinds[1:])
        buckets = tuple(bucket_layout(workload.params, compute.ready_order, scenario.ddp, model=workload.name))
        nvls = nvls_of(scenario.cluster)
        folds = fold and _resolve_mode(scenario) == "fast" and scenario.simulation.degraded_link_factor >= 1.0 \
            and fold_problem(scenario.cluster) is None
        if folds:
            collectives: CollectiveModel = _folded_model(scenario.cluster, protocol_table, nvls)
            topology = collectives.topology
        else:
            topology = build_topology(scenario.cluster)
    except ScenarioError as exc:
        if exc.file is None:
            raise ScenarioError(exc.detail, file=scenario.source, field=exc.field) from None
        raise
    if not folds:
        if scenario.simulation.degraded_link_factor < 1.0 and scenario.cluster.world_size > 1:
            topology = _degrade_first_hop(topology, scenario.cluster.gpus_per_node,
                                          scenario.simulation.degraded_link_factor)
        collectives = CollectiveModel(topology, protocol_table, nvls=nvls)
    measured_in = workload.measured.source if workload.measured is not None else None
    measured_how = workload.measured.how if workload.measured is not None else ""
    sources = {"compute": compute_source(scenario, measured_in, workload.name, gpu.name, gpu.default_compute_efficiency,
                                         measured_how, class_fit.describe(gpu, workload.precision) if class_fit is not None else ""),
               **calibrated.sources, "memory": memory_source(scenario, workload)}
    if carried is not None:
        sources["compute"] = carried
    if nvls is not None and scenario.cluster.world_size > 1:
        # on by default as NCCL has it, which a planner of a cluster that turns it off must see
        sources["nvls"] = (f"NVLink SHARP weighed by auto (cluster.intra_node.nvls {scenario.cluster.intra_node.nvls}: "
                           f"{gpu.name} on NVSwitch has it and NCCL turns it on by default; NCCL's nvlsEfficiency "
                           f"{nvls.efficiency:g}); write nvls: off for a cluster run with NCCL_NVLS_ENABLE=0")
    if folds:
        sources["network_fold"] = (f"{topology.description}: all-reduces priced on {topology.n_links:,} representative "
                                   "links (ddpsim.collectives.folded), equal to pricing every rank's flows")
    if scenario.cluster.world_size > 1:
        sources["ddp_per_rank_work"] = _per_rank_source(scenario, workload, gpu, measured_in)
        if scenario.ddp.comm_hook != "none":
            # the profile's world-size-1 DDP with the hook is recorded but not used: 20 steps at one cap
            # leave a few ms of noise against a hook cost of about 2 ms per step (on the fifth 4 x H100
            # allocation, h100x4-options-2026-11-26e, using it gave 7.4% mean error against 7.0% without)
            sources["compress_hook"] = (
                f"overheads.hook_cpu ({scenario.overheads.hook_cpu_s * 1e6:.0f} us) plus ddpsim.ddp.hooks' "
                f"{COMPRESS_HOOK_EXTRA_S * 1e6:.0f} us per bucket, measured on one 2 x H100 host, not on this machine; "
                + _lead_source(workload, measured_in))
    if other_kinds:
        sources["gpu_kinds"] = ("each rank's compute estimated on its own GPU (" + ", ".join(
            f"{k.name} {c.forward_s * 1e3 + c.backward_s * 1e3:.2f} ms forward + backward"
            for k, c in ((gpu, compute), *other_kinds)) + "); every all-reduce waits for the slowest rank")
    if scenario.ddp.grad_accumulation_steps > 1:
        sources["accumulation_micro_steps"] = _accumulate_source(workload, measured_in)
    if scenario.simulation.jitter_from_profile:
        if workload.step_jitter_cv is None:
            raise ScenarioError(f"the workload has no measured step spread ({_unmeasured_why(measured_in, 'step p10/p90')})",
                                file=scenario.source, field="simulation.jitter_from_profile")
        # every rank draws its own step factor: each bucket's all-reduce then waits for the slower rank
        # of that step (on 2 x H100 the ranks' compute differed by up to 1.5x, h100x2-ranks-2026-11-26j)
        sources["compute_jitter"] = (f"cv {workload.step_jitter_cv:.3f} per rank and step, from the step's p10..p90 "
                                     f"over the profile's steps (profile {measured_in}; measured); the median of "
                                     f"{scenario.simulation.iterations} simulated steps")
    return Prepared(scenario, workload, gpu, compute, buckets, topology, collectives, sources, other_kinds)


_FOLDED_KEPT = 4  # folded network models kept per process: a sweep's points on one cluster price it once
_folded_models: OrderedDict[str, FoldedCollectiveModel] = OrderedDict()


def _folded_model(cluster: ClusterSpec, protocol_table: ProtocolTable | None,
                  nvls: NvlsSpec | None) -> FoldedCollectiveModel:
    """The folded model of this cluster under this protocol table, built once per process for the last
    few (a model holds no state but its caches of prices, which depend only on these three)."""
    key = repr((cluster, protocol_table, nvls))
    model = _folded_models.get(key)
    if model is None:
        model = _folded_models[key] = FoldedCollectiveModel(cluster, protocol_table, nvls=nvls)
        while len(_folded_models) > _FOLDED_KEPT:
            _folded_models.popitem(last=False)
    _folded_models.move_to_end(key)
    return model


def _gpu_names(cluster: ClusterSpec) -> list[str]:
    """The cluster's GPU names in rank order, each once (without listing every rank's)."""
    if cluster.node_groups is None:
        return [cluster.gpu]
    return list(dict.fromkeys(group.gpu or cluster.gpu for group in cluster.node_groups))


def _class_fit(scenario: Scenario) -> ClassFit | None:
    """The per-kernel-class fit prices an estimated model unless the scenario sets one compute_efficiency."""
    return None if scenario.workload.compute_efficiency is not None else load_class_fit()


def _unmeasured_why(measured_in: str | None, profile_lacks: str) -> str:
    """Why a measured-only input is missing: the profile lacks it, or there is no profile at all."""
    return f"the profile has no {profile_lacks}" if measured_in is not None else "compute is estimated, not profiled"


def _lead_source(workload: Workload, measured_in: str | None) -> str:
    if workload.ddp_world1_lead_s is None:
        why = _unmeasured_why(measured_in, "world-size-1 DDP lead")
        return (f"the backward thread's lead over the GPU was not measured ({why}): charged in full, as if the "
                "backward were host-bound")
    return (f"the first {workload.ddp_world1_lead_s * 1e3:.2f} ms of it per step hidden: the backward thread's lead "
            f"over the GPU under DDP at world size 1 (profile {measured_in}; measured)")


def _accumulate_source(workload: Workload, measured_in: str | None) -> str:
    if workload.backward_accumulate_s is None or workload.measured is None:
        why = _unmeasured_why(measured_in, "backward into existing gradients")
        return f"not measured ({why}): each micro-step priced as the plain forward and backward"
    factor = accumulate_backward_factor(workload)
    clamped = (" (measured faster than the plain backward: noise, taken as 1x)"
               if workload.backward_accumulate_s < workload.measured.backward_s else "")
    return (f"profile {measured_in}: backward into existing gradients {workload.backward_accumulate_s * 1e3:.2f} ms "
            f"against {workload.measured.backward_s * 1e3:.2f} ms after zero_grad (measured); every micro-step "
            f"after the first takes {factor:.3f}x the backward{clamped}")


def _degrade_first_hop(topology: Topology, gpus_per_node: int, factor: float) -> Topology:
    """A new topology whose rank-0 first hop (towards another node, else another GPU) has less bandwidth."""
    peer = gpus_per_node if topology.world_size > gpus_per_node else 1
    link = topology.route(0, peer).link_ids[0]
    degraded = copy.copy(topology)
    degraded.capacity_Bps = topology.capacity_Bps.copy()
    degraded.capacity_Bps[link] *= factor
    return degraded


def _copy_bandwidth_Bps(scenario: Scenario, gpu: GPUSpec) -> float:
    if scenario.overheads.copy_bandwidth_Bps is not None:
        return scenario.overheads.copy_bandwidth_Bps
    return gpu.memory_bandwidth_Bps * _COPY_EFFICIENCY


def _option_costs(prep: Prepared) -> OptionCosts:
    """find_unused_parameters / static_graph: their mechanisms and measurements are in ddpsim.ddp.options.
    Like every other DDP cost here, nothing at world size 1 (simulated as training without DDP)."""
    workload = prep.workload
    if prep.scenario.cluster.world_size == 1:
        return OptionCosts()
    return option_costs(prep.scenario.ddp, len(workload.params), workload.autograd_nodes,
                        workload.autograd_nodes_source, workload.output_bytes,
                        _copy_bandwidth_Bps(prep.scenario, prep.gpu), prep.gpu.kernel_launch_s)


def _copies_s(scenario: Scenario, workload: Workload, gpu: GPUSpec) -> tuple[tuple[float, ...], float]:
    """The bucket copies of one step on a communicating rank: copy-in per gradient, copy-out in total
    (mul_out into the bucket view when each gradient's hook fires, then back: read + write each time)."""
    if scenario.cluster.world_size == 1 or scenario.ddp.gradient_as_bucket_view:
        return tuple(0.0 for _ in workload.params), 0.0
    copy_Bps = _copy_bandwidth_Bps(scenario, gpu)
    copy_in = tuple(2 * p.bytes / copy_Bps + gpu.kernel_launch_s for p in workload.params)
    return copy_in, sum(copy_in)


@dataclass(frozen=True)
class _ReducerCharge:
    """DDP's own per-rank work where the profile measured it: DDP at world size 1 on the profiled
    machine (``Workload.ddp_world1_extra_s``: the reducer's autograd hooks, bucket copies and
    launches, with nothing on a link) over the plain step; what is charged on the gradients' hooks
    is that less the copies priced here already. On a launch-bound model this host work delays every
    backward kernel behind it: the same 4 x H100 model ran its DDP step 1.3-1.9x slower on a slower
    host (validation/data/h100x4-options-2026-11-26b), and world-size-1 DDP measured 10 ms of it for
    mlp-ln-64 (h100x4-options-2026-11-26c)."""

    measured_s: float
    charged_s: float
    which: str  # the variant and cap measured (a profile without a gbv row gives the plain one, and says so)


def _reducer_charge(scenario: Scenario, workload: Workload, gpu: GPUSpec) -> _ReducerCharge | None:
    """None without the measurement (nothing assumed) or at world size 1 (no DDP simulated)."""
    extra, gbv = workload.ddp_world1_extra_s, scenario.ddp.gradient_as_bucket_view
    cap = f"cap {workload.ddp_world1_cap_mb:g} MB" if workload.ddp_world1_cap_mb is not None else "its cap"
    if scenario.cluster.world_size == 1:
        return None
    if gbv and "gbv" in extra:
        measured_s, which = extra["gbv"], f"gradient_as_bucket_view, {cap}"
    elif "none" in extra:
        measured_s, which = extra["none"], f"plain DDP, {cap}" + (
            " (the profile has no gradient_as_bucket_view row)" if gbv else "")
    else:
        return None
    copy_in, copy_out = _copies_s(scenario, workload, gpu)
    return _ReducerCharge(measured_s, max(0.0, measured_s - sum(copy_in) - copy_out), which)


def _per_rank_source(scenario: Scenario, workload: Workload, gpu: GPUSpec, measured_in: str | None) -> str:
    charge = _reducer_charge(scenario, workload, gpu)
    if charge is None:
        where = _unmeasured_why(measured_in, "world-size-1 DDP timing")
        return f"not measured ({where}): only the bucket copies are priced"
    return (f"profile {measured_in}: DDP at world size 1 added {charge.measured_s * 1e3:.2f} ms to the plain step "
            f"({charge.which}; measured); {charge.charged_s * 1e3:.2f} ms of it charged on the gradients' hooks, "
            "the rest is the bucket copies priced here")


def _base_costs(prep: Prepared, allreduce_time_s: Any) -> StepCosts:
    scenario, workload, gpu = prep.scenario, prep.workload, prep.gpu
    world = scenario.cluster.world_size
    ddp, overheads = scenario.ddp, scenario.overheads
    copy_Bps = _copy_bandwidth_Bps(scenario, gpu)
    communicating = world > 1
    copy_in, copy_out = _copies_s(scenario, workload, gpu)
    hooked = communicating and ddp.comm_hook != "none"
    cast_in = tuple(
        (b.grad_bytes + b.wire_bytes) / copy_Bps + 2 * gpu.kernel_launch_s if hooked else 0.0 for b in prep.buckets
    )
    cast_out = tuple(
        (b.grad_bytes + b.wire_bytes) / copy_Bps + gpu.kernel_launch_s if hooked else 0.0 for b in prep.buckets
    )
    options = _option_costs(prep)
    charge = _reducer_charge(scenario, workload, gpu)
    param_hook_s = options.per_param_s + (charge.charged_s / max(1, len(workload.params)) if charge else 0.0)
    pre_forward = 0.0
    if communicating and ddp.broadcast_buffers and workload.buffer_bytes > 0:
        pre_forward += allreduce_time_s(workload.buffer_bytes) + overheads.buffer_sync_s
    return StepCosts(
        forward_s=prep.compute.forward_s,
        backward_segments=prep.compute.backward_segments,
        optimizer_s=prep.compute.optimizer_s,
        copy_in_s_per_param=copy_in,
        copy_out_s=copy_out,
        bucket_launch_s=overheads.bucket_launch_s if communicating else 0.0,
        hook_cast_in_s=cast_in,
        hook_cast_out_s=cast_out,
        pre_forward_s=pre_forward,
        post_forward_s=options.post_forward_s,
        param_hook_s=param_hook_s,
        end_of_backward_s=options.end_of_backward_s,
        used_map_allreduce_s=allreduce_time_s(options.used_map_bytes) if communicating and options.used_map_bytes else 0.0,
        # the step process takes the extra fraction (0 = no effect); the scenario states factors >= 1
        compute_slowdown=overheads.compute_slowdown - 1.0 if communicating else 0.0,
        max_inflight_buckets=overheads.max_inflight_buckets,
        idle_start_wait_s=overheads.idle_start_wait_s if communicating else 0.0,
        # a calibration's fitted terms were fitted without the wait and hold what it cost on their machine
        arrival_wait_s=expected_arrival_wait_s(
            mean_backward_kernel_s(prep.compute.backward_s, 2 * sum(layer.kernels for layer in workload.layers),
                                   workload.autograd_nodes, len(workload.params)), world)
        if communicating and scenario.calibration is None else 0.0,
        bucket_cpu_s=overheads.bucket_cpu_s if communicating else 0.0,
        # a registered comm hook is called from Python for every bucket, on the thread running
        # backward: the harness's micro-benchmark measures that path directly (hook_cpu_s); a compress
        # hook's own work on that thread comes on top (ddpsim.ddp.hooks names it and its measurement)
        hook_thread_s=overheads.hook_cpu_s + compress_hook_extra_s(ddp.comm_hook) if hooked else 0.0,
        backward_host_lead_s=workload.ddp_world1_lead_s or 0.0,
    )


def accumulate_backward_factor(workload: Workload) -> float:
    """Backward into existing gradients over backward after ``zero_grad(set_to_none=True)``, as the
    profile measured both (1 when it did not). Never below 1: AccumulateGrad's add only adds work."""
    measured = workload.measured
    if workload.backward_accumulate_s is None or measured is None or measured.backward_s <= 0:
        return 1.0
    return max(1.0, workload.backward_accumulate_s / measured.backward_s)


def _accumulating(costs: StepCosts, factor: float) -> StepCosts:
    """The costs of a micro-step whose backward adds into the gradients of the micro-steps before it."""
    if factor == 1.0:
        return costs
    return replace(costs, backward_segments=tuple((d * factor, ready) for d, ready in costs.backward_segments))


def _scaled(costs: StepCosts, factor: float) -> StepCosts:
    if factor == 1.0:
        return costs
    return replace(
        costs,
        forward_s=costs.forward_s * factor,
        backward_segments=tuple((d * factor, ready) for d, ready in costs.backward_segments),
        optimizer_s=costs.optimizer_s * factor,
    )


def _resolve_mode(scenario: Scenario) -> str:
    mode = scenario.simulation.mode
    if mode == "auto":
        return "detailed" if scenario.cluster.world_size <= DETAILED_MAX_GPUS else "fast"
    return mode


def simulate(scenario: Scenario | Prepared, progress: TextIO | None = None) -> Result:
    """Simulate ``simulation.iterations`` steady-state steps and return the Result; ``progress`` (the CLI's
    stderr) gets a line every few seconds of a long simulation."""
    wall_start = time.perf_counter()
    prep = scenario if isinstance(scenario, Prepared) else prepare(scenario)
    sc = prep.scenario
    if sc.parallel.strategy in ("zero2", "zero3"):
        # DDP's per-rank work (its reducer, hooks and bucket copies) is not in a sharded step
        sources = {k: v for k, v in prep.sources.items() if not k.startswith("DDP's") and k != "ddp_per_rank_work"}
        return simulate_sharded(sc, prep.workload, prep.gpu, prep.compute, prep.collectives, sources,
                                _copy_bandwidth_Bps(sc, prep.gpu))
    world = sc.cluster.world_size
    mode = _resolve_mode(sc)
    model = prep.collectives
    spec_alg, spec_proto = sc.collective.algorithm, sc.collective.protocol
    largest = max((b.wire_bytes for b in prep.buckets), default=0)
    algorithm, protocol = model.choose(largest, spec_alg, spec_proto) if world > 1 else ("none", "none")

    def allreduce_time_s(n_bytes: float) -> float:
        alg, proto = model.choose(n_bytes, spec_alg, spec_proto)
        return model.allreduce_time_s(n_bytes, alg, proto)

    env = _CountingEnvironment()
    network = None
    if mode == "detailed" and world > 1:
        from ddpsim.network import FlowNetwork

        network = FlowNetwork(env, prep.topology.capacity_Bps)

    def runner(env_: simpy.Environment, bucket: Bucket) -> Generator[Any, Any, None]:
        alg, proto = model.choose(bucket.wire_bytes, spec_alg, spec_proto)
        if network is not None:
            # DDP's one communication stream: nothing else is on the network meanwhile
            yield from model.allreduce_process(env_, network, bucket.wire_bytes, alg, proto, exclusive=True)
        else:
            yield env_.timeout(model.allreduce_time_s(bucket.wire_bytes, alg, proto))

    # per GPU kind (one unless cluster.node_groups mixes kinds): that kind's compute, copies and optimizer
    kind_preps = [prep] + [replace(prep, gpu=kind, compute=compute) for kind, compute in prep.other_kinds]
    bases = []
    for kind_prep in kind_preps:
        kind_base = _base_costs(kind_prep, allreduce_time_s)
        if sc.parallel.strategy == "zero1" and world > 1:
            # ZeroRedundancyOptimizer.step(): the sharded optimizer, then the updated parameters exchanged
            kind_base = replace(kind_base, optimizer_s=sum(zero1_optimizer_s(
                sc, prep.workload, kind_prep.gpu, kind_prep.compute, model)))
        bases.append(kind_base)
    # zero_grad(set_to_none=True) before the first micro-step: every later one, the synced last one
    # included, adds into the gradients already there
    accumulating = sc.ddp.grad_accumulation_steps > 1
    later_bases = [_accumulating(b, accumulate_backward_factor(prep.workload)) if accumulating else b for b in bases]
    sim = sc.simulation
    # identical ranks folded, ranks never the slowest dropped (ddpsim.ddp.fold says what is exact)
    jitter_cv = prep.workload.step_jitter_cv if sim.jitter_from_profile else sim.jitter_cv
    factors = draw_factors(world, sim.iterations, sim.seed, jitter_cv or 0.0, sim.straggler_rank, sim.straggler_slowdown)
    kind_names = [p.gpu.name for p in kind_preps]
    if len(kind_preps) == 1:
        kind_of_rank = [0] * world
    else:
        kind_of_name = {name: kind_names.index(get_gpu(name).name) for name in _gpu_names(sc.cluster)}
        kind_of_rank = [kind_of_name[name] for name in sc.cluster.rank_gpus]
    # ranks of different GPU kinds run different costs: they fold only with their own kind
    plan = plan_ranks(factors, classes=np.array(kind_of_rank)) if len(kind_preps) > 1 else plan_ranks(factors)
    ranks = list(plan.factors)
    rendezvous = (
        Rendezvous(env, len(ranks), runner, sc.overheads.comm_slowdown - 1.0, sc.overheads.allreduce_stretch)
        if world > 1
        else None
    )
    bucket_of_param = {p: b.index for b in prep.buckets for p in b.param_indices}
    traces: dict[int, list[RankTrace]] = {r: [] for r in ranks}
    steps_done = _StepProgress(progress, sim.iterations)

    def rank_process(rank: int) -> Generator[Any, Any, None]:
        for step in range(sim.iterations):
            if rank == ranks[0] and step:
                steps_done.step_done(step)
            factor = plan.factors[rank][step]
            costs = _scaled(bases[kind_of_rank[rank]], factor)
            later = _scaled(later_bases[kind_of_rank[rank]], factor) if accumulating else costs
            trace = RankTrace()
            for micro in range(sc.ddp.grad_accumulation_steps - 1):
                yield from accumulation_micro_step(env, costs if micro == 0 else later, trace)
            yield from rank_step(env, step, later, prep.buckets, bucket_of_param, rendezvous, trace)
            traces[rank].append(trace)

    for rank in ranks:
        env.process(rank_process(rank))
    env.run()
    # folded ranks get their representative's timeline on small clusters only: a trace of
    # thousands of identical ranks says nothing more and costs a file of hundreds of MB
    engine = _EngineRun(
        mode=mode, algorithm=algorithm, protocol=protocol, traces=traces, network=network,
        members=plan.members if world <= DETAILED_MAX_GPUS else None,
        events=env.events_processed,
        mode_reason=mode_reason(sc.simulation.mode, mode, world, DETAILED_MAX_GPUS, plan),
        wall_s=time.perf_counter() - wall_start,
    )
    return _result(prep, engine)


def _priced_busy_s(prep: Prepared, iterations: int) -> Any:
    """Per-link busy seconds in fast mode: the bytes each link carries for every bucket over its capacity."""
    sc, model = prep.scenario, prep.collectives
    carried_by_size: dict[float, Any] = {}
    total = 0.0
    for bucket in prep.buckets:
        if bucket.wire_bytes not in carried_by_size:
            algorithm, protocol = model.choose(bucket.wire_bytes, sc.collective.algorithm, sc.collective.protocol)
            carried_by_size[bucket.wire_bytes] = model.link_bytes(bucket.wire_bytes, algorithm, protocol)
        total = total + carried_by_size[bucket.wire_bytes]
    return iterations * total / prep.topology.capacity_Bps


def _exposed(comm: list[tuple[float, float]], compute: list[tuple[float, float]]) -> float:
    """Time the comm stream is busy while the compute stream is not."""
    return union_length(comm + compute) - union_length(compute)


@dataclass(frozen=True)
class _EngineRun:
    """What one run of the event engine produced, before it is read into a Result."""

    mode: str
    algorithm: str
    protocol: str
    traces: dict[int, list[RankTrace]]  # per simulated rank, one trace per step
    network: Any  # the FlowNetwork in detailed mode (its links' busy time), else None
    members: dict[int, tuple[int, ...]] | None  # the ranks each simulated rank stands for (None: not drawn)
    events: int
    mode_reason: str
    wall_s: float


def _result(prep: Prepared, run: _EngineRun) -> Result:
    sc, workload = prep.scenario, prep.workload
    ends = _step_ends(run.traces, sc.simulation.iterations)
    step_times = [ends[0]] + [ends[i] - ends[i - 1] for i in range(1, len(ends))]
    step_time = statistics.median(step_times)
    last = run.traces[0][-1]  # the breakdown is rank 0's last step
    samples = workload.batch_size * sc.ddp.grad_accumulation_steps * sc.cluster.world_size
    # every rank holds the same model and buckets: the kind with the least memory is the one that may not fit
    tightest = min((prep.gpu, *(kind for kind, _ in prep.other_kinds)), key=lambda kind: kind.memory_bytes)
    memory, memory_totals, recommended, memory_warnings = memory_check(sc, workload, tightest)
    fits = memory["total"] <= tightest.memory_bytes
    p10_s, p90_s, spread_source = _interval(sc, step_time)
    kinds = [prep.gpu.name] + [kind.name for kind, _ in prep.other_kinds]
    return Result(
        scenario=sc.source, model=workload.name, gpu="+".join(kinds), world_size=sc.cluster.world_size,
        nodes=sc.cluster.nodes, gpus_per_node=sc.cluster.gpus_per_node,
        algorithm=run.algorithm, protocol=run.protocol, mode=run.mode, bucket_cap_mb=sc.ddp.bucket_cap_mb,
        step_time_s=step_time, step_times_s=step_times,
        critical_rank=max(run.traces, key=lambda r: run.traces[r][-1].backward_compute_end_s),
        **_breakdown(prep, last),
        compute_only_s=_compute_only_s(prep),
        buckets=_bucket_records(prep, last),
        links=_link_records(prep, run.network, ends[-1]),
        samples_per_s=samples / step_time,
        tokens_per_s=samples * workload.seq_len / step_time if workload.seq_len else None,
        memory_bytes=memory, gpu_memory_bytes=tightest.memory_bytes, fits_in_memory=fits,
        warnings=memory_warnings,
        events=run.events, wall_s=run.wall_s, mode_reason=run.mode_reason, simulated_ranks=len(run.traces),
        value_sources={**prep.sources, **_option_sources(prep), **spread_source},
        step_time_p10_s=p10_s, step_time_p90_s=p90_s,
        rank_timelines=_timelines(prep, run.traces, run.members),
        strategy=sc.parallel.strategy, memory_by_strategy=memory_totals, recommended_strategy=recommended,
        resolved_scenario=resolved_scenario(sc),
    )


def _step_ends(traces: dict[int, list[RankTrace]], iterations: int) -> list[float]:
    """When each step ended on its slowest rank."""
    if any(len(rank_traces) < iterations for rank_traces in traces.values()):
        # a rank that never finished its steps means the processes deadlocked: a modelling bug
        raise RuntimeError("simulation ended before every rank finished its steps")
    return [max(traces[r][i].step_end_s for r in traces) for i in range(iterations)]


def _breakdown(prep: Prepared, last: RankTrace) -> dict[str, Any]:
    """Rank 0's last step in parts. The rest after forward and backward compute, so the summary's parts
    add up to the step: the wait for the last all-reduces, the copy out of the buckets after them, the
    optimizer and (with accumulation) the no_sync micro-steps before."""
    t0 = last.step_start_s
    compute = [(a, b) for a, b, _label in last.compute_intervals if a >= t0]
    comm = [(last.bucket_start_s[b.index], last.bucket_end_s[b.index]) for b in prep.buckets]

    def busy_s(label: str) -> float:
        return sum(b - a for a, b, lbl in last.compute_intervals if lbl == label and a >= t0)

    return {
        "forward_s": last.forward_end_s - t0,
        "backward_s": last.backward_compute_end_s - last.forward_end_s,
        "optimizer_s": prep.compute.optimizer_s,
        "comm_time_s": sum(b - a for a, b in comm),
        "exposed_comm_s": _exposed(comm, compute) if prep.scenario.cluster.world_size > 1 else 0.0,
        "copy_s": sum(b - a for a, b, label in last.compute_intervals if a >= t0 and label.startswith("copy")),
        "comm_wait_s": last.backward_end_s - last.backward_compute_end_s,
        "copy_out_s": busy_s("copy-out"),
        "step_optimizer_s": busy_s("optimizer"),
        "accumulation_s": sum(b - a for a, b, label in last.compute_intervals if label == "no_sync micro-step"),
    }


def _compute_only_s(prep: Prepared) -> float:
    """The whole step's compute: every micro-step (the later ones into existing gradients) and the optimizer."""
    micro_steps = prep.scenario.ddp.grad_accumulation_steps
    compute = prep.compute
    later_backward = (micro_steps - 1) * accumulate_backward_factor(prep.workload)
    return micro_steps * compute.forward_s + compute.backward_s * (1 + later_backward) + compute.optimizer_s


def _bucket_records(prep: Prepared, last: RankTrace) -> list[BucketRecord]:
    t0 = last.step_start_s
    params = prep.workload.params
    return [
        BucketRecord(
            index=b.index, bytes=b.wire_bytes, grad_bytes=b.grad_bytes, n_params=b.n_params,
            ready_s=last.bucket_ready_s[b.index] - t0, launch_s=last.bucket_launch_s[b.index] - t0,
            start_s=last.bucket_start_s[b.index] - t0, end_s=last.bucket_end_s[b.index] - t0,
            param_names=[params[i].name or None for i in b.param_indices],
        )
        for b in prep.buckets
    ]


def _link_records(prep: Prepared, network: Any, end_s: float) -> list[LinkRecord]:
    """The 16 busiest links over all simulated steps."""
    if prep.scenario.cluster.world_size == 1:
        return []
    busy = network.busy_time_s if network is not None else _priced_busy_s(prep, prep.scenario.simulation.iterations)
    total = max(end_s, 1e-30)
    if isinstance(prep.topology, FoldedTopology):
        # representative links, each named as the link of the whole cluster it is
        top = prep.topology.busiest(np.asarray(busy), 16)
        return [LinkRecord(name, busy_s, busy_s / total) for name, busy_s in top if busy_s > 0]
    order = sorted(range(len(busy)), key=lambda i: -busy[i])[:16]
    return [LinkRecord(prep.topology.link_names([i])[0], float(busy[i]), float(busy[i]) / total)
            for i in order if busy[i] > 0]


def _timelines(prep: Prepared, traces: dict[int, list[RankTrace]],
               members: dict[int, tuple[int, ...]] | None) -> dict[int, list[tuple[float, float, str]]]:
    timelines = {}
    for rank, rank_traces in traces.items():
        intervals = [iv for t in rank_traces for iv in t.compute_intervals]
        intervals += [
            (t.bucket_start_s[b.index], t.bucket_end_s[b.index], f"all-reduce bucket {b.index}")
            for t in rank_traces
            for b in prep.buckets
        ]
        for member in (members or {}).get(rank, (rank,)):
            timelines[member] = intervals  # folded ranks share their representative's timeline
    return timelines


def _option_sources(prep: Prepared) -> dict[str, str]:
    """Where find_unused_parameters' inputs came from (the autograd walk; the output clone)."""
    sources = {}
    options = _option_costs(prep)
    if options.nodes_source:
        sources["autograd_nodes"] = (f"{options.autograd_nodes} nodes (find_unused_parameters' walk): "
                                     f"{options.nodes_source}")
    ddp = prep.scenario.ddp
    if ddp.find_unused_parameters and not ddp.static_graph and prep.workload.output_bytes is None:
        sources["ddp_sink_output_clone"] = "not priced: the workload does not say its output bytes"
    return sources


def _interval(sc: Scenario, step_time_s: float) -> tuple[float | None, float | None, dict[str, str]]:
    """The p10 / p90 step one would measure, from the calibration's measured noise, and where it came from."""
    if sc.calibration is None:
        return None, None, {}
    # the calibration measured the spread per class a step belongs to: across nodes, the network's
    noise_class = step_link_class(sc.cluster.nodes, link_class_of_type(sc.cluster.intra_node.type))
    interval = sc.calibration.step_interval(noise_class, step_time_s)
    if interval is None:
        return None, None, {"step_time_spread": f"not measured: calibration {sc.calibration.source} has no "
                                                f"noise.{noise_class}, so no interval is given"}
    p10_s, _, p90_s = interval
    parts = ", ".join(f"{name} {sigma:.3f}" for name, sigma in sc.calibration.interval_parts(noise_class))
    return p10_s, p90_s, {"step_time_spread": f"calibration {sc.calibration.source}: lognormal sigmas {parts}"}


BOUND_MAX_GPUS = 1024  # the what-if below builds two more topologies: cheap up to here


def communication_bound(prep: Prepared) -> str:
    """``ddpsim run``'s "communication:" line, "" where it does not apply (not computed by every simulate(): a sweep or the
    bucket advisor would pay three topologies per point). Which links bound the largest bucket's all-reduce, by pricing it again with twice the NIC bandwidth
    and with twice the NVLink bandwidth: a 400G -> 800G what-if that changes nothing gets its reason (the
    NVLS all-reduce of GPT-2 on 8 x 8 H100 is NVLink-bound). Multi-node alike nodes only."""
    sc, model = prep.scenario, prep.collectives
    cluster = sc.cluster
    if (sc.parallel.strategy not in ("ddp", "zero1") or cluster.nodes < 2 or cluster.topology is not None or cluster.node_groups is not None or not prep.buckets
            or cluster.world_size > BOUND_MAX_GPUS or sc.simulation.degraded_link_factor < 1.0
            or cluster.intra_node.bandwidth_Bps is None):
        return ""
    nbytes = max(b.wire_bytes for b in prep.buckets)
    spec_alg, spec_proto = sc.collective.algorithm, sc.collective.protocol

    def priced(variant: Any) -> tuple[float, str]:
        other = CollectiveModel(build_topology(variant), model.protocol_table, model.channels, nvls_of(variant))
        alg, proto = other.choose(nbytes, spec_alg, spec_proto)
        return other.allreduce_time_s(nbytes, alg, proto), alg

    alg, proto = model.choose(nbytes, spec_alg, spec_proto)
    base_s = model.allreduce_time_s(nbytes, alg, proto)
    if base_s <= 0:
        return ""
    nic_s, nic_alg = priced(replace(cluster, inter_node=replace(
        cluster.inter_node, nic_bandwidth_Bps=2 * cluster.inter_node.nic_bandwidth_Bps)))
    nvlink_s, _ = priced(replace(cluster, intra_node=replace(
        cluster.intra_node, bandwidth_Bps=2 * cluster.intra_node.bandwidth_Bps)))
    both_s, _ = priced(replace(cluster, intra_node=replace(cluster.intra_node, bandwidth_Bps=2 * cluster.intra_node.bandwidth_Bps),
                               inter_node=replace(cluster.inter_node, nic_bandwidth_Bps=2 * cluster.inter_node.nic_bandwidth_Bps)))
    gain = {name: 1 - t / base_s for name, t in (("nic", nic_s), ("nvlink", nvlink_s), ("both", both_s))}
    felt = 0.02  # below 2% shorter, doubling a bandwidth does not count as shortening the all-reduce
    if gain["nic"] > felt and gain["nic"] >= gain["nvlink"]:
        bound = "NIC-bound"
    elif gain["nvlink"] > felt:
        bound = "NVLink-bound; a faster network alone would not shorten it"
    elif gain["both"] > felt:
        bound = ("bound by NVLink and the NICs together (their hops take as long; a faster network alone would "
                 "not shorten it)")
    else:
        bound = (f"bound by neither link's bandwidth but by the {alg} / {proto} price's own ceiling and latencies; "
                 "a faster network would not shorten it")
    text = (f"{bound}: the largest bucket's all-reduce ({nbytes / 1e6:.3g} MB, {alg} / {proto}) takes "
            f"{base_s * 1e6:.0f} us; {nic_s * 1e6:.0f} us with 2x the NIC bandwidth"
            f"{f' ({nic_alg})' if nic_alg != alg else ''}, {nvlink_s * 1e6:.0f} us with 2x the NVLink bandwidth, "
            f"{both_s * 1e6:.0f} us with both")
    return text

