"""Issue #39, the overhead level on the fresh 2 x H200 allocations committed before PL, none in the pooled fit:
MW, MW2 (``ddpsim measure``, three models, NVLink / shared memory / sockets) and TR, TR2, TU, TU2, TU3
(``h200x2-trace-*``: one model over NVLink). Their campaigns had no probe DDP steps, so the probe is emulated
from each folder: its all-reduce sweeps, its profiles and some of its plain DDP runs, in a copy of the folder
that holds only those; the other plain runs are predicted.

- ``other caps``: the probe's runs are every model's cap-25 run; predicted: the caps 5 and 50 (what the probe
  plan now does: the user's models at cap 25).
- ``other models`` (MW, MW2): the probe's runs are the cap-25 runs of the two other models; predicted: every
  cap of the third (a reference model's level carried to a model the probe never ran).
- ``own model`` (MW, MW2): one level per model, from its own cap-25 run; predicted: its caps 5 and 50 (what a
  calibration that kept a level per model would do; the file keeps one per class today).

Unlike PL (stage heldout-pl), the emulated probe's runs come from the same launch as the predicted runs, with
30 steps a round instead of 10: the launch-to-launch spread of the step (about 6 to 8% on these links) is not
in these errors, so they are optimistic for a probe launched on its own.

Run: ``python -m validation.evidence --stage probe-level-retro``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from ddpsim.calibration.file import calibration_from_dict
from ddpsim.fitting.calibrate import is_plain, load_measurements, timing_instrumented
from ddpsim.fitting.recentre import probe_calibration
from ddpsim.fitting.validate import predict_run
from ddpsim.jsonfile import open_data, read_json_object
from validation.evidence.stages.probe_level import BASE, line

ALLOCATIONS = {
    "MW": "validation/data/h200x2-measure-2026-11-27",
    "MW2": "validation/data/h200x2-measure-2026-11-27b",
    "TR": "validation/data/h200x2-trace-2026-11-27",
    "TR2": "validation/data/h200x2-trace-2026-11-27b",
    "TU": "validation/data/h200x2-trace-2026-11-27c",
    "TU2": "validation/data/h200x2-trace-2026-11-27d",
    "TU3": "validation/data/h200x2-trace-2026-11-27e",
}
PROBE_CAP_MB = 25.0
Row = tuple[float, float, float | None, float | None]


def _plain(run: dict[str, Any]) -> bool:
    return run.get("status") == "ok" and is_plain(run) and not timing_instrumented(run)


def _probe_copy(folder: str, keep: Callable[[dict[str, Any]], bool], into: str) -> str:
    """A copy of ``folder`` whose ddp_runs.jsonl holds only the runs ``keep`` takes (sweeps, profiles kept)."""
    target = os.path.join(into, os.path.basename(folder))
    shutil.copytree(folder, target, ignore=shutil.ignore_patterns("logs", "traces"))
    path = os.path.join(target, "ddp_runs.jsonl")
    with open_data(path) as handle:
        runs = [json.loads(text) for text in handle if text.strip()]
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(run) + "\n" for run in runs if _plain(run) and keep(run))
    return target


def _predict(folder: str, base: dict[str, Any], keep: Callable[[dict[str, Any]], bool],
             predict: Callable[[dict[str, Any]], bool]) -> list[tuple[str, dict[str, Row]]]:
    """Each plain run ``predict`` takes, by the pooled file, its links re-centred, and links + overheads."""
    with tempfile.TemporaryDirectory() as tmp:
        probed, _ = probe_calibration(base, [_probe_copy(folder, keep, tmp)], base_source=BASE)
    links = json.loads(json.dumps(probed))
    links["overheads"] = base["overheads"]
    calibrations = {mode: calibration_from_dict(data, f"<{mode}>")
                    for mode, data in (("pooled", base), ("links", links), ("links + overheads", probed))}
    measured = load_measurements([folder])
    out = []
    for run in measured.runs:
        if not (_plain(run) and predict(run)):
            continue
        cells = {}
        for mode, calibration in calibrations.items():
            row = predict_run(measured, run, calibration)
            cells[mode] = (row.measured_s, row.predicted_s, row.predicted_p10_s, row.predicted_p90_s)
        out.append((str(run["transport"]), cells))
    return out


def probe_level_retro() -> str:
    base = read_json_object(BASE, "calibration", field="calibration")
    table: dict[tuple[str, str, str], list[Row]] = {}
    per_allocation: dict[tuple[str, str, str], list[Row]] = {}
    for name, folder in ALLOCATIONS.items():
        with open_data(os.path.join(folder, "ddp_runs.jsonl")) as handle:
            models = sorted({str(r["model"]) for r in map(json.loads, filter(str.strip, handle)) if _plain(r)})
        splits: list[tuple[str, Callable[[dict[str, Any]], bool], Callable[[dict[str, Any]], bool]]] = [
            ("other caps", lambda r: float(r["bucket_cap_mb"]) == PROBE_CAP_MB,
             lambda r: float(r["bucket_cap_mb"]) != PROBE_CAP_MB)]
        if len(models) > 1:
            splits += [("other models", lambda r, m=m: r["model"] != m and float(r["bucket_cap_mb"]) == PROBE_CAP_MB,
                        lambda r, m=m: r["model"] == m) for m in models]
            # one level per model (what a calibration keyed by model would hold): its cap-25 run alone
            splits += [("own model", lambda r, m=m: r["model"] == m and float(r["bucket_cap_mb"]) == PROBE_CAP_MB,
                        lambda r, m=m: r["model"] == m and float(r["bucket_cap_mb"]) != PROBE_CAP_MB)
                       for m in models]
        for split, keep, predict in splits:
            for link_class, cells in _predict(folder, base, keep, predict):
                for mode, row in cells.items():
                    table.setdefault((split, link_class, mode), []).append(row)
                    per_allocation.setdefault((split, f"{name} {link_class}", mode), []).append(row)
    header = ["| split | group | prediction | runs | mean abs error % | bias % | max % | inside p10..p90 |",
              "|---|---|---|---|---|---|---|---|"]
    lines = ["# The overhead level on seven earlier fresh 2 x H200 allocations (emulated probe)", "",
             f"Pooled `{BASE}`; allocations: " + ", ".join(f"{n} `{f}`" for n, f in ALLOCATIONS.items()) + ".", "",
             "Per link class, every allocation:", ""] + header
    lines += [f"| {split} " + line(group, mode, rows) for (split, group, mode), rows in sorted(table.items())]
    lines += ["", "Per allocation:", ""] + header
    lines += [f"| {split} " + line(group, mode, rows) for (split, group, mode), rows in sorted(per_allocation.items())]
    return "\n".join(lines) + "\n"
