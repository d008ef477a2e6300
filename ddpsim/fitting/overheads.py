"""Fit the DDP overhead terms per link class (``ddpsim calibrate``) by simulating measured runs.

The terms are fitted to a calibration subset of measured DDP runs only: the per-bucket launch cost,
compute slowed by concurrent NCCL kernels, the all-reduce stretch and the rest of ``FITTED_TERMS``.
Runs outside the subset are never looked at here: they are for ``validate``. This is the part of the
calibration that needs the simulator; the link fits (``fit.py``) do not.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from statistics import median
from typing import Any

import numpy as np

from ddpsim.calibration.file import NO_EFFECT, Calibration
from ddpsim.errors import ScenarioError
from ddpsim.fitting.curvefit import scipy_optimize
from ddpsim.fitting.measured_scenarios import run_nodes, run_scenario
from ddpsim.fitting.measurements import AllReduceSample, Profiles, campaign_of
from ddpsim.simulation import prepare, simulate

# The DDP overhead terms fitted to step times, each with the range a physical value may take.
# The in-flight limit of the launch path is not fitted: per-bucket traces show the launch path
# blocking once per step, not the sliding limit that term describes, so fitting it would only
# absorb other errors. Bounds are physical ranges, not grid edges: a fit that ends on one is reported.
FITTED_TERMS: dict[str, tuple[float, float]] = {
    "bucket_launch_s": (0.0, 500e-6),  # CPU + kernel launch of one bucket's all-reduce
    "compute_slowdown": (1.0, 3.0),  # compute beside a running NCCL kernel
    "comm_slowdown": (1.0, 20.0),  # NCCL kernel beside running compute kernels
    "allreduce_stretch": (1.0, 4.0),  # all-reduce inside DDP vs the same call alone
    "bucket_cpu_s": (0.0, 200e-6),  # the backward thread's time to launch one bucket
    "buffer_sync_s": (0.0, 10e-3),  # DDP's per-step buffer broadcast beyond its wire time
}
# The same terms with the constant stretch replaced by a wait per all-reduce started on an idle
# stream (``calibrate --idle-start-wait``, not the default). Fitted on ResNet-50 and GPT-2, the
# stretch came out 1.8 to 3.9 on NVLink and made the communication-bound mlp-heavy 57% too slow when
# held out. The per-bucket traces of h200x4-2026-11-26 (4 GPUs, cap 25) put the extra time of an
# all-reduce inside DDP where the stream was idle when the bucket was launched (NVLink +0.75 ms
# ResNet-50, +2.4 ms GPT-2, +0.24 ms mlp-heavy over the same size alone; shm +1.8 / +4.3 / +0.5 ms)
# and much less where it was queued behind the previous bucket (shm +0.06 to +0.16 ms, NVLink
# mlp-heavy +0.13 ms): a wait per idle start (the other ranks arriving), not a factor on every call.
# Slowdown while backward compute runs beside it stays ``comm_slowdown`` (it acts only then).
# Leave-one-model-out on that campaign: NVLink 23.7% -> 13.6% mean (73.7 -> 45.4 max), but shm
# 4.5 -> 7.1% and sockets 12.1 -> 14.9% (validation/reports/idle-start-wait), hence not the default.
IDLE_WAIT_TERMS: dict[str, tuple[float, float]] = {
    **{n: r for n, r in FITTED_TERMS.items() if n != "allreduce_stretch"},
    "idle_start_wait_s": (0.0, 5e-3),  # an all-reduce started on an idle stream waiting for the other ranks
}
# the range a measured stretch is clipped to
STRETCH_RANGE = FITTED_TERMS["allreduce_stretch"]
_AT_BOUND = 1e-3  # share of a term's range within which a fitted value counts as sitting on its bound



@dataclass(frozen=True)
class FitDiagnostics:
    """How well the runs determine the fitted terms."""

    calibration_mape_pct: float  # mean |predicted / measured - 1| over the calibration runs, in %
    calibration_max_error_pct: float
    calibration_runs: int
    fitted_terms: list[str]  # the terms the least squares moved, in FITTED_TERMS order
    measured_terms: list[str]  # terms measured directly and held fixed
    standard_error: dict[str, float | None]  # per fitted term, in its own unit; None: not determined
    at_no_effect: list[str]  # fitted terms that ended at their no-effect value
    pruned_terms: list[str] | None = None  # fit_overheads_pruned only: the terms it dropped


@dataclass(frozen=True)
class OverheadFit:
    """What ``fit_overheads`` found for one link class: the values, how well they are determined, and
    what to tell the user, apart. ``entry()`` is the calibration file's form of it."""

    values: dict[str, Any]  # every overhead term of NO_EFFECT: fitted, measured, or at no effect
    # the models these terms were fitted on: apply.apply_calibration names them for any other model (and,
    # with comm_terms_fitted_models_only, leaves file.NOT_CARRIED at no effect for it)
    models: list[str]
    diagnostics: FitDiagnostics
    warnings: list[str]  # each a sentence for the user: a term on its upper bound, an undetermined fit

    def entry(self) -> dict[str, Any]:
        """The ``overheads.<link class>`` entry of a calibration file (``file.py`` reads it back)."""
        diagnostics = {k: v for k, v in asdict(self.diagnostics).items() if k != "pruned_terms" or v is not None}
        return {**self.values, **diagnostics, "models": self.models, "warnings": self.warnings}


