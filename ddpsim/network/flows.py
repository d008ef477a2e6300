"""Flow-level link sharing on the event engine: transfers as flows at max-min fair rates.

A transfer waits its latency, then moves its bytes at its current fair share. Rates change only
when a flow starts or ends, so between such events every flow drains linearly and the engine
only needs one timer: the earliest completion under the current rates.

Flows live in arrays, not objects: the moving flows' link incidence is one CSR matrix that is
compacted when flows end and appended to when flows arrive, so a rate update costs a few numpy
passes over the incidence whatever the number of flows.

Max-min rates depend only on which flows are moving (their links and counts), never on their bytes,
so a solution is kept under the identity of the moving set: the batches it came from, in arrival
order, and which of each batch's flows are still moving. A schedule that sends the same batch
again and again (every step of a ring, simulated one by one) then solves max-min once per distinct
set instead of once per event, and each later event costs a few passes over the flows
(``_SOLUTIONS_KEPT`` bounds what is kept).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Generator, Hashable, Sequence
from functools import partial
from typing import Any, NamedTuple

import numpy as np
import simpy

from ddpsim.network.fairshare import LinkMatrix, max_min_rates

# A flow whose remaining bytes fall below this fraction of its size (float residue of
# rate * elapsed time) has finished; far below any byte count that matters.
_DONE_RTOL = 1e-9
# Max-min solutions kept per network, least recently used dropped first: enough for every phase of
# the collectives one step runs, small next to the flows themselves.
_SOLUTIONS_KEPT = 64


class FlowBatch(NamedTuple):
    """Flows as arrays: flow f crosses ``links`` row f, moves ``nbytes[f]`` after ``latency_s[f]``
    and stands for ``count[f]`` identical flows (same links, same bytes)."""

    links: LinkMatrix
    nbytes: np.ndarray
    latency_s: np.ndarray
    count: np.ndarray  # type: ignore[assignment]  # a NamedTuple field named like tuple.count

    @classmethod
    def from_tuples(cls, flows: Sequence[tuple[Sequence[int] | np.ndarray, float, float, int]]) -> FlowBatch:
        """From (link_ids, nbytes, latency_s, count) tuples."""
        for _, nbytes, latency_s, count in flows:
            if nbytes < 0 or latency_s < 0 or count < 1:
                raise ValueError(f"need nbytes >= 0, latency_s >= 0, count >= 1; got {nbytes}, {latency_s}, {count}")
        return cls(
            LinkMatrix.from_lists([links for links, _, _, _ in flows]),
            np.array([f[1] for f in flows], dtype=np.float64),
            np.array([f[2] for f in flows], dtype=np.float64),
            np.array([f[3] for f in flows], dtype=np.int64),
        )

    def select(self, mask: np.ndarray) -> FlowBatch:
        """The flows where ``mask`` is true, in order."""
        lengths = np.diff(self.links.indptr)
        indptr = np.zeros(int(mask.sum()) + 1, dtype=np.int64)
        np.cumsum(lengths[mask], out=indptr[1:])
        indices = self.links.indices[np.repeat(mask, lengths)]
        return FlowBatch(LinkMatrix(indptr, indices), self.nbytes[mask], self.latency_s[mask], self.count[mask])


class _Segment:
    """The flows of one arrived batch (or part of one) and which of them are still moving.

    ``key``: the identity of the arrays that decide rates (links and counts); the segment holds
    them, so no other array can take those ids while it is alive."""

    def __init__(self, part: FlowBatch) -> None:
        self.arrays = (part.links.indptr, part.links.indices, part.count)
        self.key = tuple(id(a) for a in self.arrays)
        self.alive = np.ones(len(part.nbytes), dtype=bool)
        self.moving = len(part.nbytes)

    def state(self) -> tuple[tuple[int, ...], bytes]:
        return self.key, np.packbits(self.alive).tobytes()


class _Solution(NamedTuple):
    """Max-min rates of one moving set and the link loads they give; ``arrays`` keep the ids of
    the key's segments from being reused while this is kept."""

    rates: np.ndarray
    used_links: np.ndarray
    link_load_Bps: np.ndarray
    arrays: tuple[tuple[np.ndarray, ...], ...]


