"""Step-to-step compute jitter taken from each profile, on every held-out campaign.

Every rank of a DDP step runs its own compute, and each bucket's all-reduce waits for the slowest rank of
that step. The ranks of one 2 x H100 host ran the same compute up to 1.5x apart
(validation/data/h100x2-ranks-2026-11-26j), and a launch-bound model's step varies by 10 to 40% between
its p10 and p90 in the profile itself. ``ddpsim validate --jitter-from-profile`` draws each rank's compute
per step from the profile's own step p10..p90 (a lognormal, nothing fitted) and compares the median of 20
simulated steps. The calibrations were fitted without it and are used as shipped. Each campaign below is
predicted with and without it; none of them was used to fit the calibration that predicts it.

    python -m validation.evidence --stage profile-jitter
"""

from __future__ import annotations

import os
import statistics
import sys

from ddpsim.calibration.file import read_calibration  # noqa: E402
from ddpsim.fitting.validate import validate  # noqa: E402
from validation.evidence import ROOT  # noqa: E402
from validation.evidence.stages import across_gpus, printed

DATA = os.path.join(ROOT, "validation", "data")
# calibration -> the campaigns it never saw (A's own held-out caps are in A, fitted on its caps 5 and 50)
HELD_OUT = {
    "x4-h200.json": (
        "h200x4-2026-11-26", "h200x4-2026-11-26b", "h200x2-2026-11-26", "h100x2-2026-11-26",
        "h200x4-options-2026-11-26", "h100x4-options-2026-11-26", "h100x4-options-2026-11-26b",
        "h100x4-options-2026-11-26c", "h100x4-options-2026-11-26d", "h100x4-options-2026-11-26e",
        "h100x4-options-2026-11-26f", "h100x4-options-2026-11-26f-w2", "h100x4-options-2026-11-26g",
        "h100x4-options-2026-11-26g-w2", "h100x4-options-2026-11-26h", "h100x4-options-2026-11-26h-w2",
        "h100x2-ranks-2026-11-26j", "h100x2-ranks-2026-11-26k", "h100x2-profiles-2026-11-26l",
        "h100x2-profiles-2026-11-26m", "h100x2-profiles-2026-11-26n", "h100x2-profiles-2026-11-26o"),
    "x4-multinode-h200.json": (
        "h100x4-multinode-2026-11-26", "h100x4-multinode-2026-11-26b", "h100x4-multinode-2026-11-26d",
        "h100x2-multinode-2026-11-26e", "h100x2-multinode-2026-11-26p"),
}


def _stats(errors: list[float]) -> str:
    return f"{statistics.mean(abs(e) for e in errors):5.1f} / {max(abs(e) for e in errors):5.1f}"


def main() -> int:
    pooled: dict[tuple[str, bool], list[float]] = {}
    print(f"{'campaign':32s} {'link class':12s} {'runs':>4s}   {'without jitter':>14s}   {'with jitter':>14s}"
          "   (mean / max abs error %)")
    for calibration_name, campaigns in HELD_OUT.items():
        calibration = across_gpus(read_calibration(os.path.join(ROOT, "ddpsim", "calibration", "shipped", calibration_name)))
        print(f"calibration {calibration_name}")
        for campaign in campaigns:
            path = os.path.join(DATA, campaign)
            if not os.path.isdir(path):
                continue
            results = {jitter: validate([path], calibration, jitter_from_profile=jitter) for jitter in (False, True)}
            groups = {jitter: result.by_transport() for jitter, result in results.items()}
            for group in sorted(groups[False]):
                errors = {jitter: [r.error_pct for r in groups[jitter][group]] for jitter in (False, True)}
                for jitter in (False, True):
                    pooled.setdefault((group.split()[0], jitter), []).extend(errors[jitter])
                print(f"  {campaign:30s} {group:12s} {len(errors[False]):4d}   {_stats(errors[False]):>14s}   "
                      f"{_stats(errors[True]):>14s}")
    print("all campaigns, per link class")
    for link_class in sorted({c for c, _ in pooled}):
        without, with_ = pooled[(link_class, False)], pooled[(link_class, True)]
        print(f"  {'':30s} {link_class:12s} {len(without):4d}   {_stats(without):>14s}   {_stats(with_):>14s}")
    return 0



def run() -> str:
    """The stage's output (validation/reports/profile-jitter/output.txt): what the benchmark printed."""
    return printed(main, __name__)

if __name__ == "__main__":
    sys.exit(main())
