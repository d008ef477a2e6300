"""Research, run by ``benchmarks/fresh_allocation.py`` and the evidence pipeline (not in the wheel): calibrations
pooled over machine allocations, their leave-allocations-out cross-validation with its fold cache, and the
allocation spread the shipped pooled files record. The probe that re-centres a pooled calibration on a new
allocation is the user's command, in ``ddpsim/fitting/recentre.py``.

A measured step on allocation a is modelled as ``model(theta_kind; config) x offset_a x noise``:
``theta_kind`` (links, protocol curves, DDP overhead terms) is shared by every allocation of a GPU
kind and is fitted on all of them at once; ``offset_a`` is what one allocation does differently (its
socket network, its host); its spread between allocations is measured by leaving each allocation
out (``leave_one_allocation_out``) and recorded in the calibration (``allocation_spread``). A probe
(the allocation's own all-reduce sweeps) refits the link classes it touched and keeps the pooled
DDP overheads, as ``ddpsim calibrate --links-only`` does by hand.

An allocation is one machine: the campaign folders whose ``machine.txt`` name the same GPUs (or,
without one, whose README does) are one allocation; a folder naming no GPU is its own.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ddpsim.calibration.file import SCHEMA, NoiseSigmas, calibration_from_dict
from ddpsim.errors import ScenarioError
from ddpsim.fitting.calibrate import (
    Measurements,
    calibrate,
    gpu_of_folder,
    is_plain,
    load_measurements,
    measured_on,
)
from ddpsim.fitting.fit import fit_noise
from ddpsim.fitting.measured_scenarios import run_class, run_nodes
from ddpsim.fitting.measurements import Profiles, campaign_of, find_data_files
from ddpsim.fitting.recentre import probe_links, recentre
from ddpsim.fitting.validate import predict_run
from ddpsim.scenario.link_kinds import INTER_NODE_LINK_CLASS

# the plain DDP runs per (allocation, link class, GPUs, nodes) a pooled fit takes: the overhead fit
# simulates every run about twenty times per term, so a pooled fit over twenty allocations with all
# their runs would take most of an hour on two cores; a few runs per allocation, spread over its
# models and caps, let every allocation weigh alike (one allocation with 120 runs would otherwise
# set the pooled terms)
RUNS_PER_GROUP = 3
# bumped whenever what a cached fold holds changes
FOLD_CACHE_VERSION = "pool/1"
_UUID = re.compile(r"GPU-([0-9a-f]{8})")


@dataclass(frozen=True)
class Allocation:
    """One machine allocation: its campaign folders (sorted), its GPU kind (catalog name) and a name."""

    name: str
    gpu: str
    folders: tuple[str, ...]


def gpu_uuids(folder: str) -> set[str]:
    """The GPUs a campaign folder ran on (UUID prefixes): ``machine*.txt``, else its README."""
    names = sorted(os.listdir(folder))
    machine = [n for n in names if n.startswith("machine") and n.endswith(".txt")]
    sources = machine or [n for n in names if n == "README.md"]
    found: set[str] = set()
    for name in sources:
        with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as handle:
            found |= set(_UUID.findall(handle.read()))
    return found


def find_allocations(folders: Sequence[str]) -> list[Allocation]:
    """Group campaign folders into allocations: folders sharing a GPU are one machine (union of every
    folder that shares one with another). Folders with neither DDP runs nor sweeps are left out."""
    usable = []
    for folder in sorted(os.path.normpath(f) for f in folders):
        files = find_data_files(folder)
        if files["ddp_runs"] or files["allreduce"]:
            usable.append(folder)
    parent = {f: f for f in usable}

    def root(f: str) -> str:
        while parent[f] != f:
            f = parent[f]
        return f

    owner: dict[str, str] = {}
    for folder in usable:
        for uuid in gpu_uuids(folder):
            if uuid in owner:
                parent[root(folder)] = root(owner[uuid])
            else:
                owner[uuid] = folder
    groups: dict[str, list[str]] = defaultdict(list)
    for folder in usable:
        groups[root(folder)].append(folder)
    out = []
    for members in groups.values():
        members.sort()
        kinds = {g for g in (gpu_of_folder(f) for f in members) if g}
        if len(kinds) != 1:
            raise ScenarioError(f"folders of one machine name {len(kinds)} GPU kinds ({', '.join(sorted(kinds))})",
                                file=", ".join(members), field="fingerprint.gpu_name")
        out.append(Allocation(os.path.basename(members[0]), kinds.pop(), tuple(members)))
    return sorted(out, key=lambda a: (a.gpu, a.name))


def balanced_runs(runs: Sequence[dict[str, Any]], per_group: int, salt: str) -> list[dict[str, Any]]:
    """At most ``per_group`` plain runs per (link class, GPUs, nodes), taking the models in turn and,
    within a model, caps starting at a place set by ``salt`` (the allocation's name), so that the
    allocations of a pool together cover the caps although each gives a few runs."""
    groups: dict[tuple[str, int, int], dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if is_plain(run):
            groups[(run_class(run), int(run["world_size"]), run_nodes(run))][str(run["model"])].append(run)
    start = zlib.crc32(salt.encode())
    chosen = []
    for _key, by_model in sorted(groups.items()):
        queues = []
        for model in sorted(by_model):
            ordered = sorted(by_model[model], key=lambda r: (float(r["bucket_cap_mb"]), str(r.get("launch_id"))))
            shift = start % len(ordered)
            queues.append(ordered[shift:] + ordered[:shift])
        taken: list[dict[str, Any]] = []
        while len(taken) < per_group and any(queues):
            for queue in queues:
                if queue and len(taken) < per_group:
                    taken.append(queue.pop(0))
        chosen += taken
    return chosen


def merge_measurements(parts: Sequence[Measurements]) -> Measurements:
    """Several allocations' measurements as one (each run keeps its own campaign's profile)."""
    paths: dict[tuple[str, str], str] = {}
    for part in parts:
        paths.update(part.profiles.paths)
    return Measurements(
        samples=[s for p in parts for s in p.samples],
        runs=[r for p in parts for r in p.runs],
        profiles=Profiles(paths),
        skipped=[s for p in parts for s in p.skipped],
        timing_runs=[r for p in parts for r in p.timing_runs],
        compute_slowdowns=[x for p in parts for x in p.compute_slowdowns],
        net_probes=[x for p in parts for x in p.net_probes],
    )


def within_allocation_noise(by_allocation: dict[str, Measurements]) -> dict[str, dict[str, Any]]:
    """Step-to-step and launch-to-launch sigmas per link class, launches paired only inside one
    allocation (``fit_noise`` on pooled runs would pair the same configuration across allocations and
    count the allocation spread as launch noise)."""
    step: dict[str, list[tuple[float, int]]] = defaultdict(list)
    launch: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for measured in by_allocation.values():
        for link_class, entry in fit_noise(measured.runs).items():
            if entry["step_sigma"] is not None:
                step[link_class].append((entry["step_sigma"], entry["step_runs"]))
            if entry["launch_sigma"] is not None:
                launch[link_class].append((entry["launch_sigma"], entry["launch_pairs"]))
    out = {}
    for link_class in sorted(set(step) | set(launch)):
        s, ls = step.get(link_class, []), launch.get(link_class, [])
        out[link_class] = {
            "step_sigma": sum(v * n for v, n in s) / sum(n for _, n in s) if s else None,
            "step_runs": sum(n for _, n in s),
            # pooled variance: each allocation's pairs weigh as many as they are
            "launch_sigma": math.sqrt(sum(v * v * n for v, n in ls) / sum(n for _, n in ls)) if ls else None,
            "launch_pairs": sum(n for _, n in ls),
        }
    return out


def pooled_calibration(
    by_allocation: dict[str, Measurements],
    per_group: int = RUNS_PER_GROUP,
    classes: set[str] | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """One calibration fitted on every allocation given at once: the link classes on all their sweeps,
    the DDP overheads on ``balanced_runs`` of each, the noise inside each allocation."""
    merged = merge_measurements(list(by_allocation.values()))
    if not merged.samples:
        raise ScenarioError("no all-reduce sweeps in any allocation to fit the link classes on",
                            file=", ".join(sorted(by_allocation)))
    runs = [r for name, m in sorted(by_allocation.items()) for r in balanced_runs(m.runs, per_group, name)]
    data = calibrate(merged.samples, runs, merged.profiles, None, classes=classes, log=log,
                     timing_runs=merged.timing_runs, compute_slowdowns=merged.compute_slowdowns,
                     net_probes=merged.net_probes)
    data["noise"] = within_allocation_noise(by_allocation)
    folders = {os.path.basename(campaign_of(str(r["_source"]))) for r in merged.runs if r.get("_source")}
    folders |= {os.path.basename(campaign_of(s.source)) for s in merged.samples}
    # validate's held-out test: a run of one of these folders was in the pool
    data["calibration_subset"] = {"bucket_cap_mb": "all", "folders": sorted(folders)}
    dirs = sorted({campaign_of(str(r["_source"])) for r in merged.runs if r.get("_source")}
                  | {campaign_of(s.source) for s in merged.samples})
    hardware = measured_on(dirs, merged.samples, runs, data["link_classes"])
    if hardware is not None:
        data["measured_on"] = hardware
    data["pooled_from"] = {
        "allocations": sorted(by_allocation),
        "runs_per_group": per_group,
        "fitted_runs": len(runs),
        "how": "link classes on every sweep of these allocations; DDP overheads on at most runs_per_group plain "
               "runs per allocation, link class, GPUs and nodes (models in turn, caps spread); noise inside each",
    }
    return data


def probed_part(run: dict[str, Any]) -> tuple[str, str]:
    """The link part a run's time depends on most: the network's shape across nodes, else its class
    at its GPU count."""
    nodes, world = run_nodes(run), int(run["world_size"])
    if nodes > 1:
        return INTER_NODE_LINK_CLASS, f"{nodes}x{world // nodes}"
    return str(run["transport"]), str(world)


@dataclass(frozen=True)
class HeldOutRun:
    """One plain DDP run of an allocation predicted by a calibration that never saw that allocation."""

    allocation: str
    gpu: str
    group: str  # what the report gives one line for: a link class, the network per shape
    link_class: str
    model: str
    world_size: int
    nodes: int
    bucket_cap_mb: float
    launch: str
    measured_s: float
    pooled_s: float  # the pooled calibration alone
    probed_s: float | None  # re-centred on the allocation's own sweeps (None: no sweep of its link part)
    model_in_fit: bool  # the pooled DDP overheads of its class were fitted on this model
    step_sigma: float | None  # the fold calibration's noise for its class
    launch_sigma: float | None
    level_s: float | None = None  # re-centred keeping the pooled link shape, the probe's bandwidth only

    def predicted(self, mode: str) -> float | None:
        """The prediction of one kind (``MODES``): the pooled calibration alone, re-centred on the
        allocation's sweeps (links refitted), or re-centred on their bandwidth only."""
        if mode == "probe":
            # the probe shipped (probe_calibration): the network refitted, one-node classes' bandwidth
            return self.probed_s if self.link_class == INTER_NODE_LINK_CLASS else self.level_s
        return {"pooled": self.pooled_s, "links": self.probed_s, "level": self.level_s}[mode]


