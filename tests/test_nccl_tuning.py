"""NCCL's logged tuning table: read from the committed campaigns' logs, and ``auto`` = NCCL's choice.

Expected values are NCCL's own logged choices per measured row (``nccl_algo``/``nccl_proto``), and
NCCL's time formula (tuning.cc ``ncclTopoGetAlgoTime``) written out here by hand."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import replace

import pytest

from ddpsim.calibration.apply import apply_calibration
from ddpsim.calibration.file import SCHEMA, calibration_from_dict
from ddpsim.collectives import CollectiveModel, ProtocolTable
from ddpsim.collectives.nccl_tuning import NcclTuning
from ddpsim.errors import ScenarioError
from ddpsim.fitting.fit import fit_links
from ddpsim.fitting.measurements import nccl_log_path, read_harness_allreduce, read_nccl_tuning
from ddpsim.jsonfile import open_data
from ddpsim.loader import scenario_from_dict
from ddpsim.topology import build_topology

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H200 = os.path.join(ROOT, "validation", "data", "h200x4-multinode-2026-11-26")
H100 = os.path.join(ROOT, "validation", "data", "h100x4-multinode-2026-11-26")


def _records(data: str) -> list[tuple[str, dict]]:
    path = os.path.join(data, "allreduce.jsonl")
    with open_data(path) as handle:
        return [(path, json.loads(line)) for line in handle if line.strip()]


def _logged(row: dict) -> tuple[str, str]:
    return str(row["nccl_algo"]).lower(), str(row["nccl_proto"]).lower()


@pytest.mark.parametrize("data", [H200, H100])
def test_logged_table_reproduces_nccls_choice(data):
    """Every sweep (default and forced) of both campaigns: NCCL's choice from its own logged table
    names what NCCL logged running, at >= 90% of sizes per sweep (all but one row in fact)."""
    agree, total = 0, 0
    for path, record in _records(data):
        log = nccl_log_path(path, record)
        assert log is not None, record["launch_id"]
        tuning = read_nccl_tuning(log)
        assert tuning is not None and tuning.applies_to(record["world_size"], record["nodes"])
        forced = record.get("algorithm_forced")
        algorithms = (forced,) if forced else ("tree", "ring")
        hits = sum(tuning.choose(row["bytes"], algorithms, ("ll", "ll128", "simple")) == _logged(row)
                   for row in record["rows"])
        assert hits >= 0.9 * len(record["rows"]), (record["launch_id"], forced, hits)
        agree, total = agree + hits, total + len(record["rows"])
    assert agree >= total - 1


def _model(calibration, nodes: int, gpus_per_node: int) -> CollectiveModel:
    scenario = scenario_from_dict({
        "workload": {"model": "mlp", "batch_size": 1},
        "cluster": {"gpu": "H100", "nodes": nodes, "gpus_per_node": gpus_per_node, "intra_node": {"type": "nvswitch"},
                    "inter_node": {"type": "fat-tree", "nics_per_node": 1}},
    })
    calibrated = apply_calibration(replace(scenario, calibration=calibration))
    return CollectiveModel(build_topology(calibrated.scenario.cluster), calibrated.protocol_table)


def test_calibrated_auto_names_nccls_choice_on_the_never_calibrated_h100_campaign():
    """A calibration fitted on the H200 campaign's forced-Ring sweeps carries NCCL's table per shape;
    on the H100 campaign (never calibrated) ``auto`` then names NCCL's logged pick at >= 90% of the
    default sweeps' sizes, every shape (it named 6-14 of 19 before)."""
    samples = [s for s in read_harness_allreduce(os.path.join(H200, "allreduce.jsonl")) if s.algorithm == "ring"]
    calibration = calibration_from_dict({"schema": SCHEMA, "link_classes": fit_links(samples)}, "h200 rings")
    per_shape: dict[str, list[bool]] = defaultdict(list)
    for _path, record in _records(H100):
        if record.get("algorithm_forced") is not None:
            continue
        model = _model(calibration, record["nodes"], record["gpus_per_node"])
        for row in record["rows"]:
            per_shape[f"{record['nodes']}x{record['gpus_per_node']}"].append(
                model.choose(row["bytes"], "auto", "auto") == _logged(row))
    assert set(per_shape) == {"1x4", "2x2", "4x1"}
    for shape, hits in per_shape.items():
        assert sum(hits) >= 0.9 * len(hits), (shape, sum(hits), len(hits))


def _table(nodes: int = 2) -> NcclTuning:
    us, gbps = 1e-6, 1e9
    pairs = [(a, p) for a in ("tree", "ring") for p in ("ll", "ll128", "simple")]
    latency = dict(zip(pairs, [18.0 * us, 33.5 * us, 44.4 * us, 16.0 * us, 29.6 * us, 50.0 * us], strict=True))
    bandwidth = dict(zip(pairs, [0.3 * gbps, 0.0, 1.1 * gbps, 0.4 * gbps, 0.0, 0.8 * gbps], strict=True))
    return NcclTuning(ranks=4, nodes=nodes, channels=2, latency_s=latency, algbw_Bps=bandwidth)


