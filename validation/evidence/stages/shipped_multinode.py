"""The two shipped multi-node calibrations on allocations neither saw, per node shape.

``ddpsim/calibration/shipped/x4-multinode-h200.json`` (M: 4 x H200, no network probe, full duplex assumed) and
``ddpsim/calibration/shipped/x4-multinode-h100.json`` (U, ``validation/data/h100x4-multinode-2026-11-27d``:
4 x H100, its sweeps, its probe's duplex factor 0.68 and its DDP runs at every cap, two launches per
shape). Predicted: the DDP runs of the other probed 4-GPU allocations, H100 (R, S, T) and H200 (Q, V, W),
and of E, a 4 x H100 allocation measured after U's calibration was committed (DDP runs only),
each with its own campaign's profiles; links, network, duplex factor and DDP overheads from the
calibration. Neither calibration saw any of these runs. Per (calibration, campaign, shape): mean / max
absolute error and the mean signed error (bias); then pooled: R, S, T; all four H100 allocations; Q, V, W.

    python -m validation.evidence --stage shipped-multinode
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict

from ddpsim.calibration.file import read_calibration  # noqa: E402
from ddpsim.fitting.validate import validate  # noqa: E402
from validation.evidence import ROOT  # noqa: E402
from validation.evidence.stages import across_gpus, printed

CALIBRATIONS = {"M (H200, no probe)": "ddpsim/calibration/shipped/x4-multinode-h200.json",
                "U (H100, probe)": "ddpsim/calibration/shipped/x4-multinode-h100.json"}
# campaign -> (the pools it is counted in, folder)
CAMPAIGNS = {"R": (("H100 R,S,T", "all H100"), "validation/data/h100x4-multinode-2026-11-27"),
             "S": (("H100 R,S,T", "all H100"), "validation/data/h100x4-multinode-2026-11-27b"),
             "T": (("H100 R,S,T", "all H100"), "validation/data/h100x4-multinode-2026-11-27c"),
             # measured after U's calibration was committed: DDP runs only, no sweeps or probe
             "E": (("all H100",), "validation/data/h100x4-multinode-2026-11-27e"),
             "Q": (("H200 Q,V,W",), "validation/data/h200x4-multinode-2026-11-27"),
             "V": (("H200 Q,V,W",), "validation/data/h200x4-multinode-2026-11-27b"),
             "W": (("H200 Q,V,W",), "validation/data/h200x4-multinode-2026-11-27c")}


def _line(errors: list[float]) -> str:
    mean = sum(abs(e) for e in errors) / len(errors)
    return f"{len(errors):4d} {mean:6.1f} {max(abs(e) for e in errors):6.1f} {sum(errors) / len(errors):+7.1f}"


def main() -> int:
    print(f"{'calibration':20s} {'campaign':10s} {'shape':5s} runs   mean    max    bias   (% error of the DDP step)")
    for cal_name, cal_path in CALIBRATIONS.items():
        calibration = across_gpus(read_calibration(os.path.join(ROOT, cal_path)))
        pooled: dict[tuple[str, str], list[float]] = defaultdict(list)
        for name, (pools, folder) in CAMPAIGNS.items():
            v = validate([os.path.join(ROOT, folder)], calibration)
            by_shape: dict[str, list[float]] = defaultdict(list)
            for row in v.held_out():
                by_shape[f"{row.nodes}x{row.world_size // row.nodes}"].append(row.error_pct)
            for shape, errors in sorted(by_shape.items()):
                print(f"{cal_name:20s} {name:10s} {shape:5s} {_line(errors)}")
                for pool in pools:
                    pooled[(pool, shape)] += errors
        for (pool, shape), errors in sorted(pooled.items()):
            print(f"{cal_name:20s} {pool:10s} {shape:5s} {_line(errors)}")
        print()
    return 0



def run() -> str:
    """The stage's output (validation/reports/shipped-multinode/output.txt): what the benchmark printed."""
    return printed(main, __name__)

if __name__ == "__main__":
    sys.exit(main())
