"""A ZeRO-2 / ZeRO-3 (FSDP2) step of a prepared scenario, as a Result; and ZeRO-1's optimizer step.

The simulation's inputs come from ``simulation.prepare()`` (workload, GPU, compute, the world's collective
model); this module prices the units' collectives (``sharded.collectives``), runs ``sharded.step`` and
reads its trace into a ``Result``. Of DDP's overhead terms only ``compute_slowdown`` applies (NCCL kernels
slow compute whatever the collective); the others describe DDP's buckets (launch, stretch, hooks). Every
term was fitted on DDP runs; no FSDP run has been measured against them yet, and ``value_sources`` says so.
"""

from __future__ import annotations

import time
from typing import Any

from ddpsim.collectives import CollectiveModel
from ddpsim.errors import ScenarioError
from ddpsim.hardware.allocator import allocator_reserve
from ddpsim.hardware.catalog import GPUSpec
from ddpsim.hardware.compute import STATE_BYTES_PER_PARAM, StepCompute, resolve_optimizer
from ddpsim.intervals import union_length
from ddpsim.results import CollectiveRecord, Result
from ddpsim.scenario.link_kinds import link_class_of_type, step_link_class
from ddpsim.scenario.overheads import OverheadSpec
from ddpsim.scenario.schema import Scenario
from ddpsim.schemas import resolved_scenario
from ddpsim.sharded.checkpointing import check_has_blocks, checkpoint_every, recomputed_layers
from ddpsim.sharded.collectives import Price, allreduce_price, half_ring_price, measured_price, shard_groups
from ddpsim.sharded.contention import MEASURED_ON, sharded_compute_slowdown
from ddpsim.sharded.costs import layer_seconds, sharded_optimizer_s
from ddpsim.sharded.memory import (
    Precision,
    fit_text,
    memory_by_strategy,
    recommend_strategy,
    resolve_precision,
    shard_degree,
)
from ddpsim.sharded.step import ShardedCosts, ShardedTrace, simulate_step
from ddpsim.sharded.units import ShardUnit, shard_units
from ddpsim.units import ordinal
from ddpsim.workload.model import Workload


def precision_of(scenario: Scenario) -> Precision:
    parallel = scenario.parallel
    return resolve_precision(parallel.param_dtype, parallel.reduce_dtype, scenario.workload.precision)


def strategy_memory(scenario: Scenario, workload: Workload,
                    checkpoint: int | None = None) -> tuple[dict[str, dict[str, float]], list[ShardUnit]]:
    """Every strategy's memory per GPU for this scenario (``checkpoint``: every k-th block checkpointed,
    None: the scenario's own), and the units it assumed."""
    units = shard_units(workload, scenario.parallel.unit)
    every = checkpoint_every(scenario.workload.activation_checkpointing) if checkpoint is None else checkpoint
    check_has_blocks(workload, units, every)
    cluster = scenario.cluster
    by_strategy = memory_by_strategy(workload, cluster.world_size, cluster.gpus_per_node, units,
                                     precision_of(scenario), scenario.parallel.shard_group,
                                     scenario.ddp.gradient_as_bucket_view, scenario.workload.optimizer, every)
    return by_strategy, units


def recomputed_layers_of(scenario: Scenario, workload: Workload) -> frozenset[int]:
    """The layers whose forward activation checkpointing runs again in backward (none without it)."""
    every = checkpoint_every(scenario.workload.activation_checkpointing)
    if not every:
        return frozenset()
    units = shard_units(workload, scenario.parallel.unit)
    check_has_blocks(workload, units, every)
    return recomputed_layers(units, every)


