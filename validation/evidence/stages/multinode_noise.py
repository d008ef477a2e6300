"""How much the emulated multi-node measurements move on one allocation: the floor any prediction meets.

Run: ``python -m validation.evidence --stage multinode-noise`` (output in validation/reports/multinode-noise/output.txt).

For every campaign whose shapes were launched twice (``--repeat 1``: a sweep launch and a repeat launch of
the same shape on the same machine allocation) or probed more than once per launch (``--net-probe-rounds``):

- DDP step, same (shape, model, cap) in two launches: larger / smaller - 1, per shape mean and max;
- the network endpoint's duplex factor from NCCL's collectives (two-rank all-reduce rate over broadcast
  rate, as ``ddpsim calibrate`` reads it) per launch and probe round: its spread between the rounds of
  one launch and between the launches of one shape (each launch's rounds averaged).

Nothing here is predicted or fitted; it only reads the committed records.
"""

from __future__ import annotations

import os
import statistics
import sys
from collections import defaultdict
from typing import Any

from ddpsim.fitting.measurements import launch_key, read_jsonl
from ddpsim.fitting.netprobe import read_net_probes, round_ratios
from validation.evidence import ROOT  # noqa: E402
from validation.evidence.stages import printed

CAMPAIGNS = ("h100x4-multinode-2026-11-27d", "h200x4-multinode-2026-11-27b", "h200x4-multinode-2026-11-27c")


def _shape(record: dict[str, Any]) -> str:
    return f"{record['nodes']}x{record['gpus_per_node']}"


def _ddp_pairs(folder: str) -> dict[str, list[float]]:
    """Shape -> |larger / smaller - 1| in % for each configuration (model, batch, cap, variant) measured in
    two launches."""
    steps: dict[tuple[Any, ...], dict[str, float]] = defaultdict(dict)
    for record in read_jsonl(os.path.join(folder, "ddp_runs.jsonl")):
        if record.get("status") == "ok":
            key = (_shape(record), record["model"], record.get("batch_size"), record["bucket_cap_mb"],
                   record.get("variant"))
            steps[key][record["launch_id"]] = float(record["step_s_median"])
    out: dict[str, list[float]] = defaultdict(list)
    for (shape, *_configuration), by_launch in sorted(steps.items(), key=lambda item: str(item[0])):
        if len(by_launch) == 2:
            a, b = by_launch.values()
            out[shape].append(100.0 * (max(a, b) / min(a, b) - 1.0))
    return out


def _duplex_by_round(folder: str) -> dict[str, dict[str, dict[int, float]]]:
    """Shape -> launch -> probe round -> the duplex factor of that round (``netprobe.round_ratios``)."""
    records = read_net_probes(os.path.join(folder, "netprobe.jsonl"))
    shape_of = {launch_key(r): _shape(r) for r in records}
    out: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for (launch, probe_round), value in round_ratios(records).items():
        out[shape_of[launch]][launch.rsplit("/", 1)[-1]][probe_round] = value
    return out


def _cell(values: list[float]) -> str:
    return f"{statistics.mean(values):5.1f} / {max(values):5.1f} ({len(values)})" if values else "-"


def main() -> int:
    pooled: dict[str, list[float]] = defaultdict(list)
    within: list[float] = []
    between: list[float] = []
    for campaign in CAMPAIGNS:
        folder = os.path.join(ROOT, "validation", "data", campaign)
        print(campaign)
        for shape, diffs in sorted(_ddp_pairs(folder).items()):
            pooled[shape] += diffs
            print(f"  DDP step, two launches, {shape}: mean / max % (pairs) {_cell(diffs)}")
        for shape, launches in sorted(_duplex_by_round(folder).items()):
            means = []
            for launch, rounds in sorted(launches.items()):
                values = [rounds[k] for k in sorted(rounds)]
                means.append(statistics.mean(values))
                if len(values) > 1:
                    within.append(max(values) - min(values))
                print(f"  duplex factor {shape} {launch:14s} rounds " + " ".join(f"{v:.3f}" for v in values))
            if len(means) > 1:
                between.append(max(means) - min(means))
    print("\npooled over the campaigns above")
    for shape, diffs in sorted(pooled.items()):
        print(f"  DDP step, two launches of one allocation, {shape}: mean / max % (pairs) {_cell(diffs)}")
    if within:
        print(f"  duplex factor, rounds of one launch: |difference| median {statistics.median(within):.3f}, "
              f"max {max(within):.3f} ({len(within)} launches)")
    if between:
        print(f"  duplex factor, launches of one shape (rounds averaged): |difference| median "
              f"{statistics.median(between):.3f}, max {max(between):.3f} ({len(between)} shapes)")
    return 0



def run() -> str:
    """The stage's output (validation/reports/multinode-noise/output.txt): what the benchmark printed."""
    return printed(main, __name__)

if __name__ == "__main__":
    sys.exit(main())
