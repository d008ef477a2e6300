"""All-reduce across emulated nodes: fit the network on some shapes, predict the shapes it never saw.

Run: ``python -m validation.evidence.stages.multinode_allreduce [DATA_DIR]`` (default: the committed
``validation/data/h200x4-multinode-2026-11-26``). For each split the intra-node class (NVLink) is
fitted on the one-node sweeps (1x2, 1x4, forced Ring) and the network class ``net`` on the forced-Ring
sweeps of the training shapes (the first four splits: the model's tree without tree data), or on their
forced Ring and Tree sweeps (the last three: the tree's own hop and bandwidth, ``fit._tree_network_fit``,
judged on another launch or on other shapes' trees); every sweep of a held-out shape (NCCL's default choice, forced
Ring, forced Tree) is then predicted through the calibrated topology and collective model. The table
reports the mean and max |error| below and above 1 MiB, and for the default sweeps how often ddpsim's
``auto`` picks the algorithm and protocol NCCL logged. Where NCCL's log names each row's protocol, the
network's curves are fitted per protocol on those rows, with the base and intra-node hop latencies of
the one-node fit (``fit._network_entry``). A held-out shape's NCCL table is not in the calibration (it
carries the tables of the fitted shapes only), so its ``auto`` column is the model's own play of
NCCL's tuning; the section after it checks the choice with each shape's logged table.

The floor a prediction can be judged to is how well the measurement repeats itself. Each held-out line
also scores the same sweep measured again as if it were the prediction (``as repeat`` columns): another
launch on the same allocation for this campaign's sweeps, this campaign's sweep for another allocation's
(what predicting with this campaign's measured numbers directly would score); ``-`` where none was
measured. The last section gives the spread between every two sweeps of one multi-node shape and
algorithm in ``validation/data/*multinode*`` (``spread_pct``), per kind of pair: two launches on one
allocation, two allocations of one GPU type, or of two GPU types.
"""

from __future__ import annotations

import glob
import json
import os
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ddpsim.calibration.apply import apply_calibration
from ddpsim.calibration.file import SCHEMA, calibration_from_dict
from ddpsim.collectives import CollectiveModel
from ddpsim.fitting.fit import fit_links
from ddpsim.fitting.measurements import AllReduceSample, nccl_log_path, read_nccl_tuning
from ddpsim.jsonfile import has_data, open_data
from ddpsim.loader import scenario_from_dict
from ddpsim.topology import build_topology
from validation.evidence import ROOT  # noqa: E402
from validation.evidence.stages import printed

DEFAULT_DATA = os.path.join(ROOT, "validation", "data", "h200x4-multinode-2026-11-26")
MIB = 1 << 20
# never-calibrated allocations whose sweeps of a shape this campaign also has are predicted from it
OTHER_MACHINES = ("h100x2-multinode-2026-11-26e", "h100x2-multinode-2026-11-26m", "h100x2-multinode-2026-11-26p")
# (title, fitted shapes, held-out shapes, forced algorithms fitted, launch fitted ("": every launch),
#  held-out sweeps: the forced algorithm reported (None: NCCL's default), or "any")
SPLITS: tuple[tuple[str, set[str], set[str], tuple[str, ...], str, str | None], ...] = (
    # no tree data in these: they test the model's tree without it
    ("fit 4x1 + 2x1 (every hop on the network), predict 2x2", {"4x1", "2x1"}, {"2x2"}, ("ring",), "", "any"),
    ("fit 2x2, predict 4x1 and 2x1", {"2x2"}, {"4x1", "2x1"}, ("ring",), "", "any"),
    ("fit 2x2 (forced Ring only), predict its default and Tree sweeps", {"2x2"}, {"2x2"}, ("ring",), "", "any"),
    ("fit 4x1 (forced Ring only), predict its default and Tree sweeps", {"4x1"}, {"4x1"}, ("ring",), "", "any"),
    # tree data fitted only where held-out data remains: another launch, or other shapes' trees
    ("fit 2x2 launch _0 (Ring + Tree), predict launch _1", {"2x2"}, {"2x2"}, ("ring", "tree"), "nvlink_2x2_0", "any"),
    ("fit 2x2 (Ring + Tree), predict the Tree of 4x1 and 2x1", {"2x2"}, {"4x1", "2x1"}, ("ring", "tree"), "", "tree"),
    ("fit 4x1 + 2x1 (Ring + Tree), predict the Tree of 2x2", {"4x1", "2x1"}, {"2x2"}, ("ring", "tree"), "", "tree"),
)


