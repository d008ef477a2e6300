"""Scaling and cost (the same job on more nodes) and step-time variability (jitter, a straggler, a
degraded link). Both only re-run ``simulate()`` on changed scenarios and turn Results into numbers.

A scaling study runs twice: with per-rank compute jitter (the scenario's own, else
``simulation.scale_jitter_cv``, measured) and without, because the slowest of more ranks is slower and
a curve without jitter overstates large clusters."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from ddpsim.errors import ScenarioError
from ddpsim.results import Result
from ddpsim.scenario.schema import MAX_PER_RANK_GPUS, Scenario
from ddpsim.units import format_time

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class ScalePoint:
    """One node count. ``efficiency``: throughput per GPU relative to one node's (1.0 = linear)."""

    nodes: int
    gpus: int
    step_time_s: float
    samples_per_s: float
    tokens_per_s: float | None
    efficiency: float
    comm_fraction: float  # exposed communication / step time
    cost_per_million: float | None  # in the currency of the price, per 1e6 ``cost_unit``
    cost_unit: str  # "tokens" for language models, else "samples"
    memory_per_gpu_bytes: float
    gpu_memory_bytes: float
    fits_in_memory: bool
    algorithm: str
    mode: str


@dataclass
class ScalingStudy:
    """``points``: with ``jitter_cv`` per rank (each point's efficiency against one node with the same
    jitter); ``no_jitter``: the same node counts without it (empty when ``jitter_cv`` is 0)."""

    points: list[ScalePoint]
    price_per_gpu_hour: float | None
    baseline: ScalePoint  # the one-node run every efficiency is measured against
    warnings: list[str] = field(default_factory=list)
    jitter_cv: float = 0.0
    jitter_source: str = "none"
    no_jitter: list[ScalePoint] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "price_per_gpu_hour": self.price_per_gpu_hour,
            "baseline_nodes": self.baseline.nodes,
            "jitter_cv": self.jitter_cv,
            "jitter_source": self.jitter_source,
            "points": [dataclasses.asdict(p) for p in self.points],
            "no_jitter_points": [dataclasses.asdict(p) for p in self.no_jitter],
            "warnings": list(self.warnings),
        }


def _parse_nodes(nodes: Sequence[int], file: str) -> list[int]:
    if not nodes:
        raise ScenarioError("--nodes needs at least one node count", file=file, field="--nodes")
    bad = [n for n in nodes if isinstance(n, bool) or not isinstance(n, int) or n < 1]
    if bad:
        raise ScenarioError(f"node counts must be positive integers, got {bad[0]!r}", file=file, field="--nodes")
    return list(dict.fromkeys(nodes))


def at_nodes(scenario: Scenario, nodes: int) -> Scenario:
    """The scenario on ``nodes`` nodes, everything else unchanged."""
    for fixed, what in (("topology", "a custom topology"), ("node_groups", "node groups")):
        if getattr(scenario.cluster, fixed) is not None:
            raise ScenarioError(
                f"{what} fix the node count; scaling needs a preset cluster of alike nodes (nodes, gpus_per_node)",
                file=scenario.source,
                field=f"cluster.{fixed}",
            )
    from ddpsim.loader import simulation_problem, world_size_problem

    world = nodes * scenario.cluster.gpus_per_node
    too_large = world_size_problem(nodes, scenario.cluster.gpus_per_node)
    if too_large:
        raise ScenarioError(too_large, file=scenario.source, field="--nodes")
    straggler = scenario.simulation.straggler_rank
    if straggler is not None and straggler >= world:
        raise ScenarioError(
            f"rank {straggler} does not exist on {nodes} node(s) ({world} GPUs)",
            file=scenario.source,
            field="simulation.straggler_rank",
        )
    problem = simulation_problem(scenario.simulation, world)
    if problem:
        raise ScenarioError(f"on {nodes:,} nodes: {problem[1]}", file=scenario.source,
                            field=f"simulation.{problem[0]}")
    return dataclasses.replace(scenario, cluster=dataclasses.replace(scenario.cluster, nodes=nodes))


def _point(nodes: int, result: Result, per_gpu_base: float, price: float | None) -> ScalePoint:
    per_gpu = result.samples_per_s / result.world_size
    lm = bool(result.tokens_per_s)
    rate = result.tokens_per_s if lm and result.tokens_per_s else result.samples_per_s
    cost = None
    if price is not None and rate > 0:
        # every GPU is billed for the whole step: price/hour * GPUs / (units per second) per unit
        cost = price * result.world_size / SECONDS_PER_HOUR / rate * 1e6
    return ScalePoint(
        nodes=nodes,
        gpus=result.world_size,
        step_time_s=result.step_time_s,
        samples_per_s=result.samples_per_s,
        tokens_per_s=result.tokens_per_s,
        efficiency=per_gpu / per_gpu_base if per_gpu_base > 0 else float("nan"),
        comm_fraction=result.exposed_comm_s / result.step_time_s if result.step_time_s > 0 else 0.0,
        cost_per_million=cost,
        cost_unit="tokens" if lm else "samples",
        memory_per_gpu_bytes=float(result.memory_bytes.get("total", 0.0)),
        gpu_memory_bytes=float(result.gpu_memory_bytes),
        fits_in_memory=result.fits_in_memory,
        algorithm=result.algorithm,
        mode=result.mode,
    )


