"""The per-rank DDP process against hand-computed timelines (fixed all-reduce durations)."""

import pytest
import simpy

from ddpsim.ddp.buckets import Bucket
from ddpsim.ddp.step import RankTrace, Rendezvous, StepCosts, rank_step


def _costs(segments, n_params, n_buckets, **kw):
    base = dict(
        forward_s=1.0,
        backward_segments=tuple(segments),
        optimizer_s=0.5,
        copy_in_s_per_param=tuple(0.0 for _ in range(n_params)),
        copy_out_s=0.0,
        bucket_launch_s=0.0,
        hook_cast_in_s=tuple(0.0 for _ in range(n_buckets)),
        hook_cast_out_s=tuple(0.0 for _ in range(n_buckets)),
    )
    base.update(kw)
    return StepCosts(**base)


def _run(costs, buckets, world=2, allreduce_s=None):
    env = simpy.Environment()
    durations = allreduce_s or {b.index: 1.5 for b in buckets}

    def runner(env_, bucket):
        yield env_.timeout(durations[bucket.index])

    rendezvous = Rendezvous(env, world, runner)
    of = {p: b.index for b in buckets for p in b.param_indices}
    traces = [RankTrace() for _ in range(world)]
    for rank in range(world):
        env.process(rank_step(env, 0, costs, buckets, of, rendezvous, traces[rank]))
    env.run()
    return traces


def _bucket(i, params):
    return Bucket(index=i, param_indices=tuple(params), grad_bytes=4, wire_bytes=4, n_params=len(params))


def test_one_bucket_is_reduced_after_backward():
    buckets = [_bucket(0, [0])]
    trace = _run(_costs([(1.0, (0,))], 1, 1), buckets, allreduce_s={0: 2.0})[0]
    assert trace.step_end_s == 1.0 + 1.0 + 2.0 + 0.5


def test_second_bucket_waits_for_the_first_on_one_stream():
    buckets = [_bucket(0, [1]), _bucket(1, [0])]
    trace = _run(_costs([(1.0, (1,)), (1.0, (0,))], 2, 2), buckets)[0]
    assert trace.bucket_start_s == {0: 2.0, 1: 3.5}
    assert trace.bucket_end_s == {0: 3.5, 1: 5.0}
    assert trace.step_end_s == 5.5


def test_ready_bucket_launches_only_after_earlier_buckets():
    # bucket 1's only parameter is ready first, but bucket 0 must launch before it
    buckets = [_bucket(0, [0]), _bucket(1, [1])]
    trace = _run(_costs([(1.0, (1,)), (1.0, (0,))], 2, 2), buckets)[0]
    assert trace.bucket_ready_s[1] == 2.0
    assert trace.bucket_launch_s[0] == 3.0 and trace.bucket_launch_s[1] == 3.0
    assert trace.bucket_start_s[1] == 4.5


def test_collective_waits_for_the_slowest_rank():
    buckets = [_bucket(0, [0])]
    env = simpy.Environment()

    def runner(env_, bucket):
        yield env_.timeout(1.0)

    rendezvous = Rendezvous(env, 2, runner)
    fast = _costs([(1.0, (0,))], 1, 1)
    slow = _costs([(3.0, (0,))], 1, 1)
    traces = [RankTrace(), RankTrace()]
    env.process(rank_step(env, 0, fast, buckets, {0: 0}, rendezvous, traces[0]))
    env.process(rank_step(env, 0, slow, buckets, {0: 0}, rendezvous, traces[1]))
    env.run()
    assert traces[0].bucket_start_s[0] == 4.0  # the slow rank launches at 1 + 3
    assert traces[0].step_end_s == traces[1].step_end_s == 5.5


