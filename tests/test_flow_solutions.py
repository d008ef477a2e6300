"""Kept max-min solutions: a flow set seen before reuses its rates, with results unchanged.

Max-min rates depend only on which flows are moving, so a batch sent again (every step of a ring
simulated one by one) is solved once. These tests hold the engine with kept solutions to an
oracle that shares no code with it (``reference_finish_times``: max-min recomputed from scratch at
every event, in plain Python) and to the same engine keeping nothing.
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

import ddpsim.network.flows as flows_module
from ddpsim.collectives import CollectiveModel, ProtocolTable
from ddpsim.network import FlowBatch, FlowNetwork, max_min_rates
from ddpsim.scenario.schema import ClusterSpec, InterNodeSpec, IntraNodeSpec
from ddpsim.topology import build_topology
from tests.test_network import reference_finish_times


def test_max_min_closed_forms() -> None:
    # parking lot: one long flow over k links of capacity C, one short flow on each link; every
    # link is shared by two flows, so each flow gets C/2
    k, c = 4, 10.0
    flows = [list(range(k))] + [[i] for i in range(k)]
    assert max_min_rates(flows, np.full(k, c)).tolist() == [c / 2] * (k + 1)
    # a long flow over a slow link (2) and a fast one (12) with 3 short flows on the fast link:
    # the slow link holds the long flow to 2 alone; the short ones split the other 10
    rates = max_min_rates([[0, 1], [1], [1], [1]], np.array([2.0, 12.0]))
    assert rates.tolist() == [2.0, 10 / 3, 10 / 3, 10 / 3]
    # counted flows: 3 copies of a flow beside 1 other on a link of 8 -> 2 each; the lone flow's
    # own second link of 1 holds it to 1, so the copies share 7 -> 7/3
    rates = max_min_rates([[0], [0, 1]], np.array([8.0, 1.0]), multiplicity=np.array([3, 1]))
    assert rates.tolist() == pytest.approx([7 / 3, 1.0], rel=1e-15)


batch_links = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(batch_links, st.lists(st.sampled_from([10.0, 40.0, 100.0]), min_size=4, max_size=4),
       st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5]), min_size=1, max_size=5),
       st.lists(st.sampled_from([20.0, 50.0, 100.0]), min_size=4, max_size=4))
def test_one_batch_sent_again_and_again_matches_the_oracle(links: list[list[int]], caps: list[float],
                                                           starts: list[float], sizes: list[float]) -> None:
    """The same batch object sent at several times, overlapping or not, so that kept solutions are
    looked up for sets where some of its flows have ended and other copies are moving."""
    nbytes = sizes[:len(links)]
    batch = FlowBatch.from_tuples([(ls, n, 0.0, 1) for ls, n in zip(links, nbytes, strict=True)])
    env = simpy.Environment()
    net = FlowNetwork(env, caps)
    done: list[float] = []

    def send(start_s: float):  # type: ignore[no-untyped-def]
        yield env.timeout(start_s)
        yield net.transfer_all(batch)
        done.append(env.now)

    for start_s in starts:
        env.process(send(start_s))
    env.run()
    oracle = reference_finish_times(caps, [(ls, n, s) for s in starts for ls, n in zip(links, nbytes, strict=True)])
    # a batch ends with its last flow; sends at equal times end together
    expected = sorted(max(oracle[i * len(links):(i + 1) * len(links)]) for i in range(len(starts)))
    assert sorted(done) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert net.carried_bytes.sum() == pytest.approx(len(starts) * sum(n * len(ls) for ls, n in zip(links, nbytes, strict=True)),
                                                    rel=1e-9)


def _allreduce(model: CollectiveModel, nbytes: float, algorithm: str) -> tuple[float, FlowNetwork]:
    env = simpy.Environment()
    net = FlowNetwork(env, model.topology.capacity_Bps)
    env.process(model.allreduce_process(env, net, nbytes, algorithm, "simple"))  # every repetition simulated
    env.run()
    return env.now, net


@pytest.mark.parametrize("algorithm", ["ring", "tree", "hierarchical"])
@pytest.mark.parametrize("nodes, inter", [(4, "rail-fat-tree"), (6, "fat-tree"), (3, "ethernet")])
def test_every_flow_allreduce_equals_the_engine_keeping_nothing(algorithm: str, nodes: int, inter: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    topo = build_topology(ClusterSpec(gpu="h100", nodes=nodes, gpus_per_node=4,
                                      intra_node=IntraNodeSpec("nvswitch", 300e9, 3e-6),
                                      inter_node=InterNodeSpec(inter, 25e9, 5e-6, 2.0, None)))
    model = CollectiveModel(topo, ProtocolTable.ideal())
    nbytes = 64 * 2**20
    kept_s, kept = _allreduce(model, nbytes, algorithm)
    monkeypatch.setattr(flows_module, "_SOLUTIONS_KEPT", 0)
    plain_s, plain = _allreduce(model, nbytes, algorithm)
    assert kept_s == pytest.approx(plain_s, rel=1e-12)
    assert kept.busy_time_s == pytest.approx(plain.busy_time_s, rel=1e-9, abs=1e-15)
    assert kept.carried_bytes == pytest.approx(plain.carried_bytes, rel=1e-9, abs=1e-6)
    assert plain.rate_solves == plain.rate_updates
    # a pipelined all-reduce alone on the network: FAST mode's price, which re-shares bandwidth
    # in its own loop, not through the event engine
    assert kept_s == pytest.approx(model.allreduce_time_s(nbytes, algorithm, "simple"), rel=1e-9)
    if algorithm == "ring":
        # 2(n-1) identical steps, each solved from scratch before; now a handful of distinct sets
        assert kept.rate_updates >= 2 * (topo.world_size - 1) and kept.rate_solves <= 4