# the predictions compared: the pool alone, the probe's link fits in its place, the probe's bandwidth
# only, and the combination probe_calibration ships (which of the two wins per class was read off the
# held-out results of benchmarks/fresh_allocation.py: a choice made on the data it is reported on)
MODES = ("pooled", "links", "level", "probe")


def _fold_key(held: Sequence[Allocation], training: Sequence[Allocation], per_group: int,
              link_classes: set[str] | None = None) -> str:
    parts: list[Any] = [FOLD_CACHE_VERSION, [a.folders for a in held], [a.folders for a in training], per_group]
    if link_classes is not None:
        parts.append(sorted(link_classes))
    text = json.dumps(parts)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def allocation_folds(allocations: Sequence[Allocation], folds: int | None) -> list[list[Allocation]]:
    """The held-out parts of a cross-validation over one GPU kind's allocations: one allocation each
    (``folds`` None), or ``folds`` parts dealt in turn from the allocations sorted by name (campaigns of
    one plan are named alike, so dealing spreads each plan over the parts)."""
    ordered = sorted(allocations, key=lambda a: a.name)
    if folds is None or folds >= len(ordered):
        return [[a] for a in ordered]
    if folds < 2:
        raise ValueError(f"a cross-validation needs 2 or more parts, got {folds}")
    return [ordered[i::folds] for i in range(folds)]


