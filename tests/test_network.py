"""Max-min fair sharing and the flow-level network on the event engine."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from ddpsim.network import FlowBatch, FlowNetwork, LinkMatrix, max_min_rates


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


def reference_finish_times(capacity: list[float], flows: list[tuple[list[int], float, float]]) -> list[float]:
    """Oracle, independent of FlowNetwork: (links, nbytes, start_s) flows stepped event by event,
    with max-min rates among the flows that have started and not finished."""
    remaining = [nbytes for _, nbytes, _ in flows]
    finish = [float("inf")] * len(flows)
    for i, (links, nbytes, start) in enumerate(flows):
        if nbytes == 0 or not links:
            finish[i] = start
    now = 0.0
    while any(f == float("inf") for f in finish):
        active = [i for i, (_, _, start) in enumerate(flows) if start <= now and finish[i] == float("inf")]
        future = [start for i, (_, _, start) in enumerate(flows) if start > now and finish[i] == float("inf")]
        rates = max_min_rates([flows[i][0] for i in active], np.array(capacity)) if active else np.zeros(0)
        step = min([remaining[i] / r for i, r in zip(active, rates, strict=True)] + [s - now for s in future])
        now += step
        for i, rate in zip(active, rates, strict=True):
            remaining[i] -= rate * step
            if remaining[i] <= flows[i][1] * 1e-9:
                finish[i] = now
    return finish


flow_specs = st.lists(
    st.tuples(st.lists(st.integers(0, 3), min_size=0, max_size=3, unique=True),
              st.sampled_from([0.0, 50.0, 100.0, 175.0]), st.sampled_from([0.0, 0.25, 1.0, 2.5])),
    min_size=1, max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(flow_specs, st.lists(st.sampled_from([10.0, 40.0, 100.0]), min_size=4, max_size=4))
def test_array_network_matches_the_per_flow_oracle(flows: list[tuple[list[int], float, float]], caps: list[float]) -> None:
    done, net = run_flows(caps, [(links, nbytes, 0.0, start) for links, nbytes, start in flows])
    assert done == pytest.approx(reference_finish_times(caps, flows), rel=1e-9, abs=1e-12)
    assert net.carried_bytes.sum() == pytest.approx(sum(n * len(links) for links, n, _ in flows), rel=1e-9)
    assert net.active_flows == 0


def test_a_counted_flow_equals_its_copies() -> None:
    # 3 identical flows over links 0-1 plus one over link 0: counted once vs spelled out
    capacity = [90.0, 45.0, 30.0]
    counted = FlowBatch.from_tuples([([0, 1], 60.0, 0.5, 3), ([0, 2], 60.0, 0.0, 1)])
    copies = FlowBatch.from_tuples([([0, 1], 60.0, 0.5, 1)] * 3 + [([0, 2], 60.0, 0.0, 1)])
    results = []
    for batch in (counted, copies):
        env = simpy.Environment()
        net = FlowNetwork(env, capacity)
        env.run(net.transfer_all(batch))
        results.append((env.now, net.carried_bytes.tolist(), net.busy_time_s.tolist(), net.completed_flows))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-12)
    assert results[0][1] + results[0][2] == pytest.approx(results[1][1] + results[1][2], rel=1e-12)
    assert results[0][3] == results[1][3] == 4
    # hand check: the lone flow starts alone at 30 B/s (link 2), the three join at 0.5 s at 15 B/s each
    # (link 1), so link 0 never saturates; the lone one ends at 2 s, the three at 0.5 + 4 = 4.5 s
    assert results[0][0] == pytest.approx(4.5, rel=1e-12)


def _repeated(capacity: list[float], batch: FlowBatch, repeat: int, gap_s: float, key: object,
              calls: int = 1) -> tuple[list[float], FlowNetwork]:
    env = simpy.Environment()
    net = FlowNetwork(env, capacity)
    ends: list[float] = []

    def body():  # type: ignore[no-untyped-def]
        for _ in range(calls):
            yield from net.run_repeated(batch, repeat, gap_s, replay_key=key)
            ends.append(env.now)

    env.process(body())
    env.run()
    return ends, net


def test_replayed_repetitions_equal_simulating_each_one() -> None:
    # uneven flows (one finishes early and frees bandwidth) with a gap before each repetition
    capacity = [100.0, 60.0, 25.0]
    batch = FlowBatch.from_tuples([([0, 1], 120.0, 0.1, 2), ([0, 2], 40.0, 0.3, 1), ([1], 30.0, 0.0, 1)])
    every, net_every = _repeated(capacity, batch, 7, 0.05, None, calls=2)
    replayed, net_replayed = _repeated(capacity, batch, 7, 0.05, "phase", calls=2)
    assert replayed == pytest.approx(every, rel=1e-12)
    assert net_replayed.busy_time_s == pytest.approx(net_every.busy_time_s, rel=1e-12)
    assert net_replayed.carried_bytes == pytest.approx(net_every.carried_bytes, rel=1e-12)
    assert net_replayed.completed_flows == net_every.completed_flows == 2 * 7 * 4
    # one repetition simulated flow by flow, then reused: far fewer rate computations
    assert net_replayed.rate_updates * 7 <= net_every.rate_updates
    # closed form of one repetition: the three flows share link 1 (60 B/s) and link 0
    one = _repeated(capacity, batch, 1, 0.05, None)[0][0]
    assert every[0] == pytest.approx(7 * one, rel=1e-12)


def test_a_transfer_during_a_replay_is_refused() -> None:
    env = simpy.Environment()
    net = FlowNetwork(env, [10.0])
    batch = FlowBatch.from_tuples([([0], 10.0, 0.0, 1)])
    env.process(net.run_repeated(batch, 5, replay_key="x"))

    def intruder():  # type: ignore[no-untyped-def]
        yield env.timeout(2.5)  # inside the replayed repetitions 2..5
        net.transfer([0], 1.0)

    env.process(intruder())
    with pytest.raises(RuntimeError, match="exclusively"):
        env.run()


def _scaled(batch: FlowBatch, factor: float) -> FlowBatch:
    return batch._replace(nbytes=batch.nbytes * factor)


@pytest.mark.parametrize("latencies", [(0.1, 0.1, 0.1), (0.1, 0.3, 0.0)])
def test_replays_of_a_scaled_batch_equal_simulating_it(latencies: tuple[float, float, float]) -> None:
    # one key, three sizes: with one common latency the first measurement is scaled (max-min
    # dynamics are scale-free); with several latencies each new size is measured again
    capacity = [100.0, 60.0, 25.0]
    unit = FlowBatch.from_tuples([([0, 1], 120.0, latencies[0], 2), ([0, 2], 40.0, latencies[1], 1),
                                  ([1], 30.0, latencies[2], 1)])
    factors = (1.0, 0.01, 7.3)
    env = simpy.Environment()
    replayed = FlowNetwork(env, capacity)
    ends = []

    def body():  # type: ignore[no-untyped-def]
        for factor in factors:
            yield from replayed.run_repeated(_scaled(unit, factor), 5, 0.02, replay_key="phase")
            ends.append(env.now)

    env.process(body())
    env.run()
    start, busy, carried = 0.0, np.zeros(3), np.zeros(3)
    for factor, end in zip(factors, ends, strict=True):
        done, net = _repeated(capacity, _scaled(unit, factor), 5, 0.02, None)
        start += done[0]
        busy, carried = busy + net.busy_time_s, carried + net.carried_bytes
        assert end == pytest.approx(start, rel=1e-12)
    assert replayed.busy_time_s == pytest.approx(busy, rel=1e-12)
    assert replayed.carried_bytes == pytest.approx(carried, rel=1e-12)
    # exactly one repetition simulated flow by flow: for the first size, or for every size
    simulated = factors[:1] if len(set(latencies)) == 1 else factors
    one_each = sum(_repeated(capacity, _scaled(unit, f), 1, 0.02, None)[1].rate_updates for f in simulated)
    assert replayed.rate_updates == one_each
