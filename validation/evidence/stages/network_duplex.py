"""Shape transfer across emulated nodes, with and without the network endpoint's measured duplex factor.

Run: ``python -m validation.evidence --stage network-duplex``.

The duplex factor is measured by the harness's ``--net-probe`` (point-to-point transfers, and on S and T
also a broadcast against a two-rank all-reduce between two endpoints; ``ddpsim.fitting.netprobe``).
For each campaign with several multi-node shapes, the network is fitted on some shapes' forced-Ring sweeps (plus
the one-node forced-Ring sweeps for the intra-node class, as ``multinode_allreduce.py`` does) and every
sweep of the held-out shapes (NCCL's default, forced Ring, forced Tree) is predicted, once taking the
endpoint as full duplex (what ddpsim did before) and once with the probe's factor. On the four campaigns
with a probe (``OWN_PROBE``, Q R S T, 2026-11-27) it ran on the same allocation, and only the probes of
the fitted shapes' launches are used (the held-out shape's launch measured its own); on the older ones
(no probe) the factor measured on Q is carried over. Columns: mean / max |error| in percent
below 1 MiB and from 1 MiB, per held-out sweep.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any

from ddpsim.calibration.file import SCHEMA, calibration_from_dict  # noqa: E402
from ddpsim.fitting.calibrate import load_measurements  # noqa: E402
from ddpsim.fitting.fit import fit_links  # noqa: E402
from ddpsim.fitting.netprobe import duplex_factor, read_net_probes  # noqa: E402
from ddpsim.fitting.validate import validate  # noqa: E402
from ddpsim.jsonfile import has_data
from validation.evidence import ROOT  # noqa: E402
from validation.evidence.stages import printed
from validation.evidence.stages.multinode_allreduce import MIB, _load, _model, _relative_pct, _samples, _shape  # noqa: E402

PROBED = "h200x4-multinode-2026-11-27"
# campaigns whose own --net-probe measured their endpoint (each uses its own factor; the others carry PROBED's)
OWN_PROBE = (PROBED, "h100x4-multinode-2026-11-27", "h100x4-multinode-2026-11-27b",
             "h100x4-multinode-2026-11-27c", "h100x4-multinode-2026-11-27d", "h200x4-multinode-2026-11-27b",
             "h200x4-multinode-2026-11-27c")
REFERENCE = "ddpsim/calibration/shipped/x4-multinode-h200.json"
CAMPAIGNS = (*OWN_PROBE, "h200x4-multinode-2026-11-26", "h100x4-multinode-2026-11-26", "h100x4-multinode-2026-11-26b",
             "h100x4-multinode-2026-11-26d")
# (title, fitted shapes, held-out shapes): forced-Ring sweeps fitted, every sweep of the held-out shapes predicted
SPLITS = (
    ("fit 4x1 + 2x1, predict 2x2", {"4x1", "2x1"}, {"2x2"}),
    ("fit 4x1, predict 2x2", {"4x1"}, {"2x2"}),
    ("fit 2x2, predict 4x1 and 2x1", {"2x2"}, {"4x1", "2x1"}),
)


def _errors(calibration: Any, record: dict[str, Any]) -> tuple[list[float], list[float]]:
    """|error| % of every size of one sweep: below 1 MiB, from 1 MiB."""
    model, floor_s = _model(calibration, record)
    forced = record.get("algorithm_forced")
    small: list[float] = []
    large: list[float] = []
    for row in record["rows"]:
        algorithm, protocol = model.choose(row["bytes"], forced or "auto", "auto")
        predicted = max(model.allreduce_time_s(row["bytes"], algorithm, protocol), floor_s)
        (large if row["bytes"] >= MIB else small).append(_relative_pct(predicted, row["time_us_median"] * 1e-6))
    return small, large


def _cell(values: list[float]) -> str:
    return f"{sum(values) / len(values):5.1f} /{max(values):6.1f}" if values else f"{'-':>13s}"


def main() -> int:
    for campaign in OWN_PROBE:
        duplex = duplex_factor(_probe_records(os.path.join(ROOT, "validation", "data", campaign)))
        assert duplex is not None, f"{campaign}/netprobe.jsonl has no pattern of both kinds"
        print(f"duplex factor measured on {campaign}: {duplex['value']:.3f} (per launch: "
              + ", ".join(f"{k} {v:.3f}" for k, v in duplex["per_launch"].items()) + ")")
    print()
    print(f"{'campaign / split / held-out sweep':62s} {'full duplex <1 MiB':>18s} {'>=1 MiB':>13s}   "
          f"{'measured <1 MiB':>15s} {'>=1 MiB':>13s}")
    pooled: dict[str, dict[str, list[float]]] = {"full": {"small": [], "large": []}, "measured": {"small": [], "large": []}}
    for campaign in CAMPAIGNS:
        data = os.path.join(ROOT, "validation", "data", campaign)
        path = os.path.join(data, "allreduce.jsonl")
        if not has_data(path):
            continue
        records = [r for r in _load(data) if r.get("status") == "ok"]
        shapes = {_shape(r) for r in records if r["nodes"] > 1}
        one_node = [s for r in records if r["nodes"] == 1 and r.get("algorithm_forced") == "ring" for s in _samples(r, path)]
        for title, train, test in SPLITS:
            if not (train <= shapes and test & shapes):
                continue
            fitted = [s for r in records if r["nodes"] > 1 and _shape(r) in train and r.get("algorithm_forced") == "ring"
                      for s in _samples(r, path)]
            probe_dir = data if campaign in OWN_PROBE else os.path.join(ROOT, "validation", "data", PROBED)
            calibrations = {
                "full": calibration_from_dict({"schema": SCHEMA, "link_classes": fit_links(one_node + fitted)}, title),
                "measured": calibration_from_dict(
                    {"schema": SCHEMA, "link_classes": fit_links(one_node + fitted, _probe_records(probe_dir, train if campaign in OWN_PROBE else None))}, title),
            }
            print(f"{campaign}: {title}")
            for record in records:
                if record["nodes"] < 2 or _shape(record) not in test:
                    continue
                cells = []
                for key, calibration in calibrations.items():
                    small, large = _errors(calibration, record)
                    pooled[key]["small"] += small
                    pooled[key]["large"] += large
                    cells.append(f"{_cell(small):>18s} {_cell(large):>13s}")
                label = f"  {_shape(record)} {record['launch_id']} {record.get('algorithm_forced') or 'default'}"
                print(f"{label:62s} {cells[0]}   {cells[1]}")
    print(f"\n{'every held-out sweep above, pooled':62s} "
          f"{_cell(pooled['full']['small']):>18s} {_cell(pooled['full']['large']):>13s}   "
          f"{_cell(pooled['measured']['small']):>15s} {_cell(pooled['measured']['large']):>13s}")
    for campaign in OWN_PROBE:
        _ddp_transfer(os.path.join(ROOT, "validation", "data", campaign))
    _probe_kinds()
    return 0


DDP_SPLITS = (("fit 4x1 + 2x1, predict 2x2", {"4x1", "2x1"}, {"2x2"}),
              ("fit 2x2, predict 4x1 and 2x1", {"2x2"}, {"4x1", "2x1"}))


def _reference() -> dict[str, Any]:
    with open(os.path.join(ROOT, REFERENCE), encoding="utf-8") as handle:
        return json.load(handle)


def _ddp_errors(folder: str, reference: dict[str, Any], samples: list[Any], probes: list[dict[str, Any]],
                test: set[str]) -> dict[str, str]:
    """Per held-out network group of ``test``'s shapes: 'runs mean / max / bias' of the DDP runs, the network
    fitted on ``samples`` and ``probes``, the overheads ``reference``'s."""
    # the reference's overheads are H200's, carried to the H100 campaigns on purpose (the stage compares networks)
    calibration = dataclasses.replace(
        calibration_from_dict(dict(reference, link_classes=fit_links(samples, probes)), folder), other_gpu_allowed=True)
    cells = {}
    for group, runs in validate([folder], calibration).by_transport().items():
        if group.split()[-1] in test:
            errors = [r.error_pct for r in runs]
            cells[group] = (f"{len(runs):4d} {sum(abs(e) for e in errors) / len(errors):8.1f} / "
                            f"{max(abs(e) for e in errors):5.1f} / {sum(errors) / len(errors):+6.1f}")
    return cells


