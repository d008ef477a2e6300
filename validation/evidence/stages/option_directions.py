"""Does ddpsim get each DDP option's effect right? Nine H100/H200 allocations, twelve campaigns.

The 4-GPU campaigns: ``validation/data/h200x4-options-2026-11-26`` (4 x H200) and seven 4 x H100
allocations, ``validation/data/h100x4-options-2026-11-26`` and ``-26b`` to ``-26g``; the 2-GPU ones
``-26f-w2``, ``-26g-w2`` and ``-26h-w2`` (two GPUs of the f, g and h hosts), and ``-26h`` (an eighth 4 x H100
allocation, hooks and accumulation only). An option's effect is its step over the
plain step of the same launch at the same cap, measured and predicted (``ddpsim validate`` with
``ddpsim/calibration/shipped/x4-h200.json``, fitted on another campaign's plain runs: every run here is held
out). Two counts:
  * strict: a (model, link, option) counts where the measured effect exceeds 5% on every machine of
    ``CAMPAIGNS`` (the 4-GPU campaigns with every option; not h, which measured the hooks and accumulation only)
    in the same direction (the repeats agree); it is right in direction when every prediction moves the
    same way, and right in magnitude when every predicted change is within a factor 1.5 of the measured;
  * per machine: every (machine, model, link, option) cell whose measured effect exceeds 5%, every
    campaign included: direction right, and predicted change within a factor 1.5.

    python -m validation.evidence --stage option-directions
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict

from ddpsim.calibration.file import read_calibration  # noqa: E402
from ddpsim.fitting.validate import option_effects, validate  # noqa: E402
from validation.evidence import ROOT  # noqa: E402
from validation.evidence.stages import across_gpus, printed

CAMPAIGNS = {"H200": "validation/data/h200x4-options-2026-11-26", "H100": "validation/data/h100x4-options-2026-11-26",
             "H100b": "validation/data/h100x4-options-2026-11-26b", "H100c": "validation/data/h100x4-options-2026-11-26c",
             "H100d": "validation/data/h100x4-options-2026-11-26d", "H100e": "validation/data/h100x4-options-2026-11-26e",
             "H100f": "validation/data/h100x4-options-2026-11-26f", "H100g": "validation/data/h100x4-options-2026-11-26g"}
# fewer options (two GPUs of the f, g and h hosts; h measured hooks and accumulation only): per-machine count only
PER_MACHINE_ONLY = {"H100f-w2": "validation/data/h100x4-options-2026-11-26f-w2",
                    "H100g-w2": "validation/data/h100x4-options-2026-11-26g-w2",
                    "H100h": "validation/data/h100x4-options-2026-11-26h",
                    "H100h-w2": "validation/data/h100x4-options-2026-11-26h-w2"}
CALIBRATION = "ddpsim/calibration/shipped/x4-h200.json"
THRESHOLD = 0.05
FACTOR = 1.5


def effects(campaign: str) -> dict[tuple[str, str, str], tuple[float, float]]:
    v = validate([os.path.join(ROOT, campaign)], across_gpus(read_calibration(os.path.join(ROOT, CALIBRATION))))
    return {(r.option, r.link_class, r.model): (measured, predicted) for r, measured, predicted in option_effects(v.rows)}


def _right(measured: float, predicted: float) -> tuple[bool, bool]:
    """(direction, magnitude within FACTOR) of one predicted change against the measured one."""
    direction = (predicted > 0) == (measured > 0) and predicted != 0
    if measured > 0:
        return direction, measured / FACTOR <= predicted <= measured * FACTOR
    return direction, measured * FACTOR <= predicted <= measured / FACTOR


def main() -> int:
    every = {**CAMPAIGNS, **PER_MACHINE_ONLY}
    by_machine = {name: effects(path) for name, path in every.items()}
    keys = sorted(set.union(*(set(e) for e in by_machine.values())))
    print(f"{'option':13s} {'link':7s} {'model':11s} " + " ".join(f"{m + ' meas/pred':>16s}" for m in every)
          + "  counted  direction  magnitude")
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    per_cell: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for key in keys:
        for machine in every:
            pair = by_machine[machine].get(key)
            if pair and abs(pair[0] - 1) > THRESHOLD:
                direction, magnitude = _right(pair[0] - 1, pair[1] - 1)
                for name in (key[0], "all"):
                    per_cell[name][0] += 1
                    per_cell[name][1] += direction
                    per_cell[name][2] += magnitude
        cells, counted, direction, magnitude = [], False, False, False
        for machine in every:
            pair = by_machine[machine].get(key)
            cells.append(f"{pair[0]:6.2f}/{pair[1]:5.2f}" if pair else f"{'-':>12s}")
        pairs = [by_machine[m].get(key) for m in CAMPAIGNS]
        if all(pairs):
            measured = [p[0] - 1 for p in pairs if p]
            same_way = all(m > THRESHOLD for m in measured) or all(m < -THRESHOLD for m in measured)
            if same_way:
                counted = True
                predicted = [p[1] - 1 for p in pairs if p]
                checks = [_right(m, p) for p, m in zip(predicted, measured, strict=True)]
                direction = all(d for d, _ in checks)
                magnitude = all(close for _, close in checks)
                for name in (key[0], "all"):
                    tally[name][0] += 1
                    tally[name][1] += direction
                    tally[name][2] += magnitude
        print(f"{key[0]:13s} {key[1]:7s} {key[2]:11s} " + " ".join(f"{c:>16s}" for c in cells)
              + f"  {'yes' if counted else '-':7s}  {('right' if direction else 'WRONG') if counted else '-':9s}"
              f"  {('ok' if magnitude else 'off') if counted else '-'}")
    print("\nstrict: cases where every machine of CAMPAIGNS (H200, H100 to H100g) measured the same direction beyond "
          "5%: direction right, magnitude within 1.5x")
    for name, (n, right, close) in sorted(tally.items()):
        print(f"  {name:13s} {right} of {n} right, {close} of {n} within 1.5x")
    print("\nper machine: cells measured beyond 5% (every campaign included): direction right, magnitude within 1.5x")
    for name, (n, right, close) in sorted(per_cell.items()):
        print(f"  {name:13s} {right} of {n} right, {close} of {n} within 1.5x")
    return 0



def run() -> str:
    """The stage's output (validation/reports/option-directions/output.txt): what the benchmark printed."""
    return printed(main, __name__)

if __name__ == "__main__":
    sys.exit(main())
