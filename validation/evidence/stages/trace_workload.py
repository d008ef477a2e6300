"""A torch.profiler trace as the workload (issue #28), checked on GPUs.

Four fresh 2 x H200 allocations (``validation/campaigns/trace-from-wheel.sh gpt2-124m``, twice, and
``trace-user-model.sh``, twice: a user's own decoder, ``validation/campaigns/lab_models.py``): the model traced at world
size 1 by ``python -m ddpsim.measure.trace``, then ``ddpsim measure`` of the same model on both GPUs (its own
world-size-1 profile, an all-reduce sweep, DDP runs at caps 5, 25 and 50). On each allocation the links and
overheads are fitted on the caps 5 and 50 runs with the harness's profile, and every run is predicted twice:
from the harness's profile and from the trace (``ddpsim.workload.trace``). Cap 25 is never seen by the fit.
The first allocation's capture did not yet time its steps without the profiler, so its trace keeps the
profiler's overhead; the others timed whole steps, and every phase is scaled by the step's ratio.
(A fourth, ``h200x2-trace-2026-11-27d``, timed each phase with a sync between them: that inflates a
launch-bound backward, and the method was dropped; its README has the numbers.)
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import replace

from ddpsim.calibration.file import calibration_from_dict
from ddpsim.fitting.calibrate import calibrate as fit
from ddpsim.fitting.calibrate import is_plain, load_measurements, timing_instrumented
from ddpsim.fitting.measurements import Profiles, campaign_of
from ddpsim.fitting.validate import predict_run
from ddpsim.workload.trace import read_trace
from validation.evidence import ROOT

CAMPAIGNS = ("validation/data/h200x2-trace-2026-11-27", "validation/data/h200x2-trace-2026-11-27b",
             "validation/data/h200x2-trace-2026-11-27c", "validation/data/h200x2-trace-2026-11-27e")
CALIBRATION_CAPS = (5.0, 50.0)


def run() -> str:
    lines = ["| campaign | model | cap MB | fitted | measured ms | from the harness profile | from the trace | trace step "
             "(traced / used) |", "|---|---|---|---|---|---|---|---|"]
    for campaign in CAMPAIGNS:
        data = os.path.join(ROOT, campaign)
        measured = load_measurements([data])
        calibration = calibration_from_dict(fit(
            measured.samples, measured.runs, measured.profiles, CALIBRATION_CAPS, log=lambda _line: None,
            timing_runs=measured.timing_runs, compute_slowdowns=measured.compute_slowdowns,
            net_probes=measured.net_probes), f"<fit of {campaign} caps 5, 50>")
        summary = read_trace(os.path.join(data, "traces", "trace-w1.json.gz"))
        overhead = summary.profile["profiler_overhead"]
        traced_ms = 1e3 * overhead.get("traced_step_s", summary.profile["step_s"])
        with tempfile.TemporaryDirectory() as folder:
            runs = [run for run in measured.runs if is_plain(run) and not timing_instrumented(run)]
            model = str(runs[0]["model"])  # one model per campaign
            path = os.path.join(folder, "profile.json")
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(dict(summary.profile, model=model), handle)
            from_trace = replace(measured, profiles=Profiles({(campaign_of(str(run["_source"])), str(run["model"])): path
                                                               for run in runs}))
            for run in sorted(runs, key=lambda r: float(r["bucket_cap_mb"])):
                harness, traced = predict_run(measured, run, calibration), predict_run(from_trace, run, calibration)
                cap = float(run["bucket_cap_mb"])
                lines.append(f"| {os.path.basename(campaign)} | {model.split('@')[0]} | {cap:g} | {'yes' if cap in CALIBRATION_CAPS else 'no'} | "
                             f"{1e3 * harness.measured_s:.2f} | {1e3 * harness.predicted_s:.2f} "
                             f"({harness.error_pct:+.1f}%) | {1e3 * traced.predicted_s:.2f} ({traced.error_pct:+.1f}%) | "
                             f"{traced_ms:.1f} / {1e3 * summary.profile['step_s']:.1f} ms |")
    return "\n".join(lines) + "\n"
