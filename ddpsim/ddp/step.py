"""The per-rank DDP step on the event engine.

Each rank runs two simpy processes: the compute stream (forward, backward segments, bucket
copy-in kernels, the wait in ``finalize_backward``, copy-out, optimizer) and one communication
stream that runs the rank's buckets strictly in index order. A bucket's all-reduce starts only
when every rank has launched it (the collective is a rendezvous), and only after the compute
issued before its launch (the NCCL stream waits on an event recorded at launch).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import simpy

from ddpsim.ddp.buckets import Bucket

# (env, bucket) -> a generator that runs the all-reduce once for all ranks
AllReduceRunner = Callable[[simpy.Environment, Bucket], Generator[Any, Any, None]]


@dataclass(frozen=True)
class StepCosts:
    """Per-step costs of one rank, in seconds, already scaled for this rank (jitter, straggler)."""

    forward_s: float
    backward_segments: tuple[tuple[float, tuple[int, ...]], ...]
    optimizer_s: float
    copy_in_s_per_param: tuple[float, ...]  # indexed like workload.params; 0 with gradient_as_bucket_view
    copy_out_s: float
    bucket_launch_s: float
    hook_cast_in_s: tuple[float, ...]  # per bucket, on the compute stream (compression hooks)
    hook_cast_out_s: tuple[float, ...]  # per bucket, on the comm stream after the all-reduce
    pre_forward_s: float = 0.0  # buffer broadcast
    # find_unused_parameters / static_graph (ddpsim.ddp.options names each mechanism and its measurement)
    post_forward_s: float = 0.0  # after forward: graph walk, _DDPSink, output clone
    param_hook_s: float = 0.0  # each gradient's hook: the used-map write
    end_of_backward_s: float = 0.0  # after the last bucket launch: used-map launch, finalize's reads
    used_map_allreduce_s: float = 0.0  # on DDP's stream after the last bucket; finalize waits for it
    bucket_cpu_s: float = 0.0  # launching a bucket holds up the backward kernels queued after it
    # a registered comm hook's own work per bucket on the thread running backward; it delays the GPU only
    # once the thread has used up its lead over the GPU (``backward_host_lead_s``, measured per model:
    # ResNet-50's thread is 12-22 ms ahead on an H100, mlp-ln-64's and ViT-B/16's under 0.1 ms). Like the
    # other host costs here it runs as compute, stretched while an all-reduce runs (compute_slowdown)
    hook_thread_s: float = 0.0
    backward_host_lead_s: float = 0.0
    # an all-reduce launched onto an idle NCCL stream waits this long for the other ranks to arrive;
    # one queued behind the previous bucket's all-reduce does not (the other ranks have caught up meanwhile)
    idle_start_wait_s: float = 0.0
    # a bucket launched during backward: its NCCL kernel holds SMs this long, waiting for the last rank's kernel
    # to get its SMs from the running compute kernel (ddpsim.ddp.arrival derives it); compute runs slowed meanwhile
    arrival_wait_s: float = 0.0
    compute_slowdown: float = 0.0
    max_inflight_buckets: int | None = None


@dataclass
class RankTrace:
    """What one rank did in one step; times are absolute simulation seconds."""

    step_start_s: float = 0.0
    forward_end_s: float = 0.0
    backward_compute_end_s: float = 0.0
    backward_end_s: float = 0.0
    step_end_s: float = 0.0
    compute_intervals: list[tuple[float, float, str]] = field(default_factory=list)
    bucket_ready_s: dict[int, float] = field(default_factory=dict)
    bucket_launch_s: dict[int, float] = field(default_factory=dict)
    bucket_start_s: dict[int, float] = field(default_factory=dict)
    bucket_end_s: dict[int, float] = field(default_factory=dict)


class Activity:
    """Whether some stream is busy (a count of holders), with an event that fires on every change and
    the integral of busy time, so a process running beside it can account for the time it was slowed."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.holders = 0
        self.changed = env.event()
        self._busy_s = 0.0
        self._since = 0.0

    @property
    def active(self) -> bool:
        return self.holders > 0

    def busy_time_s(self) -> float:
        return self._busy_s + (self.env.now - self._since if self.active else 0.0)

    def _update(self, delta: int) -> None:
        was = self.active
        if was:
            self._busy_s += self.env.now - self._since
        self._since = self.env.now
        self.holders += delta
        if was != self.active:
            changed, self.changed = self.changed, self.env.event()
            changed.succeed()

    def start(self) -> None:
        self._update(+1)

    def stop(self) -> None:
        self._update(-1)


