"""One rank's FSDP2 step (ZeRO-2 / ZeRO-3) on the event engine.

Three streams, as FSDP2 runs them:
- compute: per layer in execution order its forward, then in reverse its backward; a unit's first layer
  waits for the unit's all-gather and then copies the gathered parameters out of the all-gather buffer
  (``foreach_all_gather_copy_out``, on the compute stream);
- all-gather: the units' all-gathers in the order compute needs them, at most one ahead (FSDP2's implicit
  prefetch: the next unit's all-gather is issued while the current unit computes, never two ahead);
  zero3 all-gathers every unit but the root again for backward (the root is never resharded after
  forward), zero2 keeps them from forward;
- reduce-scatter: after a unit's backward, its gradients copied into the reduce-scatter buffer and
  reduce-scattered (under HSDP then all-reduced across the replicas), one unit after another.
The optimizer runs on the local shards once the last reduce-scatter is done.

While any collective is in flight, compute runs ``1 + compute_slowdown`` times slower (NCCL's kernels hold SMs:
the same mechanism and term as DDP's step, ``overheads.compute_slowdown``).

All ranks run the same step (no jitter is simulated here), so one rank stands for all and a collective
starts when its stream reaches it. All-gathers and reduce-scatters of one process group run on the same
ring links in the same direction: while both transfer they share the links equally (``SharedWire``); a
collective's latency part does not use the links. The HSDP all-reduce crosses the network only.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import simpy

from ddpsim.sharded.collectives import Price
from ddpsim.sharded.units import ShardUnit


class SharedWire:
    """Transfers in flight progress at 1/k of their solo rate each, k = how many are in flight."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.remaining: dict[simpy.Event, float] = {}
        self.last_s = env.now
        self.generation = 0

    def transfer(self, solo_s: float) -> simpy.Event:
        done = self.env.event()
        if solo_s <= 0:
            done.succeed()
            return done
        self._advance()
        self.remaining[done] = solo_s
        self._schedule()
        return done

    def _advance(self) -> None:
        if self.remaining:
            progress = (self.env.now - self.last_s) / len(self.remaining)
            for event in self.remaining:
                self.remaining[event] -= progress
        self.last_s = self.env.now

    def _schedule(self) -> None:
        self.generation += 1
        if self.remaining:
            least = min(self.remaining.values())
            # the transfers this wake-up ends: the least remaining, and any within rounding of it
            ending = [e for e, left in self.remaining.items() if left - least <= 1e-9 * max(abs(least), 1e-12)]
            self.env.process(self._wake(self.generation, max(0.0, least * len(self.remaining)), ending))

    def _wake(self, generation: int, delay: float, ending: list[simpy.Event]) -> Generator[Any, Any, None]:
        yield self.env.timeout(delay)
        if generation != self.generation:
            return  # a transfer started or ended meanwhile: a later wake-up owns the schedule
        self._advance()
        # ended by construction, whatever rounding left in their counters
        for event in ending:
            del self.remaining[event]
            event.succeed()
        self._schedule()


