"""Does ddpsim get each DDP option's effect right? Six options campaigns, six machines.

For every (model, transport, option) measured in all of ``validation/data/h200x4-options-2026-11-26``
(4 x H200), ``validation/data/h100x4-options-2026-11-26`` (4 x H100, the repeat on another machine),
``validation/data/h100x4-options-2026-11-26b``, ``-26c``, ``-26d`` and ``-26e`` (four more 4 x H100 allocations),
the option's effect is its step over the plain step of the same launch at the same cap,
measured and predicted (``ddpsim validate`` with ``validation/calibration-h200x4.json``, fitted on
another campaign's plain runs: every run here is held out). A case counts where the measured effect
exceeds 5% on every machine in the same direction (the repeat agrees); it is right in direction when
the prediction moves the same way, and right in magnitude when the predicted change is within a
factor 1.5 of the measured one.

    .venv/bin/python benchmarks/option_directions.py
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ddpsim.calibration.file import read_calibration  # noqa: E402
from ddpsim.calibration.validate import option_effects, validate  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAMPAIGNS = {"H200": "validation/data/h200x4-options-2026-11-26", "H100": "validation/data/h100x4-options-2026-11-26",
             "H100b": "validation/data/h100x4-options-2026-11-26b", "H100c": "validation/data/h100x4-options-2026-11-26c",
             "H100d": "validation/data/h100x4-options-2026-11-26d", "H100e": "validation/data/h100x4-options-2026-11-26e"}
CALIBRATION = "validation/calibration-h200x4.json"
THRESHOLD = 0.05
FACTOR = 1.5


def effects(campaign: str) -> dict[tuple[str, str, str], tuple[float, float]]:
    v = validate([os.path.join(ROOT, campaign)], read_calibration(os.path.join(ROOT, CALIBRATION)))
    return {(r.option, r.link_class, r.model): (measured, predicted) for r, measured, predicted in option_effects(v.rows)}


def main() -> int:
    by_machine = {name: effects(path) for name, path in CAMPAIGNS.items()}
    keys = sorted(set.union(*(set(e) for e in by_machine.values())))
    print(f"{'option':13s} {'link':7s} {'model':11s} " + " ".join(f"{m + ' meas/pred':>15s}" for m in CAMPAIGNS)
          + "  counted  direction  magnitude")
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for key in keys:
        cells, counted, direction, magnitude = [], False, False, False
        pairs = [by_machine[m].get(key) for m in CAMPAIGNS]
        for pair in pairs:
            cells.append(f"{pair[0]:6.2f}/{pair[1]:5.2f}" if pair else f"{'-':>12s}")
        if all(pairs):
            measured = [p[0] - 1 for p in pairs if p]
            same_way = all(m > THRESHOLD for m in measured) or all(m < -THRESHOLD for m in measured)
            if same_way:
                counted = True
                predicted = [p[1] - 1 for p in pairs if p]
                direction = all((p > 0) == (m > 0) and p != 0 for p, m in zip(predicted, measured, strict=True))
                magnitude = all(m / FACTOR <= p <= m * FACTOR if m > 0 else m * FACTOR <= p <= m / FACTOR
                                for p, m in zip(predicted, measured, strict=True))
                for name in (key[0], "all"):
                    tally[name][0] += 1
                    tally[name][1] += direction
                    tally[name][2] += magnitude
        print(f"{key[0]:13s} {key[1]:7s} {key[2]:11s} " + " ".join(f"{c:>15s}" for c in cells)
              + f"  {'yes' if counted else '-':7s}  {('right' if direction else 'WRONG') if counted else '-':9s}"
              f"  {('ok' if magnitude else 'off') if counted else '-'}")
    print("\ncases where every machine measured the same direction beyond 5%: direction right, magnitude within 1.5x")
    for name, (n, right, close) in sorted(tally.items()):
        print(f"  {name:13s} {right} of {n} right, {close} of {n} within 1.5x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