def test_launch_blocks_when_too_many_buckets_are_in_flight():
    buckets = [_bucket(0, [2]), _bucket(1, [1]), _bucket(2, [0])]
    segments = [(0.1, (2,)), (0.1, (1,)), (0.1, (0,)), (1.0, ())]
    free = _run(_costs(segments, 3, 3), buckets)[0]
    blocked = _run(_costs(segments, 3, 3, max_inflight_buckets=1), buckets)[0]
    assert free.backward_compute_end_s == pytest.approx(1.0 + 1.3, rel=1e-12)
    # bucket 1 may launch only once bucket 0 (1.1 .. 2.6) is done; the last 1.0 s of backward is pushed back
    assert blocked.bucket_launch_s[1] == pytest.approx(2.6, rel=1e-12)
    assert blocked.bucket_launch_s[2] == pytest.approx(4.1, rel=1e-12)
    assert blocked.backward_compute_end_s == pytest.approx(5.1, rel=1e-12)


def test_compute_runs_slower_while_all_reduce_is_in_flight():
    buckets = [_bucket(0, [1]), _bucket(1, [0])]
    # bucket 0 is reduced from t=2 to t=3.5; the 3 s segment after it runs at half speed meanwhile
    trace = _run(_costs([(1.0, (1,)), (3.0, (0,))], 2, 2, compute_slowdown=1.0), buckets)[0]
    # 1.5 s of wall time at half speed does 0.75 s of work; 2.25 s remain at full speed
    assert abs(trace.backward_compute_end_s - (2.0 + 1.5 + 2.25)) < 1e-12


def test_allreduce_stretch_lengthens_every_all_reduce():
    buckets = [_bucket(0, [0])]
    env = simpy.Environment()

    def runner(env_, bucket):
        yield env_.timeout(2.0)

    rendezvous = Rendezvous(env, 1, runner, allreduce_stretch=1.5)
    trace = RankTrace()
    env.process(rank_step(env, 0, _costs([(1.0, (0,))], 1, 1), buckets, {0: 0}, rendezvous, trace))
    env.run()
    # launched at 2.0 (forward 1 + backward 1), nothing computes beside it: 2.0 x 1.5 = 3.0 s
    assert trace.bucket_end_s[0] == pytest.approx(5.0, rel=1e-12)
    assert trace.step_end_s == pytest.approx(5.5, rel=1e-12)


def test_comm_slowdown_only_while_compute_runs():
    # bucket 0 is reduced from t=2 while a 1 s backward segment still runs: half speed for 1 s
    buckets = [_bucket(0, [1]), _bucket(1, [0])]
    env = simpy.Environment()

    def runner(env_, bucket):
        yield env_.timeout(2.0 if bucket.index == 0 else 0.5)

    rendezvous = Rendezvous(env, 1, runner, comm_slowdown=1.0)
    trace = RankTrace()
    costs = _costs([(1.0, (1,)), (1.0, (0,))], 2, 2)
    env.process(rank_step(env, 0, costs, buckets, {0: 1, 1: 0}, rendezvous, trace))
    env.run()
    # 2.0 s of all-reduce work: 1 s at half speed (0.5 done) while compute runs, then 1.5 s alone
    assert trace.bucket_end_s[0] == pytest.approx(2.0 + 1.0 + 1.5, rel=1e-12)


def test_idle_start_wait_only_for_an_all_reduce_launched_onto_an_idle_stream():
    # bucket 0 ready at 2.0 (stream idle: waits 0.25 s), bucket 1 at 3.0 while bucket 0 still runs
    # (queued: no wait), bucket 2 at 6.0 after bucket 1 has ended at 5.25 (idle again: waits)
    buckets = [_bucket(0, [2]), _bucket(1, [1]), _bucket(2, [0])]
    costs = _costs([(1.0, (2,)), (1.0, (1,)), (3.0, (0,))], 3, 3, idle_start_wait_s=0.25)
    trace = _run(costs, buckets)[0]
    assert trace.bucket_start_s == pytest.approx({0: 2.25, 1: 3.75, 2: 6.25}, rel=1e-12)
    assert trace.bucket_end_s == pytest.approx({0: 3.75, 1: 5.25, 2: 7.75}, rel=1e-12)
    assert trace.step_end_s == pytest.approx(8.25, rel=1e-12)