def _mape(pairs: Sequence[tuple[float, float]]) -> float:
    return sum(abs(p / m - 1) for p, m in pairs) / len(pairs) * 100


def fit_overheads(
    runs: Sequence[dict[str, Any]],
    profiles: Profiles,
    link_calibration: Calibration,
    starts: Sequence[dict[str, float]] | None = None,
    measured_terms: dict[str, float] | None = None,
    terms: dict[str, tuple[float, float]] | None = None,
) -> OverheadFit:
    """Bounded least squares (scipy) of the relative step-time error over ``terms`` (default
    ``FITTED_TERMS``; ``IDLE_WAIT_TERMS`` for the idle-start wait in place of the stretch).

    Terms no run can tell apart (a model without buffers says nothing of ``buffer_sync_s``) stay at
    their no-effect value. The entry reports each term's standard error from the Jacobian at the
    optimum, and a warning for every term that ends on a bound of its physical range.
    """
    least_squares = scipy_optimize().least_squares


    with_profile = [(r, profiles.for_run(r)) for r in runs]
    runs = [r for r, path in with_profile if path is not None]
    if not runs:
        raise ScenarioError("no calibration runs with a measured profile")
    prepared = [prepare(run_scenario(run, path, link_calibration)) for run, path in with_profile if path is not None]
    measured = np.array([float(run["step_s_median"]) for run in runs])
    ranges = FITTED_TERMS if terms is None else terms
    fixed = dict(measured_terms or {})  # terms measured directly are not fitted
    names = [n for n in ranges if n not in fixed
             and (n != "buffer_sync_s" or any(p.workload.buffer_bytes > 0 for p in prepared))]
    low = np.array([ranges[n][0] for n in names])
    span = np.array([ranges[n][1] - ranges[n][0] for n in names])

    def values(unit: np.ndarray) -> dict[str, Any]:
        # the optimiser works on each term scaled to [0, 1] of its range, so one step size suits all
        return {**NO_EFFECT, **fixed, **{n: float(v) for n, v in zip(names, low + unit * span, strict=True)}}

    def residuals(unit: np.ndarray) -> np.ndarray:
        params = values(unit)
        predicted = []
        for prep in prepared:
            overheads = replace(prep.scenario.overheads, **params)
            predicted.append(simulate(replace(prep, scenario=replace(prep.scenario, overheads=overheads))).step_time_s)
        return np.array(predicted) / measured - 1.0

    # the terms trade off (slower compute vs slower communication both lengthen backward), so start
    # from several points and keep the best
    default_starts = [{}, {"comm_slowdown": 4.0}, {"compute_slowdown": 1.5, "bucket_launch_s": 40e-6, "idle_start_wait_s": 500e-6}]
    finishes = []
    for start in starts if starts is not None else default_starts:
        x0 = np.array([(start.get(n, NO_EFFECT[n]) - lo) / sp for n, lo, sp in zip(names, low, span, strict=True)])
        x0 = np.clip(x0, 0.0, 1.0)
        finishes.append(least_squares(residuals, x0, bounds=(0.0, 1.0), diff_step=1e-2, x_scale=1.0, max_nfev=60))
    best = min(finishes, key=lambda r: float(np.sum(r.fun**2)))
    params = values(best.x)
    errors = np.abs(best.fun) * 100
    standard_error = _standard_errors(best.jac, best.fun, names, span)
    at_no_effect = [n for n, x in zip(names, best.x, strict=True) if x < _AT_BOUND]
    warnings = [
        f"{n} = {params[n]:.3g} sits on the upper bound of its physical range {ranges[n]}: "
        "the runs push it further, so a mechanism is probably missing from the model"
        for n, x in zip(names, best.x, strict=True)
        # every lower bound is the term's no-effect value, an honest result; the upper bound is not
        if x > 1 - _AT_BOUND
    ] + _determination_warnings(len(runs), names, params, standard_error, at_no_effect)
    diagnostics = FitDiagnostics(
        calibration_mape_pct=float(errors.mean()),
        calibration_max_error_pct=float(errors.max()),
        calibration_runs=len(runs),
        fitted_terms=names,
        measured_terms=sorted(fixed),
        standard_error=standard_error,
        at_no_effect=at_no_effect,
    )
    return OverheadFit(values=params, models=sorted({str(run["model"]) for run in runs}), diagnostics=diagnostics,
                       warnings=warnings)


