"""Each DDP option's effect where two launches on one allocation agree, against ddpsim's prediction.

The issue's rule for an option's direction and size: count a (model, GPUs, option) case only where the
option's measured effect exceeds 5% in both launches, in the same direction (the repeat agrees). An
effect is the option's step over the plain step of the same model, GPUs and cap in the same launch, so
each launch's level divides out. ddpsim's direction is right when its predicted change has the measured
sign; its size is right when the predicted change is within a factor 1.5 of the mean of the two
measured changes. Accumulation (+180 to +280%) is easy to get right, so the counts are also given without
it; and where both launches stayed within 5%, the cases ddpsim predicts beyond 5% are counted too (an
effect predicted that was not seen).

Data: ``validation/data/h200x4-options-2026-11-27`` (4 x H200, an allocation no calibration has seen;
every option at cap 25 on 4 and on 2 GPUs, the whole plan launched twice). Predicted with
``ddpsim/calibration/shipped/x4-h200.json`` (another H200 allocation's plain runs at caps 5 and 50; no option
was fitted).

    python -m validation.evidence.stages.option_repeat [CAMPAIGN_DIR ...]
"""

from __future__ import annotations

import os
import re
import sys
from collections import defaultdict

from ddpsim.calibration.file import read_calibration  # noqa: E402
from ddpsim.fitting.validate import option_effects, validate  # noqa: E402
from validation.evidence import ROOT  # noqa: E402
from validation.evidence.stages import across_gpus, printed

# the same rule as the per-machine count: direction and size within a factor 1.5 of one predicted change
from validation.evidence.stages.option_directions import CALIBRATION, THRESHOLD, _right  # noqa: E402

DEFAULT_CAMPAIGNS = ["validation/data/h200x4-options-2026-11-27", "validation/data/h200x4-options-2026-11-27b"]


def launch_series(launch_id: str) -> str:
    """The launch id without its launch number: nvlink_w4_0 and nvlink_w4_1 are one plan, launched twice."""
    return re.sub(r"_\d+$", "", launch_id)


def main(campaigns: list[str]) -> int:
    calibration = across_gpus(read_calibration(os.path.join(ROOT, CALIBRATION)))
    # (campaign, series, model, GPUs, cap, option) -> launch -> (measured effect, predicted effect)
    cases: dict[tuple, dict[str, tuple[float, float]]] = defaultdict(dict)
    for campaign in campaigns:
        v = validate([os.path.join(ROOT, campaign)], calibration)
        for row, measured_ratio, predicted_ratio in option_effects(v.rows):
            key = (os.path.basename(campaign), launch_series(row.launch_id), row.model, row.world_size,
                   row.bucket_cap_mb, row.option)
            cases[key][row.launch_id] = (measured_ratio, predicted_ratio)

    print(f"{'campaign':26s} {'model':11s} GPUs {'option':13s} {'measured per launch':>22s} {'predicted':>9s}"
          "  counted  direction  size")
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # cases, agree, direction, size
    # predicted beyond 5% where both launches stayed within 5%: a confident prediction of an effect not seen
    phantom: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # quiet cases, predicted beyond 5%
    for key in sorted(cases):
        campaign, _, model, gpus, _, option = key
        launches = cases[key]
        measured = [m - 1 for m, _ in launches.values()]
        predictions = {round(p, 9) for _, p in launches.values()}
        # the prediction uses nothing of the launch (profile, calibration, options): one value per case
        assert len(predictions) == 1, (key, predictions)
        predicted = predictions.pop() - 1
        agree = len(measured) >= 2 and (all(m > THRESHOLD for m in measured) or all(m < -THRESHOLD for m in measured))
        quiet = len(measured) >= 2 and all(abs(m) <= THRESHOLD for m in measured)
        direction = size = False
        if agree:
            direction, size = _right(sum(measured) / len(measured), predicted)
        names = (option, "all") if option == "accum4" else (option, "all", "all but accum4")
        for name in names:
            t = tally[name]
            t[0] += len(measured) >= 2
            t[1] += agree
            t[2] += direction
            t[3] += size
            phantom[name][0] += quiet
            phantom[name][1] += quiet and abs(predicted) > THRESHOLD
        shown = " ".join(f"{m:+7.2%}" for m in measured)
        verdict = (f"{'right' if direction else 'WRONG':9s}  {'ok' if size else 'off'}") if agree else "-"
        print(f"{campaign:26s} {model:11s} {gpus:4d} {option:13s} {shown:>22s} {predicted:+9.2%}"
              f"  {'yes' if agree else '-':7s}  {verdict}")
    print("\ncases measured in two launches; counted where both exceed 5% the same way; of those, "
          "direction right and size within 1.5x of the launches' mean")
    for name, (n_cases, n_agree, n_direction, n_size) in sorted(tally.items()):
        print(f"  {name:14s} {n_cases:3d} cases, {n_agree:2d} counted: direction {n_direction} of {n_agree}, "
              f"size {n_size} of {n_agree}")
    print("\ncases where both launches stayed within 5%: how many ddpsim predicts beyond 5% (an effect not seen)")
    for name, (n_quiet, n_loud) in sorted(phantom.items()):
        print(f"  {name:14s} {n_loud} of {n_quiet}")
    return 0



def run() -> str:
    """The stage's output (validation/reports/option-repeat/output.txt): what the benchmark printed."""
    return printed(lambda: main(DEFAULT_CAMPAIGNS), __name__)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or DEFAULT_CAMPAIGNS))
