"""Fresh allocations: each machine allocation predicted by a calibration pooled over the others.

For every GPU kind, the committed campaign folders are grouped into allocations (``pool.find_allocations``:
folders whose machine.txt names the same GPUs are one machine). Each part of the allocations is held
out in turn; a calibration is fitted on the kind's other allocations at once (``pool.pooled_calibration``)
and predicts the held-out allocations' plain DDP runs (a) as it is and (b) re-centred on the allocation's
own all-reduce sweeps (the probe: its link classes refitted, or only their bandwidth taken, the pooled DDP
overheads kept). Every run is
predicted from its own campaign's world-size-1 profile, as ``ddpsim validate`` does. The report gives, per
GPU kind and link class, the errors, the spread of the allocations' offsets, and the share of runs inside
a p10..p90 built from the other allocations' spreads only.

    python benchmarks/fresh_allocation.py --folds 5 > benchmarks/fresh_allocation_output.txt
    python benchmarks/fresh_allocation.py --folds 5 --write-pooled reports/pooled   # also the pooled files

The shipped pooled calibrations (``pooled:H100``, ``pooled:H200``: ``ddpsim/calibration/shipped/``) are copies of
such files, made by hand after a review: the benchmark never writes into the package.

Fits are cached per fold (``--cache``): a rerun with the same folders and settings reads them back.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import sys
import time

from ddpsim.fitting.calibrate import load_measurements
from validation.pool import (
    FOLD_CACHE_VERSION,
    MODES,
    RUNS_PER_GROUP,
    Allocation,
    GroupSummary,
    HeldOutRun,
    allocation_folds,
    allocation_offsets,
    allocation_spread_entry,
    cross_validate_allocations,
    find_allocations,
    pooled_calibration,
    spread_sigmas,
    summarise,
    write_pooled,
)

# the shipped files' names (ddpsim/calibration/shipped/)
POOLED_NAMES = {"H100-SXM": "pooled-h100.json", "H200": "pooled-h200.json"}


def _summary_lines(rows: list[HeldOutRun], title: str) -> list[str]:
    lines = [title, f"{'GPU':9} {'link':10} {'probe':6} {'runs':>4} {'alloc':>5} {'mean|e|%':>8} {'signed%':>8} "
             f"{'max|e|%':>8} {'in p10..p90':>11} {'half-width%':>11} {'p80|e|%':>8}"]
    for mode in MODES:
        for s in summarise(rows, mode):
            lines.append(_summary_line(s))
    return lines


def _summary_line(s: GroupSummary) -> str:
    inside = f"{s.inside}/{s.with_interval}" if s.with_interval else "-"
    width = "-" if s.median_half_width_pct is None else f"{s.median_half_width_pct:.1f}"
    p80 = "-" if s.abs_error_p80_pct is None else f"{s.abs_error_p80_pct:.1f}"
    return (f"{s.gpu:9} {s.group:10} {s.mode:6} {s.runs:>4} {s.allocations:>5} "
            f"{s.mean_abs_pct:>8.1f} {s.signed_pct:>+8.1f} {s.max_abs_pct:>8.1f} {inside:>11} {width:>11} {p80:>8}")


def _offset_lines(rows: list[HeldOutRun]) -> list[str]:
    lines = ["Allocation offsets: mean ln(measured/predicted) per allocation and link class, as % "
             "(pooled alone -> with the probe)"]
    plain, probed = allocation_offsets(rows, "pooled"), allocation_offsets(rows, "probe")
    for key in sorted(plain):
        cells = []
        for allocation, value in sorted(plain[key].items()):
            after = probed.get(key, {}).get(allocation)
            cells.append(f"{allocation} {100 * value:+.1f}" + ("" if after is None else f"->{100 * after:+.1f}"))
        lines.append(f"  {key[0]} {key[1]}: " + "; ".join(cells))
    lines.append("Spreads (lognormal sigma, %): allocation offset / runs around it, over allocations")
    for mode in MODES:
        for (gpu, link_class), (alloc, within, n) in sorted(spread_sigmas(rows, mode).items()):
            a = "-" if alloc is None else f"{100 * alloc:.1f}"
            w = "-" if within is None else f"{100 * within:.1f}"
            lines.append(f"  {gpu} {link_class:7} {mode:6}: allocation {a}, "
                         f"residual {w} ({n} allocations)")
    return lines


def _model_lines(rows: list[HeldOutRun]) -> list[str]:
    """What limits the probed error: per GPU, link class and model, the mean and the spread of
    ln(measured / predicted) over every allocation's runs (a model's own misfit, not the allocation's)."""
    import math
    from collections import defaultdict

    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for r in rows:
        predicted = r.predicted("probe") or r.pooled_s
        groups[(r.gpu, r.link_class, r.model)].append(math.log(r.measured_s / predicted))
    lines = ["Per model (with the probe where there is one): mean ln(measured/predicted) % and its spread % over "
             "runs of every allocation (positive: ran slower than predicted)"]
    for (gpu, link_class, model), errors in sorted(groups.items()):
        mean = sum(errors) / len(errors)
        spread = math.sqrt(sum((e - mean) ** 2 for e in errors) / max(1, len(errors) - 1))
        lines.append(f"  {gpu:9} {link_class:7} {model:11} runs {len(errors):3}: mean {100 * mean:+6.1f}, "
                     f"spread {100 * spread:5.1f}")
    return lines


