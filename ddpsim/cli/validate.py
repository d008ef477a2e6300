"""``ddpsim calibrate`` and ``ddpsim validate``: fit from measurements, then prove the predictions."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import replace
from typing import Any

from ddpsim.cli.args import add_allow_other_gpu, add_command, nonnegative_float, print_json, share
from ddpsim.errors import ScenarioError

EXIT_FAILED_VALIDATION = 1


def _parse_caps(text: str) -> list[float] | None:
    """'all' (None) or positive caps in MB: an empty item, NaN or a negative cap selects no run at all."""
    if text.strip() == "all":
        return None
    try:
        caps = [float(x) for x in text.split(",")]
    except ValueError:
        raise ScenarioError(f"expected comma-separated numbers or 'all', got {text!r}", field="--calibration-caps") from None
    if not all(math.isfinite(c) and c > 0 for c in caps):
        raise ScenarioError(f"expected positive bucket caps in MB, got {text!r}", field="--calibration-caps")
    return caps


_NCCL_TESTS_OPTIONS = ("type", "redop", "op")


def _nccl_tests_arg(spec: str):
    """``FILE:LINK_CLASS:WORLD[:NODES][:type=T][:redop=R][:op=COLLECTIVE][:in-place]``: one sweep of nccl-tests output."""
    from ddpsim.fitting.nccl_tests import read_nccl_tests_sweep

    parts = spec.split(":")
    positional = [p for p in parts if "=" not in p and p != "in-place"]
    if len(positional) not in (3, 4) or parts[:len(positional)] != positional:
        raise ScenarioError("expected FILE:LINK_CLASS:WORLD_SIZE[:NODES][:type=T][:redop=R][:op=C][:in-place]",
                            field="--nccl-tests", file=spec)
    options: dict[str, str] = {}
    for part in parts[len(positional):]:
        key, _, value = part.partition("=")
        if part != "in-place" and (key not in _NCCL_TESTS_OPTIONS or not value or key in options):
            raise ScenarioError(f"unknown or repeated option {part!r} (known: type=, redop=, op=, in-place)",
                                field="--nccl-tests", file=spec)
        options[key] = value
    try:
        world, nodes = int(positional[2]), int(positional[3]) if len(positional) == 4 else 1
    except ValueError:
        raise ScenarioError("world size and nodes must be integers", field="--nccl-tests", file=spec) from None
    return read_nccl_tests_sweep(positional[0], positional[1], world, nodes, in_place="in-place" in options,
                                 data_type=options.get("type"), redop=options.get("redop"), collective=options.get("op"))


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from ddpsim.fitting.calibrate import (
        DEFAULT_CALIBRATION_CAPS,
        calibrate,
        calibration_caps_for,
        fit_warnings,
        load_measurements,
        measured_on,
        noise_runs,
        require_runs,
    )
    from ddpsim.fitting.fit import fit_noise, write_calibration
    from ddpsim.fitting.measurements import Profiles
    from ddpsim.fitting.sharded_fit import fit_sharded_collectives

    if args.recentre:
        return _recentre(args)
    given = args.calibration_caps is not None
    if given and args.links_only:
        raise ScenarioError("selects the DDP runs the overheads are fitted on, and --links-only fits none: drop one",
                            field="--calibration-caps")
    caps = _parse_caps(args.calibration_caps) if given else list(DEFAULT_CALIBRATION_CAPS)
    _check_data_dirs(args.noise_from, "--noise-from")
    other_runs = noise_runs(args.noise_from) if args.noise_from else []  # a bad folder stops before any fitting
    measured = load_measurements([args.data_dir]) if args.data_dir else None
    if measured and not args.links_only:
        require_runs(measured, [args.data_dir])
        caps = calibration_caps_for(caps, measured.runs, args.data_dir, given, lambda line: print(line, file=sys.stderr))
    samples = list(measured.samples) if measured else []
    sharded_sweeps = []  # reduce-scatter and all-gather: their own curves, beside the links the all-reduces fit
    for spec in args.nccl_tests:
        sweep = _nccl_tests_arg(spec)
        if sweep.collective == "all_reduce":
            samples.extend(sweep.allreduce_samples())
        else:
            sharded_sweeps.append(sweep)
    # fitted before the links and overheads, so that a bad sweep stops the command before the long fits
    sharded = fit_sharded_collectives(sharded_sweeps) if sharded_sweeps else {}
    if not samples:
        raise ScenarioError("no all-reduce measurements found (harness allreduce.jsonl or all_reduce_perf output "
                            "given with --nccl-tests; reduce-scatter and all-gather sweeps are fitted beside them)",
                            file=args.data_dir)
    if not args.data_dir and not args.links_only:
        raise ScenarioError("--nccl-tests measures the links only: add --links-only, or give DATA_DIR with DDP runs "
                            "to fit the overheads on", field="--links-only")
    data = calibrate(
        samples,
        measured.runs if measured else [],
        measured.profiles if measured else Profiles(),
        caps,
        links_only=args.links_only,
        log=lambda line: print(line, file=sys.stderr),
        timing_runs=measured.timing_runs if measured else (),
        compute_slowdowns=measured.compute_slowdowns if measured else (),
        net_probes=measured.net_probes if measured else (),
    )
    if not args.links_only and not data["overheads"]:
        # a fit that determined nothing is not a calibration: its runs' links were not measured
        raise ScenarioError("no DDP run at the calibration caps has its links measured (allreduce.jsonl sweeps of "
                            "its transport and shape) to fit the overheads on; add --links-only to fit the links alone",
                            file=args.data_dir, field="--calibration-caps")
    from ddpsim.fitting.gaps import calibration_gaps

    # what the data could not set, named with how to measure it (issue #24: calibrate never guesses silently);
    # a fatal one would answer from a default where the data should have set it: nothing is written
    gaps = calibration_gaps(samples, measured.runs if measured else [], data, caps, args.links_only)
    fatal = [gap for gap in gaps if gap.fatal]
    if fatal:
        raise ScenarioError(str(fatal[0]) + (f" (and {len(fatal) - 1} more)" if len(fatal) > 1 else ""),
                            file=args.data_dir)
    noise_source = (f"{args.data_dir}: every DDP run (p10/p90 over steps; repeat launches of the same configuration)"
                    if args.data_dir else None)
    if args.noise_from:
        # the spread between machine allocations, measured where the same plan ran on several of them
        data["noise"] = fit_noise(other_runs)
        noise_source = (", ".join(args.noise_from) + ": every DDP run (p10/p90 over steps; the same configuration "
                        "in other launches and campaigns)")
    meta = {
        "calibration_subset": data["calibration_subset"],
        "noise": data["noise"],
        "measured_overheads": data["measured_overheads"],
        "noise_source": noise_source,
        "data_dir": os.path.relpath(args.data_dir, os.path.dirname(os.path.abspath(args.out))) if args.data_dir else None,
        "nccl_tests": list(args.nccl_tests),
    }
    if sharded:
        meta["collectives"] = sharded
    hardware = measured_on([args.data_dir] if args.data_dir else [], samples, measured.runs if measured else [],
                           data["link_classes"])
    if hardware is not None:  # nccl-tests output alone does not name its GPU
        meta["measured_on"] = hardware
    written = write_calibration(args.out, data["link_classes"], data["overheads"], meta)
    for warning in [*fit_warnings(data), *map(str, gaps)]:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print_json(written)
        return 0
    _print_calibration(data["link_classes"], data["overheads"])
    for link_class, by_collective in sorted(meta.get("collectives", {}).items()):
        for collective, by_shape in sorted(by_collective.items()):
            for shape, entry in sorted(by_shape.items()):
                # beside the all-reduce's bus bandwidth on the same GPUs: a ring runs both at the link's speed
                nodes, per_node = (int(x) for x in shape.split("x"))
                links = data["link_classes"].get(link_class) if nodes == 1 else None
                links = (links.get("by_world_size") or {}).get(str(per_node), links) if links else None
                print(f"{link_class} {collective} {shape}: bus bandwidth {entry['bandwidth_Bps'] / 1e9:.1f} GB/s"
                      + (f" (all-reduce {links['bandwidth_Bps'] / 1e9:.1f})" if links else "")
                      + f", floor {entry['call_floor_s'] * 1e6:.1f} us, fit error {entry['fit_mean_error_pct']:.1f}% mean "
                      f"({entry['data_type']}, {', '.join(entry['sources'])})")
    how = {"allreduce_stretch": "last bucket of {} per-bucket traces",
           "compute_slowdown": "{} micro-benchmarks, GEMM and convolution beside all-reduces"}
    for link_class, entry in sorted(data["measured_overheads"].items()):
        for term, measured_term in sorted(entry.items()):
            fitted = data["overheads"].get(link_class, {}).get(term)
            print(f"{link_class}: {term} measured {measured_term['value']:.2f} ({how[term].format(measured_term['runs'])})"
                  + (f", fitted {fitted:.2f}" if fitted is not None else ""))
    print(f"\nwrote {args.out}")
    return 0


def _recentre(args: argparse.Namespace) -> int:
    """A pooled calibration re-centred on one allocation's probe (its all-reduce sweeps, and the level of the
    DDP overheads where the probe ran DDP steps)."""
    from ddpsim.calibration.file import calibration_from_dict, read_calibration_dict
    from ddpsim.fitting.recentre import probe_calibration
    from ddpsim.jsonfile import non_finite_field
    from ddpsim.outdir import atomic_write_text
    from ddpsim.schemas import document

    for option, on in (("--calibration-caps", args.calibration_caps is not None), ("--links-only", args.links_only),
                       ("--nccl-tests", bool(args.nccl_tests)), ("--noise-from", bool(args.noise_from))):
        if on:
            raise ScenarioError("--recentre keeps the pooled fit's noise and terms and takes the probe's sweeps and "
                                "the level of its DDP steps: drop it", field=option)
    if not args.data_dir:
        raise ScenarioError("--recentre needs DATA_DIR, the probe of the allocation (ddpsim measure --plan probe)",
                            field="data_dir")
    _check_data_dirs([args.data_dir])
    base = read_calibration_dict(args.recentre)  # a bad base file stops here, named
    data, notes = probe_calibration(base, [args.data_dir], base_source=args.recentre,
                                    allow_other_gpu=args.allow_other_gpu)
    calibration_from_dict(data, args.out)  # what is written reads back
    bad = non_finite_field(data)
    if bad:
        raise ScenarioError("the re-centred calibration holds a value that is not a finite number; nothing was "
                            "written", file=args.out, field=bad)
    data = document("calibration", data)
    atomic_write_text(args.out, json.dumps(data, indent=1) + "\n")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        print_json(data)
        return 0
    probed = data.get("probed_from", {}).get("parts", [])
    print(f"re-centred {args.recentre} on the probe {args.data_dir}: {', '.join(probed) or 'nothing'}")
    for level in data.get("probed_from", {}).get("overheads", []):
        print(f"  overheads {level['overhead_class']} at {level['world_size']} GPUs x {level['level']:.3f} from "
              f"{level['runs']} DDP run(s) of the probe" + (" (clipped at its range or the terms' floors: "
              f"the probe's runs stay {100 * math.expm1(-level['log_error_after']):+.1f}% off)" if level["clipped"] else ""))
    if data.get("probed_from", {}).get("other_gpu"):
        print(f"from: gpu  the probe ran on {', '.join(data['probed_from']['other_gpu'])}, {args.recentre} was "
              f"measured on {data['measured_on']['gpu']} (--allow-other-gpu)")
    print(f"\nwrote {args.out}")
    return 0


def _print_calibration(links: dict, overheads: dict) -> None:
    from ddpsim.report.tables import table

    rows: list[tuple[object, ...]] = []
    for link_class, entry in links.items():
        fits = [("all", entry)] + sorted(entry.get("by_world_size", {}).items())
        for world, fit_entry in fits:
            for protocol, fit in fit_entry["protocol_fits"].items():
                if not fit.get("selected", True):
                    continue  # never the fastest on the measured sizes
                rows.append(
                    (
                        link_class,
                        world,
                        protocol,
                        f"{fit['base_latency_s'] * 1e6:.1f}",
                        f"{fit['hop_latency_s'] * 1e6:.2f}",
                        f"{fit['bus_bandwidth_Bps'] / 1e9:.1f}",
                        f"{fit_entry.get('call_floor_s', 0.0) * 1e6:.0f}",
                        f"{fit_entry['fit_mean_error_pct']:.1f} / {fit_entry['fit_max_error_pct']:.1f}",
                    )
                )
    print("All-reduce fit per link class: max(floor, min over protocols of base + 2(n-1) x hop + bytes x 2(n-1)/n / busbw)")
    headers: tuple[str, ...] = ("link class", "GPUs", "protocol", "base us", "per-hop us", "busbw GB/s", "floor us", "fit err mean/max %")
    print(table(headers, rows))
    for link_class, entry in links.items():
        if entry.get("protocols_from", "").startswith("no NCCL log"):
            print(f"{link_class}: {entry['protocols_from']}")
        if "duplex_factor" in entry:
            # the net rows' busbw is the endpoint's one-way rate; both ways it gets this fraction each way
            print(f"{link_class}: endpoint duplex factor {entry['duplex_factor']:.2f}, {entry.get('duplex_source', '')}")
        tree = entry.get("tree_fit")
        if isinstance(tree, dict) and not tree.get("fitted", True):
            print(f"{link_class}: {tree['note']}")  # the tree then runs on the ring's network numbers
    if overheads:
        print("\nDDP overheads (fitted on the calibration subset only)")
        rows.clear()
        for link_class, entry in overheads.items():
            for world, o in [("all", entry)] + sorted(entry.get("by_world_size", {}).items()):
                rows.append(
                    (
                        link_class,
                        world,
                        f"{o['bucket_launch_s'] * 1e6:.0f}",
                        f"{o['compute_slowdown']:.2f}",
                        f"{o['comm_slowdown']:.1f}",
                        f"{o.get('allreduce_stretch', 1.0):.2f}",
                        f"{o.get('idle_start_wait_s', 0.0) * 1e6:.0f}",
                        f"{o.get('bucket_cpu_s', 0.0) * 1e6:.0f}",
                        str(o["max_inflight_buckets"]),
                        f"{o['buffer_sync_s'] * 1e3:.1f}",
                        f"{o['calibration_mape_pct']:.1f}",
                        o["calibration_runs"],
                    )
                )
        headers = ("link class", "GPUs", "launch us", "compute slowdown", "comm slowdown", "all-reduce stretch",
                   "idle-start wait us", "bucket cpu us", "max in flight", "buffer sync ms", "calib MAPE %", "runs")
        print(table(headers, rows))


def _cmd_validate(args: argparse.Namespace) -> int:
    from ddpsim.calibration.file import read_calibration
    from ddpsim.cli.validation_report import validation_dict, validation_text, write_validation_dir
    from ddpsim.fitting.calibrate import DEFAULT_CALIBRATION_CAPS
    from ddpsim.fitting.validate import cross_validate, validate

    tolerances = {
        "max_mape_pct": args.max_mape,
        "max_error_pct": args.max_error,
        "max_allreduce_error_pct": args.max_allreduce_error,
        "min_recommendation_share": args.min_recommendation_share,
    }
    _check_data_dirs(args.data_dir)
    if not args.cross:
        for option, value in (("--calibration-caps", args.calibration_caps), ("--jobs", args.jobs)):
            if value is not None:
                raise ScenarioError("only cross-validation fits calibrations: add --cross model|launch|host, "
                                    f"or drop {option}", field=option)
    if args.cross:
        if args.calibration:
            raise ScenarioError("--cross builds its own calibrations from the other parts; drop --calibration",
                                field="--calibration")
        given = args.calibration_caps is not None
        caps = _parse_caps(args.calibration_caps) if given else list(DEFAULT_CALIBRATION_CAPS)
        jobs = 1 if args.jobs is None else args.jobs
        if not 1 <= jobs <= 1024:
            raise ScenarioError(f"expected 1 to 1024 processes, got {jobs}", field="--jobs")
        v = cross_validate(args.data_dir, args.cross, caps, log=lambda line: print(line, file=sys.stderr),
                           jobs=jobs, caps_given=given, **tolerances)
    else:
        calibration = read_calibration(args.calibration) if args.calibration else None
        if calibration is not None and args.allow_other_gpu:
            calibration = replace(calibration, other_gpu_allowed=True)
        v = validate(args.data_dir, calibration, **tolerances)
    if args.json:
        print_json(validation_dict(v))
    else:
        print(validation_text(v))
    if args.out:
        write_validation_dir(v, args.out)
        if not args.json:
            print(f"\nwrote {args.out}/validation.md, validation.json, predicted_vs_measured.png, bucket_cap_curves.png")
    return 0 if v.passed else EXIT_FAILED_VALIDATION


def _check_data_dirs(data_dirs: list[str], option: str = "data_dir") -> None:
    """Each campaign once: a folder given twice, or inside another given, would count its runs twice."""
    seen: list[tuple[str, str]] = []
    for data_dir in data_dirs:
        real = os.path.realpath(data_dir)
        for other, other_real in seen:
            if os.path.commonpath([real, other_real]) in (real, other_real):
                same = "the same folder as" if real == other_real else "inside" if real.startswith(other_real) else "holds"
                raise ScenarioError(f"{same} {other}, given already: its runs would be counted twice", file=data_dir,
                                    field=option)
        seen.append((data_dir, real))
    from ddpsim.fitting.device import refuse_dry_runs

    refuse_dry_runs(data_dirs, option)


def register(sub: Any) -> None:
    # the fitting and prediction switches whose experiments lost (fixed stretch, idle-start wait, pruning,
    # fitted-models-only communication terms, profile jitter, launch normalisation) are library
    # parameters only: docs/model.md, "Switches that lost their experiment"
    cal = add_command(sub, "calibrate", "fit link and DDP overhead parameters from measurements", (
        "ddpsim calibrate validation/data/h200x4-2026-11-26 --out my-calibration.json",
        "ddpsim calibrate --nccl-tests all_reduce_perf.txt:nvlink:8 --links-only --out links.json",
    ))
    cal.add_argument("data_dir", nargs="?", help="folder with the harness's allreduce.jsonl, ddp_runs.jsonl, profiles/")
    cal.add_argument("--out", required=True, metavar="FILE", help="calibration JSON to write")
    cal.add_argument("--calibration-caps", default=None, metavar="MB,MB|all",
                     help="bucket caps (MB) whose DDP runs may be used for fitting, or 'all'; the rest stay held out "
                          "(default 5,50: those of them measured)")
    cal.add_argument("--nccl-tests", action="append", default=[], metavar="FILE:LINK_CLASS:WORLD[:NODES][:OPTION]",
                     help="nccl-tests all_reduce_perf, reduce_scatter_perf or all_gather_perf output, text or -J JSON, "
                          "to fit as well (repeatable); options: type=T and redop=R choose one sweep of a -d all / -o all "
                          "file, op=C names the binary of a file that does not, in-place reads the in-place columns")
    cal.add_argument("--links-only", action="store_true", help="fit only the link classes")
    cal.add_argument("--json", action="store_true",
                     help="print the calibration written (one JSON object) on stdout, nothing else; notes to stderr")
    cal.add_argument("--recentre", metavar="FILE|NAME",
                     help="re-centre FILE or a shipped calibration (e.g. pooled:H200) on "
                          "DATA_DIR's all-reduce sweeps: the probe of a fresh allocation (ddpsim measure --plan probe)")
    cal.add_argument("--noise-from", action="append", default=[], metavar="DIR",
                     help="campaign folders whose DDP runs give the step's measured spread (p10/p90 of 'ddpsim run') "
                          "instead of DATA_DIR's: e.g. the same plan on several allocations (repeatable)")
    add_allow_other_gpu(cal)
    cal.set_defaults(handler=_cmd_calibrate)

    val = add_command(sub, "validate", "predict held-out measured runs and fail beyond tolerance", (
        "ddpsim validate validation/data/h200x4-2026-11-26b --calibration x4:H200 --out reports/h200x4b",
        "ddpsim validate validation/data/h200x2-2026-11-26 validation/data/h100x2-2026-11-26 --cross host --jobs 2",
    ))
    val.add_argument("data_dir", nargs="+", help="campaign folders (several: one report over all of them)")
    val.add_argument("--calibration", metavar="FILE|NAME",
                     help="calibration JSON, or a shipped one by name (pooled:H200; omit: the scenario defaults, "
                          "uncalibrated)")
    val.add_argument("--cross", choices=("model", "launch", "host"),
                     help="leave one model, launch or host out: each predicted by a calibration fitted on the rest")
    val.add_argument("--calibration-caps", default=None, metavar="MB,MB|all",
                     help="with --cross: bucket caps (MB) of the plain runs the overheads are fitted on, or 'all' "
                          "(default 5,50: those of them measured)")
    val.add_argument("--jobs", type=int, default=None, metavar="N",
                     help="with --cross: folds fitted in parallel processes (default 1)")
    val.add_argument("--json", action="store_true", help="print one JSON object on stdout, nothing else")
    val.add_argument("--out", metavar="DIR",
                     help="write validation.md, validation.json, predicted_vs_measured.png, bucket_cap_curves.png")
    limits = val.add_argument_group("tolerances (exit 1 past any of them)")
    limits.add_argument("--max-mape", type=nonnegative_float, default=5.0, metavar="PCT",
                        help="mean absolute %% error per link class (default 5)")
    limits.add_argument("--max-error", type=nonnegative_float, default=15.0, metavar="PCT",
                        help="%% error of any held-out run (default 15)")
    limits.add_argument("--max-allreduce-error", type=nonnegative_float, default=10.0, metavar="PCT",
                        help="%% error of any all-reduce size from 64 KiB to 1 GiB (default 10)")
    limits.add_argument("--min-recommendation-share", type=share, default=0.9, metavar="SHARE",
                        help="share of groups whose recommended cap is within 5%% of the measured best (default 0.9)")
    add_allow_other_gpu(val)
    val.set_defaults(handler=_cmd_validate)