def _fitted_sweeps(measurements: Any, train: set[str]) -> list[Any]:
    """The one-node sweeps and the multi-node sweeps of the ``train`` shapes."""
    return [s for s in measurements.samples if s.nodes == 1 or f"{s.nodes}x{s.world_size // s.nodes}" in train]


def _probe_kinds() -> None:
    """Which probe: on the campaigns that measured both, every probe record of the campaign, the
    collectives' ratio (what calibrate takes) against the point-to-point one, same splits as above."""
    reference = _reference()
    print("\nThe probe's kind (every probe record of the campaign): DDP mean / max / bias %")
    for campaign in OWN_PROBE:
        folder = os.path.join(ROOT, "validation", "data", campaign)
        measurements = load_measurements([folder])
        if not any(p.get("bench") == "net_collective" for p in measurements.net_probes):
            continue
        p2p = [p for p in measurements.net_probes if p.get("bench") != "net_collective"]
        for title, train, test in DDP_SPLITS:
            for kind, probes in (("collectives", measurements.net_probes), ("point to point", p2p)):
                for group, cell in _ddp_errors(folder, reference, _fitted_sweeps(measurements, train), probes,
                                               test).items():
                    print(f"  {campaign:30s} {title:30s} {kind:15s} {group:8s} {cell[5:]}")


def _ddp_transfer(probe_dir: str) -> None:
    """DDP runs of a shape whose sweeps were never fitted: the network from the other shapes' sweeps
    (forced Ring and Tree, plus the one-node sweeps) and those shapes' probe launches, DDP overheads
    from campaign M's calibration (another allocation), every DDP run of the held-out shape predicted."""
    reference = _reference()
    measurements = load_measurements([probe_dir])
    print(f"\nDDP runs of {os.path.basename(probe_dir)}, network fitted on other shapes' sweeps (and its own probe), "
          f"overheads of {REFERENCE}")
    print(f"{'split':34s} {'held-out group':14s} {'runs':>4s} {'full duplex mean / max / bias':>31s}   "
          f"{'measured mean / max / bias':>28s}")
    for title, train, test in DDP_SPLITS:
        samples = _fitted_sweeps(measurements, train)
        fitted_probes = [p for p in measurements.net_probes if f"{p['nodes']}x{p['gpus_per_node']}" in train]
        full = _ddp_errors(probe_dir, reference, samples, [], test)
        measured = _ddp_errors(probe_dir, reference, samples, fitted_probes, test)
        for group in full:
            print(f"{title:34s} {group:14s} {full[group]}          {measured[group][5:]}")


def _probe_records(probe_dir: str, shapes: set[str] | None = None) -> list[dict[str, Any]]:
    """The probe records of a campaign, of the launches of ``shapes`` only where given."""
    records = read_net_probes(os.path.join(probe_dir, "netprobe.jsonl"))
    return [r for r in records if shapes is None or f"{r['nodes']}x{r['gpus_per_node']}" in shapes]



def run() -> str:
    """The stage's output (validation/reports/network-duplex/output.txt): what the benchmark printed."""
    return printed(main, __name__)

if __name__ == "__main__":
    sys.exit(main())
