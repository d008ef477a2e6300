"""Multi-node DDP on machines never calibrated, with the network measured on each machine.

What a user does on a new cluster: measure its network (the harness's all-reduce sweeps, or nccl-tests)
and take DDP's overheads from a calibration made elsewhere. For each never-calibrated multi-node
campaign, the link classes (NVLink in a node, the socket network between emulated nodes, NCCL's logged
tuning tables) are fitted on that campaign's own all-reduce sweeps only. The DDP overheads come from
``ddpsim/calibration/shipped/x4-multinode-h200.json`` (4 x H200, campaign M). The campaign's DDP runs are then
predicted. No DDP run of the campaign is fitted. The sweeps ran in the same launches as the runs, as a
user's nccl-tests would run before training. Printed beside: the same runs with M's network
(the held-out table of the README).

The three 4 x H100 campaigns swept NCCL's default and forced Ring, not forced Tree. So their own fit prices NCCL's
tree with the ring's network terms, and a third variant carries M's measured tree bandwidth factor per shape
(0.60 on 2x2, 0.84 on 4x1: how NCCL's trees load a node's network, a property of the shape) into the
machine's own fit. The four 2026-11-27 campaigns (Q, R, S, T) measured their network endpoint's duplex
factor (``--net-probe``), which their own fit uses; a fourth variant carries Q's factor into the own fit of
each campaign that has no probe.

    python -m validation.evidence --stage own-network
"""

from __future__ import annotations

import json
import os
import sys

from ddpsim.calibration.file import calibration_from_dict  # noqa: E402
from ddpsim.fitting.calibrate import load_measurements  # noqa: E402
from ddpsim.fitting.fit import fit_links  # noqa: E402
from ddpsim.fitting.validate import validate  # noqa: E402
from validation.evidence import ROOT  # noqa: E402
from validation.evidence.stages import printed

CALIBRATION = "ddpsim/calibration/shipped/x4-multinode-h200.json"
CAMPAIGNS = ("h200x4-multinode-2026-11-27", "h100x4-multinode-2026-11-27", "h100x4-multinode-2026-11-27b",
             "h100x4-multinode-2026-11-27c", "h100x4-multinode-2026-11-27d", "h200x4-multinode-2026-11-27b",
             "h200x4-multinode-2026-11-27c",
             "h100x4-multinode-2026-11-26", "h100x4-multinode-2026-11-26b",
             "h100x4-multinode-2026-11-26d", "h100x2-multinode-2026-11-26e", "h100x2-multinode-2026-11-26p")
# the campaign whose --net-probe measured the network endpoint's duplex factor (read from its netprobe.jsonl)
PROBED = "h200x4-multinode-2026-11-27"


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


def _summary(campaign_dir: str, calibration: dict, label: str) -> list[str]:
    """Per reported group (link class, network per shape) of the held-out runs: runs, mean, max, bias."""
    result = validate([campaign_dir], calibration_from_dict(calibration, label))
    rows = []
    for group, runs in result.by_transport().items():
        errors = [r.error_pct for r in runs]
        mean = sum(abs(e) for e in errors) / len(errors)
        rows.append(f"{group:9s} {len(runs):4d} runs  {mean:5.1f}% mean  {max(abs(e) for e in errors):5.1f}% max  "
                    f"bias {sum(errors) / len(errors):+6.1f}%")
    return rows


def main() -> int:
    with open(os.path.join(ROOT, CALIBRATION), encoding="utf-8") as handle:
        reference = json.load(handle)
    probes = load_measurements([os.path.join(ROOT, "validation", "data", PROBED)]).net_probes
    for campaign in CAMPAIGNS:
        campaign_dir = os.path.join(ROOT, "validation", "data", campaign)
        measurements = load_measurements([campaign_dir])
        links = fit_links(measurements.samples, measurements.net_probes)
        variants = {"M's network": reference,
                    "its own network": dict(reference, link_classes=links),
                    "own + M's tree": dict(reference, link_classes=_with_reference_tree(links, reference["link_classes"]))}
        if not measurements.net_probes:
            variants["own + Q's duplex"] = dict(reference, link_classes=fit_links(measurements.samples, probes))
        print(f"{campaign} ({len(measurements.samples)} all-reduce sizes of its own sweeps)")
        for label, calibration in variants.items():
            for row in _summary(campaign_dir, calibration, f"{campaign}: {label}"):
                print(f"  {label:16s} {row}")
    return 0



def run() -> str:
    """The stage's output (validation/reports/own-network/output.txt): what the benchmark printed."""
    return printed(main, __name__)

if __name__ == "__main__":
    sys.exit(main())