def fit_overheads_pruned(
    runs: Sequence[dict[str, Any]],
    profiles: Profiles,
    link_calibration: Calibration,
    measured_terms: dict[str, float] | None = None,
    terms: dict[str, tuple[float, float]] | None = None,
) -> OverheadFit:
    """``fit_overheads``, then backward elimination of the terms the runs do not determine
    (``calibrate --prune-undetermined``): each round drops every term that ended at its no-effect value
    (it changes no prediction) and, of the rest, the one whose standard error exceeds its effect by the
    largest factor, and refits, until every remaining term whose standard error is known has an effect
    larger than it. A term is never dropped on an unknown standard error (as many runs as terms: the
    warning says so instead), and the last term is kept, determined or not.
    Fewer free terms than runs is the aim: with 6 runs for 6 terms a fit reproduces every run whatever
    the mechanism. The dropped terms stay at no effect and are listed in ``pruned_terms``. Not the
    default: on campaigns A to D it predicted held-out hosts worse (NVLink 5.8% against 4.8% mean,
    validation/reports/prune-undetermined): the terms are undetermined one by one, not together."""
    ranges = dict(FITTED_TERMS if terms is None else terms)
    pruned: list[str] = []
    while True:
        fit = fit_overheads(runs, profiles, link_calibration, measured_terms=measured_terms, terms=ranges)
        names = fit.diagnostics.fitted_terms
        drop = [n for n in names if n in fit.diagnostics.at_no_effect]
        ratios = _error_over_effect(names, fit.values, fit.diagnostics.standard_error, drop)
        worst = max(ratios, key=lambda n: ratios[n], default=None)
        if worst is not None and ratios[worst] > 1.0:
            drop.append(worst)
        if not drop or len(drop) == len(names):
            return replace(fit, diagnostics=replace(fit.diagnostics, pruned_terms=pruned))
        pruned += drop
        ranges = {n: r for n, r in ranges.items() if n not in drop}


def _error_over_effect(names: Sequence[str], params: dict[str, Any], standard_error: dict[str, float | None],
                       skip: Sequence[str]) -> dict[str, float]:
    """Each term's standard error over its effect (its distance from the no-effect value), where both are
    known and the effect is not zero; above 1 the runs cannot tell the term from no effect."""
    out = {}
    for n in names:
        se = standard_error.get(n)
        effect = abs(float(params[n]) - float(NO_EFFECT[n]))
        if n not in skip and se is not None and effect > 0:
            out[n] = se / effect
    return out