def predict_fold(
    held: Sequence[Allocation],
    training: Sequence[Allocation],
    loaded: dict[str, Measurements],
    per_group: int = RUNS_PER_GROUP,
    cache_dir: str | None = None,
    log: Callable[[str], None] | None = None,
    link_classes: set[str] | None = None,
) -> list[HeldOutRun]:
    """Fit on ``training`` (never any of ``held``), predict each held allocation's plain runs (of
    ``link_classes`` only, if given) without a probe and with its own sweeps as the probe. A fold
    already in ``cache_dir`` is read back."""
    names = {a.name for a in held}
    if names & {a.name for a in training}:
        raise ValueError(f"allocations {sorted(names & {a.name for a in training})} are among their own training")
    cache = os.path.join(cache_dir, f"{held[0].name}-{_fold_key(held, training, per_group, link_classes)}.json") \
        if cache_dir else None
    if cache and os.path.isfile(cache):
        with open(cache, encoding="utf-8") as handle:
            stored = json.load(handle)
        rows = [HeldOutRun(**row) for row in stored["rows"]]
        if "level" not in stored.get("modes", []):
            # a fold cached before the bandwidth-only probe: its fit is kept, only that probe is predicted
            rows = _with_level(rows, loaded, stored["calibration"])
            stored["rows"], stored["modes"] = [asdict(r) for r in rows], list(MODES)
            _write_cache(cache, stored)
        return rows
    plain = {a.name: [r for r in loaded[a.name].runs
                      if is_plain(r) and (link_classes is None or run_class(r) in link_classes)] for a in held}
    classes = {run_class(r) for runs in plain.values() for r in runs}
    if not classes:
        return []
    data = pooled_calibration({a.name: loaded[a.name] for a in training}, per_group, classes=classes, log=log)
    pooled = calibration_from_dict(data, f"<pooled without {', '.join(sorted(names))}>")
    rows = []
    for allocation in held:
        measured = loaded[allocation.name]
        links = probe_links(measured)
        probed_data, probed = recentre(data, links)
        probed_cal = calibration_from_dict(probed_data, f"<pooled without {allocation.name}, probed>")
        level_cal = calibration_from_dict(recentre(data, links, keep_shape=True)[0], f"<{allocation.name}, level>")
        for run in plain[allocation.name]:
            link_class = run_class(run)
            if not pooled.has_overheads(link_class) or not _has_link(pooled, run):
                if log:
                    log(f"{allocation.name}: {link_class} not in the pooled fit, not predicted")
                continue
            row = predict_run(measured, run, pooled)
            touched = probed_part(run) in probed
            with_probe = predict_run(measured, run, probed_cal).predicted_s if touched else None
            level = predict_run(measured, run, level_cal).predicted_s if touched else None
            noise = pooled.noise.get(link_class) or NoiseSigmas()
            rows.append(HeldOutRun(
                allocation=allocation.name, gpu=allocation.gpu, group=row.group, link_class=link_class,
                model=row.model, world_size=row.world_size, nodes=row.nodes, bucket_cap_mb=row.bucket_cap_mb,
                launch=row.launch, measured_s=row.measured_s, pooled_s=row.predicted_s, probed_s=with_probe,
                model_in_fit=row.model in (pooled.overhead_models(link_class, row.world_size) or []),
                step_sigma=noise.step_sigma, launch_sigma=noise.launch_sigma, level_s=level,
            ))
    if cache:
        _write_cache(cache, {"held_out": sorted(names), "training": [a.name for a in training], "modes": list(MODES),
                            "calibration": data, "rows": [asdict(r) for r in rows]})
    return rows