class InFlight:
    """How many collectives are in flight, and an event that fires whenever that changes."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.count = 0
        self.changed = env.event()

    def add(self, delta: int) -> None:
        self.count += delta
        fired, self.changed = self.changed, self.env.event()
        fired.succeed()


@dataclass(frozen=True)
class ShardedCosts:
    """Seconds of one step on one rank, per layer and per unit (indices of ``units``)."""

    strategy: str  # "zero2" | "zero3"
    units: tuple[ShardUnit, ...]
    layer_order: tuple[int, ...]  # layer indices in forward execution order
    forward_s: tuple[float, ...]  # per layer (indexed like workload.layers)
    backward_s: tuple[float, ...]
    all_gather: tuple[Price, ...]  # per unit
    reduce_scatter: tuple[Price, ...]
    replica_allreduce: tuple[Price, ...]  # per unit, HSDP only (zero prices otherwise)
    copy_out_s: tuple[float, ...]  # per unit, on the compute stream after its all-gather
    forward_host_s: tuple[float, ...]  # per unit, host work before its forward that holds up compute
    regather_host_s: tuple[float, ...]  # per unit, the same before a zero3 backward re-gather
    rs_copy_in_s: tuple[float, ...]  # per unit, on the reduce-scatter stream before it
    optimizer_s: float
    compute_slowdown: float = 0.0  # extra fraction while a collective is in flight (0: none)


@dataclass
class CollectiveSpan:
    kind: str  # "all-gather (forward)", "all-gather (backward)", "reduce-scatter", "all-reduce (replicas)"
    unit: str
    bytes: float
    protocol: str
    start_s: float
    end_s: float


@dataclass
class ShardedTrace:
    forward_end_s: float = 0.0
    backward_compute_end_s: float = 0.0
    backward_end_s: float = 0.0
    step_end_s: float = 0.0
    compute_intervals: list[tuple[float, float, str]] = field(default_factory=list)
    collectives: list[CollectiveSpan] = field(default_factory=list)


def simulate_step(costs: ShardedCosts, unit_bytes: Sequence[tuple[float, float, float]]) -> ShardedTrace:
    """Run one step; ``unit_bytes`` per unit: (all-gather, reduce-scatter, replica all-reduce) bytes."""
    env = simpy.Environment()
    wire, network = SharedWire(env), SharedWire(env)
    trace = ShardedTrace()
    unit_of_layer = {li: ui for ui, unit in enumerate(costs.units) for li in unit.layer_indices}
    zero3 = costs.strategy == "zero3"
    fwd_units = _first_use(costs.layer_order, unit_of_layer)
    bwd_units = _first_use(tuple(reversed(costs.layer_order)), unit_of_layer)
    if zero3:
        bwd_gathers = [u for u in bwd_units if not costs.units[u].is_root]
    else:
        bwd_gathers = []
    gathers = [(u, "all-gather (forward)") for u in fwd_units] + [(u, "all-gather (backward)") for u in bwd_gathers]
    gathered = [env.event() for _ in gathers]
    consumed = [env.event() for _ in gathers]  # compute began using gather i: gather i+2 may be issued
    rs_queue: simpy.Store = simpy.Store(env)
    forward_done = env.event()

    in_flight = InFlight(env)

    def collective(price: Price, on: SharedWire, kind: str, unit: int, nbytes: float) -> Generator[Any, Any, None]:
        start = env.now
        in_flight.add(1)
        if price.latency_s > 0:
            yield env.timeout(price.latency_s)
        yield on.transfer(price.transfer_s)
        in_flight.add(-1)
        trace.collectives.append(CollectiveSpan(kind, costs.units[unit].name, nbytes, price.protocol, start, env.now))

    def all_gather_stream() -> Generator[Any, Any, None]:
        for i, (unit, kind) in enumerate(gathers):
            if i == len(fwd_units):
                # the first backward all-gather is issued at the root's pre-backward, when backward begins
                yield forward_done
            elif i >= 1:
                yield consumed[i - 1]  # one all-gather ahead of the unit in use, no more
            yield from collective(costs.all_gather[unit], wire, kind, unit, unit_bytes[unit][0])
            gathered[i].succeed()

    def reduce_scatter_stream() -> Generator[Any, Any, None]:
        for _ in costs.units:
            unit = yield rs_queue.get()
            if costs.rs_copy_in_s[unit] > 0:
                yield env.timeout(costs.rs_copy_in_s[unit])
            yield from collective(costs.reduce_scatter[unit], wire, "reduce-scatter", unit, unit_bytes[unit][1])
            if costs.replica_allreduce[unit].seconds > 0:
                yield from collective(costs.replica_allreduce[unit], network, "all-reduce (replicas)", unit,
                                      unit_bytes[unit][2])

    def compute(seconds: float, label: str) -> Generator[Any, Any, None]:
        if seconds <= 0:
            return
        start, left_s = env.now, seconds  # left_s: seconds of work at full speed
        while True:
            factor = 1.0 + costs.compute_slowdown if in_flight.count else 1.0
            t0 = env.now
            finished = env.timeout(left_s * factor)
            fired = yield finished | in_flight.changed
            if finished in fired:
                break  # ended by its own timeout, whatever rounding left in left_s
            left_s -= (env.now - t0) / factor
        trace.compute_intervals.append((start, env.now, label))

    def host(seconds: float, label: str) -> Generator[Any, Any, None]:
        # the host's own time: not slowed by collectives on the GPU, but nothing runs on the stream meanwhile
        if seconds > 0:
            start = env.now
            yield env.timeout(seconds)
            trace.compute_intervals.append((start, env.now, label))

    def compute_stream() -> Generator[Any, Any, None]:
        gather_index = {(u, "f"): i for i, u in enumerate(fwd_units)}
        gather_index.update({(u, "b"): len(fwd_units) + i for i, u in enumerate(bwd_gathers)})
        started: set[tuple[int, str]] = set()

        def ensure(unit: int, phase: str) -> Generator[Any, Any, None]:
            key = (unit, phase)
            if key in started or key not in gather_index:
                return
            started.add(key)
            i = gather_index[key]
            yield gathered[i]
            consumed[i].succeed()
            yield from compute(costs.copy_out_s[unit], f"copy-out after all-gather {costs.units[unit].name}")
            yield from host((costs.forward_host_s if phase == "f" else costs.regather_host_s)[unit],
                            f"FSDP2 host work before {costs.units[unit].name}")

        for li in costs.layer_order:
            yield from ensure(unit_of_layer[li], "f")
            yield from compute(costs.forward_s[li], "forward")
        trace.forward_end_s = env.now
        forward_done.succeed()
        remaining = {u: len(costs.units[u].layer_indices) for u in range(len(costs.units))}
        for li in reversed(costs.layer_order):
            unit = unit_of_layer[li]
            yield from ensure(unit, "b")
            yield from compute(costs.backward_s[li], "backward")
            remaining[unit] -= 1
            if remaining[unit] == 0:
                rs_queue.put(unit)
        trace.backward_compute_end_s = env.now
        yield rs_done
        trace.backward_end_s = env.now
        yield from compute(costs.optimizer_s, "optimizer")
        trace.step_end_s = env.now

    env.process(all_gather_stream())
    rs_done = env.process(reduce_scatter_stream())
    env.process(compute_stream())
    env.run()
    return trace


def _first_use(order: tuple[int, ...], unit_of_layer: dict[int, int]) -> list[int]:
    seen: list[int] = []
    for li in order:
        unit = unit_of_layer[li]
        if unit not in seen:
            seen.append(unit)
    return seen