def _determination_warnings(n_runs: int, names: Sequence[str], params: dict[str, Any],
                            standard_error: dict[str, float | None], at_no_effect: Sequence[str]) -> list[str]:
    """Where the runs do not determine the fitted terms: as many terms as runs (the fit then reproduces
    every run whatever the mechanism, and no uncertainty can be computed), or a term whose effect is
    smaller than its own standard error (the runs cannot tell it from no effect). A term that ended at
    its no-effect value is an honest result, not a warning."""
    if n_runs <= len(names):
        return [f"{n_runs} runs for {len(names)} fitted terms: nothing is left to check the fit, so its "
                "error on these runs says nothing and the terms' uncertainty is unknown; give more caps "
                "(--calibration-caps) or models"]
    undetermined = [f"{n} = {params[n]:.3g} +- {standard_error[n]:.2g}"
                    for n, ratio in _error_over_effect(names, params, standard_error, at_no_effect).items() if ratio > 1]
    if not undetermined:
        return []
    # one line per fit: a user reads which terms, not the same sentence once per term
    return [f"{len(undetermined)} of {len(names)} fitted terms have an effect smaller than their standard error, "
            f"so these runs cannot tell them from no effect: {'; '.join(undetermined)}"]


def measure_stretch(
    timing_runs: Sequence[dict[str, Any]], samples: Sequence[AllReduceSample]
) -> dict[str, dict[str, Any]]:
    """``allreduce_stretch`` measured, per link class: the last bucket of a step runs after backward has
    ended, so nothing computes beside it; its all-reduce inside DDP (the harness's per-bucket timing
    hook, CUDA events) over the same size called alone (the same campaign's sweep, interpolated in log
    space) is how much slower DDP's all-reduce is by itself. Median over the runs; per-bucket traces of
    campaigns A-D gave 1.4 to 2.2 on NVLink and 1.0 to 1.1 on shared memory and sockets."""
    # per campaign folder, class and GPU count: size -> the median of its sweeps' times (a folder may
    # hold NCCL's default and a forced Ring sweep of the same sizes)
    sweeps: dict[tuple[str, str, int], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in samples:
        if s.nodes == 1 and s.algorithm in (None, "ring"):
            sweeps[(campaign_of(s.source), s.link_class, s.world_size)][s.bytes].append(s.time_s)

    def alone_s(key: tuple[str, str, int], size: int) -> float | None:
        rows = sorted((b, median(ts)) for b, ts in sweeps.get(key, {}).items())
        if len(rows) < 2 or not rows[0][0] <= size <= rows[-1][0]:
            return None
        sizes, times = np.log([b for b, _ in rows]), np.log([t for _, t in rows])
        return float(np.exp(np.interp(np.log(size), sizes, times)))

    ratios: dict[str, list[float]] = defaultdict(list)
    for run in timing_runs:
        buckets = run.get("per_bucket") or []
        if not buckets or run_nodes(run) > 1:
            continue
        last = buckets[-1]
        key = (campaign_of(str(run.get("_source", ""))), str(run["transport"]), int(run["world_size"]))
        alone = alone_s(key, int(last["bytes"]))
        duration = float(last["end_s"]) - float(last["start_s"])
        if alone and duration > 0:
            ratios[str(run["transport"])].append(duration / alone)
    return {
        link_class: {"value": min(max(median(values), STRETCH_RANGE[0]), STRETCH_RANGE[1]), "runs": len(values)}
        for link_class, values in ratios.items()
    }


def _standard_errors(jac: Any, residuals: Any, names: Sequence[str], span: Any) -> dict[str, float | None]:
    """sqrt(diag(s^2 (J^T J)^-1)) in each term's own unit; None where the runs cannot determine it."""
    n_runs, n_terms = jac.shape
    if n_runs <= n_terms:
        return {n: None for n in names}
    s2 = float(np.sum(residuals**2)) / (n_runs - n_terms)
    normal = jac.T @ jac
    out: dict[str, float | None] = {}
    try:
        cov = np.linalg.pinv(normal) * s2
    except np.linalg.LinAlgError:
        return {n: None for n in names}
    for i, name in enumerate(names):
        determined = float(np.abs(jac[:, i]).max()) > 1e-9
        out[name] = float(np.sqrt(max(cov[i, i], 0.0)) * span[i]) if determined else None
    return out