def memory_check(scenario: Scenario, workload: Workload, gpu: GPUSpec) -> tuple[dict[str, float], dict[str, float],
                                                                                str | None, list[str]]:
    """(this strategy's memory by part, every strategy's total, the cheapest that fits, warnings). Where no
    strategy fits without activation checkpointing, the warning says whether full checkpointing would fit."""
    by_strategy, _units = strategy_memory(scenario, workload)
    strategy = scenario.parallel.strategy
    memory = by_strategy[strategy]
    warnings: list[str] = []
    if memory["total"] > gpu.memory_bytes:
        text = fit_text(strategy, by_strategy, gpu.name, gpu.memory_bytes)
        if recommend_strategy(by_strategy, gpu.memory_bytes) is None \
                and checkpoint_every(scenario.workload.activation_checkpointing) != 1 and _has_blocks(workload, scenario):
            checkpointed, _ = strategy_memory(scenario, workload, checkpoint=1)
            best = recommend_strategy(checkpointed, gpu.memory_bytes)
            text += ("; with full activation checkpointing " + (
                f"{best} fits at {checkpointed[best]['total'] / 2**30:.1f} GiB (--set parallel.strategy={best} "
                "--set workload.activation_checkpointing=full)" if best else
                f"still none fits (the least {min(c['total'] for c in checkpointed.values()) / 2**30:.1f} GiB)"))
        warnings.append(text)
    else:
        reserve = allocator_reserve()
        if memory["total"] * reserve["max"] > gpu.memory_bytes:
            low, high = memory["total"] * reserve["min"], memory["total"] * reserve["max"]
            warnings.append(
                f"the allocated peak {memory['total'] / 2**30:.1f} GiB fits the {gpu.name}'s "
                f"{gpu.memory_bytes / 2**30:.1f} GiB, but PyTorch's caching allocator reserved {reserve['min']:.2f}x to "
                f"{reserve['max']:.2f}x its allocated peak in {reserve['runs']} measured runs: {low / 2**30:.1f} to "
                f"{high / 2**30:.1f} GiB, which may not fit")
    return (memory, {s: m["total"] for s, m in by_strategy.items()},
            recommend_strategy(by_strategy, gpu.memory_bytes), warnings)


def _has_blocks(workload: Workload, scenario: Scenario) -> bool:
    return any(not u.is_root for u in shard_units(workload, scenario.parallel.unit))


def memory_source(scenario: Scenario, workload: Workload) -> str:
    """Where the memory figure's parts come from, for the report's from: rows: the activations (never a
    silent 0), the optimizer's states, activation checkpointing, the step's peak."""
    optimizer = resolve_optimizer(workload, scenario.workload.optimizer)
    said = "" if scenario.workload.optimizer == "auto" else " (workload.optimizer)"
    parts = [f"optimizer {optimizer}{said}: {STATE_BYTES_PER_PARAM[optimizer]} bytes of state per parameter"]
    if workload.peak_memory is not None:
        parts.append(f"the step's peak by part from {workload.peak_memory.source}")
    if workload.activation_source:
        copies = (" (with autocast's 16-bit weight copies, which a 16-bit FSDP param_dtype replaces)"
                  if workload.peak_memory is not None and workload.precision != "fp32" else "")
        parts.append(f"activations {workload.activation_bytes / 2**30:.2f} GiB{copies} from {workload.activation_source}")
    else:
        parts.append("activations NOT KNOWN, counted as 0: the workload has no measured or estimated figure "
                     "(measure it with ddpsim measure, which records them, or use torch:module:factory)")
    if workload.transient_bytes:
        parts.append(f"the loss's temporaries {workload.transient_bytes / 2**30:.2f} GiB at the start of backward "
                     "(the zoo's count: log-softmax's fp32 gradient in and out over the logits)")
    every = checkpoint_every(scenario.workload.activation_checkpointing)
    if every and workload.peak_memory is not None and every in workload.peak_memory.checkpointed:
        parts.append(f"activation checkpointing of {'every block' if every == 1 else f'every {ordinal(every)} block'}: "
                     f"the step's peak from {workload.peak_memory.checkpointed[every].source} "
                     "(torch.utils.checkpoint, non-reentrant)")
    elif every:
        parts.append(f"activation checkpointing of {'every block' if every == 1 else f'every {ordinal(every)} block'}: "
                     "each keeps its input, one block's activations live again in backward")
    return "; ".join(parts)


