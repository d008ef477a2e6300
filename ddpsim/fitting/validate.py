"""Compare predictions with measured DDP runs and all-reduce sweeps (``ddpsim validate``).

Two ways to hold runs out. With a calibration file, only runs outside its calibration subset are
predicted. With ``cross`` (model, launch or host), every run is predicted by a calibration built from
the other models', launches' or hosts' data only (leave one out), which is what a user asking about
another model, another day or another machine gets. The report fails (``Validation.passed`` is False)
when the error is past the tolerances given.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ddpsim.calibration.apply import check_gpu
from ddpsim.calibration.file import Calibration, calibration_from_dict
from ddpsim.errors import ScenarioError
from ddpsim.fitting.calibrate import (
    Measurements,
    calibrate,
    calibration_caps_for,
    check_stretch_options,
    load_measurements,
    require_runs,
)
from ddpsim.fitting.fit import fit_noise
from ddpsim.fitting.measured_scenarios import (
    run_class,
    run_gpu,
    run_label,
    run_nodes,
    run_scenario,
    uneven_shape,
)
from ddpsim.fitting.measurements import AllReduceSample, Profiles, host_of, launch_key
from ddpsim.planning.advisor import pick_cap
from ddpsim.scenario.link_kinds import INTER_NODE_LINK_CLASS, step_link_class

ALLREDUCE_CHECK_MIN_BYTES = 64 * 1024
ALLREDUCE_CHECK_MAX_BYTES = 1 << 30
CROSS_MODES = ("model", "launch", "host")


@dataclass(frozen=True)
class RunRow:
    model: str
    transport: str
    world_size: int
    bucket_cap_mb: float
    measured_s: float
    measured_p10_s: float | None
    measured_p90_s: float | None
    predicted_s: float
    held_out: bool
    launch_id: str = ""
    option: str = "none"  # the harness's variant: none, gbv, fp16, bf16, accum4, find_unused, static_graph
    nodes: int = 1
    host: str = ""
    # the shape across nodes where they differ ("3+1"); empty for nodes alike
    uneven_shape: str = ""
    fold: str = ""  # the held-out part whose calibration predicted this run (cross-validation)
    launch_level: float = 1.0  # measured_s was divided by this (normalise_launches; 1: as measured)
    # the prediction's p10 / p90 from the calibration's measured noise (None: the calibration has none)
    predicted_p10_s: float | None = None
    predicted_p90_s: float | None = None
    # peak memory per GPU: the record's measured max over ranks (its "memory" object; None: not measured)
    # and the prediction's
    measured_peak_bytes: float | None = None
    predicted_peak_bytes: float | None = None

    @property
    def peak_error_pct(self) -> float | None:
        if not self.measured_peak_bytes or self.predicted_peak_bytes is None:
            return None
        return (self.predicted_peak_bytes / self.measured_peak_bytes - 1) * 100

    @property
    def error_pct(self) -> float:
        return (self.predicted_s / self.measured_s - 1) * 100

    @property
    def inside_interval(self) -> bool | None:
        """Whether the measured step lies within the predicted p10..p90 (None: no interval)."""
        if self.predicted_p10_s is None or self.predicted_p90_s is None:
            return None
        return self.predicted_p10_s <= self.measured_s <= self.predicted_p90_s

    @property
    def link_class(self) -> str:
        return step_link_class(self.nodes, self.transport)

    @property
    def launch(self) -> str:
        """Its launch across campaigns (``measurements.launch_key``'s form)."""
        return f"{self.host}/{self.launch_id}"

    @property
    def group(self) -> str:
        """What the summary reports one line for: a link class, and the network per shape."""
        if self.nodes == 1:
            return self.transport
        return f"{INTER_NODE_LINK_CLASS} {self.uneven_shape or f'{self.nodes}x{self.world_size // self.nodes}'}"


@dataclass(frozen=True)
class AllReduceRow:
    link_class: str
    world_size: int
    bytes: int
    measured_s: float
    predicted_s: float

    @property
    def error_pct(self) -> float:
        return (self.predicted_s / self.measured_s - 1) * 100


@dataclass
class Validation:
    rows: list[RunRow]
    allreduce: list[AllReduceRow]
    recommendation: list[dict[str, Any]]
    layouts_checked: int
    layout_mismatches: list[str]
    fingerprints: list[str]
    calibration_subset: dict[str, Any]
    failures: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (run, why it was not predicted)
    noise: dict[str, Any] = field(default_factory=dict)  # measured spread per link class (fit_noise)
    cross: str | None = None
    folds: list[dict[str, Any]] = field(default_factory=list)
    profile_warnings: list[str] = field(default_factory=list)
    launch_drift: list[dict[str, Any]] = field(default_factory=list)
    jitter_from_profile: bool = False  # predictions drew each rank's compute from its profile's step spread
    comm_terms_fitted_models_only: bool = False  # each fold kept its communication terms for its own models

    def held_out(self) -> list[RunRow]:
        return [r for r in self.rows if r.held_out]

    def by_transport(self) -> dict[str, list[RunRow]]:
        groups: dict[str, list[RunRow]] = defaultdict(list)
        for row in self.held_out():
            groups[row.group].append(row)
        return dict(sorted(groups.items()))

    def by_option(self) -> dict[tuple[str, str], list[RunRow]]:
        groups: dict[tuple[str, str], list[RunRow]] = defaultdict(list)
        for row in self.held_out():
            groups[(row.option, row.link_class)].append(row)
        return dict(sorted(groups.items()))

    @property
    def passed(self) -> bool:
        return not self.failures


def option_effects(rows: Sequence[RunRow]) -> list[tuple[RunRow, float, float]]:
    """Each option run with its effect, measured and predicted: its step over the plain step of the
    same model, link class, GPUs and cap in the same launch (the option's cost, with the launch's level
    and the model's compute divided out)."""
    def key(r: RunRow) -> tuple[Any, ...]:
        return r.host, r.launch_id, r.model, r.link_class, r.world_size, r.bucket_cap_mb

    plain = {key(r): r for r in rows if r.option == "none"}
    return [(r, r.measured_s / base.measured_s, r.predicted_s / base.predicted_s)
            for r in rows if r.option != "none" and (base := plain.get(key(r))) is not None]


def in_calibration_subset(run: dict[str, Any], subset: dict[str, Any], data_dir: str | None = None) -> bool:
    """Whether ``run`` may have been used by the calibration: its cap is in the subset and, when the
    calibration names its data folder, the run comes from that folder."""
    caps = subset.get("bucket_cap_mb")
    if caps is None:
        return False
    if caps != "all" and float(run["bucket_cap_mb"]) not in {float(c) for c in caps}:
        return False
    source = run.get("_source")
    folders = subset.get("folders")
    if isinstance(folders, list) and source is not None:
        # a pooled calibration (pool.py) names the campaign folders it was fitted on
        return os.path.basename(os.path.dirname(source)) in folders
    if data_dir is None or source is None:
        return True
    return os.path.commonpath([os.path.abspath(data_dir), source]) == os.path.abspath(data_dir)


def _check_allreduce(samples: Sequence[AllReduceSample], calibration: Calibration) -> list[AllReduceRow]:
    from ddpsim.collectives import CollectiveModel
    from ddpsim.loader import scenario_from_dict
    from ddpsim.scenario.link_kinds import intra_type_of_class
    from ddpsim.topology import build_topology

    rows = []
    models: dict[tuple[str, int], Any] = {}
    for sample in samples:
        if not ALLREDUCE_CHECK_MIN_BYTES <= sample.bytes <= ALLREDUCE_CHECK_MAX_BYTES:
            continue
        if sample.nodes > 1 or sample.algorithm == "tree":
            continue  # across nodes and forced trees: validation/evidence/stages/multinode_allreduce.py checks those
        fitted = calibration.link_fit(sample.link_class, sample.world_size, 1)
        if fitted is None:
            continue
        key = (sample.link_class, sample.world_size)
        if key not in models:
            cluster = scenario_from_dict(
                {
                    "workload": {"model": "mlp", "batch_size": 1},
                    "cluster": {
                        "gpu": "H100-SXM",
                        "nodes": 1,
                        "gpus_per_node": sample.world_size,
                        "intra_node": {
                            "type": intra_type_of_class(sample.link_class),
                            "bandwidth": fitted.bandwidth_Bps,
                            "latency": fitted.latency_s,
                        },
                    },
                }
            ).cluster
            models[key] = CollectiveModel(build_topology(cluster), fitted.protocol_table)
        algorithm = fitted.algorithm or "auto"
        kernel_s = models[key].allreduce_time_s(sample.bytes, algorithm, "auto")
        # the harness times single calls from the host, which never finish under the launch floor
        predicted = max(kernel_s, fitted.call_floor_s)
        rows.append(AllReduceRow(sample.link_class, sample.world_size, sample.bytes, sample.time_s, predicted))
    return rows


def _recommendations(rows: Sequence[RunRow]) -> list[dict[str, Any]]:
    """Per (model, transport, world): is the cap with the lowest PREDICTED time within 5% of the measured best?"""
    by_launch: dict[tuple[str, str, int, str], dict[str, list[RunRow]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row.option == "none":
            by_launch[(row.model, row.link_class, row.world_size, row.host)][row.launch_id].append(row)
    out = []
    for (model, transport, world, host), launches in sorted(by_launch.items()):
        # caps are compared within one launch: between launches the same run can differ by 15%
        group = max(launches.values(), key=lambda rs: len({r.bucket_cap_mb for r in rs}))
        if len(group) < 2:
            continue
        chosen = pick_cap({r.bucket_cap_mb: r.predicted_s for r in group})
        recommended = next(r for r in group if r.bucket_cap_mb == chosen)
        best = min(group, key=lambda r: r.measured_s)
        out.append(
            {
                "model": model,
                "transport": transport,
                "world_size": world,
                "host": host,
                "recommended_cap_mb": recommended.bucket_cap_mb,
                "measured_best_cap_mb": best.bucket_cap_mb,
                "recommended_vs_best_pct": (recommended.measured_s / best.measured_s - 1) * 100,
                "within_5pct": recommended.measured_s <= best.measured_s * 1.05,
            }
        )
    return out


def _layout_mismatch(run: dict[str, Any], prep: Any) -> str | None:
    """None when the run logged no layout; "" when the predicted layout equals it; else a description."""
    measured = run.get("bucket_param_indices")
    if not measured:
        return None
    predicted = [list(b.param_indices) for b in prep.buckets]
    if [list(map(int, b)) for b in measured] == predicted:
        return ""
    sizes = [b.grad_bytes for b in prep.buckets]
    return f"{run_label(run)}: predicted {len(predicted)} buckets {sizes[:4]}..., measured {len(measured)} {run.get('bucket_sizes_bytes', [])[:4]}..."


def validate(
    data_dirs: Sequence[str],
    calibration: Calibration | None,
    max_mape_pct: float = 5.0,
    max_error_pct: float = 15.0,
    max_allreduce_error_pct: float = 10.0,
    min_recommendation_share: float = 0.9,
    normalise_launches: bool = False,
    jitter_from_profile: bool = False,
) -> Validation:
    """Predict the measured runs outside the calibration's subset; without a calibration, with the
    scenario defaults (every run held out). Multi-node runs need the calibration's network fit.
    ``jitter_from_profile``: every rank's compute varies step to step as its profile measured."""
    measured = load_measurements(data_dirs)
    require_runs(measured, data_dirs)
    if calibration is not None:
        # before any prediction: the runs of another GPU kind are refused in one line, with what to run instead
        check_gpu(calibration, [run_gpu(run) for run in measured.runs], "the runs' GPU (fingerprint.gpu_name)",
                  option="--calibration ")
    subset = calibration.calibration_subset if calibration is not None else {}
    data_dir = calibration.data_dir if calibration is not None else None
    rows: list[RunRow] = []
    layouts: list[str | None] = []
    for run in measured.runs:
        _require_network(run, calibration)
        row, layout = _predict(run, _profile_of(measured.profiles, run), calibration,
                               held_out=not in_calibration_subset(run, subset, data_dir),
                               jitter_from_profile=jitter_from_profile)
        rows.append(row)
        layouts.append(layout)
    if normalise_launches:
        rows = normalised_by_reference(rows, measured.runs)
    return _report(measured, rows, layouts, calibration, subset, None, [],
                   (max_mape_pct, max_error_pct, max_allreduce_error_pct, min_recommendation_share),
                   jitter_from_profile=jitter_from_profile)


def cross_validate(
    data_dirs: Sequence[str],
    cross: str,
    calibration_caps: Sequence[float] | None = None,
    max_mape_pct: float = 5.0,
    max_error_pct: float = 15.0,
    max_allreduce_error_pct: float = 10.0,
    min_recommendation_share: float = 0.9,
    log: Callable[[str], None] | None = None,
    jobs: int = 1,
    fix_measured_stretch: bool = False,
    normalise_launches: bool = False,
    idle_start_wait: bool = False,
    jitter_from_profile: bool = False,
    prune_undetermined: bool = False,
    comm_terms_fitted_models_only: bool = False,
    caps_given: bool = True,
) -> Validation:
    """Leave one model, launch or host out: each part's runs are predicted by a calibration fitted on
    everything else (all-reduce sweeps and plain DDP runs at ``calibration_caps``, None: every cap;
    with ``caps_given`` False they are a default, of which the caps not measured are left out).

    A part whose link class has no run left to fit its overheads on is not predicted; the report says
    so (``skipped``) rather than predicting it from defaults.
    """
    if cross not in CROSS_MODES:
        raise ScenarioError(f"expected one of {', '.join(CROSS_MODES)}, got {cross!r}", field="--cross")
    check_stretch_options(fix_measured_stretch, idle_start_wait)  # before minutes of loading and fitting
    measured = load_measurements(data_dirs)
    require_runs(measured, data_dirs)
    calibration_caps = calibration_caps_for(calibration_caps, measured.runs, ", ".join(data_dirs), caps_given, log)
    key = _FOLD_KEYS[cross]
    parts = sorted({key(run) for run in measured.runs})
    if len(parts) < 2:
        raise ScenarioError(f"leave-one-{cross}-out needs runs of at least two {cross}s; found {len(parts)}",
                            file=", ".join(data_dirs), field="--cross")
    rows: list[RunRow] = []
    layouts: list[str | None] = []
    folds: list[dict[str, Any]] = []
    skipped = list(measured.skipped)
    caps = None if calibration_caps is None else list(calibration_caps)
    if log:
        log(f"leave-one-{cross}-out: {len(parts)} folds, {jobs} at a time")
    # folds are independent fits of seconds to minutes each: one process per core
    with _pool(jobs) as pool:
        for fold_rows, fold_layouts, fold, fold_skipped in pool.map(
            _fold, [_FoldJob(measured, cross, part, caps, fix_measured_stretch, idle_start_wait, jitter_from_profile,
                             prune_undetermined, comm_terms_fitted_models_only) for part in parts]
        ):
            rows += fold_rows
            layouts += fold_layouts
            folds.append(fold)
            skipped += fold_skipped
            if log:
                log(f"fold {fold['held_out']}: fitted on {fold['training_runs']} runs and "
                    f"{fold['training_sweeps']} sweeps, predicted {len(fold_rows)} runs")
    if normalise_launches:
        rows = normalised_by_reference(rows, measured.runs)
    subset = {"bucket_cap_mb": "all" if calibration_caps is None else sorted(float(c) for c in calibration_caps)}
    return _report(measured, rows, layouts, None, subset, cross, folds,
                   (max_mape_pct, max_error_pct, max_allreduce_error_pct, min_recommendation_share), skipped,
                   jitter_from_profile=jitter_from_profile, comm_terms_fitted_models_only=comm_terms_fitted_models_only)


@contextmanager
def _pool(jobs: int) -> Iterator[Any]:
    """Worker processes for the folds that stop at once on Ctrl-C: waiting for the folds in progress
    (the executor's default) took 22.5 s; a fold holds nothing to clean up, so its worker is killed
    (the sweep's way, ``planning.sweep._run_processes``)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

    from ddpsim.planning.sweep import _die_with_parent

    if jobs == 1:  # no worker processes: a thread pool of one runs the folds in order, here
        with ThreadPoolExecutor(1) as threads:
            yield threads
        return
    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(jobs, initializer=_die_with_parent)
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        started = [p for p in multiprocessing.active_children() if p not in before]
        for process in started:
            process.kill()
        for process in started:
            process.join(timeout=1.0)
        raise
    pool.shutdown()


class _FoldJob(NamedTuple):
    """One fold of a cross-validation, as handed to a worker process: the data, the part held out and
    how the calibration without it is fitted and used."""

    measured: Measurements
    cross: str
    part: str
    caps: list[float] | None
    fix_measured_stretch: bool
    idle_start_wait: bool
    jitter_from_profile: bool
    prune_undetermined: bool
    comm_terms_fitted_models_only: bool


def _fold(
    job: _FoldJob,
) -> tuple[list[RunRow], list[str | None], dict[str, Any], list[tuple[str, str]]]:
    """Fit without ``part``, predict ``part``'s runs (the fit itself without jitter, as ``calibrate``)."""
    measured, cross, part, caps = job.measured, job.cross, job.part, job.caps
    fix_stretch, idle_start_wait, jitter, prune = (job.fix_measured_stretch, job.idle_start_wait,
                                                   job.jitter_from_profile, job.prune_undetermined)
    key = _FOLD_KEYS[cross]
    held = [r for r in measured.runs if key(r) == part]
    train_runs = [r for r in measured.runs if key(r) != part]
    train_samples = [s for s in measured.samples if _sample_key(cross, s) != part]
    fold: dict[str, Any] = {
        "held_out": part, "runs": len(held), "training_runs": len(train_runs),
        "training_sweeps": len({(s.source, s.launch_id, s.world_size, s.nodes, s.algorithm) for s in train_samples}),
    }
    train_timing = [r for r in measured.timing_runs if key(r) != part]
    data = calibrate(train_samples, train_runs, measured.profiles, caps, classes={run_class(r) for r in held},
                     timing_runs=train_timing, fix_measured_stretch=fix_stretch, idle_start_wait=idle_start_wait,
                     prune_undetermined=prune, comm_terms_fitted_models_only=job.comm_terms_fitted_models_only,
                     net_probes=[p for p in measured.net_probes if _sample_key(cross, p) != part])
    fold["warnings"] = [w for c in data["overheads"].values() for w in c.get("warnings", [])]
    calibration = calibration_from_dict(data, f"<fold without {cross} {part}>")
    rows, layouts, skipped = [], [], []
    for run in held:
        why = _unpredictable(run, calibration)
        if why:
            skipped.append((run_label(run), f"fold {part}: {why}"))
            continue
        row, layout = _predict(run, _profile_of(measured.profiles, run), calibration, held_out=True, fold=str(part),
                               jitter_from_profile=jitter)
        rows.append(row)
        layouts.append(layout)
    return rows, layouts, fold, skipped


_FOLD_KEYS: dict[str, Callable[[dict[str, Any]], str]] = {
    "model": lambda run: str(run["model"]),
    "launch": launch_key,
    "host": host_of,
}


def _sample_key(cross: str, sample: AllReduceSample | dict[str, Any]) -> str | None:
    """The part an all-reduce sweep (or a network probe record) belongs to: sweeps measure links, not
    models, so they stay in every model fold; a launch's or host's own sweeps leave with it."""
    if cross == "model":
        return None
    if cross == "launch":
        return launch_key(sample)
    return host_of(sample)


def _unpredictable(run: dict[str, Any], calibration: Calibration) -> str:
    nodes, world = run_nodes(run), int(run["world_size"])
    if nodes > 1 and calibration.link_fit(INTER_NODE_LINK_CLASS, world, nodes) is None:
        return "no multi-node sweeps outside it to fit the network on"
    if nodes < world and calibration.link_fit(str(run["transport"]), world, nodes) is None:
        return f"no {run['transport']} sweeps outside it to fit the link on"
    if not calibration.has_overheads(run_class(run)):
        return f"no {run_class(run)} runs outside it to fit the DDP overheads on"
    return ""


def _require_network(run: dict[str, Any], calibration: Calibration | None) -> None:
    """A multi-node run predicted on a network nobody measured would be a silent default: refuse it."""
    nodes = run_nodes(run)
    if nodes == 1:
        return
    if calibration is None or calibration.link_fit(INTER_NODE_LINK_CLASS, int(run["world_size"]), nodes) is None:
        where = "no calibration" if calibration is None else f"calibration {calibration.source} has no network fit"
        raise ScenarioError(
            f"a run across {nodes} nodes, and {where} ('{INTER_NODE_LINK_CLASS}'): calibrate on this campaign's "
            "multi-node sweeps first (ddpsim calibrate DATA_DIR)",
            file=run.get("_source"), field=f"line {run.get('_line', '?')}.nodes",
        )


def _predict(
    run: dict[str, Any], profile: str, calibration: Calibration | None, held_out: bool, fold: str = "",
    jitter_from_profile: bool = False,
) -> tuple[RunRow, str | None]:
    from ddpsim.simulation import prepare, simulate

    prep = prepare(run_scenario(run, profile, calibration, jitter_from_profile=jitter_from_profile))
    result = simulate(prep)
    row = RunRow(
        model=run["model"],
        transport=run["transport"],
        world_size=int(run["world_size"]),
        bucket_cap_mb=float(run["bucket_cap_mb"]),
        measured_s=float(run["step_s_median"]),
        measured_p10_s=run.get("step_s_p10"),
        measured_p90_s=run.get("step_s_p90"),
        predicted_s=result.step_time_s,
        predicted_p10_s=result.step_time_p10_s,
        predicted_p90_s=result.step_time_p90_s,
        held_out=held_out,
        launch_id=str(run.get("launch_id", "")),
        option=str(run.get("variant") or "none"),
        nodes=run_nodes(run),
        host=host_of(run),
        uneven_shape=uneven_shape(run),
        fold=fold,
        measured_peak_bytes=measured_peak_bytes(run),
        predicted_peak_bytes=result.memory_bytes.get("total"),
    )
    return row, _layout_mismatch(run, prep)


def measured_peak_bytes(run: dict[str, Any]) -> float | None:
    """A run record's measured peak allocated memory, the max over ranks (the record contract's ``memory``
    object; older records lack it)."""
    memory = run.get("memory")
    if not isinstance(memory, dict):
        return None
    peak = memory.get("peak_allocated_bytes")
    per_rank = [r.get("peak_allocated_bytes") for r in memory.get("per_rank") or [] if isinstance(r, dict)]
    values = [float(v) for v in (peak, *per_rank) if isinstance(v, int | float) and not isinstance(v, bool)]
    return max(values) if values else None


def _fingerprint(run: dict[str, Any]) -> str:
    fp = run.get("fingerprint", {})
    return (f"{fp.get('gpu_count', run['world_size'])} x {fp.get('gpu_name', '?')}, driver {fp.get('driver', '?')}, "
            f"torch {fp.get('torch', '?')}, NCCL {fp.get('nccl', '?')}")


def _report(
    measured: Measurements,
    rows: list[RunRow],
    layouts: list[str | None],
    calibration: Calibration | None,
    subset: dict[str, Any],
    cross: str | None,
    folds: list[dict[str, Any]],
    tolerances: tuple[float, float, float, float],
    skipped: list[tuple[str, str]] | None = None,
    jitter_from_profile: bool = False,
    comm_terms_fitted_models_only: bool = False,
) -> Validation:
    checked = [m for m in layouts if m is not None]
    result = Validation(
        rows=rows,
        allreduce=_check_allreduce(measured.samples, calibration) if calibration is not None else [],
        # only held-out runs: the calibration subset's step times were fitted
        recommendation=_recommendations([r for r in rows if r.held_out]),
        layouts_checked=len(checked),
        layout_mismatches=[m for m in checked if m],
        fingerprints=sorted({_fingerprint(run) for run in measured.runs}),
        calibration_subset=subset,
        skipped=measured.skipped if skipped is None else skipped,
        noise=fit_noise(measured.runs),
        cross=cross,
        folds=folds,
        profile_warnings=_profile_warnings(measured.runs, measured.profiles),
        launch_drift=launch_drift(measured.runs),
        jitter_from_profile=jitter_from_profile,
        comm_terms_fitted_models_only=comm_terms_fitted_models_only,
    )
    # the tolerances read the report's own groupings (per link class, held-out runs), so they come last
    result.failures = _failures(result, *tolerances)
    return result


def launch_levels(runs: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Per launch, its level against other launches of the same reference configuration (the harness
    runs one first and last in every launch): the launch's reference step over the median of that
    configuration's reference steps across launches. Only configurations measured in two or more
    launches give a level; the others are absent (level 1)."""
    from statistics import median

    references: dict[str, dict[str, float]] = defaultdict(dict)
    for run in runs:
        if run.get("is_reference"):
            references[run_label(run)][launch_key(run)] = float(run["step_s_median"])
    levels = {}
    for by_launch in references.values():
        if len(by_launch) >= 2:
            middle = median(by_launch.values())
            levels.update({launch: step / middle for launch, step in by_launch.items()})
    return levels


def normalised_by_reference(rows: Sequence[RunRow], runs: Sequence[dict[str, Any]]) -> list[RunRow]:
    """Each run's measured step divided by its launch's level (``launch_levels``), so that a launch
    whose machine ran faster or slower as a whole is compared at the common level."""
    from dataclasses import replace

    levels = launch_levels(runs)
    return [replace(r, measured_s=r.measured_s / levels[key], launch_level=levels[key])
            if (key := r.launch) in levels else r for r in rows]


def launch_drift(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per launch with a reference configuration (measured first and last in the launch): how far the
    machine's level moved from start to end, beside the launch's own round-to-round spread (the median
    over its configurations of (largest - smallest) / smallest round median). A drift past that spread
    means the launch's runs carry more than their own noise; ``drifted`` says so."""
    from statistics import median

    by_launch: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        by_launch[launch_key(run)].append(run)
    out = []
    for launch, group in sorted(by_launch.items()):
        reference = next((r for r in group if r.get("is_reference")), None)
        if reference is None:
            continue
        rounds = reference.get("rounds") or []
        start = [r["step_s_median"] for r in rounds if r.get("position") == "reference_start" and r.get("step_s_median")]
        end = [r["step_s_median"] for r in rounds if r.get("position") == "reference_end" and r.get("step_s_median")]
        spreads = [
            (max(m) - min(m)) / min(m)
            for m in ([x for x in (r.get("round_medians_s") or []) if x] for r in group)
            if len(m) >= 2 and min(m) > 0
        ]
        if not start or not end or not spreads:
            continue
        drift, spread = end[-1] / start[0] - 1, median(spreads)
        out.append({"launch": launch, "reference": run_label(reference), "drift_pct": drift * 100,
                    "round_spread_pct": spread * 100, "drifted": abs(drift) > spread})
    return out


PROFILE_SPREAD_WARNING = 1.25  # p90 / p10 of a profile's backward time


PROFILE_VS_NOSYNC_WARNING = 1.10  # profile step / the runs' own compute-only (no_sync) step


def predict_run(measured: Measurements, run: dict[str, Any], calibration: Calibration | None) -> RunRow:
    """One measured run of ``measured`` predicted as held out, with its campaign's profile (for studies
    that vary the calibration per run, such as a network scaled per launch)."""
    return _predict(run, _profile_of(measured.profiles, run), calibration, held_out=True)[0]


def _profile_of(profiles: Profiles, run: dict[str, Any]) -> str:
    path = profiles.for_run(run)
    assert path is not None, "load_measurements keeps only runs with a profile in their campaign"
    return path


def _profile_warnings(runs: Sequence[dict[str, Any]], profiles: Profiles) -> list[str]:
    """Profiles that cannot carry an accurate prediction, said beside the errors rather than left to
    be read as simulator error: one whose backward time varies widely from step to step (a host-bound
    model whose Python and launch overheads fluctuate), and one slower than the compute-only step
    (DDP under ``no_sync``) the runs themselves measured, which no communication model can undo."""
    from statistics import median

    from ddpsim.jsonfile import read_json_object

    out = []
    by_profile: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        path = profiles.for_run(run)
        if path is not None:
            by_profile.setdefault(path, []).append(run)
    for path, its_runs in sorted(by_profile.items()):
        model = str(its_runs[0]["model"])
        data = read_json_object(path, "profile")
        p10, p90 = data.get("backward_s_p10"), data.get("backward_s_p90")
        if isinstance(p10, int | float) and isinstance(p90, int | float) and p10 > 0 and p90 / p10 > PROFILE_SPREAD_WARNING:
            out.append(f"profile of {model}: backward p10 {p10 * 1e3:.1f} ms, p90 {p90 * 1e3:.1f} ms over its steps "
                       f"({path}): its runs cannot be predicted closer than this spread")
        nosync = [float(r["nosync_step_s_median"]) for r in its_runs if isinstance(r.get("nosync_step_s_median"), int | float)]
        step = data.get("step_s")
        if nosync and isinstance(step, int | float) and step > PROFILE_VS_NOSYNC_WARNING * median(nosync):
            out.append(f"profile of {model}: step {step * 1e3:.1f} ms at world size 1, but the runs' own compute-only "
                       f"(no_sync) step is {median(nosync) * 1e3:.1f} ms ({path}): the profile is slower than the runs' "
                       "compute")
    return out


def launch_spread_pct(noise: dict[str, Any], link_class: str) -> float | None:
    """The mean |difference| between two launches of one configuration, in percent, from the measured
    launch sigma: E|ln a - ln b| = 2 sigma / sqrt(pi) for two lognormal launches."""
    sigma = (noise.get(link_class) or {}).get("launch_sigma")
    if sigma is None:
        return None
    return (math.exp(2 * sigma / math.sqrt(math.pi)) - 1) * 100


def _failures(v: Validation, max_mape: float, max_error: float, max_ar: float, min_share: float) -> list[str]:
    failures = []
    if not v.held_out():
        failures.append("no held-out runs to validate against")
    for transport, rows in v.by_transport().items():
        mape = sum(abs(r.error_pct) for r in rows) / len(rows)
        worst = max(abs(r.error_pct) for r in rows)
        if mape > max_mape:
            failures.append(f"{transport}: mean absolute error {mape:.1f}% > {max_mape:g}%")
        if worst > max_error:
            failures.append(f"{transport}: maximum error {worst:.1f}% > {max_error:g}%")
    bad_ar = [r for r in v.allreduce if abs(r.error_pct) > max_ar]
    if bad_ar:
        worst_ar = max(bad_ar, key=lambda r: abs(r.error_pct))
        failures.append(
            f"all-reduce: {len(bad_ar)} of {len(v.allreduce)} sizes off by more than {max_ar:g}% "
            f"(worst {worst_ar.error_pct:+.1f}% at {worst_ar.bytes} B, {worst_ar.link_class} x{worst_ar.world_size})"
        )
    if v.recommendation:
        share = sum(r["within_5pct"] for r in v.recommendation) / len(v.recommendation)
        if share < min_share:
            failures.append(f"bucket-cap recommendation within 5% of best in {100 * share:.0f}% of groups < {100 * min_share:.0f}%")
    if v.layout_mismatches:
        failures.append(f"{len(v.layout_mismatches)} predicted bucket layouts differ from the measured ones")
    peaks = [abs(e) for e in (r.peak_error_pct for r in v.held_out()) if e is not None]
    if peaks and sum(peaks) / len(peaks) > MAX_PEAK_MEAN_ERROR_PCT:
        failures.append(f"peak memory: mean absolute error {sum(peaks) / len(peaks):.1f}% > {MAX_PEAK_MEAN_ERROR_PCT:g}%")
    if peaks and max(peaks) > MAX_PEAK_ERROR_PCT:
        failures.append(f"peak memory: maximum error {max(peaks):.1f}% > {MAX_PEAK_ERROR_PCT:g}%")
    return failures


# peak memory per GPU of held-out runs that measured it (issue targets: 10% mean, 25% max)
MAX_PEAK_MEAN_ERROR_PCT = 10.0
MAX_PEAK_ERROR_PCT = 25.0


def peak_summary(v: Validation) -> str:
    """One line on predicted against measured peak memory of the held-out runs ("" where none measured it)."""
    peaks = [r for r in v.held_out() if r.peak_error_pct is not None]
    if not peaks:
        return ""
    errors = [abs(r.peak_error_pct or 0.0) for r in peaks]
    return (f"peak memory per GPU: {len(peaks)} held-out runs measured it; mean |error| "
            f"{sum(errors) / len(errors):.1f}%, max {max(errors):.1f}% (tolerance {MAX_PEAK_MEAN_ERROR_PCT:g}% mean, "
            f"{MAX_PEAK_ERROR_PCT:g}% max)")