# a jittered step is the median of at least this many simulated steps: one draw per rank is noisy on few ranks
SCALE_JITTER_STEPS = 5


def scale_jitter(scenario: Scenario) -> tuple[float, str]:
    """(per-rank jitter cv the scaling study simulates, where it came from). The scenario's own jitter
    wins; else ``simulation.scale_jitter_cv`` (its default measured: see its doc in the schema)."""
    sim = scenario.simulation
    if sim.jitter_from_profile:
        return 0.0, "the workload profile's own step spread (simulation.jitter_from_profile)"
    if "simulation.jitter_cv" not in scenario.defaulted_fields:
        return sim.jitter_cv, f"simulation.jitter_cv of scenario {scenario.source}"
    if "simulation.scale_jitter_cv" not in scenario.defaulted_fields:
        return sim.scale_jitter_cv, f"simulation.scale_jitter_cv of scenario {scenario.source}"
    return sim.scale_jitter_cv, ("ddpsim's default simulation.scale_jitter_cv: the median step-time spread of the "
                                 "measured profiles under validation/data")


def _curve(scenario: Scenario, counts: list[int], price: float | None) -> tuple[dict[int, Result], ScalePoint,
                                                                                list[ScalePoint]]:
    from ddpsim.simulation import simulate

    scenarios = {n: at_nodes(scenario, n) for n in [*counts, 1]}  # every count checked before any runs
    results = {n: simulate(scenarios[n]) for n in dict.fromkeys([*counts, 1])}
    base_result = results[1]
    per_gpu_base = base_result.samples_per_s / base_result.world_size
    return results, _point(1, base_result, per_gpu_base, price), [
        _point(n, results[n], per_gpu_base, price) for n in counts]


def scaling_study(
    scenario: Scenario, nodes: Sequence[int], price_per_gpu_hour: float | None = None
) -> ScalingStudy:
    """Simulate the scenario on each node count (and on one node, the efficiency baseline), with the
    per-rank jitter of ``scale_jitter`` and, beside it, without."""
    counts = _parse_nodes(nodes, scenario.source)
    price = price_per_gpu_hour if price_per_gpu_hour is not None else scenario.price_per_gpu_hour
    if price is not None and price < 0:
        raise ScenarioError(f"must not be negative, got {price}", file=scenario.source, field="--price-per-gpu-hour")
    jitter_cv, jitter_source = scale_jitter(scenario)
    sim = scenario.simulation
    largest = max(counts) * scenario.cluster.gpus_per_node
    if jitter_cv > 0 and largest > MAX_PER_RANK_GPUS:
        # over several steps the fold keeps every rank that is slowest in some mix of steps (about 1,000 of
        # 131,072 at 5 steps: minutes per point), so the curve is jittered up to this size only
        jitter_cv, jitter_source = 0.0, (f"none: {largest:,} GPUs, and jitter over {SCALE_JITTER_STEPS} steps "
                                         f"simulates every rank that is the slowest in some step mix, too many "
                                         f"above {MAX_PER_RANK_GPUS:,} (the curve below assumes identical ranks)")
    steady = dataclasses.replace(scenario, simulation=dataclasses.replace(sim, jitter_cv=0.0))
    no_jitter: list[ScalePoint] = []
    if jitter_cv > 0:
        jittered = dataclasses.replace(scenario, simulation=dataclasses.replace(
            sim, jitter_cv=jitter_cv, iterations=max(sim.iterations, SCALE_JITTER_STEPS)))
        _, _, no_jitter = _curve(steady, counts, price)
        _, baseline, points = _curve(jittered, counts, price)
        jitter_source += f"; each point the median of {jittered.simulation.iterations} simulated steps"
    else:
        _, baseline, points = _curve(scenario if sim.jitter_from_profile else steady, counts, price)
    warnings = [
        f"{p.nodes} node(s): {p.memory_per_gpu_bytes / 2**30:.1f} GiB per GPU needed, "
        f"{p.gpu_memory_bytes / 2**30:.0f} GiB available: DOES NOT FIT"
        for p in points
        if not p.fits_in_memory
    ]
    return ScalingStudy(points, price, baseline, warnings, jitter_cv, jitter_source, no_jitter)


