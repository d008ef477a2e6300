"""The launch-to-launch spread of validation/evidence/stages/multinode_allreduce.py, on hand-derived numbers."""

from __future__ import annotations

from typing import Any

import pytest

from validation.evidence.stages.multinode_allreduce import MIB, spread_pct, spread_table, sweep_spreads


def test_spread_is_larger_over_smaller_minus_one_either_way() -> None:
    # 120 / 100 - 1 = 0.2: 20%, whichever of the two is given first
    assert spread_pct(100.0, 120.0) == pytest.approx(20.0)
    assert spread_pct(120.0, 100.0) == pytest.approx(20.0)
    # 60 / 40 - 1 = 0.5: 50% (not |60 - 40| / 60 = 33% nor / 50 = 40%)
    assert spread_pct(60.0, 40.0) == pytest.approx(50.0)
    assert spread_pct(57.0, 57.0) == 0.0


def _sweep(times_us: dict[int, float], **fields: Any) -> dict[str, Any]:
    record = {"nodes": 2, "gpus_per_node": 1, "algorithm_forced": None, "status": "ok", "launch_id": "socket_2x1_0",
              "fingerprint": {"gpu_name": "NVIDIA H200"},
              "rows": [{"bytes": size, "time_us_median": t} for size, t in times_us.items()]}
    return record | fields


def test_two_synthetic_sweeps_split_by_band() -> None:
    # 4 KiB: 40 vs 50 -> 50/40 - 1 = 25%; 64 KiB: 110 vs 100 -> 10%; 1 MiB: 300 vs 400 -> 400/300 - 1 = 33.33%;
    # 16 MiB only in the first sweep: not compared
    a = _sweep({4096: 40.0, 65536: 110.0, MIB: 300.0, 16 * MIB: 900.0})
    b = _sweep({4096: 50.0, 65536: 100.0, MIB: 400.0}, launch_id="socket_2x1_1")
    small, large = sweep_spreads(a, b)
    assert small == pytest.approx([25.0, 10.0])
    assert large == pytest.approx([100.0 / 3])


def test_spread_table_pairs_by_allocation_and_gpu() -> None:
    a = _sweep({4096: 40.0, MIB: 300.0})
    b = _sweep({4096: 50.0, MIB: 400.0}, launch_id="socket_2x1_1")
    h100 = _sweep({4096: 60.0, MIB: 300.0}, fingerprint={"gpu_name": "NVIDIA H100 80GB HBM3"})
    one_node = _sweep({4096: 10.0, MIB: 10.0}, nodes=1, gpus_per_node=2)  # one node: not a multi-node shape
    failed = _sweep({4096: 1.0, MIB: 1.0}, status="error")
    lines = spread_table([("M", a), ("M", b), ("He", h100), ("M", one_node), ("M", one_node), ("M", failed)])
    assert len(lines) == 2
    same, other_gpu = (line.split() for line in lines)
    # a vs b on one allocation: 4 KiB 50/40 - 1 = 25%, 1 MiB 400/300 - 1 = 33.3%
    assert same[:5] == ["2x1", "default", "same", "allocation", "1"]
    assert same[5:] == ["25.0", "/", "25.0", "33.3", "/", "33.3"]
    # H100 vs a: 60/40 - 1 = 50%, 300/300: 0%; H100 vs b: 60/50 - 1 = 20%, 400/300 - 1 = 33.3%
    assert other_gpu[:7] == ["2x1", "default", "other", "allocation,", "other", "GPU", "2"]
    assert other_gpu[7:] == ["35.0", "/", "50.0", "16.7", "/", "33.3"]
