"""Measured data in, one calibration out: link classes, DDP overheads per class, measured noise.

``ddpsim calibrate`` writes what this builds; every cross-validation fold of ``ddpsim validate``
builds one the same way from the data its held-out part is not in.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ddpsim.calibration.file import FITTED_MODELS_ONLY_KEY, SCHEMA, Calibration, calibration_from_dict
from ddpsim.errors import ScenarioError
from ddpsim.fitting.device import refuse_dry_runs
from ddpsim.fitting.fit import fit_links, fit_noise
from ddpsim.fitting.measured_scenarios import catalog_gpu, run_class, run_label, run_nodes
from ddpsim.fitting.measurements import (
    AllReduceSample,
    Profiles,
    find_data_files,
    read_compute_slowdowns,
    read_ddp_runs,
    read_harness_allreduce,
)
from ddpsim.fitting.netprobe import read_net_probes
from ddpsim.fitting.overheads import IDLE_WAIT_TERMS, fit_overheads, fit_overheads_pruned, measure_stretch
from ddpsim.hardware.catalog import get_gpu
from ddpsim.jsonfile import open_data
from ddpsim.scenario.link_kinds import INTER_NODE_LINK_CLASS
from ddpsim.scenario.schema import DDPSpec

# DDP's own arguments a run may record, with PyTorch's default from the scenario schema: a run with
# any other value is not a plain run, and the overheads are fitted on plain runs only, so that no
# option's cost is absorbed into them
DDP_OPTION_DEFAULTS: dict[str, Any] = {
    name: getattr(DDPSpec(), name)
    for name in ("gradient_as_bucket_view", "comm_hook", "grad_accumulation_steps", "find_unused_parameters",
                 "static_graph")
}


@dataclass
class Measurements:
    """Everything measured under one or more campaign folders, and what could not be used, with why."""

    samples: list[AllReduceSample]
    runs: list[dict[str, Any]]
    profiles: Profiles
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (run label, reason)
    timing_runs: list[dict[str, Any]] = field(default_factory=list)  # per-bucket traces, not predicted
    compute_slowdowns: list[tuple[str, float]] = field(default_factory=list)  # micro-benchmark (class, ratio)
    net_probes: list[dict[str, Any]] = field(default_factory=list)  # point-to-point patterns across nodes


def timing_instrumented(run: dict[str, Any]) -> bool:
    """Runs with the harness's per-bucket timing hook (older campaigns stored it as comm_hook "timing")
    measure the hook's own cost, not DDP's: they are for per-bucket analysis only."""
    return bool(run.get("timing_hook")) or run.get("comm_hook") == "timing"


def is_plain(run: dict[str, Any]) -> bool:
    # a record leaves an option out or null (the harness writes comm_hook null for no hook) at its default
    return all(run.get(key) is None or run[key] == default for key, default in DDP_OPTION_DEFAULTS.items())


def noise_runs(data_dirs: Sequence[str]) -> list[dict[str, Any]]:
    """Every measured DDP run under ``data_dirs`` (no profile needed): what ``fit_noise`` reads when the
    spread of a step one would measure comes from other campaigns, such as allocations of other machines
    of the same kind."""
    runs: list[dict[str, Any]] = []
    for data_dir in data_dirs:
        if not os.path.isdir(data_dir):
            raise ScenarioError("measurement folder not found", file=data_dir, field="--noise-from")
        paths = find_data_files(data_dir)["ddp_runs"]
        if not paths:
            raise ScenarioError("no ddp_runs.jsonl under this folder", file=data_dir, field="--noise-from")
        runs += [run for path in paths for run in read_ddp_runs(path) if run.get("status") == "ok"]
    return runs


def gpu_of_folder(folder: str) -> str | None:
    """The catalog GPU kind of a folder's measurements, from its DDP runs' or sweeps' fingerprints (None:
    none names one); a folder of several kinds is refused."""
    files = find_data_files(folder)
    kinds: set[str] = set()
    for path in files["ddp_runs"] + files["allreduce"]:
        with open_data(path) as handle:
            for line in handle:
                try:
                    record = json.loads(line) if line.strip() else {}
                except json.JSONDecodeError:
                    continue  # the readers name a bad line; this only looks for the GPU
                name = (record.get("fingerprint") or {}).get("gpu_name") if isinstance(record, dict) else None
                if name:
                    kinds.add(catalog_gpu(str(name)))
    if len(kinds) > 1:
        raise ScenarioError(f"measured on {len(kinds)} GPU kinds ({', '.join(sorted(kinds))}): one calibration is "
                            "one kind's; calibrate each kind's folders apart", file=folder, field="fingerprint.gpu_name")
    return kinds.pop() if kinds else None


def measured_on(data_dirs: Sequence[str], samples: Sequence[AllReduceSample], runs: Sequence[dict[str, Any]],
                link_classes: dict[str, Any]) -> dict[str, Any] | None:
    """The calibration's ``measured_on``: GPU kind, GPU counts, link classes (None: no folder names its GPU,
    as nccl-tests output given alone does not)."""
    kinds = {g for g in (gpu_of_folder(d) for d in data_dirs) if g}
    if len(kinds) != 1:
        if kinds:
            raise ScenarioError(f"the folders were measured on {len(kinds)} GPU kinds ({', '.join(sorted(kinds))})",
                                file=", ".join(data_dirs), field="fingerprint.gpu_name")
        return None
    counts = sorted({int(s.world_size) for s in samples} | {int(r["world_size"]) for r in runs})
    return {"gpu": get_gpu(kinds.pop()).name, "gpu_counts": counts, "link_classes": sorted(link_classes)}


def load_measurements(data_dirs: Sequence[str]) -> Measurements:
    """Every campaign folder under ``data_dirs``; runs that cannot be predicted are listed with why."""
    samples: list[AllReduceSample] = []
    runs: list[dict[str, Any]] = []
    profile_paths: list[str] = []
    slowdowns: list[tuple[str, float]] = []
    skipped: list[tuple[str, str]] = []
    net_probes: list[dict[str, Any]] = []
    refuse_dry_runs(data_dirs)  # whatever the caller allows: a CPU dry run fits and validates nothing
    for data_dir in data_dirs:
        files = find_data_files(data_dir)
        if not files["ddp_runs"] and not files["allreduce"]:
            raise ScenarioError("no ddp_runs.jsonl or allreduce.jsonl under this folder", file=data_dir)
        samples += [s for path in files["allreduce"] for s in read_harness_allreduce(path, skipped)]
        slowdowns += [x for path in files["microbench"] for x in read_compute_slowdowns(path)]
        net_probes += [x for path in files["netprobe"] for x in read_net_probes(path)]
        profile_paths += files["profiles"]
        for path in files["ddp_runs"]:
            for run in read_ddp_runs(path, with_failed=True):
                if run.get("status") != "ok":
                    skipped.append((f"{path}:{run['_line']}", f"status {run.get('status')!r}: {run.get('error') or 'no step time'}"))
                else:
                    runs.append(run)
    profiles = Profiles.from_paths(profile_paths)
    usable, timing = [], []
    for run in runs:
        if timing_instrumented(run):
            timing.append(run)
            skipped.append((run_label(run), "per-bucket timing hook (its cost is the instrument's; its traces "
                                            "measure the all-reduce stretch)"))
        elif profiles.for_run(run) is None:
            skipped.append((run_label(run), "no measured profile of this model in its campaign folder"))
        else:
            usable.append(run)
    return Measurements(samples, usable, profiles, skipped, timing, slowdowns, net_probes)


def calibrate(
    samples: Sequence[AllReduceSample],
    runs: Sequence[dict[str, Any]],
    profiles: Profiles,
    calibration_caps: Sequence[float] | None,
    links_only: bool = False,
    classes: set[str] | None = None,
    log: Callable[[str], None] | None = None,
    timing_runs: Sequence[dict[str, Any]] = (),
    fix_measured_stretch: bool = False,
    compute_slowdowns: Sequence[tuple[str, float]] = (),
    idle_start_wait: bool = False,
    net_probes: Sequence[dict[str, Any]] = (),
    prune_undetermined: bool = False,
    comm_terms_fitted_models_only: bool = False,
) -> dict[str, Any]:
    """The calibration file's content. Overheads are fitted per link class on the plain runs whose cap
    is in ``calibration_caps`` (None: every cap); ``classes`` limits the overhead fits to those classes.
    Noise is measured on every run given, plain or not (the spread is the measurement's, not a fit).
    The all-reduce stretch is measured from ``timing_runs``' per-bucket traces and reported; with
    ``fix_measured_stretch`` the fit takes it as given instead of fitting it. With ``idle_start_wait``
    the fit replaces the stretch by a wait per all-reduce started on an idle stream (overheads.IDLE_WAIT_TERMS).
    ``net_probes``: the harness's point-to-point patterns across nodes; the network fit takes its
    endpoint's duplex factor from them (``netprobe.duplex_factor``). With ``prune_undetermined`` the
    overhead terms the runs do not determine are dropped (``overheads.fit_overheads_pruned``). With
    ``comm_terms_fitted_models_only`` the file keeps the communication terms for the fitted models only
    (``file.NOT_CARRIED``; not the default, ``file.py`` says why)."""
    check_stretch_options(fix_measured_stretch, idle_start_wait)
    if not samples:
        raise ScenarioError("no all-reduce measurements to fit the link classes")
    links = fit_links(samples, net_probes)
    caps = None if calibration_caps is None else {float(c) for c in calibration_caps}
    chosen = [
        r for r in runs
        if is_plain(r) and (caps is None or float(r["bucket_cap_mb"]) in caps)
        and (classes is None or run_class(r) in classes) and _has_link_fits(r, links)
    ]
    overheads: dict[str, Any] = {}
    stretch = measure_stretch(timing_runs, samples)
    if chosen and not links_only:
        link_fits = calibration_from_dict({"schema": SCHEMA, "link_classes": links}, "<links fitted just now>")
        for link_class in sorted({run_class(r) for r in chosen}):
            group = [r for r in chosen if run_class(r) == link_class]
            # the measured stretch is reported beside the fit; fixing the fit to it is an option, not
            # the default: it varies between machine allocations (NVLink 1.4 to 2.2), and fixed to other
            # hosts' value it predicted held-out hosts worse (leave-one-host-out NVLink 9.6% against 4.8%, validation/reports/fixed-stretch)
            fix = fix_measured_stretch and link_class in stretch
            measured = {"allreduce_stretch": stretch[link_class]["value"]} if fix else None
            overheads[link_class] = _fit_class(group, profiles, link_fits, measured, idle_start_wait,
                                               prune_undetermined)
            if comm_terms_fitted_models_only:
                keep_comm_terms_for_fitted_models(overheads[link_class])
            if log:
                log(f"fitted DDP overheads for {link_class} on {len(group)} runs")
    return {
        "schema": SCHEMA,
        "link_classes": links,
        "overheads": overheads,
        "noise": fit_noise(runs),
        "measured_overheads": _measured_overheads(stretch, compute_slowdowns),
        "calibration_subset": {"bucket_cap_mb": sorted(caps) if caps is not None else "all"},
    }


def check_calibration_caps(caps: Sequence[float] | None, runs: Sequence[dict[str, Any]], where: str | None) -> None:
    """Every cap asked for must have plain runs to fit on: a cap typed wrong (7 for 5) would otherwise
    leave the overheads fitted on fewer runs, or on none, without a word."""
    if caps is None or not runs:
        return
    measured = sorted({float(r["bucket_cap_mb"]) for r in runs if is_plain(r)})
    missing = [c for c in caps if float(c) not in measured]
    if missing:
        listed = ", ".join(f"{c:g}" for c in measured) or "none"
        raise ScenarioError(f"no plain DDP run at {', '.join(f'{c:g}' for c in missing)} MB to fit on "
                            f"(measured caps: {listed}; or 'all')", file=where, field="--calibration-caps")


DEFAULT_CALIBRATION_CAPS = (5.0, 50.0)  # --calibration-caps when not given


def calibration_caps_for(
    caps: Sequence[float] | None, runs: Sequence[dict[str, Any]], where: str | None, given: bool = True,
    log: Callable[[str], None] | None = None,
) -> list[float] | None:
    """The caps to fit on. Caps the user gave must each have plain runs (``check_calibration_caps``);
    of the default caps, those measured are kept and the others named (``ddpsim measure --plan quick``
    measures 5 and 25 MB only), and none measured is an error."""
    if given or caps is None or not runs:
        check_calibration_caps(caps, runs, where)
        return None if caps is None else list(caps)
    measured = {float(r["bucket_cap_mb"]) for r in runs if is_plain(r)}
    kept = [float(c) for c in caps if float(c) in measured]
    shown = ", ".join(f"{c:g}" for c in caps)
    if not kept:
        listed = ", ".join(f"{c:g}" for c in sorted(measured)) or "none"
        raise ScenarioError(f"no plain DDP run at the default caps {shown} MB (measured caps: {listed}): give "
                            "--calibration-caps MB,MB or 'all'", file=where, field="--calibration-caps")
    if len(kept) < len(caps) and log:
        missing = ", ".join(f"{c:g}" for c in caps if float(c) not in measured)
        log(f"note: overheads fitted on the caps {', '.join(f'{c:g}' for c in kept)} MB of the default {shown} "
            f"(no plain run at {missing} MB)")
    return kept


def require_runs(measured: Measurements, data_dirs: Sequence[str]) -> None:
    """A folder with no run that can be predicted or fitted is not something to validate or calibrate
    overheads on: say what it lacks and how to measure it, rather than report an empty result."""
    if measured.runs:
        return
    where = ", ".join(data_dirs)
    if any("no measured profile" in why for _, why in measured.skipped):
        raise ScenarioError("no DDP run has its model's measured profile (profiles/<model>.json in its campaign "
                            "folder): measure the models with `ddpsim measure --out DIR --model ...`", file=where)
    if measured.skipped:
        label, why = measured.skipped[0]
        raise ScenarioError(f"none of its {len(measured.skipped)} DDP runs can be used (first: {label}: {why})",
                            file=where)
    raise ScenarioError("no DDP runs (ddp_runs.jsonl) to fit or predict: measure them with `ddpsim measure --out DIR`",
                        file=where)


def check_stretch_options(fix_measured_stretch: bool, idle_start_wait: bool) -> None:
    """The idle-start wait replaces the all-reduce stretch: fixing one and fitting the other at once
    would be a silent mixture of two models, so it is refused."""
    if fix_measured_stretch and idle_start_wait:
        raise ScenarioError("the idle-start wait replaces the all-reduce stretch: fix the stretch or fit the wait, "
                            "not both", field="idle_start_wait")


def keep_comm_terms_for_fitted_models(entry: dict[str, Any]) -> None:
    """Mark a class's fitted overheads (and each world size's) to keep their communication terms for the
    models they were fitted on (``file.NOT_CARRIED``)."""
    for sub in [entry, *entry.get("by_world_size", {}).values()]:
        sub[FITTED_MODELS_ONLY_KEY] = True


def _measured_overheads(
    stretch: dict[str, dict[str, Any]], compute_slowdowns: Sequence[tuple[str, float]]
) -> dict[str, dict[str, Any]]:
    """What was measured directly, per link class, to set beside the fitted terms: the all-reduce
    stretch (per-bucket traces) and the compute slowdown beside NCCL (the micro-benchmark's GEMM and
    convolution with all-reduces running: x1.05 to x1.11 on NVLink, 4 x H200)."""
    from statistics import median

    out: dict[str, dict[str, Any]] = {c: {"allreduce_stretch": v} for c, v in stretch.items()}
    by_class: dict[str, list[float]] = {}
    for link_class, ratio in compute_slowdowns:
        by_class.setdefault(link_class, []).append(ratio)
    for link_class, ratios in by_class.items():
        out.setdefault(link_class, {})["compute_slowdown"] = {"value": median(ratios), "runs": len(ratios)}
    return out


def _has_link_fits(run: dict[str, Any], links: dict[str, Any]) -> bool:
    """Overheads are fitted on top of the links: a run whose links were not measured (sockets without
    a sweep) cannot say anything about them."""
    if run_nodes(run) > 1 and INTER_NODE_LINK_CLASS not in links:
        return False
    return run_nodes(run) == int(run["world_size"]) or str(run["transport"]) in links


def _fit_class(
    runs: Sequence[dict[str, Any]], profiles: Profiles, link_fits: Calibration, measured: dict[str, float] | None,
    idle_start_wait: bool = False,
    prune_undetermined: bool = False,
) -> dict[str, Any]:
    terms = IDLE_WAIT_TERMS if idle_start_wait else None
    fit = fit_overheads_pruned if prune_undetermined else fit_overheads
    entry = fit(runs, profiles, link_fits, measured_terms=measured, terms=terms).entry()
    by_world: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        by_world[int(run["world_size"])].append(run)
    if len(by_world) > 1:
        entry["by_world_size"] = {str(w): fit(group, profiles, link_fits, measured_terms=measured, terms=terms).entry()
                                  for w, group in sorted(by_world.items())}
    return entry


def fit_warnings(calibration: dict[str, Any]) -> list[str]:
    """Every fitted term that ended on the upper bound of its physical range, with where it is."""
    out = []
    for link_class, entry in calibration.get("overheads", {}).items():
        for world, sub in [("all", entry)] + sorted(entry.get("by_world_size", {}).items()):
            out += [f"overheads.{link_class} ({world} GPUs): {w}" for w in sub.get("warnings", [])]
    return out
