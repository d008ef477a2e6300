"""Flow-level link sharing on the event engine: transfers as flows at max-min fair rates.

A transfer waits its latency, then moves its bytes at its current fair share. Rates change only
when a flow starts or ends, so between such events every flow drains linearly and the engine
only needs one timer: the earliest completion under the current rates.

Flows live in arrays, not objects: the moving flows' link incidence is one CSR matrix that is
compacted when flows end and appended to when flows arrive, so a rate update costs a few numpy
passes over the incidence whatever the number of flows.
"""

from __future__ import annotations

from collections.abc import Generator, Hashable, Sequence
from functools import partial
from typing import Any, NamedTuple

import numpy as np
import simpy

from ddpsim.network.fairshare import LinkMatrix, max_min_rates

# A flow whose remaining bytes fall below this fraction of its size (float residue of
# rate * elapsed time) has finished; far below any byte count that matters.
_DONE_RTOL = 1e-9


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
        n_links = len(self.capacity_Bps)
        self.busy_time_s = np.zeros(n_links)
        self.carried_bytes = np.zeros(n_links)
        self.completed_flows = 0
        self.rate_updates = 0  # max-min solutions computed (for benchmarks)
        self._in_flight = 0  # flow entries started and not finished (latency included)
        # moving flows: CSR incidence plus per-flow arrays, all in the same order
        self._indptr = np.zeros(1, dtype=np.int64)
        self._indices = np.zeros(0, dtype=np.int64)
        self._size = np.zeros(0)
        self._count = np.zeros(0, dtype=np.int64)
        self._group = np.zeros(0, dtype=np.int64)
        self._remaining = np.zeros(0)
        self._rates: np.ndarray = np.zeros(0)
        self._alive = np.zeros(0, dtype=bool)
        self._arrivals: list[tuple[FlowBatch, int]] = []  # arrived since the last rate update
        self._groups: dict[int, list[Any]] = {}  # group id -> [flow entries pending, done event]
        self._next_group = 0
        self._used_links: np.ndarray = np.zeros(0, dtype=np.int64)
        self._link_load_Bps: np.ndarray = np.zeros(0)
        self._last_update_s = env.now
        self._update_pending = False
        self._version = 0
        self._replays: dict[Hashable, _Replay] = {}
        self._reserved_until = -np.inf

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
        one event for all of them. Flows with equal latency share one timer."""
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
        latencies, which = np.unique(batch.latency_s, return_inverse=True)
        for k, latency_s in enumerate(latencies):
            part = batch if len(latencies) == 1 else batch.select(which == k)
            wait = self.env.timeout(float(latency_s))
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
        ids, finished = np.unique(groups, return_counts=True)
        for gid, k in zip(ids.tolist(), finished.tolist(), strict=True):
            entry = self._groups[gid]
            entry[0] -= k
            if entry[0] == 0:
                del self._groups[gid]
                entry[1].succeed()

    def _advance(self) -> None:
        """Drain every moving flow up to now at the rates in force since the last update."""
        elapsed = self.env.now - self._last_update_s
        if elapsed > 0 and len(self._remaining):
            self._remaining -= self._rates * elapsed
            self.busy_time_s[self._used_links] += elapsed
            self.carried_bytes[self._used_links] += self._link_load_Bps * elapsed
        self._last_update_s = self.env.now

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
        if not keep.all():
            lengths = np.diff(self._indptr)
            self._indices = self._indices[np.repeat(keep, lengths)]
            indptr = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
            np.cumsum(lengths[keep], out=indptr[1:])
            self._indptr = indptr
            self._size, self._count = self._size[keep], self._count[keep]
            self._group, self._remaining = self._group[keep], self._remaining[keep]
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
            self._arrivals = []
        self._alive = np.ones(len(self._size), dtype=bool)

    def _update(self) -> None:
        self._update_pending = False
        self._advance()
        self._compact()
        self._version += 1
        n_links = len(self.capacity_Bps)
        if not len(self._size):
            self._rates = np.zeros(0)
            self._used_links = np.zeros(0, dtype=np.int64)
            self._link_load_Bps = np.zeros(0)
            return
        matrix = LinkMatrix(self._indptr, self._indices)
        counts = self._count.astype(np.float64)
        self._rates = max_min_rates(matrix, self.capacity_Bps, counts)
        self.rate_updates += 1
        flow_of_entry = np.repeat(np.arange(len(self._size)), np.diff(self._indptr))
        load = np.bincount(self._indices, weights=(self._rates * counts)[flow_of_entry], minlength=n_links)
        self._used_links = np.flatnonzero(load > 0)
        self._link_load_Bps = load[self._used_links]
        next_s = float(np.min(np.maximum(self._remaining, 0.0) / self._rates))
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
            left_s = np.where(self._alive, self._remaining / self._rates, np.inf)
            done = left_s <= np.min(left_s) * (1 + 1e-9)
        self._remaining[done] = 0.0
        self._alive &= ~done
        self._finish_entries(self._group[done], self._count[done])
        self._request_update()