def scaling_table(study: ScalingStudy, markdown: bool = False) -> str:
    from ddpsim.report.tables import table

    lm = any(p.tokens_per_s for p in study.points)
    headers = ["nodes", "GPUs", "step time", "samples/s"] + (["tokens/s"] if lm else [])
    headers += ["efficiency", "exposed comm"]
    if study.no_jitter:
        headers += ["step time, no jitter", "efficiency, no jitter"]
    if study.price_per_gpu_hour is not None:
        headers.append(f"cost / 1M {study.points[0].cost_unit}")
    headers.append("memory per GPU")
    rows = []
    for i, p in enumerate(study.points):
        row: list[object] = [p.nodes, p.gpus, format_time(p.step_time_s), f"{p.samples_per_s:,.0f}"]
        if lm:
            row.append(f"{p.tokens_per_s:,.0f}" if p.tokens_per_s else "-")
        row += [f"{100 * p.efficiency:.1f}%", f"{100 * p.comm_fraction:.1f}%"]
        if study.no_jitter:
            steady = study.no_jitter[i]
            row += [format_time(steady.step_time_s), f"{100 * steady.efficiency:.1f}%"]
        if study.price_per_gpu_hour is not None:
            row.append(f"{p.cost_per_million:,.4g}" if p.cost_per_million is not None else "-")
        memory = f"{p.memory_per_gpu_bytes / 2**30:.1f} / {p.gpu_memory_bytes / 2**30:.0f} GiB"
        row.append(memory if p.fits_in_memory else f"{memory} DOES NOT FIT")
        rows.append(row)
    return table(headers, rows, markdown)


def plot_scaling(study: ScalingStudy, path: str) -> None:
    from ddpsim.report.plots import line_plot

    gpus = [float(p.gpus) for p in study.points]
    label = f"per-rank jitter cv {study.jitter_cv:g} (%)" if study.no_jitter else "scaling efficiency (%)"
    series = {label: [100 * p.efficiency for p in study.points]}
    if study.no_jitter:
        series["no jitter (%)"] = [100 * p.efficiency for p in study.no_jitter]
    logx = len(gpus) > 1 and min(gpus) > 0 and max(gpus) / min(gpus) >= 8
    line_plot(path, gpus, series, "GPUs", "throughput per GPU vs one node (%)", "scaling efficiency", logx=logx)


# --- variability -----------------------------------------------------------------------------------


def variability_overrides(
    iterations: int,
    jitter_cv: float | None = None,
    straggler_rank: int | None = None,
    straggler_slowdown: float | None = None,
    degraded_link_factor: float | None = None,
    seed: int | None = None,
) -> list[str]:
    """``--set`` strings for the simulation section, so the scenario loader validates them."""
    fields: dict[str, Any] = {
        "iterations": iterations,
        "jitter_cv": jitter_cv,
        "straggler_rank": straggler_rank,
        "straggler_slowdown": straggler_slowdown,
        "degraded_link_factor": degraded_link_factor,
        "seed": seed,
    }
    return [f"simulation.{name}={value!r}" for name, value in fields.items() if value is not None]


@dataclass
class VariabilityStudy:
    result: Result

    @property
    def step_times_s(self) -> list[float]:
        return list(self.result.step_times_s) or [self.result.step_time_s]

    def to_dict(self) -> dict[str, Any]:
        times = self.step_times_s
        r = self.result
        return {
            "iterations": len(times),
            "p50_s": r.percentile_s(50),
            "p95_s": r.percentile_s(95),
            "p99_s": r.percentile_s(99),
            "mean_s": sum(times) / len(times),
            "min_s": min(times),
            "max_s": max(times),
            "critical_rank": r.critical_rank,
            "world_size": r.world_size,
            "mode": r.mode,
            "step_times_s": times,
        }


def variability_study(scenario: Scenario, progress: TextIO | None = None) -> VariabilityStudy:
    """Simulate ``simulation.iterations`` steps with the scenario's jitter/straggler/link settings
    (``progress``: a line every few seconds of a long simulation)."""
    from ddpsim.simulation import simulate

    return VariabilityStudy(simulate(scenario, progress))


def variability_table(study: VariabilityStudy, scenario: Scenario, markdown: bool = False) -> str:
    from ddpsim.report.tables import table

    data, sim = study.to_dict(), scenario.simulation
    straggler = (
        f"rank {sim.straggler_rank} x{sim.straggler_slowdown:g}" if sim.straggler_rank is not None else "none"
    )
    rows = [
        ("steps simulated", data["iterations"]),
        ("compute jitter (cv)", f"{sim.jitter_cv:g}"),
        ("straggler", straggler),
        ("degraded link", f"{sim.degraded_link_factor:g} of bandwidth" if sim.degraded_link_factor < 1 else "none"),
        ("step p50", format_time(data["p50_s"])),
        ("step p95", format_time(data["p95_s"])),
        ("step p99", format_time(data["p99_s"])),
        ("step mean / min / max", " / ".join(format_time(data[k]) for k in ("mean_s", "min_s", "max_s"))),
        ("critical-path rank", data["critical_rank"]),
    ]
    return table(("quantity", "value"), rows, markdown)


def plot_variability(study: VariabilityStudy, path: str) -> None:
    from ddpsim.report.plots import histogram

    r = study.result
    # Steps that differ only by float noise (no jitter) make numpy refuse 30 bins over a ~1e-15 range;
    # nanosecond precision is all a step time carries, and equal values get one ordinary bar.
    times = [round(t, 9) for t in study.step_times_s]
    histogram(path, times, f"{r.model} on {r.world_size} x {r.gpu}: {len(times)} steps")
