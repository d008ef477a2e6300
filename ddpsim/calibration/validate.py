"""Compare predictions with measured DDP runs and all-reduce sweeps (``ddpsim validate``).

Only runs outside the calibration subset named in the calibration file are predicted. The report
fails (``Validation.passed`` is False) when the error is past the tolerances given.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ddpsim.calibration.file import Calibration
from ddpsim.calibration.measured_scenarios import run_label, run_scenario
from ddpsim.calibration.measurements import (
    AllReduceSample,
    find_data_files,
    read_ddp_runs,
    read_harness_allreduce,
)
from ddpsim.errors import ScenarioError
from ddpsim.jsonfile import read_json_object
from ddpsim.planning.advisor import pick_cap

ALLREDUCE_CHECK_MIN_BYTES = 64 * 1024
ALLREDUCE_CHECK_MAX_BYTES = 1 << 30


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

    @property
    def error_pct(self) -> float:
        return (self.predicted_s / self.measured_s - 1) * 100


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

    def held_out(self) -> list[RunRow]:
        return [r for r in self.rows if r.held_out]

    def by_transport(self) -> dict[str, list[RunRow]]:
        groups: dict[str, list[RunRow]] = defaultdict(list)
        for row in self.held_out():
            groups[row.transport].append(row)
        return dict(sorted(groups.items()))

    @property
    def passed(self) -> bool:
        return not self.failures


def profiles_by_model(paths: Sequence[str]) -> dict[str, str]:
    """Model name -> profile path, for the harness's ``profiles/*.json``."""
    profiles = {}
    for path in paths:
        model = read_json_object(path, "profile").get("model")
        if isinstance(model, str):
            profiles[model] = path
    return profiles


def in_calibration_subset(run: dict[str, Any], subset: dict[str, Any], data_dir: str | None = None) -> bool:
    """Whether ``run`` may have been used by the calibration: its cap is in the subset and, when the
    calibration names its data folder, the run comes from that folder."""
    caps = subset.get("bucket_cap_mb")
    if caps is None or float(run["bucket_cap_mb"]) not in {float(c) for c in caps}:
        return False
    source = run.get("_source")
    if data_dir is None or source is None:
        return True
    return os.path.commonpath([os.path.abspath(data_dir), source]) == os.path.abspath(data_dir)


def load_measurements(data_dir: str) -> tuple[list[dict[str, Any]], dict[str, str], list[AllReduceSample]]:
    files = find_data_files(data_dir)
    if not files["ddp_runs"]:
        raise ScenarioError("no ddp_runs.jsonl under this folder", file=data_dir)
    runs = [run for path in files["ddp_runs"] for run in read_ddp_runs(path)]
    samples = [s for path in files["allreduce"] for s in read_harness_allreduce(path)]
    return runs, profiles_by_model(files["profiles"]), samples


def _check_allreduce(samples: Sequence[AllReduceSample], calibration: Calibration) -> list[AllReduceRow]:
    from ddpsim.collectives import CollectiveModel
    from ddpsim.scenario.load import scenario_from_dict
    from ddpsim.topology import build_topology
    from ddpsim.topology.link_kinds import intra_type_of_class

    rows = []
    models: dict[tuple[str, int], Any] = {}
    for sample in samples:
        if not ALLREDUCE_CHECK_MIN_BYTES <= sample.bytes <= ALLREDUCE_CHECK_MAX_BYTES:
            continue
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
    by_launch: dict[tuple[str, str, int], dict[str, list[RunRow]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        by_launch[(row.model, row.transport, row.world_size)][row.launch_id].append(row)
    out = []
    for (model, transport, world), launches in sorted(by_launch.items()):
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
    data_dir: str,
    calibration: Calibration | None,
    max_mape_pct: float = 5.0,
    max_error_pct: float = 15.0,
    max_allreduce_error_pct: float = 10.0,
    min_recommendation_share: float = 0.9,
) -> Validation:
    """Predict the measured runs; without a calibration, with the scenario defaults (all runs held out)."""
    from ddpsim.simulation import prepare, simulate

    subset = calibration.calibration_subset if calibration is not None else {}
    calibration_data_dir = calibration.data_dir if calibration is not None else None
    runs, profiles, samples = load_measurements(data_dir)
    rows: list[RunRow] = []
    mismatches: list[str] = []
    checked = 0
    fingerprints = set()
    for run in runs:
        if run["model"] not in profiles or run.get("comm_hook"):
            # instrumented runs (a timing comm hook) are for per-bucket analysis, not accuracy
            continue
        fp = run.get("fingerprint", {})
        fingerprints.add(
            f"{fp.get('gpu_count', run['world_size'])} x {fp.get('gpu_name', '?')}, driver {fp.get('driver', '?')}, "
            f"torch {fp.get('torch', '?')}, NCCL {fp.get('nccl', '?')}"
        )
        prep = prepare(run_scenario(run, profiles[run["model"]], calibration))
        predicted = simulate(prep).step_time_s
        rows.append(
            RunRow(
                model=run["model"],
                transport=run["transport"],
                world_size=int(run["world_size"]),
                bucket_cap_mb=float(run["bucket_cap_mb"]),
                measured_s=float(run["step_s_median"]),
                measured_p10_s=run.get("step_s_p10"),
                measured_p90_s=run.get("step_s_p90"),
                predicted_s=predicted,
                held_out=not in_calibration_subset(run, subset, calibration_data_dir),
                launch_id=str(run.get("launch_id", "")),
            )
        )
        mismatch = _layout_mismatch(run, prep)
        if mismatch is not None:
            checked += 1
            if mismatch:
                mismatches.append(mismatch)
    result = Validation(
        rows=rows,
        allreduce=_check_allreduce(samples, calibration) if calibration is not None else [],
        # only held-out runs: the calibration subset's step times were fitted
        recommendation=_recommendations([r for r in rows if r.held_out]),
        layouts_checked=checked,
        layout_mismatches=mismatches,
        fingerprints=sorted(fingerprints),
        calibration_subset=subset,
    )
    result.failures = _failures(result, max_mape_pct, max_error_pct, max_allreduce_error_pct, min_recommendation_share)
    return result


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
    return failures