class _Replay(NamedTuple):
    """One repetition of a batch on an otherwise idle network, as measured the first time.

    The flows all arrive ``latency_s`` after the gap (one common latency), then take
    ``transfer_s``; ``size`` is the batch's largest flow, the unit in which the rest scale.
    """

    size: float
    latency_s: float
    transfer_s: float
    busy_s: np.ndarray
    carried_bytes: np.ndarray
    completed_flows: int


class FlowNetwork:
    """Directed links with capacities, shared max-min fairly by the flows crossing them.

    Attributes:
        capacity_Bps: per directed link, bytes/s.
        busy_time_s: per link, time during which at least one flow was moving bytes over it.
        carried_bytes: per link, bytes moved over it.
    """

    def __init__(self, env: simpy.Environment, capacity_Bps: np.ndarray | Sequence[float]) -> None:
        self.env = env
        self.capacity_Bps = np.array(capacity_Bps, dtype=np.float64)
        if self.capacity_Bps.ndim != 1 or not np.all(self.capacity_Bps > 0):
            raise ValueError("capacity_Bps must be a 1-d array of positive capacities")
        self.capacity_Bps.flags.writeable = False  # kept max-min solutions assume fixed capacities
        n_links = len(self.capacity_Bps)
        self._busy_time_s = np.zeros(n_links)
        self._carried_bytes = np.zeros(n_links)
        # seconds each solution has been in force and not yet added to the per-link totals: one
        # pass over a solution's links when the totals are read, not one per rate update
        self._accrued: dict[int, tuple[_Solution, float]] = {}
        self._solution = _Solution(np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0), ())
        self.completed_flows = 0
        self.rate_updates = 0  # rate updates (for benchmarks)
        self.rate_solves = 0  # of which max-min was solved, not found among the kept solutions
        self._in_flight = 0  # flow entries started and not finished (latency included)
        # moving flows: CSR incidence plus per-flow arrays, all in the same order
        self._indptr = np.zeros(1, dtype=np.int64)
        self._indices = np.zeros(0, dtype=np.int64)
        self._size = np.zeros(0)
        self._count = np.zeros(0, dtype=np.int64)
        self._group = np.zeros(0, dtype=np.int64)
        self._segment = np.zeros(0, dtype=np.int64)  # serial of the flow's segment
        self._slot = np.zeros(0, dtype=np.int64)  # its position in that segment
        self._segments: dict[int, _Segment] = {}  # moving segments by serial, in arrival order
        self._next_segment = 0
        self._solutions: OrderedDict[tuple[tuple[tuple[int, ...], bytes], ...], _Solution] = OrderedDict()
        self._remaining = np.zeros(0)
        self._alive = np.zeros(0, dtype=bool)
        self._arrivals: list[tuple[FlowBatch, int]] = []  # arrived since the last rate update
        self._groups: dict[int, list[Any]] = {}  # group id -> [flow entries pending, done event]
        self._next_group = 0
        self._last_update_s = env.now
        self._update_pending = False
        self._version = 0
        self._replays: dict[Hashable, _Replay] = {}
        self._reserved_until = -np.inf

    @property
    def busy_time_s(self) -> np.ndarray:
        """Per link, time during which at least one flow was moving bytes over it."""
        self._settle()
        return self._busy_time_s

    @busy_time_s.setter
    def busy_time_s(self, value: np.ndarray) -> None:
        self._settle()
        self._busy_time_s = value

    @property
    def carried_bytes(self) -> np.ndarray:
        """Per link, bytes moved over it."""
        self._settle()
        return self._carried_bytes

    @carried_bytes.setter
    def carried_bytes(self, value: np.ndarray) -> None:
        self._settle()
        self._carried_bytes = value

    @property
    def active_flows(self) -> int:
        """Flow entries started and not yet finished (a counted entry is one)."""
        return self._in_flight

    @property
    def idle(self) -> bool:
        """No flow in flight and no replayed collective holding the network."""
        return self._in_flight == 0 and self.env.now >= self._reserved_until

    def transfer(self, link_ids: Sequence[int] | np.ndarray, nbytes: float, latency_s: float = 0.0,
                 count: int = 1) -> simpy.Event:
        """Start a flow (``count`` identical ones); the event succeeds when all bytes have arrived."""
        return self.transfer_all([(link_ids, nbytes, latency_s, count)])

    def transfer_all(
        self, flows: Sequence[tuple[Sequence[int] | np.ndarray, float, float, int]] | FlowBatch
    ) -> simpy.Event:
        """Start flows, given as a ``FlowBatch`` or (link_ids, nbytes, latency_s, count) tuples;
        one event for all of them. Flows with equal latency share one timer. A ``FlowBatch``'s link
        and count arrays must not be changed afterwards: their identity keys the kept solutions."""
        batch = flows if isinstance(flows, FlowBatch) else FlowBatch.from_tuples(flows)
        if self.env.now < self._reserved_until:
            # a replayed collective assumed it had the network to itself until then
            raise RuntimeError("transfer started while a replayed collective holds the network exclusively")
        done = self.env.event()
        n = len(batch.nbytes)
        if n == 0:
            done.succeed()
            return done
        if np.any(batch.nbytes < 0) or np.any(batch.latency_s < 0) or np.any(batch.count < 1):
            raise ValueError("need nbytes >= 0, latency_s >= 0, count >= 1 for every flow")
        group = self._next_group
        self._next_group += 1
        self._groups[group] = [n, done]
        self._in_flight += n
        if np.all(batch.latency_s == batch.latency_s[0]):
            parts = [(float(batch.latency_s[0]), batch)]
        else:
            latencies, which = np.unique(batch.latency_s, return_inverse=True)
            parts = [(float(latency_s), batch.select(which == k)) for k, latency_s in enumerate(latencies)]
        for latency_s, part in parts:
            wait = self.env.timeout(latency_s)
            wait.callbacks.append(partial(self._arrive_on, part, group))
        return done

    def run_repeated(self, batch: FlowBatch, repeat: int, gap_s: float = 0.0,
                     replay_key: Hashable | None = None) -> Generator[simpy.Event, Any, None]:
        """Process body: ``repeat`` times, wait ``gap_s`` then move ``batch``, each repetition
        after the previous one has fully arrived.

        ``replay_key``: the caller promises that nothing else uses this network until the call
        returns (a collective on its own communication stream), and that batches passed under one
        key differ at most by a common factor on ``nbytes`` (same links, latencies and counts).
        A repetition that starts on an idle network then takes the same time and loads the same
        links as the first one did, so only the first is simulated flow by flow and the rest are
        added in one step. When all flows share one latency, max-min sharing after their common
        arrival is scale-free (rates do not depend on sizes, so k times the bytes finish in the
        same order at k times the times), and a batch k times as large reuses the measurement
        with transfer time, busy time and bytes times k. Any transfer started during a replay
        raises (the promise was broken). None: every repetition is simulated.
        """
        if repeat < 1:
            return
        size = float(batch.nbytes.max()) if len(batch.nbytes) else 0.0
        one_latency = len(batch.latency_s) > 0 and bool(np.all(batch.latency_s == batch.latency_s[0]))
        replay = self._replays.get(replay_key) if replay_key is not None else None
        if replay is not None and not (size == replay.size or (one_latency and size > 0 and replay.size > 0
                                                                and batch.latency_s[0] == replay.latency_s)):
            replay = None  # sizes differ and cannot be scaled: measure this batch
        done_reps = 0
        if replay is None:
            idle_at_start = self.idle
            busy, carried, completed = self.busy_time_s.copy(), self.carried_bytes.copy(), self.completed_flows
            if gap_s > 0:
                yield self.env.timeout(gap_s)
            start_s = self.env.now
            yield self.transfer_all(batch)
            done_reps = 1
            # a measurement is reusable only if this batch had the network to itself throughout
            alone = idle_at_start and self.idle and self.completed_flows - completed == int(batch.count.sum())
            if replay_key is None or not alone:
                for _ in range(repeat - 1):
                    if gap_s > 0:
                        yield self.env.timeout(gap_s)
                    yield self.transfer_all(batch)
                return
            latency_s = float(batch.latency_s[0]) if one_latency else 0.0
            replay = _Replay(size, latency_s, self.env.now - start_s - latency_s, self.busy_time_s - busy,
                             self.carried_bytes - carried, self.completed_flows - completed)
            self._replays[replay_key] = replay
        remaining = repeat - done_reps
        if remaining == 0:
            return
        if not self.idle:
            raise RuntimeError("replayed collective found the network busy: another user broke exclusivity")
        scale = 1.0 if size == replay.size else size / replay.size
        duration_s = remaining * (gap_s + replay.latency_s + scale * replay.transfer_s)
        self._reserved_until = self.env.now + duration_s
        yield self.env.timeout(duration_s)
        self._reserved_until = -np.inf
        self.busy_time_s += (remaining * scale) * replay.busy_s
        self.carried_bytes += (remaining * scale) * replay.carried_bytes
        self.completed_flows += remaining * replay.completed_flows
        self._last_update_s = self.env.now

    # -- internals ------------------------------------------------------------------------------
    def _arrive_on(self, part: FlowBatch, group: int, _event: simpy.Event) -> None:
        self._arrive(part, group)

    def _arrive(self, part: FlowBatch, group: int) -> None:
        lengths = np.diff(part.links.indptr)
        trivial = (part.nbytes == 0) | (lengths == 0)
        if trivial.any():
            # nothing to share: a local copy or an empty message costs only its latency
            self._finish_entries(np.full(int(trivial.sum()), group), part.count[trivial])
            part = part.select(~trivial)
        if len(part.nbytes):
            self._advance()
            self._arrivals.append((part, group))
            self._request_update()

    def _finish_entries(self, groups: np.ndarray, counts: np.ndarray) -> None:
        self.completed_flows += int(counts.sum())
        self._in_flight -= len(groups)
        for gid, k in _runs(groups):
            entry = self._groups[gid]
            entry[0] -= k
            if entry[0] == 0:
                del self._groups[gid]
                entry[1].succeed()

    def _advance(self) -> None:
        """Drain every moving flow up to now at the rates in force since the last update."""
        elapsed = self.env.now - self._last_update_s
        if elapsed > 0 and len(self._remaining):
            solution = self._solution
            self._remaining -= solution.rates * elapsed
            accrued = self._accrued.get(id(solution))
            if accrued is None and len(self._accrued) >= _SOLUTIONS_KEPT:
                self._settle()
            self._accrued[id(solution)] = (solution, elapsed + (accrued[1] if accrued else 0.0))
        self._last_update_s = self.env.now

    def _settle(self) -> None:
        """Add the time each solution was in force to its links' busy time and carried bytes."""
        for solution, elapsed in self._accrued.values():
            self._busy_time_s[solution.used_links] += elapsed
            self._carried_bytes[solution.used_links] += solution.link_load_Bps * elapsed
        self._accrued = {}

    def _request_update(self) -> None:
        # Defer to the end of this instant so that flows starting or ending together cost one
        # rate computation, not one each: a zero-delay event queues behind those already due now.
        if self._update_pending:
            return
        self._update_pending = True
        tick = self.env.timeout(0)
        tick.callbacks.append(lambda _event: self._update())

    def _compact(self) -> None:
        """Drop finished flows and append the arrivals: the incidence is edited, not rebuilt."""
        keep = self._alive
        if not keep.any():
            # everything ended (a batch that finishes together): nothing to carry over
            self._indptr, self._indices = self._indptr[:1], self._indices[:0]
            self._size, self._count, self._group = self._size[:0], self._count[:0], self._group[:0]
            self._remaining, self._segment, self._slot = self._remaining[:0], self._segment[:0], self._slot[:0]
        elif not keep.all():
            lengths = np.diff(self._indptr)
            self._indices = self._indices[np.repeat(keep, lengths)]
            indptr = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
            np.cumsum(lengths[keep], out=indptr[1:])
            self._indptr = indptr
            self._size, self._count = self._size[keep], self._count[keep]
            self._group, self._remaining = self._group[keep], self._remaining[keep]
            self._segment, self._slot = self._segment[keep], self._slot[keep]
        if len(self._arrivals) == 1 and not len(self._size):
            # one batch onto an idle network (a collective's next step): its arrays as they are;
            # only the remaining bytes are written in place
            part, group = self._arrivals[0]
            n = len(part.nbytes)
            self._indptr, self._indices = part.links.indptr, part.links.indices
            self._size, self._count, self._remaining = part.nbytes, part.count, part.nbytes.copy()
            self._group = np.full(n, group, dtype=np.int64)
            self._segment = np.full(n, self._next_segment, dtype=np.int64)
            self._slot = np.arange(n)
            self._segments[self._next_segment] = _Segment(part)
            self._next_segment += 1
            self._arrivals = []
        if self._arrivals:
            parts = [part for part, _ in self._arrivals]
            offsets = [self._indptr[1:]]
            base = int(self._indptr[-1])
            for part in parts:
                offsets.append(part.links.indptr[1:] + base)
                base += int(part.links.indptr[-1])
            self._indptr = np.concatenate([self._indptr[:1], *offsets])
            self._indices = np.concatenate([self._indices, *(p.links.indices for p in parts)])
            self._size = np.concatenate([self._size, *(p.nbytes for p in parts)])
            self._count = np.concatenate([self._count, *(p.count for p in parts)])
            self._group = np.concatenate(
                [self._group, *(np.full(len(p.nbytes), g, dtype=np.int64) for p, g in self._arrivals)])
            self._remaining = np.concatenate([self._remaining, *(p.nbytes for p in parts)])
            serials = []
            for part in parts:
                serials.append(np.full(len(part.nbytes), self._next_segment, dtype=np.int64))
                self._segments[self._next_segment] = _Segment(part)
                self._next_segment += 1
            self._segment = np.concatenate([self._segment, *serials])
            self._slot = np.concatenate([self._slot, *(np.arange(len(p.nbytes)) for p in parts)])
            self._arrivals = []
        self._alive = np.ones(len(self._size), dtype=bool)

    def _update(self) -> None:
        self._update_pending = False
        self._advance()
        self._compact()
        self._version += 1
        n_links = len(self.capacity_Bps)
        if not len(self._size):
            self._solution = _Solution(np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0), ())
            return
        self.rate_updates += 1
        key = tuple(segment.state() for segment in self._segments.values())
        solution = self._solutions.get(key)
        if solution is None:
            matrix = LinkMatrix(self._indptr, self._indices)
            counts = self._count.astype(np.float64)
            rates = max_min_rates(matrix, self.capacity_Bps, counts)
            self.rate_solves += 1
            flow_of_entry = np.repeat(np.arange(len(self._size)), np.diff(self._indptr))
            load = np.bincount(self._indices, weights=(rates * counts)[flow_of_entry], minlength=n_links)
            used = np.flatnonzero(load > 0)
            solution = _Solution(rates, used, load[used], tuple(s.arrays for s in self._segments.values()))
            self._solutions[key] = solution
            if len(self._solutions) > _SOLUTIONS_KEPT:
                self._solutions.popitem(last=False)
        else:
            self._solutions.move_to_end(key)
        self._solution = solution
        next_s = float(np.min(np.maximum(self._remaining, 0.0) / solution.rates))
        version = self._version
        timer = self.env.timeout(next_s)
        timer.callbacks.append(lambda _event: self._on_timer(version))

    def _on_timer(self, version: int) -> None:
        if version != self._version:
            return  # rates changed since this timer was set; a newer timer is pending
        self._advance()
        done = self._alive & (self._remaining <= self._size * _DONE_RTOL)
        if not done.any():
            # float residue left the earliest flow a hair short: finish the closest one(s)
            left_s = np.where(self._alive, self._remaining / self._solution.rates, np.inf)
            done = left_s <= np.min(left_s) * (1 + 1e-9)
        self._remaining[done] = 0.0
        self._alive &= ~done
        segments, slots = self._segment[done], self._slot[done]
        for serial, _ in _runs(segments):
            segment = self._segments[serial]
            ended = slots if segments[0] == segments[-1] else slots[segments == serial]
            segment.alive[ended] = False
            segment.moving -= len(ended)
            if segment.moving == 0:
                del self._segments[serial]
        self._finish_entries(self._group[done], self._count[done])
        self._request_update()


def _runs(values: np.ndarray) -> list[tuple[int, int]]:
    """(value, how many) for each distinct value; one comparison where all are equal (the usual case:
    flows of one batch ending together)."""
    if values[0] == values[-1] and np.all(values == values[0]):
        return [(int(values[0]), len(values))]
    ids, counts = np.unique(values, return_counts=True)
    return list(zip(ids.tolist(), counts.tolist(), strict=True))
