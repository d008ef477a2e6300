"""``ddpsim run`` prints what applies to the run (issue 34: "output that does not apply").

- A ZeRO-3 step has no DDP buckets and no all-reduce: its summary names the strategy and its collectives.
- The 400G -> 800G what-if gives identical steps: the run says why (the all-reduce is not bound by the NICs
  alone), and a cluster whose all-reduce is NIC-bound says so, with about half the time at 2x the NIC
  bandwidth (a ring's bandwidth term over 100G Ethernet dwarfs its latency terms).
"""

from __future__ import annotations

import os
import re

import pytest

from ddpsim.cli.main import main

SCENARIOS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scenarios")


def _run(capsys, name: str, *extra: str) -> str:
    assert main(["run", os.path.join(SCENARIOS, name), *extra]) == 0
    return capsys.readouterr().out


def _rows(out: str) -> dict[str, str]:
    return {line[:35].strip(): line[35:].strip() for line in out.splitlines() if line[:35].strip()}


def test_a_zero3_run_prints_no_ddp_rows(capsys):
    rows = _rows(_run(capsys, "h100-16x8-ib400-llama7b-zero3.yaml"))
    assert "buckets" not in rows and "all-reduce" not in rows and "bucket_cap_mb" not in rows
    assert rows["strategy"].startswith("zero3")
    assert "all-gather" in rows["collectives"] and "reduce-scatter" in rows["collectives"]
    assert "communication (all collectives)" in rows and "wait for the last collectives" in rows


def test_a_ddp_run_keeps_its_rows(capsys):
    rows = _rows(_run(capsys, "quickstart.yaml"))
    assert "buckets" in rows and "all-reduce" in rows and "strategy" not in rows


def _bound(out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith("communication: ")]
    assert len(lines) == 1, out
    return lines[0]


def test_the_400g_and_800g_what_if_says_why_its_steps_are_identical(capsys):
    slow, fast = (_run(capsys, f"whatif-ib{g}-h100-8x8-gpt2.yaml") for g in (400, 800))
    assert _rows(slow)["step time"] == _rows(fast)["step time"]
    for out in (slow, fast):
        assert "a faster network alone would not shorten it" in _bound(out)
    assert "NVLink-bound" in _bound(fast)


def test_a_nic_bound_all_reduce_says_so(capsys):
    line = _bound(_run(capsys, "a100-4x8-eth100-bert-large.yaml"))
    assert line.startswith("communication: NIC-bound")
    base, nic = (float(t) for t in re.findall(r"(\d+) us", line)[:2])
    assert nic / base == pytest.approx(0.5, abs=0.05)
