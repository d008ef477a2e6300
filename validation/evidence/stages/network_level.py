"""Does the probe of a launch tell how fast its network ran? Raw against probe-normalised DDP errors.

Run: ``python -m validation.evidence --stage network-level`` (output in validation/reports/network-level/output.txt).

The same configuration launched twice on one allocation differs by up to 24% on the emulated network
(``multinode_noise.py``), and the probe shows the network's own speed moving with it (U's 2x1 repeat launch:
point-to-point 3.1 to 3.5 GB/s against 3.9 to 4.1 in its sweep launch, its steps 9 to 24% slower). A
launch's level here is the median, over its probe rounds, of the two-rank all-reduce's per-flow rate
(``collective_two_way``: both directions of one endpoint on NCCL's channels, as DDP's rings use them).
Normalised, a DDP run of launch L is predicted with the network's fitted rate x level(L) / level of the
launches whose sweeps were fitted; nothing else changes, and nothing is refitted. This is a normalisation,
like ``validate --normalise-launches``' reference configuration, not a prediction: a user predicting a
cluster has no probe of the launch to come. Both errors are reported; DDP overheads are M's
(``ddpsim/calibration/shipped/x4-multinode-h200.json``), as in ``network_duplex.py`` and ``own_network.py``.

- transfer: the held-out shape's runs, the network fitted on the other shapes' sweeps and probes
  (``network_duplex.py``'s DDP splits); reference level: the fitted shapes' sweep launches';
- own network, repeat launches: every shape's sweeps fitted (``own_network.py``); the repeat launches'
  runs (U and V launched every shape twice), each against its shape's sweep launch.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from typing import Any

from ddpsim.calibration.file import calibration_from_dict
from ddpsim.fitting.calibrate import load_measurements
from ddpsim.fitting.fit import fit_links
from ddpsim.fitting.validate import predict_run
from validation.evidence import ROOT  # noqa: E402
from validation.evidence.stages import printed

REFERENCE = "ddpsim/calibration/shipped/x4-multinode-h200.json"
# the campaigns whose probe has NCCL's collectives (S, T, U, V, W)
CAMPAIGNS = ("h100x4-multinode-2026-11-27b", "h100x4-multinode-2026-11-27c", "h100x4-multinode-2026-11-27d",
             "h200x4-multinode-2026-11-27b", "h200x4-multinode-2026-11-27c")
SPLITS = (("fit 4x1 + 2x1, predict 2x2", {"4x1", "2x1"}, {"2x2"}),
          ("fit 2x2, predict 4x1 and 2x1", {"2x2"}, {"4x1", "2x1"}))


def _shape(record: dict[str, Any]) -> str:
    return f"{record['nodes']}x{record['gpus_per_node']}"


def _levels(probes: list[dict[str, Any]]) -> dict[str, float]:
    """launch id -> median per-flow rate of its two-rank all-reduces (GB/s)."""
    rates: dict[str, list[float]] = {}
    for probe in probes:
        if probe.get("pattern") == "collective_two_way":
            rates.setdefault(probe["launch_id"], []).append(float(probe["flow_GBps"]))
    return {launch: statistics.median(values) for launch, values in rates.items()}


def _scaled(calibration: dict[str, Any], factor: float) -> dict[str, Any]:
    """The calibration with every network rate it simulates with (the pooled one and each shape's) x factor."""
    out = json.loads(json.dumps(calibration))
    net = out["link_classes"]["net"]
    for entry in (net, *net.get("by_shape", {}).values()):
        entry["bandwidth_Bps"] *= factor
    return out


def _errors(measured: Any, calibration: dict[str, Any], runs: list[dict[str, Any]],
            factor_by_launch: dict[str, float]) -> tuple[list[float], list[float]]:
    """Signed % errors of ``runs``: raw, and with the network scaled by their launch's factor."""
    raw: list[float] = []
    normalised: list[float] = []
    cache: dict[float, Any] = {}
    for run in runs:
        for factor, out in ((1.0, raw), (factor_by_launch[run["launch_id"]], normalised)):
            if factor not in cache:
                cache[factor] = calibration_from_dict(_scaled(calibration, factor), f"x{factor:.3f}")
            out.append(predict_run(measured, run, cache[factor]).error_pct)
    return raw, normalised


def _cell(errors: list[float]) -> str:
    return (f"{sum(abs(e) for e in errors) / len(errors):5.1f} / {max(abs(e) for e in errors):5.1f} / "
            f"{sum(errors) / len(errors):+6.1f}")


def main() -> int:
    with open(os.path.join(ROOT, REFERENCE), encoding="utf-8") as handle:
        reference = json.load(handle)
    pooled: dict[str, tuple[list[float], list[float]]] = {}
    print(f"{'campaign':30s} {'what':34s} {'group':5s} {'runs':>4s}   {'raw mean / max / bias':>22s}   "
          f"{'normalised mean / max / bias':>28s}")
    for campaign in CAMPAIGNS:
        folder = os.path.join(ROOT, "validation", "data", campaign)
        measured = load_measurements([folder])
        levels = _levels(measured.net_probes)
        swept = {r.launch_id for r in measured.samples if r.nodes > 1}
        print(f"{campaign}: level per launch (GB/s) " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(levels.items())))
        for title, train, test in SPLITS:
            samples = [s for s in measured.samples if s.nodes == 1 or f"{s.nodes}x{s.world_size // s.nodes}" in train]
            probes = [p for p in measured.net_probes if _shape(p) in train]
            calibration = dict(reference, link_classes=fit_links(samples, probes))
            base = statistics.median(levels[launch] for launch in {p["launch_id"] for p in probes} & swept)
            factors = {launch: level / base for launch, level in levels.items()}
            for shape in sorted(test):
                runs = [r for r in measured.runs if r["nodes"] > 1 and _shape(r) == shape]
                if runs:
                    _report(pooled, "transfer", campaign, title, shape, *_errors(measured, calibration, runs, factors))
        repeats = [r for r in measured.runs if r["nodes"] > 1 and r["launch_id"] not in swept]
        if repeats:
            calibration = dict(reference, link_classes=fit_links(measured.samples, measured.net_probes))
            sweep_of = {_shape(p): p["launch_id"] for p in measured.net_probes if p["launch_id"] in swept}
            factors = {r["launch_id"]: levels[r["launch_id"]] / levels[sweep_of[_shape(r)]] for r in repeats}
            _report(pooled, "repeat", campaign, "own network, repeat launches", "all",
                    *_errors(measured, calibration, repeats, factors))
    print("\npooled")
    for kind, (raw, normalised) in pooled.items():
        print(f"  {kind:10s} {len(raw):4d} runs   raw {_cell(raw)}   normalised {_cell(normalised)}")
    return 0


def _report(pooled: dict[str, tuple[list[float], list[float]]], kind: str, campaign: str, what: str, group: str,
            raw: list[float], normalised: list[float]) -> None:
    print(f"  {campaign:28s} {what:34s} {group:5s} {len(raw):4d}   {_cell(raw):>22s}   {_cell(normalised):>28s}")
    pool = pooled.setdefault(kind, ([], []))
    pool[0].extend(raw)
    pool[1].extend(normalised)



def run() -> str:
    """The stage's output (validation/reports/network-level/output.txt): what the benchmark printed."""
    return printed(main, __name__)

if __name__ == "__main__":
    sys.exit(main())