def _shape(record: dict[str, Any]) -> str:
    return f"{record['nodes']}x{record['gpus_per_node']}"


def _load(data: str) -> list[dict[str, Any]]:
    """The all-reduce sweeps of one campaign folder."""
    with open_data(os.path.join(data, "allreduce.jsonl")) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _relative_pct(value: float, reference: float) -> float:
    """|value / reference - 1| in percent: a prediction's error against its measurement."""
    return abs(value / reference - 1) * 100


def spread_pct(t1: float, t2: float) -> float:
    """Spread of two measurements of one configuration in percent, symmetric: larger / smaller - 1, i.e.
    exp|ln t1 - ln t2| - 1, the one-pair form of the launch spread ``ddpsim.fitting.validate.
    launch_spread_pct`` gives from a fitted lognormal launch sigma (that function takes the sigma, not a
    pair, so it is not called here). 100 and 120 us: 20%."""
    return _relative_pct(max(t1, t2), min(t1, t2))


def sweep_spreads(a: dict[str, Any], b: dict[str, Any],
                  score: Callable[[float, float], float] = spread_pct) -> tuple[list[float], list[float]]:
    """``score(a's time, b's time)`` at every size both sweeps measured: below 1 MiB, from 1 MiB."""
    times_b = {row["bytes"]: row["time_us_median"] for row in b["rows"]}
    small: list[float] = []
    large: list[float] = []
    for row in a["rows"]:
        if row["bytes"] in times_b:
            (large if row["bytes"] >= MIB else small).append(score(row["time_us_median"], times_b[row["bytes"]]))
    return small, large


def _pooled(spreads: list[tuple[list[float], list[float]]]) -> tuple[list[float], list[float]]:
    """Several pairs' ``sweep_spreads`` pooled: every value below 1 MiB, every value from 1 MiB."""
    return [x for small, _ in spreads for x in small], [x for _, large in spreads for x in large]


def _mean_max(values: list[float], width: int = 8) -> str:
    return f"{sum(values) / len(values):{width}.1f} / {max(values):6.1f}" if values else f"{'-':>{width + 9}s}"


def _algorithm(record: dict[str, Any]) -> str:
    return record.get("algorithm_forced") or "default"