def _with_level(rows: list[HeldOutRun], loaded: dict[str, Measurements], data: dict[str, Any]) -> list[HeldOutRun]:
    """``rows`` with the bandwidth-only probe predicted from the fold's stored calibration (rows are
    matched to their runs by allocation, link class, model, GPUs, nodes, cap and measured step)."""
    from dataclasses import replace

    out = []
    level_cals: dict[str, Any] = {}
    for row in rows:
        if row.probed_s is None:
            out.append(row)
            continue
        measured = loaded[row.allocation]
        if row.allocation not in level_cals:
            level_cals[row.allocation] = calibration_from_dict(
                recentre(data, probe_links(measured), keep_shape=True)[0], f"<{row.allocation}, level>")
        run = next(r for r in measured.runs if is_plain(r) and run_class(r) == row.link_class
                   and str(r["model"]) == row.model and int(r["world_size"]) == row.world_size
                   and run_nodes(r) == row.nodes and float(r["bucket_cap_mb"]) == row.bucket_cap_mb
                   and float(r["step_s_median"]) == row.measured_s)
        out.append(replace(row, level_s=predict_run(measured, run, level_cals[row.allocation]).predicted_s))
    return out


def _has_link(calibration: Any, run: dict[str, Any]) -> bool:
    nodes, world = run_nodes(run), int(run["world_size"])
    if nodes > 1 and calibration.link_fit(INTER_NODE_LINK_CLASS, world, nodes) is None:
        return False
    return nodes == world or calibration.link_fit(str(run["transport"]), world, nodes) is not None


