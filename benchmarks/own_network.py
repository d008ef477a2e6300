"""Multi-node DDP on machines never calibrated, with the network measured on each machine.

What a user does on a new cluster: measure its network (the harness's all-reduce sweeps, or nccl-tests)
and take DDP's overheads from a calibration made elsewhere. For each never-calibrated multi-node
campaign, the link classes (NVLink in a node, the socket network between emulated nodes, NCCL's logged
tuning tables) are fitted on that campaign's own all-reduce sweeps only. The DDP overheads come from
``validation/calibration-h200x4-multinode.json`` (4 x H200, campaign M). The campaign's DDP runs are then
predicted. No DDP run of the campaign is fitted. The sweeps ran in the same launches as the runs, as a
user's nccl-tests would run before training. Printed beside: the same runs with M's network
(the held-out table of the README).

The three 4 x H100 campaigns swept NCCL's default and forced Ring, not forced Tree. So their own fit prices NCCL's
tree with the ring's network terms, and a third variant carries M's measured tree bandwidth factor per shape
(0.60 on 2x2, 0.84 on 4x1: how NCCL's trees load a node's network, a property of the shape) into the
machine's own fit.

    .venv/bin/python benchmarks/own_network.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ddpsim.calibration.calibrate import load_measurements  # noqa: E402
from ddpsim.calibration.fit import fit_links  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CALIBRATION = "validation/calibration-h200x4-multinode.json"
CAMPAIGNS = ("h100x4-multinode-2026-11-26", "h100x4-multinode-2026-11-26b", "h100x4-multinode-2026-11-26d",
             "h100x2-multinode-2026-11-26e")


def _summary(campaign_dir: str, calibration_path: str) -> list[str]:
    """The per-link-class rows of ``ddpsim validate`` (runs, mean, max, bias)."""
    out = subprocess.run(
        [sys.executable, "-m", "ddpsim", "validate", campaign_dir, "--calibration", calibration_path],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, check=False,
    ).stdout
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("link class"))
    rows = []
    for line in lines[start + 2:]:
        if not line.strip():
            break
        cells = line.split()
        # "net 2x2  9  6.6  12.5  +6.6 ..." or "nvlink  9  11.4  19.3  +11.4 ..."
        name_cells = 2 if cells[0] == "net" else 1
        name = " ".join(cells[:name_cells])
        runs, mean, worst, bias = cells[name_cells:name_cells + 4]
        rows.append(f"{name:9s} {runs:>4s} runs  {mean:>5s}% mean  {worst:>5s}% max  bias {bias:>6s}%")
    return rows


def _with_reference_tree(own: dict, reference: dict) -> dict:
    """``own``'s link classes, with the reference's fitted tree factor on every shape whose own fit has
    no forced-Tree sweeps (``tree_fit.fitted`` false)."""
    own = json.loads(json.dumps(own))
    for shape, entry in own.get("net", {}).get("by_shape", {}).items():
        theirs = reference["net"]["by_shape"].get(shape)
        if entry.get("tree_fit", {}).get("fitted") or not theirs or not theirs.get("tree_fit", {}).get("fitted"):
            continue
        mine = entry["protocol_table"]["algorithm_protocol_efficiency"]
        for key, value in theirs["protocol_table"]["algorithm_protocol_efficiency"].items():
            if key.startswith("tree/") and key.endswith("/multi-node"):
                mine[key] = value
    return own


def main() -> int:
    with open(os.path.join(ROOT, CALIBRATION), encoding="utf-8") as handle:
        reference = json.load(handle)
    with tempfile.TemporaryDirectory() as tmp:
        for campaign in CAMPAIGNS:
            campaign_dir = os.path.join(ROOT, "validation", "data", campaign)
            measurements = load_measurements([campaign_dir])
            links = fit_links(measurements.samples)
            variants = {"its own network": links,
                        "own + M's tree": _with_reference_tree(links, reference["link_classes"])}
            paths = {"M's network": os.path.join(ROOT, CALIBRATION)}
            for label, link_classes in variants.items():
                paths[label] = os.path.join(tmp, f"{campaign}-{len(paths)}.json")
                with open(paths[label], "w", encoding="utf-8") as handle:
                    json.dump(dict(reference, link_classes=link_classes), handle)
            print(f"{campaign} ({len(measurements.samples)} all-reduce sizes of its own sweeps)")
            for label, path in paths.items():
                for row in _summary(campaign_dir, path):
                    print(f"  {label:16s} {row}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