def _repeats(record: dict[str, Any], sweeps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The other sweeps of ``sweeps`` that measured ``record``'s shape and algorithm."""
    return [r for r in sweeps if r is not record and r.get("status") == "ok" and _shape(r) == _shape(record)
            and _algorithm(r) == _algorithm(record)]


def _samples(record: dict[str, Any], path: str) -> list[AllReduceSample]:
    link_class = "net" if record["nodes"] > 1 else record["transport"]
    log = nccl_log_path(path, record)
    tuning = read_nccl_tuning(log) if log else None  # NCCL's own cost table for this launch
    return [
        AllReduceSample(link_class, record["world_size"], record["nodes"], row["bytes"], row["time_us_median"] * 1e-6, path,
                        record.get("algorithm_forced"), record.get("launch_id", ""),
                        nccl_protocol=str(row.get("nccl_proto") or "").lower() or None, nccl_tuning=tuning)
        for row in record["rows"]
    ]


def _model(calibration: Any, record: dict[str, Any]) -> tuple[CollectiveModel, float]:
    scenario = scenario_from_dict({
        "workload": {"model": "mlp", "batch_size": 1},
        "cluster": {
            "gpu": "H200", "nodes": record["nodes"], "gpus_per_node": record["gpus_per_node"],
            "intra_node": {"type": "nvswitch"}, "inter_node": {"type": "fat-tree", "nics_per_node": 1},
        },
    })
    calibrated = apply_calibration(replace(scenario, calibration=calibration))
    net = calibration.link_fit("net", record["world_size"], record["nodes"])
    return CollectiveModel(build_topology(calibrated.scenario.cluster), calibrated.protocol_table), net.call_floor_s


def _agreement(calibration: Any, data: str) -> list[str]:
    """Per shape of ``data``'s default sweeps: how often ``auto`` names the algorithm and protocol
    NCCL logged, played from the calibration's model alone (no logged table) and with NCCL's logged
    table where the calibration carries one for that shape."""
    records = _load(data)
    lines = []
    for record in records:
        if record.get("algorithm_forced") is not None:
            continue
        counts = []
        for use_table in (False, True):
            model, _ = _model(calibration, record)
            if not use_table:
                model.protocol_table = replace(model.protocol_table, nccl_tuning=None)
            agree = sum(model.choose(row["bytes"], "auto", "auto") == (str(row["nccl_algo"]).lower(),
                                                                        str(row["nccl_proto"]).lower())
                        for row in record["rows"])
            counts.append(f"{agree}/{len(record['rows'])}")
        lines.append(f"  {_shape(record):4s} ({record['launch_id']:13s}) model alone {counts[0]:>6s}   with NCCL's table {counts[1]:>6s}")
    return lines


def _predicted_line(calibration: Any, record: dict[str, Any], repeats: list[dict[str, Any]], where: str) -> str:
    """One held-out sweep: mean / max |error| below and from 1 MiB, (NCCL's default sweeps) how often
    ``auto`` names the algorithm and protocol NCCL logged, and the same |error| of ``repeats`` (the same
    sweep measured again, on ``where``) taken as the prediction."""
    model, floor_s = _model(calibration, record)
    forced = record.get("algorithm_forced")
    small: list[float] = []
    large: list[float] = []
    agree = 0
    for row in record["rows"]:
        algorithm, protocol = model.choose(row["bytes"], forced or "auto", "auto")
        predicted = max(model.allreduce_time_s(row["bytes"], algorithm, protocol), floor_s)
        error = _relative_pct(predicted, row["time_us_median"] * 1e-6)
        (large if row["bytes"] >= MIB else small).append(error)
        agree += (algorithm, protocol) == (str(row.get("nccl_algo", "")).lower(), str(row.get("nccl_proto", "")).lower())
    label = f"  {_shape(record)} ({record['launch_id']})"
    share = f"{agree}/{len(record['rows'])}" if forced is None else "-"
    repeat_small, repeat_large = _pooled([sweep_spreads(repeat, record, _relative_pct) for repeat in repeats])
    return (f"{label:58s} {forced or 'default':9s} {_mean_max(small)} {_mean_max(large, 9)} {share:>11s}"
            f" {_mean_max(repeat_small, 9)} {_mean_max(repeat_large, 10)}  {where if repeats else '-'}")


PAIR_KINDS = ("same allocation", "other allocation, same GPU", "other allocation, other GPU")


def _gpu(record: dict[str, Any]) -> str:
    return str((record.get("fingerprint") or {}).get("gpu_name", "?"))


def spread_table(sweeps: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Per multi-node (shape, algorithm) measured more than once and kind of pair: how many pairs of sweeps,
    and the mean / max over pairs and sizes of ``spread_pct`` below and from 1 MiB. ``sweeps`` are
    (allocation, record): the folder names the allocation."""
    by_sweep: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for allocation, record in sweeps:
        if record["nodes"] > 1 and record.get("status") == "ok":
            by_sweep[(_shape(record), _algorithm(record))].append((allocation, record))
    pairs: dict[tuple[str, str, int], list[tuple[list[float], list[float]]]] = defaultdict(list)
    for (shape, algorithm), group in by_sweep.items():
        for i, (allocation_a, a) in enumerate(group):
            for allocation_b, b in group[i + 1:]:
                kind = 0 if allocation_a == allocation_b else 1 if _gpu(a) == _gpu(b) else 2
                pairs[(shape, algorithm, kind)].append(sweep_spreads(a, b))
    lines = []
    for (shape, algorithm, kind), spreads in sorted(pairs.items()):
        small, large = _pooled(spreads)
        lines.append(f"  {shape:5s} {algorithm:9s} {PAIR_KINDS[kind]:28s} {len(spreads):5d}"
                     f" {_mean_max(small)} {_mean_max(large, 9)}")
    return lines


def main(argv: list[str]) -> int:
    data = argv[0] if argv else DEFAULT_DATA
    path = os.path.join(data, "allreduce.jsonl")
    records = _load(data)
    one_node = [s for r in records if r["nodes"] == 1 and r.get("algorithm_forced") == "ring" for s in _samples(r, path)]
    print(f"data: {os.path.relpath(data, ROOT)}\n")
    print(f"{'split / held-out shape':58s} {'algorithm':9s} {'<1 MiB mean/max %':>18s} {'>=1 MiB mean/max %':>19s} {'auto = NCCL':>11s}"
          f" {'as repeat <1 MiB':>18s} {'as repeat >=1 MiB':>19s}  repeat measured on")
    for title, train, test, algorithms, launch, reported in SPLITS:
        def is_fitted(r: dict[str, Any], train: set[str] = train, algorithms: tuple[str, ...] = algorithms,
                      launch: str = launch) -> bool:
            return (r["nodes"] > 1 and _shape(r) in train and r.get("algorithm_forced") in algorithms
                    and launch in ("", r["launch_id"]))

        fitted = [s for r in records if is_fitted(r) for s in _samples(r, path)]
        calibration = calibration_from_dict({"schema": SCHEMA, "link_classes": fit_links(one_node + fitted)}, title)
        print(title)
        for record in records:
            if _shape(record) not in test or is_fitted(record) or (launch and record["launch_id"] == launch):
                continue  # a fitted sweep (or launch) is never reported as a prediction
            if reported != "any" and record.get("algorithm_forced") != reported:
                continue
            print(_predicted_line(calibration, record, _repeats(record, records), "this allocation"))
    # the same shape on another machine: the 2x1 network fitted on this campaign's 2x1 sweeps (forced
    # Ring and Tree) predicts every 2x1 sweep of a never-calibrated 2 x H100 allocation
    fitted = [s for r in records if _shape(r) == "2x1" and r.get("algorithm_forced") in ("ring", "tree")
              for s in _samples(r, path)]
    if fitted:
        calibration = calibration_from_dict({"schema": SCHEMA, "link_classes": fit_links(one_node + fitted)}, "2x1")
        for other in OTHER_MACHINES:
            other_path = os.path.join(ROOT, "validation", "data", other)
            if not has_data(os.path.join(other_path, "allreduce.jsonl")):
                continue
            print(f"fit 2x1 (Ring + Tree) here, predict the 2x1 sweeps of {other}")
            for record in _load(other_path):
                if _shape(record) == "2x1":
                    print(_predicted_line(calibration, record, _repeats(record, records), os.path.basename(data)))
    # NCCL's tuning table is printed at communicator init, before any timed call: carrying it is not
    # fitting to the held-out timings. The calibration fitted on every sweep's forced Ring rows (the
    # shapes' tables with it) is checked on the default sweeps here and on the never-calibrated H100
    # campaign, whose NCCL believes the same 10 Gbps network.
    every = [s for r in records if r.get("algorithm_forced") == "ring" for s in _samples(r, path)]
    calibration = calibration_from_dict({"schema": SCHEMA, "link_classes": fit_links(every)}, "all shapes, forced Ring")
    others = [f"h100x4-multinode-2026-11-26{s}" for s in ("", "b", "d")] + list(OTHER_MACHINES)
    for campaign in (data, *(os.path.join(ROOT, "validation", "data", name) for name in others)):
        if has_data(os.path.join(campaign, "allreduce.jsonl")):
            print(f"\nauto = NCCL's logged choice, default sweeps of {os.path.relpath(campaign, ROOT)} "
                  f"(calibration: forced-Ring sweeps of every shape of {os.path.basename(data)}):")
            print("\n".join(_agreement(calibration, campaign)))
    folders = sorted({os.path.abspath(data), *glob.glob(os.path.join(ROOT, "validation", "data", "*multinode*"))})
    sweeps = [(os.path.basename(f), r) for f in folders if has_data(os.path.join(f, "allreduce.jsonl"))
              for r in _load(f)]
    print("\nmeasured spread of the same sweep (larger / smaller - 1 per size, two sweeps of one shape and "
          "algorithm;\nmean and max over pairs and sizes; the folder names the allocation):")
    for allocation in sorted({a for a, _ in sweeps}):
        print(f"  {allocation}: {_gpu(next(r for a, r in sweeps if a == allocation))}")
    print(f"  {'shape':5s} {'algorithm':9s} {'pair':28s} {'pairs':>5s} {'<1 MiB mean/max %':>17s}"
          f" {'>=1 MiB mean/max %':>18s}")
    print("\n".join(spread_table(sweeps)))
    return 0



def run() -> str:
    """The stage's output (validation/reports/multinode-allreduce/output.txt): what the benchmark printed."""
    return printed(lambda: main([]), __name__)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