class Rendezvous:
    """One all-reduce per bucket for the whole group: it starts when the last rank has joined.

    While any rank computes, an all-reduce progresses ``1 + comm_slowdown`` times slower: NCCL's
    kernels get the SMs and memory bandwidth that compute kernels leave over. Every all-reduce
    inside DDP also takes ``allreduce_stretch`` times what the network delivers alone (measured
    per bucket on NVLink: 1.3 to 1.8 times the isolated call even after backward has ended).
    """

    def __init__(
        self,
        env: simpy.Environment,
        world_size: int,
        runner: AllReduceRunner,
        comm_slowdown: float = 0.0,
        allreduce_stretch: float = 1.0,
    ) -> None:
        self.env, self.world_size, self.runner = env, world_size, runner
        self.comm_slowdown = comm_slowdown
        self.allreduce_stretch = allreduce_stretch
        self.compute = Activity(env)
        self._joined: dict[tuple[int, int], int] = {}
        self._done: dict[tuple[int, int], simpy.Event] = {}
        self.start_s: dict[tuple[int, int], float] = {}

    def join(self, step: int, bucket: Bucket) -> simpy.Event:
        key = (step, bucket.index)
        done = self._done.setdefault(key, self.env.event())
        self._joined[key] = self._joined.get(key, 0) + 1
        if self._joined[key] == self.world_size:
            self.start_s[key] = self.env.now
            self.env.process(self._run(bucket, done))
        return done

    def _run(self, bucket: Bucket, done: simpy.Event) -> Generator[Any, Any, None]:
        start, busy_at_start = self.env.now, self.compute.busy_time_s()
        yield from self.runner(self.env, bucket)
        # the network delivered at full speed; what the stretched and slowed progress still owes runs now
        nominal_s = self.env.now - start
        busy = self.compute.busy_time_s() - busy_at_start
        done_s = nominal_s - busy * self.comm_slowdown / (1.0 + self.comm_slowdown)
        owed = nominal_s * self.allreduce_stretch - done_s
        if owed > 0:
            yield from _work(self.env, owed, self.compute, self.comm_slowdown)
        done.succeed()


def _work(env: simpy.Environment, seconds: float, other: Activity, slowdown: float) -> Generator[Any, Any, None]:
    """Run ``seconds`` of work, stretched by (1 + slowdown) while the other stream is active."""
    remaining = seconds
    while remaining > 1e-15:
        rate = 1.0 / (1.0 + slowdown) if other.active and slowdown > 0 else 1.0
        finish = env.timeout(remaining / rate)
        if slowdown <= 0:
            yield finish
            return
        started = env.now
        result = yield finish | other.changed
        if finish in result:
            return
        remaining -= (env.now - started) * rate