def cross_validate_allocations(
    allocations: Sequence[Allocation],
    folds: int | None = None,
    per_group: int = RUNS_PER_GROUP,
    cache_dir: str | None = None,
    log: Callable[[str], None] | None = None,
    loo_classes: Sequence[str] = (),
) -> list[HeldOutRun]:
    """Every allocation of each GPU kind predicted by a calibration pooled over the kind's allocations
    outside its part (``allocation_folds``: None, leave one allocation out). For each link class of
    ``loo_classes`` (one measured on few allocations, which a part may hold all of), its runs come
    from leaving one allocation out instead, fitting that class only."""
    loaded = {a.name: load_measurements(a.folders) for a in allocations}
    rows: list[HeldOutRun] = []
    for gpu in sorted({a.gpu for a in allocations}):
        kind = [a for a in allocations if a.gpu == gpu]
        for held in allocation_folds(kind, folds):
            training = [a for a in kind if a not in held]
            if log:
                log(f"{gpu}: holding out {', '.join(a.name for a in held)}; fitting on {len(training)} allocations")
            rows += predict_fold(held, training, loaded, per_group, cache_dir, log)
        for link_class in loo_classes:
            rows = [r for r in rows if not (r.gpu == gpu and r.link_class == link_class)]
            for allocation in kind:
                if any(run_class(r) == link_class and is_plain(r) for r in loaded[allocation.name].runs):
                    if log:
                        log(f"{gpu} {link_class}: holding out {allocation.name} alone")
                    rows += predict_fold([allocation], [a for a in kind if a != allocation], loaded, per_group,
                                         cache_dir, log, link_classes={link_class})
    return rows


# --- what the held-out predictions say: errors, the spread between allocations, intervals -------------


def log_error(row: HeldOutRun, mode: str) -> float | None:
    """ln(measured / predicted) of one run (None: no prediction of that kind)."""
    predicted = row.predicted(mode)
    return None if predicted is None else math.log(row.measured_s / predicted)


def allocation_offsets(rows: Sequence[HeldOutRun], mode: str) -> dict[tuple[str, str], dict[str, float]]:
    """Per (GPU, link class), each allocation's offset: the mean ln(measured / predicted) of its runs."""
    acc: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        e = log_error(row, mode)
        if e is not None:
            acc[(row.gpu, row.link_class)][row.allocation].append(e)
    return {k: {a: sum(v) / len(v) for a, v in by.items()} for k, by in acc.items()}


def spread_sigmas(rows: Sequence[HeldOutRun], mode: str, leave_out: str | None = None
                  ) -> dict[tuple[str, str], tuple[float | None, float | None, int]]:
    """Per (GPU, link class): the allocation spread (root mean square of the allocations' offsets:
    the prediction is centred on the pool, so a common bias counts too), the residual spread of runs
    around their allocation's offset (the model's misfit per configuration and the launch noise), and
    how many allocations gave them; ``leave_out``'s own runs are not used (the interval of an
    allocation is built from the others only)."""
    kept = [r for r in rows if r.allocation != leave_out]
    offsets = allocation_offsets(kept, mode)
    residuals: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in kept:
        e = log_error(row, mode)
        if e is not None:
            residuals[(row.gpu, row.link_class)].append(e - offsets[(row.gpu, row.link_class)][row.allocation])
    out: dict[tuple[str, str], tuple[float | None, float | None, int]] = {}
    for key, by in offsets.items():
        alloc = math.sqrt(sum(v * v for v in by.values()) / len(by)) if len(by) >= 2 else None
        res = residuals[key]
        within = math.sqrt(sum(v * v for v in res) / (len(res) - len(by))) if len(res) > len(by) else None
        out[key] = (alloc, within, len(by))
    return out


@dataclass(frozen=True)
class GroupSummary:
    gpu: str
    group: str
    mode: str
    runs: int
    allocations: int
    mean_abs_pct: float
    signed_pct: float
    max_abs_pct: float
    inside: int  # measured inside the predicted p10..p90
    with_interval: int
    median_half_width_pct: float | None
    abs_error_p80_pct: float | None  # the half-width an honest interval needs


