"""The wait of a bucket's all-reduce for the last rank's NCCL kernel (ddpsim/ddp/arrival.py): the closed form
against a Monte Carlo of its own assumption, and its effect on the step against a hand-computed timeline."""

import numpy as np
import pytest
import simpy

from ddpsim.ddp.arrival import expected_arrival_wait_s, mean_backward_kernel_s
from ddpsim.ddp.buckets import Bucket
from ddpsim.ddp.options import NODES_PER_PARAM_TENSOR
from ddpsim.ddp.step import RankTrace, Rendezvous, StepCosts, rank_step


@pytest.mark.parametrize("n", [2, 3, 4, 8, 16])
def test_closed_form_matches_uniform_order_statistics(n):
    # each rank's kernel starts after U(0, K); a rank holds its SMs from its own start to the last start
    rng = np.random.default_rng(n)
    kernel_s = 300e-6
    starts = rng.uniform(0.0, kernel_s, size=(200_000, n))
    held = (starts.max(axis=1, keepdims=True) - starts).mean()
    assert expected_arrival_wait_s(kernel_s, n) == pytest.approx(held, rel=0.01)


def test_one_rank_waits_for_no_one_and_negative_kernels_are_refused():
    assert expected_arrival_wait_s(1e-3, 1) == 0.0
    with pytest.raises(ValueError):
        expected_arrival_wait_s(-1.0, 4)


def test_mean_kernel_prefers_the_kernel_count_then_nodes_then_the_median():
    assert mean_backward_kernel_s(0.1, 200, 337, 161) == pytest.approx(0.1 / 200)
    assert mean_backward_kernel_s(0.1, 0, 337, 161) == pytest.approx(0.1 / 337)
    assert mean_backward_kernel_s(0.1, 0, None, 100) == pytest.approx(0.1 / (NODES_PER_PARAM_TENSOR * 100))


def _bucket(i, params):
    return Bucket(index=i, param_indices=tuple(params), grad_bytes=4, wire_bytes=4, n_params=len(params))


def _step_end(arrival_wait_s, compute_slowdown):
    """Two ranks; bucket 0 ready after the first backward segment (2 s of backward left), bucket 1 at its end."""
    buckets = [_bucket(0, [1]), _bucket(1, [0])]
    costs = StepCosts(
        forward_s=1.0, backward_segments=((1.0, (1,)), (2.0, (0,))), optimizer_s=0.5,
        copy_in_s_per_param=(0.0, 0.0), copy_out_s=0.0, bucket_launch_s=0.0,
        hook_cast_in_s=(0.0, 0.0), hook_cast_out_s=(0.0, 0.0),
        arrival_wait_s=arrival_wait_s, compute_slowdown=compute_slowdown)
    env = simpy.Environment()

    def runner(env_, bucket):
        yield env_.timeout(0.1)

    rendezvous = Rendezvous(env, 2, runner)
    traces = [RankTrace(), RankTrace()]
    for trace in traces:
        env.process(rank_step(env, 0, costs, buckets, {1: 0, 0: 1}, rendezvous, trace))
    env.run()
    return traces[0]


def test_the_wait_slows_backward_only_for_a_bucket_launched_during_it():
    # by hand: without the wait bucket 0 runs 2.0-2.1 s while backward computes at 1/(1+1) speed: backward
    # loses 0.05 s and ends at 4.05; bucket 1 (launched at the end of backward) runs 4.05-4.15, step 4.65 s.
    plain = _step_end(0.0, 1.0)
    assert plain.step_end_s == pytest.approx(4.65)
    # a 0.3 s wait holds bucket 0's SMs 2.0-2.3 s before its 0.1 s all-reduce: 0.4 s in flight during
    # backward, 0.2 s lost; bucket 1, launched after backward's last kernel, waits for no one
    waited = _step_end(0.3, 1.0)
    assert waited.bucket_start_s[0] == pytest.approx(2.3)
    assert waited.step_end_s == pytest.approx(1.0 + 3.0 + 0.4 / 2 + 0.1 + 0.5)
    assert waited.bucket_end_s[1] - waited.bucket_start_s[1] == pytest.approx(0.1)


def test_without_a_compute_slowdown_a_hidden_wait_costs_nothing():
    assert _step_end(0.3, 0.0).step_end_s == pytest.approx(1.0 + 3.0 + 0.1 + 0.5)


def test_a_bucket_queued_behind_another_all_reduce_waits_once_eligible():
    # three buckets: 0 and 1 ready together after the first segment (1 queues behind 0), 2 at backward's end
    buckets = [_bucket(0, [2]), _bucket(1, [1]), _bucket(2, [0])]
    costs = StepCosts(
        forward_s=1.0, backward_segments=((1.0, (2, 1)), (2.0, (0,))), optimizer_s=0.5,
        copy_in_s_per_param=(0.0, 0.0, 0.0), copy_out_s=0.0, bucket_launch_s=0.0,
        hook_cast_in_s=(0.0,) * 3, hook_cast_out_s=(0.0,) * 3, arrival_wait_s=0.3, compute_slowdown=0.0)
    env = simpy.Environment()

    def runner(env_, bucket):
        yield env_.timeout(0.1)

    rendezvous = Rendezvous(env, 2, runner)
    traces = [RankTrace(), RankTrace()]
    for trace in traces:
        env.process(rank_step(env, 0, costs, buckets, {2: 0, 1: 1, 0: 2}, rendezvous, trace))
    env.run()
    trace = traces[0]
    # bucket 0 waits 0.3 s, runs 0.1 s; bucket 1, eligible when 0 ends with backward still running, waits
    # 0.3 s for its SMs too; bucket 2, launched after backward's last kernel, does not
    assert trace.bucket_start_s[0] == pytest.approx(2.3)
    assert trace.bucket_start_s[1] == pytest.approx(2.7)
    assert trace.bucket_start_s[2] == pytest.approx(4.0)