def test_nccl_time_formula():
    tuning = _table()
    size = 65536  # floor(log2(65536 / 64)) = 10: treeCorrectionFactor Simple .6, LL .6
    assert tuning.time_s(size, "tree", "simple") == pytest.approx(44.4e-6 + size / (1.1e9 * 0.6))
    assert tuning.time_s(size, "tree", "ll") == pytest.approx(18.0e-6 + size / (0.3e9 * 0.6))
    # ring Simple on 2 nodes: 65536 / (2 channels x 4 ranks) >= 64 bytes, so latency x 1.4
    assert tuning.time_s(size, "ring", "simple") == pytest.approx(50.0e-6 * 1.4 + size / 0.8e9)
    assert tuning.time_s(256, "ring", "simple") == pytest.approx(50.0e-6 + 256 / 0.8e9)  # 256/8 = 32 < 64
    assert _table(nodes=1).time_s(size, "ring", "simple") == pytest.approx(50.0e-6 + size / 0.8e9)
    assert tuning.time_s(size, "ring", "ll128") is None  # bandwidth 0.0: NCCL disabled it
    # 16 KiB: ring LL 16 + 16384 / 400 = 57.0 us; tree Simple (k = log2(256) = 8: factor .7)
    # 44.4 + 16384 / (1100 x .7) = 65.7 us: NCCL stays on ring LL, as the 2x2 sweeps logged
    assert tuning.choose(16384, ("tree", "ring"), ("ll", "ll128", "simple")) == ("ring", "ll")
    assert tuning.choose(65536, ("tree", "ring"), ("ll", "ll128", "simple")) == ("tree", "simple")
    assert tuning.choose(65536, ("hierarchical",), ("simple",)) is None


def test_tuning_round_trips_through_the_protocol_table():
    table = ProtocolTable(nccl_tuning=_table())
    again = ProtocolTable.from_dict(json.loads(json.dumps(table.to_dict())))
    assert again.nccl_tuning is not None
    assert again.nccl_tuning.latency_s == pytest.approx(table.nccl_tuning.latency_s)
    assert again.nccl_tuning.algbw_Bps == pytest.approx(table.nccl_tuning.algbw_Bps)
    assert "nccl_tuning" not in ProtocolTable().to_dict()  # tables without a log keep their old form


def _log(tmp_path, row: str, channels: bool = True) -> str:
    text = "\n".join([
        "vm:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0",
        "vm:1:1 [0] NCCL INFO   Algorithm   |            Tree             |          Ring           |",
        "vm:1:1 [0] NCCL INFO   Protocol    |   LL |  LL128 | Simple |   LL |  LL128 | Simple |",
        f"vm:1:1 [0] NCCL INFO     AllReduce | {row} |",
        *(["vm:1:1 [0] NCCL INFO 2 coll channels, 2 collnet channels, 0 nvls channels"] if channels else []),
    ])
    path = tmp_path / "nccl_x_r0.trimmed.txt"
    path.write_text(text + "\n")
    return str(path)


def test_reads_a_minimal_table(tmp_path):
    good = "18.0/ 0.3 | 33.5/ 0.0 | 44.4/ 1.1 | 16.0/ 0.4 | 29.6/ 0.0 | 50.0/ 0.8"
    tuning = read_nccl_tuning(_log(tmp_path, good))
    assert tuning is not None and (tuning.ranks, tuning.nodes, tuning.channels) == (4, 2, 2)
    assert tuning.algbw_Bps[("tree", "simple")] == pytest.approx(1.1e9)
    assert tuning.latency_s[("ring", "simple")] == pytest.approx(50.0e-6)


@pytest.mark.parametrize("row, channels, field", [
    ("18.0/ 0.3 | 33.5/ 0.0 | 44.4/ x | 16.0/ 0.4 | 29.6/ 0.0 | 50.0/ 0.8", True, "AllReduce"),
    ("18.0/ 0.3 | 33.5/ 0.0", True, "AllReduce"),
    ("18.0/ 0.3 | 33.5/ 0.0 | 44.4/ 1.1 | 16.0/ 0.4 | 29.6/ 0.0 | 50.0/ 0.8", False, "coll channels"),
])
def test_malformed_table_is_one_clear_error(tmp_path, row, channels, field):
    path = _log(tmp_path, row, channels)
    with pytest.raises(ScenarioError) as error:
        read_nccl_tuning(path)
    assert error.value.file == path and error.value.field == field
    assert "\n" not in str(error.value)
