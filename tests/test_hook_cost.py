"""A registered comm hook costs the backward thread its measured per-bucket CPU time (hook_cpu)."""

from __future__ import annotations

import pytest

from ddpsim import simulate
from ddpsim.jsonfile import open_data
from ddpsim.loader import scenario_from_dict
from ddpsim.simulation import prepare


def _prepared(hook: str, hook_cpu: str):
    return prepare(scenario_from_dict({
        "workload": {"model": "gpt2-124m", "batch_size": 4},
        "cluster": {"gpu": "H100-SXM", "nodes": 1, "gpus_per_node": 4, "intra_node": {"type": "nvswitch"}},
        "ddp": {"bucket_cap_mb": 5, "comm_hook": hook},
        "overheads": {"hook_cpu": hook_cpu},
    }))


def test_the_hook_cost_is_paid_per_bucket_and_at_most_once_each():
    free, costly = _prepared("bf16", "0us"), _prepared("bf16", "135us")
    delta_s = simulate(costly).step_time_s - simulate(free).step_time_s
    assert delta_s > 0
    # the backward thread pays it once per bucket; some of it may hide behind GPU work
    assert delta_s <= len(costly.buckets) * 135e-6 + 1e-12


def test_without_a_hook_the_term_has_no_effect():
    assert simulate(_prepared("none", "0us")).step_time_s == pytest.approx(
        simulate(_prepared("none", "135us")).step_time_s, rel=1e-12)


def test_the_default_is_the_committed_measurement():
    import json
    import os

    from ddpsim.scenario.schema import OverheadSpec

    path = os.path.join(os.path.dirname(__file__), "..", "validation", "data", "h200x4-options-2026-11-26",
                        "microbench.jsonl")
    with open_data(path) as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    hook = [r for r in records if r.get("bench") == "allreduce_launch_cpu" and r.get("path") == "ddp_comm_hook"]
    measured_s = hook[0]["call_and_future_then_cpu_us"]["median"] * 1e-6
    assert OverheadSpec().hook_cpu_s == pytest.approx(measured_s, abs=1e-6)
