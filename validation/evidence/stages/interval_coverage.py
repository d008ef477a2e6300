"""Are ddpsim's p10..p90 step intervals honest on machines the calibration never saw?

An interval is honest when about 80% of measured steps fall inside it. ``ddpsim run`` takes the interval
from the calibration's measured noise: the step-to-step spread and the spread of the same configuration
between launches. ``ddpsim/calibration/shipped/x4-h200.json`` measured that on one 4 x H200 host (campaign A),
so its launch spread (5.2% on NVLink) holds no machine-to-machine variation. Here each held-out
campaign is predicted twice:

- with that calibration as shipped;
- with the same fit and the noise measured across eight 4 x H100 allocations that ran one plan
  (``ddpsim calibrate --noise-from``: the H100 options campaigns H to Hh).

The held-out campaigns are 2 x H100 allocations that took no part in either: D, j, k, l, m, n and o.
The count is per link class, of runs that have an interval (the H100 options campaigns ran NVLink only, so
the second variant has no interval for shared memory and sockets).

The second part does the same across emulated nodes: ``ddpsim/calibration/shipped/x4-multinode-h200.json`` (M,
its noise from M's own launches) against the same fit with the spread measured between four other probed
allocations (Q, R, S, T), predicting U, V and W, which took part in neither.

    python -m validation.evidence --stage interval-coverage
"""

from __future__ import annotations

import json
import os
import sys

from ddpsim.calibration.file import calibration_from_dict  # noqa: E402
from ddpsim.fitting.calibrate import noise_runs  # noqa: E402
from ddpsim.fitting.fit import fit_noise  # noqa: E402
from ddpsim.fitting.validate import validate  # noqa: E402
from validation.evidence import ROOT  # noqa: E402
from validation.evidence.stages import printed

DATA = os.path.join(ROOT, "validation", "data")
CALIBRATION = os.path.join(ROOT, "ddpsim", "calibration", "shipped", "x4-h200.json")
NOISE_FROM = tuple(f"h100x4-options-2026-11-26{s}" for s in ("", "b", "c", "d", "e", "f", "g", "h"))
HELD_OUT = ("h100x2-2026-11-26", "h100x2-ranks-2026-11-26j", "h100x2-ranks-2026-11-26k",
            "h100x2-profiles-2026-11-26l", "h100x2-profiles-2026-11-26m", "h100x2-profiles-2026-11-26n",
            "h100x2-profiles-2026-11-26o")
# across emulated nodes: M's calibration (4 x H200, no probe); the spread between the probed 4-GPU allocations
# Q to T; predicted U, V and W, measured after both and in neither
MULTINODE_CALIBRATION = os.path.join(ROOT, "ddpsim", "calibration", "shipped", "x4-multinode-h200.json")
MULTINODE_NOISE_FROM = ("h200x4-multinode-2026-11-27", "h100x4-multinode-2026-11-27", "h100x4-multinode-2026-11-27b",
                        "h100x4-multinode-2026-11-27c")
MULTINODE_HELD_OUT = ("h100x4-multinode-2026-11-27d", "h200x4-multinode-2026-11-27b", "h200x4-multinode-2026-11-27c")


def _coverage(campaign: str, calibration) -> dict[str, tuple[int, int]]:
    """Per link class: (runs measured inside the predicted p10..p90, runs with an interval)."""
    out: dict[str, tuple[int, int]] = {}
    for row in validate([os.path.join(DATA, campaign)], calibration).rows:
        if row.held_out and row.inside_interval is not None:
            inside, total = out.get(row.group, (0, 0))
            out[row.group] = (inside + int(row.inside_interval), total + 1)
    return out


def _sigmas(noise: dict) -> str:
    return ", ".join(f"{link_class} step {entry['step_sigma']:.3f} launch {entry['launch_sigma']:.3f} "
                     f"({entry['launch_pairs']} pairs)" for link_class, entry in sorted(noise.items())
                     if entry.get("launch_sigma") is not None)


def _compare(calibration_path: str, noise_from: tuple[str, ...], held_out: tuple[str, ...]) -> None:
    """Coverage of ``held_out`` with the calibration's own noise and with the noise of ``noise_from``."""
    with open(calibration_path, encoding="utf-8") as handle:
        shipped = json.load(handle)
    wide_noise = fit_noise(noise_runs([os.path.join(DATA, name) for name in noise_from]))
    variants = {"as shipped": shipped, "noise across allocations": dict(shipped, noise=wide_noise)}
    print(f"{os.path.relpath(calibration_path, ROOT)}; noise across allocations from {', '.join(noise_from)}")
    print("lognormal sigmas (ln units; p10..p90 = x exp(-/+1.28 sigma) with step and launch added in quadrature)")
    for label, data in variants.items():
        print(f"  {label:26s} {_sigmas(data['noise'])}")
    calibrations = {label: calibration_from_dict(data, label) for label, data in variants.items()}
    totals: dict[tuple[str, str], list[int]] = {}
    print(f"\n{'held-out campaign':30s} {'link class':12s} " + "  ".join(f"{label:>26s}" for label in variants))
    for campaign in held_out:
        counts = {label: _coverage(campaign, calibration) for label, calibration in calibrations.items()}
        for group in sorted(set().union(*counts.values())):
            cells = []
            for label in variants:
                inside, total = counts[label].get(group, (0, 0))
                total_row = totals.setdefault((group, label), [0, 0])
                total_row[0] += inside
                total_row[1] += total
                cells.append(f"{inside:3d} of {total:3d} inside" if total else "no interval")
            print(f"{campaign:30s} {group:12s} " + "  ".join(f"{cell:>26s}" for cell in cells))
    for group in sorted({g for g, _ in totals}):
        pooled = [totals[(group, label)] for label in variants]
        print(f"{'all':30s} {group:12s} " + "  ".join(
            f"{f'{inside} of {total} ({100 * inside / total:.0f}%)' if total else 'no interval':>26s}"
            for inside, total in pooled))


def main() -> int:
    _compare(CALIBRATION, NOISE_FROM, HELD_OUT)
    print()
    _compare(MULTINODE_CALIBRATION, MULTINODE_NOISE_FROM, MULTINODE_HELD_OUT)
    return 0



def run() -> str:
    """The stage's output (validation/reports/interval-coverage/output.txt): what the benchmark printed."""
    return printed(main, __name__)

if __name__ == "__main__":
    sys.exit(main())
