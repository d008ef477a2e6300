"""Fit the simulator's parameters from measurements (``ddpsim calibrate``).

1. Link classes: NCCL-style latency/bandwidth per protocol, fitted to all-reduce sweeps (the
   harness's JSON or nccl-tests output), turned into a link bandwidth, latency and protocol table.
2. DDP overheads per link class, fitted to a calibration subset of measured DDP runs only: the
   per-bucket launch cost, compute slowed by concurrent NCCL kernels, and the in-flight limit of
   the launch path. Runs outside the subset are never looked at here: they are for ``validate``.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from ddpsim.calibration.curvefit import PROTOCOL_NAMES, envelope_s, fit_protocols
from ddpsim.calibration.file import SCHEMA, Calibration
from ddpsim.calibration.measurements import AllReduceSample
from ddpsim.collectives import ProtocolTable
from ddpsim.errors import ScenarioError
from ddpsim.topology.link_kinds import LINK_CLASSES, nccl_transport_of_class

MIN_FIT_BYTES = 4096

# candidate values searched for the DDP overhead terms (coordinate descent over these grids)
OVERHEAD_GRIDS: dict[str, tuple[Any, ...]] = {
    "bucket_launch_s": (2e-6, 5e-6, 10e-6, 20e-6, 40e-6, 80e-6, 160e-6),
    "compute_slowdown": (1.0, 1.05, 1.1, 1.15, 1.2, 1.3, 1.45, 1.6, 1.8, 2.0),
    "comm_slowdown": (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0, 9.0, 13.0),
    "max_inflight_buckets": (None, 1, 2, 3, 4, 6, 8),
    "buffer_sync_s": (0.0, 0.5e-3, 1e-3, 1.5e-3, 2e-3, 2.5e-3, 3e-3, 4e-3, 5e-3),
    "bucket_cpu_s": (0.0, 10e-6, 20e-6, 40e-6, 80e-6, 160e-6),
    "allreduce_stretch": (1.0, 1.1, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0),
}
START_OVERHEADS: dict[str, Any] = {
    "bucket_launch_s": 10e-6,
    "compute_slowdown": 1.0,
    "comm_slowdown": 1.0,
    "max_inflight_buckets": None,
    "buffer_sync_s": 0.0,
    "bucket_cpu_s": 0.0,
    "allreduce_stretch": 1.0,
}


def fit_link_class(samples: Sequence[AllReduceSample]) -> dict[str, Any]:
    """One link class's entry of the calibration file, with the fit's own errors on its samples."""
    used = [s for s in samples if s.bytes >= MIN_FIT_BYTES]
    if len(used) < 3:
        raise ScenarioError("fewer than three all-reduce sizes to fit", file=samples[0].source if samples else None)
    link_class = used[0].link_class
    fits = fit_protocols([s.bytes for s in used], [s.world_size for s in used], [s.time_s for s in used], with_floor=True)
    floor_s = fits.pop("floor").base_s
    chosen = {envelope_s(fits, s.bytes, s.world_size)[1] for s in used}
    reference_Bps = max(fits[p].busbw_Bps for p in chosen)
    if link_class not in LINK_CLASSES:
        raise ScenarioError(
            f"unknown link class {link_class!r} (known: {', '.join(LINK_CLASSES)})", file=used[0].source, field="link_class"
        )
    transport = nccl_transport_of_class(link_class)
    base, hops, efficiency = {}, {}, {}
    for protocol in PROTOCOL_NAMES:
        fit = fits[protocol]
        if protocol not in chosen:
            # never the fastest on the measured sizes: keep it out of NCCL-like choice
            base[protocol], hops[protocol], efficiency[protocol] = 1.0, 1.0, 1e-3
            continue
        base[protocol], hops[protocol] = fit.base_s, fit.hop_s
        efficiency[protocol] = min(1.0, fit.busbw_Bps / reference_Bps)
    table = ProtocolTable(
        base_latency_s={(family, p): base[p] for family in ("ring", "tree") for p in PROTOCOL_NAMES},
        hop_latency_s={(transport, family, p): hops[p] for family in ("ring", "tree") for p in PROTOCOL_NAMES},
        transport_efficiency={(transport, p): efficiency[p] for p in PROTOCOL_NAMES},
        hop_latency_mode="absolute",
    )
    errors = [abs(envelope_s(fits, s.bytes, s.world_size, floor_s)[0] / s.time_s - 1) * 100 for s in used]
    return {
        "bandwidth_Bps": reference_Bps,
        "latency_s": min(hops[p] for p in chosen),
        # NCCL runs rings inside one node (its tree is slower there); the fit is of rings
        "algorithm": "ring",
        # a single call never completes faster than this (the launch path, timed from the host)
        "call_floor_s": floor_s,
        "protocol_table": table.to_dict(),
        "protocol_fits": {
            p: {"base_latency_s": f.base_s, "hop_latency_s": f.hop_s, "bus_bandwidth_Bps": f.busbw_Bps,
                "selected": p in chosen}
            for p, f in fits.items()
        },
        "samples": len(used),
        "world_sizes": sorted({s.world_size for s in used}),
        "sources": sorted({os.path.basename(s.source) for s in used}),
        "fit_mean_error_pct": sum(errors) / len(errors),
        "fit_max_error_pct": max(errors),
    }


def fit_links(samples: Iterable[AllReduceSample]) -> dict[str, dict[str, Any]]:
    by_class: dict[str, list[AllReduceSample]] = defaultdict(list)
    for sample in samples:
        by_class[sample.link_class].append(sample)
    fitted = {}
    for link_class, group in sorted(by_class.items()):
        entry = fit_link_class(group)
        worlds = sorted({s.world_size for s in group})
        if len(worlds) > 1:
            # NCCL's bandwidth on one host does not always follow 2(n-1)/n (shared host memory,
            # sockets): a fit per measured world size is used where the scenario matches it
            entry["by_world_size"] = {
                str(w): fit_link_class([s for s in group if s.world_size == w]) for w in worlds
            }
        fitted[link_class] = entry
    return fitted


def write_calibration(path: str, link_classes: dict[str, Any], overheads: dict[str, Any], meta: dict[str, Any]) -> None:
    from ddpsim.outdir import atomic_write_text

    data = {"schema": SCHEMA, "link_classes": link_classes, "overheads": overheads, **meta}
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _mape(pairs: Sequence[tuple[float, float]]) -> float:
    return sum(abs(p / m - 1) for p, m in pairs) / len(pairs) * 100


def fit_overheads(
    runs: Sequence[dict[str, Any]],
    profiles: dict[str, str],
    link_calibration: Calibration,
    rounds: int = 3,
) -> dict[str, Any]:
    """Coordinate descent over ``OVERHEAD_GRIDS``, minimising mean absolute % error on ``runs``."""
    from dataclasses import replace

    from ddpsim.calibration.measured_scenarios import run_scenario
    from ddpsim.simulation import prepare, simulate

    runs = [r for r in runs if r["model"] in profiles]
    if not runs:
        raise ScenarioError("no calibration runs with a measured profile")
    prepared = [prepare(run_scenario(run, profiles[run["model"]], link_calibration)) for run in runs]
    measured = [float(run["step_s_median"]) for run in runs]
    cache: dict[tuple, float] = {}

    def score(params: dict[str, Any]) -> float:
        key = tuple(params[name] for name in OVERHEAD_GRIDS)
        if key not in cache:
            pairs = []
            for prep, step_s in zip(prepared, measured, strict=True):
                overheads = replace(prep.scenario.overheads, **params)
                trial = replace(prep, scenario=replace(prep.scenario, overheads=overheads))
                pairs.append((simulate(trial).step_time_s, step_s))
            cache[key] = _mape(pairs)
        return cache[key]

    def descend(params: dict[str, Any]) -> dict[str, Any]:
        for _ in range(rounds):
            before = score(params)
            for name, grid in OVERHEAD_GRIDS.items():
                params[name] = min(grid, key=lambda value: (score({**params, name: value}), str(value)))
            if score(params) >= before:
                break
        return params

    # the terms trade off (slower compute vs slower communication both lengthen backward), so
    # descend from several starting points and keep the best
    starts = [dict(START_OVERHEADS)] + [{**START_OVERHEADS, "comm_slowdown": c} for c in (3.0, 5.0, 9.0)]
    best = min((descend(start) for start in starts), key=score)
    return {**best, "calibration_mape_pct": score(best), "calibration_runs": len(runs)}