def zero1_optimizer_s(scenario: Scenario, workload: Workload, gpu: GPUSpec, compute: StepCompute,
                      model: CollectiveModel) -> tuple[float, float]:
    """ZeroRedundancyOptimizer.step(): the optimizer on this rank's 1/n of the parameters, then every
    rank's updated parameters sent to all (``_sync_params``: a broadcast per rank, the bytes of an
    all-gather of the parameters, priced as one). Returns (optimizer, parameter exchange) seconds."""
    n = scenario.cluster.world_size
    exchange = half_ring_price(model, float(sum(p.bytes for p in workload.params)), scenario.collective.protocol)
    return sharded_optimizer_s(workload, gpu, compute.optimizer_s, n), exchange.seconds


def _measured_curves(scenario: Scenario, over_world: bool, sources: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The calibration's measured all-gather and reduce-scatter curves of this cluster's link class and shape
    (nccl-tests, ``ddpsim calibrate --nccl-tests``), where it has them and the shard group is the world; the
    sources say which priced the step."""
    cluster, calibration = scenario.cluster, scenario.calibration
    link_class = step_link_class(cluster.nodes, link_class_of_type(cluster.intra_node.type))
    shape = f"{cluster.nodes}x{cluster.world_size // cluster.nodes}"
    found = {}
    if calibration is not None and over_world:
        for collective in ("all_gather", "reduce_scatter"):
            entry = calibration.collective_curve(link_class, collective, cluster.world_size, cluster.nodes)
            if entry is not None:
                found[collective] = entry
    measured = [f"calibration {calibration.source} collectives.{link_class}.{c}.{shape}" for c in found] \
        if calibration is not None else []
    missing = [c for c in ("all_gather", "reduce_scatter") if c not in found]
    sources["sharded_collectives"] = "; ".join(
        ([f"measured curves: {', '.join(measured)}"] if measured else [])
        + ([f"{' and '.join(missing)} priced as half a ring all-reduce of the all-reduce model (no measured curve "
            f"of {link_class} {shape}{'' if over_world else ' for a shard group inside the world'}: "
            "ddpsim calibrate --nccl-tests with reduce_scatter_perf / all_gather_perf output)"] if missing else []))
    return found


def _compute_slowdown(scenario: Scenario) -> tuple[float, str]:
    """The factor compute runs slower while a collective is in flight, and where it comes from: a scenario's or
    calibration's own ``overheads.compute_slowdown`` where it sets one, else the overlap bench's measurement for
    the link the collectives' kernels drive (``ddpsim.sharded.contention``)."""
    default = OverheadSpec.__dataclass_fields__["compute_slowdown"].default
    value = scenario.overheads.compute_slowdown
    if scenario.calibration is not None or value != default:
        return value, "overheads.compute_slowdown, as the scenario or its calibration sets it"
    link = link_class_of_type(scenario.cluster.intra_node.type)
    measured = sharded_compute_slowdown(link)
    return measured, f"measured beside {link} all-reduces on {MEASURED_ON}; the median of its models"


def _check(scenario: Scenario) -> None:
    sim = scenario.simulation
    strategy = scenario.parallel.strategy
    if scenario.ddp.grad_accumulation_steps > 1:
        # FSDP2 supports it (pytorch/pytorch#126166 states both flavours); ddpsim's sharded step has one
        # backward, and the two flavours differ in both time and memory: say which is which, and what to run
        raise ScenarioError(
            f"gradient accumulation is not simulated with parallel.strategy {strategy}, though FSDP2 supports it "
            "two ways: by default every micro-batch's backward reduce-scatters its gradients (each micro-step is "
            "one simulated step less the optimizer; sharded gradients), and with "
            "module.set_requires_gradient_sync(is_last_microbatch) only the last one does (the others keep "
            "unsharded gradients, more memory); simulate one micro-step with grad_accumulation_steps 1, or use "
            "parallel.strategy ddp or zero1, which model it", file=scenario.source, field="ddp.grad_accumulation_steps")
    for name, on in (("simulation.jitter_cv", sim.jitter_cv > 0), ("simulation.jitter_from_profile",
                     sim.jitter_from_profile), ("simulation.straggler_rank", sim.straggler_rank is not None)):
        if on:
            raise ScenarioError(f"is not simulated with parallel.strategy {strategy} (ddp only)",
                                file=scenario.source, field=name)


def simulate_sharded(scenario: Scenario, workload: Workload, gpu: GPUSpec, compute: StepCompute,
                     model: CollectiveModel, sources: dict[str, str], copy_Bps: float) -> Result:
    """One FSDP2 step (parallel.strategy zero2 or zero3) as a Result."""
    wall_start = time.perf_counter()
    _check(scenario)
    cluster, parallel = scenario.cluster, scenario.parallel
    precision = precision_of(scenario)
    units = shard_units(workload, parallel.unit)
    n = shard_degree(parallel.strategy, parallel.shard_group, cluster.world_size, cluster.gpus_per_node)
    groups = shard_groups(cluster, model, parallel.shard_group)
    protocol = scenario.collective.protocol
    communicating = cluster.world_size > 1
    ag_bytes = [u.numel * precision.param_bytes for u in units]
    rs_bytes = [u.numel * precision.reduce_bytes for u in units]
    replica_bytes = [b / n for b in rs_bytes]
    none = Price(0.0, 0.0, "none")
    curves = _measured_curves(scenario, groups.replicate is None, sources) if communicating else {}

    def price(collective: str, nbytes: float) -> Price:
        if not communicating:
            return none
        entry = curves.get(collective)
        return measured_price(entry, nbytes, n) if entry else half_ring_price(groups.shard, nbytes, protocol)

    all_gather = tuple(price("all_gather", b) for b in ag_bytes)
    reduce_scatter = tuple(price("reduce_scatter", b) for b in rs_bytes)
    replica = tuple(allreduce_price(groups.replicate, b, scenario.collective.algorithm, protocol)
                    if groups.replicate is not None else none for b in replica_bytes)
    launch_s = gpu.kernel_launch_s
    slowdown, slowdown_from = _compute_slowdown(scenario)
    forward_s, backward_s = layer_seconds(workload, gpu, compute, scenario.workload.compute_efficiency)
    optimizer_s = sharded_optimizer_s(workload, gpu, compute.optimizer_s, n)
    costs = ShardedCosts(
        strategy=parallel.strategy, units=tuple(units), layer_order=workload.execution_order,
        forward_s=forward_s, backward_s=backward_s, all_gather=all_gather, reduce_scatter=reduce_scatter,
        replica_allreduce=replica,
        # FSDP2 copies each gathered unit out of the all-gather buffer (read + write) and each unit's
        # gradients into the reduce-scatter buffer (read + write), one kernel each
        copy_out_s=tuple(2 * b / copy_Bps + launch_s if communicating else 0.0 for b in ag_bytes),
        rs_copy_in_s=tuple(2 * b / copy_Bps + launch_s if communicating else 0.0 for b in rs_bytes),
        forward_host_s=tuple(len(u.param_indices) * parallel.forward_host_per_tensor_s for u in units),
        regather_host_s=tuple(len(u.param_indices) * parallel.regather_host_per_tensor_s for u in units),
        optimizer_s=optimizer_s,
        compute_slowdown=slowdown - 1.0 if communicating else 0.0,
    )
    trace = simulate_step(costs, list(zip(ag_bytes, rs_bytes, replica_bytes, strict=True)))
    memory, totals, recommended, warnings = memory_check(scenario, workload, gpu)
    step_time = trace.step_end_s
    samples = workload.batch_size * cluster.world_size
    spans = [(c.start_s, c.end_s) for c in trace.collectives]
    compute_spans = [(a, b) for a, b, _label in trace.compute_intervals]
    protocols = sorted({c.protocol for c in trace.collectives})
    notes = {
        "data_parallelism": _strategy_text(parallel.strategy, n, parallel.shard_group, precision, len(units)),
        "activations": ("the workload's own count of what autograd saves (zoo) or the torch importer's estimate, "
                        "not measured"),
        "sharded_overheads": (f"all-gather / reduce-scatter as NCCL's ring model prices them, sharing the ring's links "
                              f"while both run; compute {slowdown:g}x slower while one is in flight ({slowdown_from}); DDP's "
                              "bucket terms not applied; FSDP2's host work per parameter tensor "
                              f"{1e6 * parallel.forward_host_per_tensor_s:.0f} us before each unit's forward"
                              + (f", {1e6 * parallel.regather_host_per_tensor_s:.0f} us before each re-gathered "
                                 "backward" if parallel.strategy == "zero3" else "")
                              + " (parallel.forward_host_per_tensor: measured on 2 x H200, docs/sharded.md)"),
    }
    return Result(
        scenario=scenario.source, model=workload.name, gpu=gpu.name, world_size=cluster.world_size,
        nodes=cluster.nodes, gpus_per_node=cluster.gpus_per_node,
        algorithm="ring" if communicating else "none", protocol="/".join(protocols) or "none", mode="fast",
        bucket_cap_mb=None, step_time_s=step_time, step_times_s=[step_time],
        forward_s=trace.forward_end_s, backward_s=trace.backward_compute_end_s - trace.forward_end_s,
        optimizer_s=optimizer_s, comm_time_s=sum(b - a for a, b in spans),
        exposed_comm_s=union_length(spans + compute_spans) - union_length(compute_spans),
        compute_only_s=compute.forward_s + compute.backward_s + optimizer_s,
        copy_s=sum(b - a for a, b, label in trace.compute_intervals if label.startswith("copy")),
        buckets=[], samples_per_s=samples / step_time if step_time > 0 else 0.0,
        tokens_per_s=samples * workload.seq_len / step_time if workload.seq_len and step_time > 0 else None,
        memory_bytes=memory, gpu_memory_bytes=gpu.memory_bytes, fits_in_memory=memory["total"] <= gpu.memory_bytes,
        warnings=warnings, wall_s=time.perf_counter() - wall_start,
        mode_reason="one rank stands for all: identical ranks, collectives priced in FAST mode",
        simulated_ranks=1, value_sources={**sources, **notes},
        rank_timelines={0: _timeline(trace)},
        comm_wait_s=trace.backward_end_s - trace.backward_compute_end_s, step_optimizer_s=optimizer_s,
        strategy=parallel.strategy,
        collectives=[CollectiveRecord(c.kind, c.unit, c.bytes, c.protocol, c.start_s, c.end_s)
                     for c in trace.collectives],
        memory_by_strategy=totals, recommended_strategy=recommended, resolved_scenario=resolved_scenario(scenario),
    )


def _strategy_text(strategy: str, n: int, shard_group: str, precision: Precision, n_units: int) -> str:
    how = "reshard after forward" if strategy == "zero3" else "no reshard after forward"
    group = f"sharded over {n} GPUs" + (" of a node, replicated across nodes (HSDP)" if shard_group == "node" else "")
    return (f"{strategy}: FSDP2 fully_shard, {how}, {n_units} units, {group}; all-gather in {precision.param_dtype}, "
            f"reduce-scatter in {precision.reduce_dtype} (scenario parallel.*)")


def _timeline(trace: ShardedTrace) -> list[tuple[float, float, str]]:
    return list(trace.compute_intervals) + [(c.start_s, c.end_s, f"{c.kind} {c.unit}") for c in trace.collectives]