def interval_sigma(row: HeldOutRun, spreads: dict[tuple[str, str], tuple[float | None, float | None, int]]
                   ) -> float | None:
    """The lognormal sigma of a run's predicted p10..p90: the step noise, the allocation spread and
    the residual spread (which holds the launch noise), in quadrature; None without a spread."""
    alloc, within, _n = spreads.get((row.gpu, row.link_class), (None, None, 0))
    if alloc is None or within is None:
        return None
    return math.sqrt((row.step_sigma or 0.0) ** 2 + alloc ** 2 + within ** 2)


def summarise(rows: Sequence[HeldOutRun], mode: str) -> list[GroupSummary]:
    """Per (GPU, report group): errors, and the share of runs inside an interval whose spreads were
    measured on the other allocations only."""
    from statistics import median

    from ddpsim.spread import Z90

    spreads_without = {a: spread_sigmas(rows, mode, leave_out=a) for a in {r.allocation for r in rows}}
    groups: dict[tuple[str, str], list[HeldOutRun]] = defaultdict(list)
    for row in rows:
        if log_error(row, mode) is not None:
            groups[(row.gpu, row.group)].append(row)
    out = []
    for (gpu, group), members in sorted(groups.items()):
        errors = [100 * ((r.predicted(mode) or math.nan) / r.measured_s - 1) for r in members]
        inside, widths = 0, []
        for row in members:
            sigma = interval_sigma(row, spreads_without[row.allocation])
            if sigma is None:
                continue
            predicted = row.predicted(mode)
            assert predicted is not None
            low, high = predicted * math.exp(-Z90 * sigma), predicted * math.exp(Z90 * sigma)
            inside += low <= row.measured_s <= high
            widths.append(100 * (high - low) / 2 / predicted)
        abs_sorted = sorted(abs(e) for e in errors)
        out.append(GroupSummary(
            gpu=gpu, group=group, mode=mode, runs=len(members),
            allocations=len({r.allocation for r in members}),
            mean_abs_pct=sum(abs(e) for e in errors) / len(errors), signed_pct=sum(errors) / len(errors),
            max_abs_pct=max(abs(e) for e in errors), inside=inside, with_interval=len(widths),
            median_half_width_pct=median(widths) if widths else None,
            abs_error_p80_pct=abs_sorted[min(len(abs_sorted) - 1, int(0.8 * len(abs_sorted)))] if abs_sorted else None,
        ))
    return out


def allocation_spread_entry(rows: Sequence[HeldOutRun], gpu: str, probe_mode: str = "probe") -> dict[str, Any]:
    """The calibration file's ``allocation_spread`` for one GPU kind, from leave-one-allocation-out;
    after the probe of kind ``probe_mode``."""
    plain, probed = spread_sigmas(rows, "pooled"), spread_sigmas(rows, probe_mode)
    out = {}
    for (kind, link_class), (alloc, within, _n) in sorted(plain.items()):
        if kind != gpu or alloc is None:
            continue
        after = probed.get((kind, link_class), (None, None, 0))
        out[link_class] = {
            "sigma": alloc,
            "residual_sigma": within,
            "sigma_after_probe": after[0],
            "residual_sigma_after_probe": after[1],
            "allocations": sorted({r.allocation for r in rows if r.gpu == gpu and r.link_class == link_class}),
            "allocations_probed": after[2],
            "how": "leave one allocation out: each allocation's mean ln(measured/predicted) over its plain runs, "
                   "root mean square over allocations (sigma); the runs' spread around their allocation's mean "
                   "(residual_sigma, holds the launch noise); after_probe: the same re-centred on the allocation's "
                   "own sweeps (" + {"level": "their bandwidth only, the pooled latencies and curves kept",
                                     "links": "its link classes refitted",
                                     "probe": "one-node classes: their bandwidth only; the network refitted"}[probe_mode]
                   + ")",
            "probe": probe_mode,
        }
    return out


def _write_cache(path: str, data: dict[str, Any]) -> None:
    from ddpsim.outdir import atomic_write_text

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    atomic_write_text(path, json.dumps(data))


def write_pooled(path: str, data: dict[str, Any], spread: dict[str, Any]) -> None:
    """A pooled calibration file with its measured allocation spread."""
    from ddpsim.outdir import atomic_write_text
    from ddpsim.schemas import document

    out = document("calibration", {**data, "schema": SCHEMA, "allocation_spread": spread})
    calibration_from_dict(out, path)  # what is written must read back
    atomic_write_text(path, json.dumps(out, indent=2, sort_keys=True) + "\n")