def _baseline_rows(allocations: list[Allocation], path: str, log) -> list[tuple[HeldOutRun, bool | None]]:
    """The same held-out runs predicted by one allocation's shipped calibration (``path``), the
    allocations whose folders it was fitted on left out: what a user had before pooling."""
    from ddpsim.calibration.file import read_calibration
    from ddpsim.fitting.calibrate import is_plain
    from ddpsim.fitting.measured_scenarios import run_class
    from ddpsim.fitting.validate import predict_run

    calibration = read_calibration(path)
    # the folders it was fitted on (data_dir in files written by calibrate before they named them)
    seen = set(calibration.calibration_subset.get("folders") or [])
    seen.add(os.path.basename(os.path.normpath(calibration.data_dir or "")))
    rows: list[HeldOutRun] = []
    inside: list[bool | None] = []
    for a in allocations:
        if seen & {os.path.basename(f) for f in a.folders}:
            continue
        measured = load_measurements(a.folders)
        for run in measured.runs:
            link_class = run_class(run)
            world, nodes = int(run["world_size"]), int(run.get("nodes") or 1)
            if not is_plain(run) or not calibration.has_overheads(link_class) or (
                    nodes > 1 and calibration.link_fit("net", world, nodes) is None) or (
                    nodes < world and calibration.link_fit(str(run["transport"]), world, nodes) is None):
                continue
            row = predict_run(measured, run, calibration)
            inside.append(row.inside_interval)
            rows.append(HeldOutRun(
                allocation=a.name, gpu=a.gpu, group=row.group, link_class=link_class, model=row.model,
                world_size=row.world_size, nodes=row.nodes, bucket_cap_mb=row.bucket_cap_mb, launch=row.launch,
                measured_s=row.measured_s, pooled_s=row.predicted_s, probed_s=None, model_in_fit=row.model in (
                    calibration.overhead_models(link_class, row.world_size) or []),
                step_sigma=None, launch_sigma=None))
    log(f"{path}: {len(rows)} runs of {len({r.allocation for r in rows})} allocations it was not fitted on")
    return list(zip(rows, inside, strict=True))


