"""Max-min fair sharing and the flow-level network on the event engine."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from ddpsim.network import FlowNetwork, LinkMatrix, max_min_rates


def test_max_min_textbook_cases() -> None:
    # a flow across both links is held to its share of the tighter one; the others take the rest
    assert max_min_rates([[0], [0, 1], [1]], np.array([10.0, 4.0])).tolist() == [8.0, 2.0, 2.0]
    rates = max_min_rates([[0], [0], [], [1]], np.array([10.0, 4.0]))
    assert rates[:2].tolist() == [5.0, 5.0] and np.isinf(rates[2]) and rates[3] == 4.0
    assert max_min_rates([], np.array([1.0])).shape == (0,)


def test_link_matrix_and_lists_agree() -> None:
    lists = [[0, 2], [1], [2, 1, 0], []]
    matrix = LinkMatrix.from_lists(lists)
    assert matrix.n_flows == 4 and matrix.indptr.tolist() == [0, 2, 3, 6, 6]
    capacity = np.array([3.0, 7.0, 5.0])
    assert np.array_equal(max_min_rates(matrix, capacity), max_min_rates(lists, capacity))


flows_strategy = st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=4, unique=True), min_size=1, max_size=12)
capacity_strategy = st.lists(st.floats(0.1, 100.0), min_size=6, max_size=6)


@settings(max_examples=200, deadline=None)
@given(flows_strategy, capacity_strategy)
def test_max_min_is_feasible_and_every_flow_has_a_bottleneck(flows: list[list[int]], caps: list[float]) -> None:
    capacity = np.array(caps)
    rates = max_min_rates(flows, capacity)
    load = np.zeros(len(capacity))
    for links, rate in zip(flows, rates, strict=True):
        load[links] += rate
    assert np.all(load <= capacity * (1 + 1e-9))
    for f, links in enumerate(flows):
        # max-min: some link of this flow is full and no flow on it goes faster than this one
        assert any(
            load[link] >= capacity[link] * (1 - 1e-9)
            and all(rates[g] <= rates[f] * (1 + 1e-9) for g, other in enumerate(flows) if link in other)
            for link in links
        )


def run_flows(capacity: list[float], flows: list[tuple[list[int], float, float, float]]) -> tuple[list[float], FlowNetwork]:
    """flows: (links, nbytes, latency_s, start_s); returns each flow's completion time."""
    env = simpy.Environment()
    net = FlowNetwork(env, capacity)
    done = [0.0] * len(flows)

    def one(i: int, links: list[int], nbytes: float, latency_s: float, start_s: float):  # type: ignore[no-untyped-def]
        yield env.timeout(start_s)
        yield net.transfer(links, nbytes, latency_s)
        done[i] = env.now

    for i, flow in enumerate(flows):
        env.process(one(i, *flow))
    env.run()
    return done, net


def test_one_flow_takes_latency_plus_bytes_over_capacity() -> None:
    done, net = run_flows([3e9], [([0], 7e6, 4.5e-6, 0.0)])
    assert done[0] == 4.5e-6 + 7e6 / 3e9
    assert net.busy_time_s[0] == pytest.approx(7e6 / 3e9, rel=1e-12)
    assert net.carried_bytes[0] == pytest.approx(7e6, rel=1e-12)
    assert net.active_flows == 0 and net.completed_flows == 1


def test_two_flows_on_one_link_take_twice_as_long() -> None:
    done, net = run_flows([1e9, 1e9, 1e9], [([0, 1], 1e6, 2e-6, 0.0), ([0, 2], 1e6, 2e-6, 0.0)])
    assert done == [pytest.approx(2e-6 + 2 * 1e6 / 1e9, rel=1e-12)] * 2
    assert net.carried_bytes.tolist() == pytest.approx([2e6, 1e6, 1e6], rel=1e-12)


def test_rates_are_reshared_when_flows_start_and_end() -> None:
    # a and b share link 0 (50 B/s each) until t=3; c joins link 0 and its own link 1 at 3.5
    done, net = run_flows([100.0, 50.0], [([0], 100.0, 1.0, 0.0), ([0], 100.0, 1.0, 0.0),
                                          ([0, 1], 100.0, 0.5, 3.0)])
    assert done == pytest.approx([3.0, 3.0, 5.5], rel=1e-12)
    assert net.busy_time_s.tolist() == pytest.approx([4.0, 2.0], rel=1e-12)
    done, _ = run_flows([100.0], [([0], 100.0, 0.0, 0.0), ([0], 300.0, 0.0, 0.0)])
    assert done == pytest.approx([2.0, 4.0], rel=1e-12)  # the survivor speeds up to the full link


def test_grouped_and_counted_flows_match_single_flows() -> None:
    env = simpy.Environment()
    net = FlowNetwork(env, [1e9, 1e9])
    # three identical flows folded into one entry, plus a lone flow on the same first link
    done = net.transfer_all([([0, 1], 1e6, 1e-6, 3), ([0], 1e6, 1e-6, 1)])
    env.run(done)
    assert env.now == pytest.approx(1e-6 + 4 * 1e6 / 1e9, rel=1e-12)
    assert net.completed_flows == 4
    assert net.carried_bytes.tolist() == pytest.approx([4e6, 3e6], rel=1e-12)
    empty = net.transfer_all([])
    assert empty.triggered


def test_empty_and_local_flows_cost_only_latency() -> None:
    done, net = run_flows([1.0], [([0], 0.0, 1e-3, 0.0), ([], 1e9, 2e-3, 0.0)])
    assert done == [1e-3, 2e-3]
    assert net.carried_bytes[0] == 0.0


def test_bad_inputs_are_refused() -> None:
    env = simpy.Environment()
    with pytest.raises(ValueError):
        FlowNetwork(env, [1.0, 0.0])
    net = FlowNetwork(env, [1.0])
    with pytest.raises(ValueError):
        net.transfer([0], -1.0)
