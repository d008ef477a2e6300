"""Rank folding: simulating representatives of identical ranks and leaving out ranks that are
never the slowest gives what simulating every rank gives (the oracle is ``plan_ranks(fold=False)``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import ddpsim.simulation as simulation
from ddpsim.ddp.fold import draw_factors, plan_ranks
from ddpsim.loader import scenario_from_dict
from ddpsim.results import Result
from ddpsim.scenario.schema import Scenario


def _scenario(mode: str = "detailed", nodes: int = 2, gpus: int = 4, model: str = "mlp", cap: float = 1,
              **simulation_spec: object) -> Scenario:
    return scenario_from_dict({
        "workload": {"model": model, "batch_size": 8},
        "cluster": {"gpu": "H100-SXM", "nodes": nodes, "gpus_per_node": gpus,
                    "intra_node": {"type": "nvswitch", "bandwidth": "100GB/s", "latency": "3us"},
                    "inter_node": {"type": "rail-fat-tree", "nic_bandwidth": "50Gbps", "latency": "5us"}},
        "ddp": {"bucket_cap_mb": cap},
        "simulation": {"mode": mode, **simulation_spec},
    })


def _every_rank(scenario: Scenario, monkeypatch: pytest.MonkeyPatch) -> Result:
    with monkeypatch.context() as patch:
        patch.setattr(simulation, "plan_ranks", lambda factors: plan_ranks(factors, fold=False))
        return simulation.simulate(scenario)


def _same(folded: Result, full: Result) -> None:
    assert folded.step_times_s == pytest.approx(full.step_times_s, rel=1e-12)
    assert [t for b in folded.buckets for t in (b.start_s, b.end_s, b.launch_s)] == pytest.approx(
        [t for b in full.buckets for t in (b.start_s, b.end_s, b.launch_s)], rel=1e-12)
    assert [folded.comm_time_s, folded.exposed_comm_s] == pytest.approx([full.comm_time_s, full.exposed_comm_s],
                                                                        rel=1e-12)
    assert [link.busy_s for link in folded.links] == pytest.approx([link.busy_s for link in full.links], rel=1e-12)
    assert folded.critical_rank == full.critical_rank


def test_plans_for_symmetric_straggler_and_jitter() -> None:
    same = plan_ranks(draw_factors(16, 2, 0, 0.0, None, 1.0))
    assert list(same.factors) == [0] and same.members[0] == tuple(range(16)) and same.dropped == 0
    straggler = plan_ranks(draw_factors(16, 1, 0, 0.0, 5, 1.5))
    assert straggler.factors == {0: (1.0,), 5: (1.5,)}
    assert straggler.members[0] == tuple(r for r in range(16) if r != 5) and straggler.members[5] == (5,)
    factors = draw_factors(1000, 1, 3, 0.2, None, 1.0)
    jitter = plan_ranks(factors)
    assert set(jitter.factors) == {0, int(np.argmax(factors[:, 0]))} and jitter.dropped == 998
    # over two steps: hand-made factors, rank 1 beats rank 2 in both steps, rank 3 beats nobody
    hand = np.array([[1.0, 1.0], [1.2, 1.1], [1.1, 1.05], [0.9, 1.3], [0.8, 0.8]])
    assert list(plan_ranks(hand).factors) == [0, 1, 3]


def test_jitter_draws_are_lognormal_with_mean_one() -> None:
    factors = draw_factors(20000, 1, 1, 0.1, None, 1.0)
    assert factors.mean() == pytest.approx(1.0, abs=3e-3)
    assert factors.std() / factors.mean() == pytest.approx(0.1, rel=0.05)


@pytest.mark.parametrize("mode", ["detailed", "fast"])
@pytest.mark.parametrize("case", [
    {},
    {"straggler_rank": 5, "straggler_slowdown": 1.7},
    {"jitter_cv": 0.3, "iterations": 3, "seed": 4},
    {"jitter_cv": 0.1, "iterations": 4, "seed": 1, "straggler_rank": 2, "straggler_slowdown": 1.2},
    {"degraded_link_factor": 0.3},
])
def test_folded_ranks_equal_every_rank(mode: str, case: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = _scenario(mode, **case)
    folded, full = simulation.simulate(scenario), _every_rank(scenario, monkeypatch)
    _same(folded, full)
    assert folded.simulated_ranks < full.simulated_ranks == 8
    assert sorted(full.rank_timelines) == list(range(8))


@pytest.mark.parametrize("overheads", [
    {"compute_slowdown": 1.0, "comm_slowdown": 0.5, "bucket_cpu_s": 2e-5, "idle_start_wait_s": 3e-4},
    {"compute_slowdown": 0.3, "max_inflight_buckets": 1, "allreduce_stretch": 1.4},
    {"compute_slowdown": 2.0, "comm_slowdown": 1.0, "max_inflight_buckets": 2, "bucket_launch_s": 1e-4},
])
def test_folding_is_exact_with_slowdowns_and_inflight_limits(overheads: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    for case in ({"jitter_cv": 0.4, "iterations": 3, "seed": 7}, {"straggler_rank": 3, "straggler_slowdown": 1.3}):
        base = _scenario("detailed", cap=0.5, **case)
        scenario = replace(base, overheads=replace(base.overheads, **overheads))
        _same(simulation.simulate(scenario), _every_rank(scenario, monkeypatch))


def test_identical_ranks_share_one_timeline_and_the_reason_is_reported() -> None:
    result = simulation.simulate(_scenario("detailed"))
    assert result.simulated_ranks == 1 and sorted(result.rank_timelines) == list(range(8))
    assert result.rank_timelines[7] is result.rank_timelines[0]
    assert result.mode_reason.startswith("simulation.mode: detailed") and "1 of 8 ranks" in result.mode_reason
    auto = simulation.simulate(_scenario("auto", nodes=16, gpus=8))
    assert auto.mode == "fast" and auto.mode_reason.startswith("auto: 128 GPUs > 64, so fast")


def test_large_folded_clusters_keep_only_simulated_timelines() -> None:
    result = simulation.simulate(_scenario("fast", nodes=16, gpus=8, straggler_rank=100, straggler_slowdown=1.2))
    assert result.simulated_ranks == 2 and sorted(result.rank_timelines) == [0, 100]