def rank_step(
    env: simpy.Environment,
    step: int,
    costs: StepCosts,
    buckets: Sequence[Bucket],
    bucket_of_param: dict[int, int],
    rendezvous: Rendezvous | None,
    trace: RankTrace,
) -> Generator[Any, Any, None]:
    """One DDP step of one rank (the last micro-step when accumulating gradients)."""
    comm = Activity(env)
    # buckets launched while backward kernels remain to run: their NCCL kernels wait for SMs (ddpsim.ddp.arrival)
    launched_in_backward: set[int] = set()
    launched: simpy.Store = simpy.Store(env)
    completions: dict[int, simpy.Event] = {b.index: env.event() for b in buckets}
    trace.step_start_s = env.now

    def compute(seconds: float, label: str) -> Generator[Any, Any, None]:
        if seconds <= 0:
            return
        start = env.now
        if rendezvous is not None:
            rendezvous.compute.start()
        yield from _work(env, seconds, comm, costs.compute_slowdown)
        if rendezvous is not None:
            rendezvous.compute.stop()
        trace.compute_intervals.append((start, env.now, label))

    def comm_stream() -> Generator[Any, Any, None]:
        for _ in buckets:
            bucket = yield launched.get()
            # per-bucket traces (h200x4-2026-11-26, cap 25, 4 GPUs): an all-reduce that starts on an idle
            # stream ran 0.24-2.4 ms (NVLink) and 0.5-4.3 ms (shm) past its time alone, one queued behind
            # the previous bucket 0-0.2 ms (shm) and ~0.1 ms (NVLink, after backward): the ranks' arrival
            # at a collective is paid once per idle start, never again while the stream stays busy
            idle_start = env.now <= trace.bucket_launch_s[bucket.index]
            yield env.timeout(costs.bucket_launch_s + (costs.idle_start_wait_s if idle_start else 0.0))
            if rendezvous is None:
                trace.bucket_start_s[bucket.index] = env.now
                trace.bucket_end_s[bucket.index] = env.now
            else:
                comm.start()
                if costs.arrival_wait_s > 0 and bucket.index in launched_in_backward:
                    # resident and spinning until the last rank's NCCL kernel got its SMs (ddpsim.ddp.arrival);
                    # one queued behind the previous all-reduce too: the compute kernel's waiting CTAs take the
                    # SMs that kernel leaves
                    yield env.timeout(costs.arrival_wait_s)
                done = rendezvous.join(step, bucket)
                yield done
                trace.bucket_start_s[bucket.index] = rendezvous.start_s[(step, bucket.index)]
                comm.stop()
                if costs.hook_cast_out_s[bucket.index] > 0:
                    yield env.timeout(costs.hook_cast_out_s[bucket.index])
                trace.bucket_end_s[bucket.index] = env.now
            completions[bucket.index].succeed()

    env.process(comm_stream())

    yield from compute(costs.pre_forward_s, "ddp-pre-forward")
    yield from compute(costs.forward_s, "forward")
    yield from compute(costs.post_forward_s, "ddp-post-forward")
    trace.forward_end_s = env.now

    pending = {b.index: len(b.param_indices) for b in buckets}
    next_launch = 0
    lead_left_s = costs.backward_host_lead_s
    last_segment = len(costs.backward_segments) - 1
    for segment, (duration_s, ready_params) in enumerate(costs.backward_segments):
        yield from compute(duration_s, "backward")
        for param in ready_params:
            yield from compute(costs.param_hook_s, "ddp-used-map")
            yield from compute(costs.copy_in_s_per_param[param], "copy-in")
            bucket_index = bucket_of_param[param]
            pending[bucket_index] -= 1
            if pending[bucket_index] == 0:
                trace.bucket_ready_s[bucket_index] = env.now
        # launch strictly in index order: a ready bucket waits for every earlier one
        while next_launch < len(buckets) and pending[next_launch] == 0:
            bucket = buckets[next_launch]
            yield from compute(costs.hook_cast_in_s[bucket.index], "hook-cast")
            if costs.max_inflight_buckets is not None and next_launch >= costs.max_inflight_buckets:
                # the launch path blocks until an earlier all-reduce has finished (seen on slow transports)
                yield completions[next_launch - costs.max_inflight_buckets]
            trace.bucket_launch_s[bucket.index] = env.now
            if segment < last_segment:
                launched_in_backward.add(bucket.index)
            launched.put(bucket)
            next_launch += 1
            yield from compute(costs.bucket_cpu_s, "bucket-launch")
            hidden_s = min(lead_left_s, costs.hook_thread_s)
            lead_left_s -= hidden_s
            yield from compute(costs.hook_thread_s - hidden_s, "comm hook (backward thread)")
    yield from compute(costs.end_of_backward_s, "ddp-finalize")
    trace.backward_compute_end_s = env.now

    if buckets:
        yield simpy.AllOf(env, list(completions.values()))
    if costs.used_map_allreduce_s > 0:
        # serial after the last bucket on DDP's one stream; finalize_backward waits for it
        yield env.timeout(costs.used_map_allreduce_s)
    trace.backward_end_s = env.now
    yield from compute(costs.copy_out_s, "copy-out")
    yield from compute(costs.optimizer_s, "optimizer")
    trace.step_end_s = env.now


def accumulation_micro_step(
    env: simpy.Environment, costs: StepCosts, trace: RankTrace
) -> Generator[Any, Any, None]:
    """A micro-step under ``no_sync()``: forward and backward only, no hooks, copies or communication."""
    start = env.now
    backward_s = sum(d for d, _ in costs.backward_segments)
    yield env.timeout(costs.forward_s + backward_s)
    trace.compute_intervals.append((start, env.now, "no_sync micro-step"))