def _baseline_lines(pairs: list, rows: list[HeldOutRun], path: str) -> list[str]:
    """The one-allocation file beside the pooled calibration and the probe, on the same runs: those of
    the file's fitted models on every other allocation, each predicted by the pooled fit without it."""
    from collections import defaultdict

    def key(r: HeldOutRun) -> tuple:
        return r.allocation, r.link_class, r.model, r.world_size, r.nodes, r.bucket_cap_mb, r.measured_s

    ours = {key(r): r for r in rows}
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for row, inside in pairs:
        if row.model_in_fit and key(row) in ours:
            groups[(row.gpu, row.group)].append((row, inside, ours[key(row)]))

    def stats(errors: list[float]) -> str:
        if not errors:
            return f"{'-':>19}"
        return f"{sum(map(abs, errors)) / len(errors):5.1f} {sum(errors) / len(errors):+6.1f} {max(map(abs, errors)):6.1f}"

    lines = [f"Before pooling: {path} alone (fitted on one allocation, left out here), on the runs of its fitted "
             "models that the cross-validation above predicted: mean|e| signed max (%), and inside its own "
             "p10..p90 (its one allocation's noise); beside it the pooled fit and the probe on the same runs",
             f"{'GPU':9} {'link':10} {'runs':>4} {'one allocation':>19} {'in p10..p90':>11} {'pooled':>19} "
             f"{'probe (runs)':>26}"]
    for (gpu, group), members in sorted(groups.items()):
        held = [i for _, i, _ in members if i is not None]
        probed = [100 * (p / o.measured_s - 1) for _, _, o in members if (p := o.predicted("probe")) is not None]
        lines.append(
            f"{gpu:9} {group:10} {len(members):>4} {stats([100 * (r.pooled_s / r.measured_s - 1) for r, _, _ in members])} "
            f"{f'{sum(held)}/{len(held)}' if held else '-':>11} "
            f"{stats([100 * (o.pooled_s / o.measured_s - 1) for _, _, o in members])} "
            f"{stats(probed)} ({len(probed)})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="validation/data", help="folder of campaign folders")
    parser.add_argument("--folds", type=int, default=None, help="parts per GPU kind (default: one per allocation)")
    parser.add_argument("--per-group", type=int, default=RUNS_PER_GROUP,
                        help="plain runs per allocation, link class, GPUs and nodes in a pooled overhead fit")
    parser.add_argument("--gpu", action="append", help="only these GPU kinds (catalog names: H100-SXM, H200)")
    parser.add_argument("--cache", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "ddpsim-fresh-cache"))
    parser.add_argument("--loo-class", action="append", default=[], metavar="CLASS",
                        help="this link class's runs by leaving one allocation out, fitting that class only (for a "
                             "class measured on so few allocations that a part holds all of them)")
    parser.add_argument("--baseline", action="append", default=[], metavar="FILE",
                        help="also predict the held-out runs with this one-allocation calibration (its own "
                             "allocation left out), for comparison")
    parser.add_argument("--fit-only", action="store_true",
                        help="only the pooled fit on every allocation (cached for a later --write-pooled run)")
    parser.add_argument("--write-pooled", metavar="DIR",
                        help="fit each GPU kind on every allocation and write its pooled calibration here")
    args = parser.parse_args(argv)
    package = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ddpsim"))
    if args.write_pooled and os.path.commonpath([os.path.realpath(args.write_pooled), package]) == package:
        parser.error("--write-pooled: not inside the package (ddpsim/); write elsewhere, review, then copy")

    def log(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    allocations = find_allocations(sorted(glob.glob(os.path.join(args.data, "*"))))
    if args.gpu:
        allocations = [a for a in allocations if a.gpu in args.gpu]
    print("Allocations (folders of one machine; GPU):")
    for a in allocations:
        print(f"  {a.gpu:9} {a.name}: {', '.join(os.path.basename(f) for f in a.folders)}")
    for gpu in sorted({a.gpu for a in allocations}):
        parts = allocation_folds([a for a in allocations if a.gpu == gpu], args.folds)
        print(f"{gpu}: {len(parts)} held-out parts: " + " | ".join(",".join(a.name for a in p) for p in parts))
    if args.fit_only:
        for gpu in sorted({a.gpu for a in allocations}):
            _pooled_fit([a for a in allocations if a.gpu == gpu], args.per_group, args.cache, log)
        return 0
    rows = cross_validate_allocations(allocations, args.folds, args.per_group, args.cache, log, args.loo_class)
    print()
    print(f"Every plain DDP run of each allocation, predicted by a calibration pooled over the same GPU kind's "
          f"allocations outside its part ({args.per_group} plain runs per allocation, link class, GPUs and nodes "
          "in the overhead fit; every sweep in the link fit). probe pooled: the pooled calibration alone; links: "
          "its link classes refitted on the allocation's own sweeps (calibrate --links-only); level: the pooled "
          "link curves kept, their bandwidth taken from the allocation's own sweeps (runs whose link part the "
          "allocation did not sweep are left out of the links and level lines); probe: what "
          "pool.probe_calibration ships, level for one-node classes, links for the network. Intervals: p10..p90 "
          "from the step "
          "noise, the allocation spread and the residual spread measured on the other allocations (this one's "
          "runs never used); p80|e|: the half-width an honest interval needs.")
    print("\n".join(_summary_lines(rows, "All plain runs:")))
    swept = [r for r in rows if r.probed_s is not None]
    print("\n".join(_summary_lines(swept, "The same, on the runs whose link part their allocation swept (the pool "
                                           "alone and each probe on the same runs):")))
    seen = [r for r in rows if r.model_in_fit]
    if len(seen) < len(rows):
        print("\n".join(_summary_lines(seen, "Runs of models the pooled overheads were fitted on:")))
        unseen = [r for r in rows if not r.model_in_fit]
        print("\n".join(_summary_lines(unseen, "Runs of models the pooled overheads were NOT fitted on:")))
    for path in args.baseline:
        print("\n".join(_baseline_lines(_baseline_rows(allocations, path, log), rows, path)))
    print("\n".join(_offset_lines(rows)))
    print("\n".join(_model_lines(rows)))
    if args.write_pooled:
        for gpu in sorted({a.gpu for a in allocations}):
            data = _pooled_fit([a for a in allocations if a.gpu == gpu], args.per_group, args.cache, log)
            path = os.path.join(args.write_pooled, POOLED_NAMES.get(gpu, f"pooled-{gpu.lower()}.json"))
            write_pooled(path, data, allocation_spread_entry(rows, gpu))
            print(f"wrote {path}: fitted on every allocation above of {gpu}")
    return 0


def _pooled_fit(kind: list[Allocation], per_group: int, cache: str, log) -> dict:
    """The calibration fitted on every allocation of one GPU kind, cached as the folds are."""
    key = hashlib.sha256(json.dumps([FOLD_CACHE_VERSION, [a.folders for a in kind], per_group]).encode()).hexdigest()
    path = os.path.join(cache, f"pooled-{kind[0].gpu}-{key[:16]}.json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    log(f"{kind[0].gpu}: fitting the pooled calibration on all {len(kind)} allocations")
    data = pooled_calibration({a.name: load_measurements(a.folders) for a in kind}, per_group, log=log)
    os.makedirs(cache, exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(path + ".tmp", path)
    return data


if __name__ == "__main__":
    sys.exit(main())
