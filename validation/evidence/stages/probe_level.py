"""Issue #39 held-out allocation PL (2026-11-28, 2 x H200): the pooled H200 calibration, re-centred on PL's
probe (`ddpsim measure --plan probe`: sweeps, a few DDP steps at cap 25, profiles), predicting PL's held-out
DDP campaign (`ddpsim measure --plan default`, another folder and launch of the same allocation).

Run: ``python -m validation.evidence --stage probe-pl`` (the re-centred calibration) and ``--stage
heldout-pl`` (the table). Three predictions of every plain held-out run: the pooled file alone; re-centred on
the probe's sweeps only (``links``: what ``calibrate --recentre`` wrote before issue #39); and re-centred on
the sweeps and the probe's DDP steps (``links + overheads``, ``pool.probe_calibration`` now).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from ddpsim.calibration.file import calibration_from_dict
from ddpsim.fitting.calibrate import is_plain, load_measurements, timing_instrumented
from ddpsim.fitting.measured_scenarios import run_nodes
from ddpsim.fitting.recentre import probe_calibration
from ddpsim.fitting.validate import predict_run
from ddpsim.jsonfile import read_json_object

BASE = "ddpsim/calibration/shipped/pooled-h200.json"
PROBE = "validation/data/h200x2-probe-2026-11-28"
HELDOUT = "validation/data/h200x2-heldout-2026-11-28"


def _calibrations() -> dict[str, dict[str, Any]]:
    base = read_json_object(BASE, "calibration", field="calibration")
    with_overheads, _ = probe_calibration(base, [PROBE], base_source=BASE)
    links_only = json.loads(json.dumps(with_overheads))
    # the same re-centring without the probe's DDP steps: the overheads entries back to the pooled ones
    links_only["overheads"] = base["overheads"]
    links_only["probed_from"].pop("overheads", None)
    return {"pooled": base, "links": links_only, "links + overheads": with_overheads}


def probe_pl() -> str:
    return json.dumps(_calibrations()["links + overheads"], indent=1, sort_keys=True) + "\n"


def _group(run: dict[str, Any]) -> str:
    nodes = run_nodes(run)
    if nodes > 1:
        return f"network {nodes}x{int(run['world_size']) // nodes}"
    return str(run["transport"])


def line(group: str, mode: str, rows: Sequence[tuple[float, float, float | None, float | None]]) -> str:
    errors = [100.0 * (p / m - 1.0) for m, p, _, _ in rows]
    inside = sum(1 for m, _, lo, hi in rows if lo is not None and hi is not None and lo <= m <= hi)
    mean_abs = sum(abs(e) for e in errors) / len(errors)
    bias = 100.0 * math.expm1(sum(math.log(p / m) for m, p, _, _ in rows) / len(rows))
    return (f"| {group} | {mode} | {len(rows)} | {mean_abs:.1f} | {bias:+.1f} | {max(abs(e) for e in errors):.1f} | "
            f"{inside} of {len(rows)} |")


def heldout_pl() -> str:
    measured = load_measurements([HELDOUT])
    runs = [r for r in measured.runs if is_plain(r) and not timing_instrumented(r)]
    calibrations = {mode: calibration_from_dict(data, f"<{mode}>") for mode, data in _calibrations().items()}
    table: dict[tuple[str, str], list[tuple[float, float, float | None, float | None]]] = {}
    detail = []
    for run in sorted(runs, key=lambda r: (_group(r), r["model"], float(r["bucket_cap_mb"]))):
        cells = []
        for mode, calibration in calibrations.items():
            row = predict_run(measured, run, calibration)
            table.setdefault((_group(run), mode), []).append(
                (row.measured_s, row.predicted_s, row.predicted_p10_s, row.predicted_p90_s))
            cells.append(f"{1e3 * row.predicted_s:.1f} ({row.error_pct:+.1f}%)")
        detail.append(f"| {_group(run)} | {run['model']} | {float(run['bucket_cap_mb']):g} | "
                      f"{1e3 * float(run['step_s_median']):.1f} | " + " | ".join(cells) + " |")
    lines = ["# PL (2 x H200, 2026-11-28): held-out DDP runs, pooled calibration and the probe", "",
             f"Data: `{HELDOUT}` (held out: no fit saw it), probe `{PROBE}`, pooled `{BASE}`.", "",
             "| group | prediction | runs | mean abs error % | bias % | max % | inside p10..p90 |",
             "|---|---|---|---|---|---|---|"]
    lines += [line(group, mode, rows) for (group, mode), rows in table.items()]
    lines += ["", "| group | model | cap MB | measured ms | " + " | ".join(calibrations) + " |",
              "|---|---|---|---|" + "---|" * len(calibrations)] + detail
    levels = _calibrations()["links + overheads"]["probed_from"].get("overheads") or []
    lines += ["", "Overhead levels the probe's DDP steps set (pool.probe_calibration):", ""]
    lines += [f"- {x['overhead_class']} at {x['world_size']} GPUs: level {x['level']:.3f} from {x['runs']} runs "
              f"(mean log error before {x['log_error_before']:+.3f}, after {x['log_error_after']:+.3f}"
              + (", clipped" if x["clipped"] else "") + ")" for x in levels]
    return "\n".join(lines) + "\n"


FSDP = "validation/data/h200x2-fsdp-2026-11-28"


def fsdp_pl() -> str:
    """PL's FSDP2 steps (``ddpsim measure --plan sharded``, GPT-2, NVLink) against the sharded model."""
    from validation.evidence.stages.fsdp import _report

    return _report(FSDP, derive=False)
