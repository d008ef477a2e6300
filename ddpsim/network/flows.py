"""Flow-level link sharing on the event engine: transfers as flows at max-min fair rates.

A transfer waits its latency, then moves its bytes at its current fair share. Rates change only
when a flow starts or ends, so between such events every flow drains linearly and the engine
only needs one timer: the earliest completion under the current rates.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import simpy

from ddpsim.network.fairshare import LinkMatrix, max_min_rates

# A flow whose remaining bytes fall below this fraction of its size (float residue of
# rate * elapsed time) has finished; far below any byte count that matters.
_DONE_RTOL = 1e-9


class _Group:
    """Flows started together; its event succeeds when the last of them has arrived."""

    __slots__ = ("pending", "done")

    def __init__(self, pending: int, done: simpy.Event) -> None:
        self.pending = pending
        self.done = done


class _Flow:
    __slots__ = ("links", "nbytes", "count", "remaining", "group", "finished")

    def __init__(self, links: np.ndarray, nbytes: float, count: int, group: _Group) -> None:
        self.links = links
        self.nbytes = nbytes
        self.count = count  # identical flows this one stands for (same links, same bytes)
        self.remaining = nbytes
        self.group = group
        self.finished = False


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
        self._flows: list[_Flow] = []  # flows moving bytes, in the order of the arrays below
        self._arrivals: list[_Flow] = []  # flows whose latency ended since the last rate update
        self._remaining = np.zeros(0)
        self._rates = np.zeros(0)
        self._used_links = np.zeros(0, dtype=np.int64)
        self._link_load_Bps = np.zeros(0)
        self._last_update_s = env.now
        self._update_pending = False
        self._version = 0

    @property
    def active_flows(self) -> int:
        return len(self._flows) + len(self._arrivals)

    def transfer(self, link_ids: Sequence[int] | np.ndarray, nbytes: float, latency_s: float = 0.0,
                 count: int = 1) -> simpy.Event:
        """Start a flow (``count`` identical ones); the event succeeds when all bytes have arrived."""
        return self.transfer_all([(link_ids, nbytes, latency_s, count)])

    def transfer_all(
        self, flows: Sequence[tuple[Sequence[int] | np.ndarray, float, float, int]]
    ) -> simpy.Event:
        """Start flows given as (link_ids, nbytes, latency_s, count); one event for all of them.

        Cheaper than one ``transfer`` each: flows with equal latency share one timer.
        """
        done = self.env.event()
        group = _Group(len(flows), done)
        by_latency: dict[float, list[_Flow]] = {}
        for link_ids, nbytes, latency_s, count in flows:
            if nbytes < 0 or latency_s < 0 or count < 1:
                raise ValueError(f"need nbytes >= 0, latency_s >= 0, count >= 1; got {nbytes}, {latency_s}, {count}")
            links = link_ids if isinstance(link_ids, np.ndarray) else np.asarray(link_ids, dtype=np.int64)
            by_latency.setdefault(float(latency_s), []).append(_Flow(links, float(nbytes), int(count), group))
        if not flows:
            done.succeed()
        for latency_s, batch in by_latency.items():
            wait = self.env.timeout(latency_s)
            wait.callbacks.append(lambda _event, batch=batch: self._arrive(batch))
        return done

    def _arrive(self, batch: list[_Flow]) -> None:
        moving = []
        for flow in batch:
            if flow.nbytes == 0 or len(flow.links) == 0:
                # nothing to share: a local copy or an empty message costs only its latency
                self._finish(flow)
            else:
                moving.append(flow)
        if moving:
            self._advance()
            self._arrivals.extend(moving)
            self._request_update()

    def _finish(self, flow: _Flow) -> None:
        flow.finished = True
        self.completed_flows += flow.count
        flow.group.pending -= 1
        if flow.group.pending == 0:
            flow.group.done.succeed()

    def _advance(self) -> None:
        """Drain every moving flow up to now at the rates in force since the last update."""
        elapsed = self.env.now - self._last_update_s
        if elapsed > 0 and len(self._flows):
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

    def _update(self) -> None:
        self._update_pending = False
        self._advance()
        for flow, remaining in zip(self._flows, self._remaining, strict=True):
            flow.remaining = float(remaining)
        self._flows = [f for f in self._flows if not f.finished] + self._arrivals
        self._arrivals = []
        self._version += 1
        if not self._flows:
            self._remaining = np.zeros(0)
            self._rates = np.zeros(0)
            self._used_links = np.zeros(0, dtype=np.int64)
            self._link_load_Bps = np.zeros(0)
            return
        matrix = LinkMatrix.from_lists([f.links for f in self._flows])
        counts = np.array([f.count for f in self._flows], dtype=np.float64)
        self._rates = max_min_rates(matrix, self.capacity_Bps, counts)
        self._remaining = np.array([f.remaining for f in self._flows])
        flow_of_entry = np.repeat(np.arange(len(self._flows)), np.diff(matrix.indptr))
        load = np.bincount(matrix.indices, weights=(self._rates * counts)[flow_of_entry],
                           minlength=len(self.capacity_Bps))
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
        sizes = np.array([f.nbytes for f in self._flows])
        done = np.flatnonzero(self._remaining <= sizes * _DONE_RTOL)
        if len(done) == 0:
            # float residue left the earliest flow a hair short: finish the closest one(s)
            done = np.flatnonzero(self._remaining / self._rates <= np.min(self._remaining / self._rates) * (1 + 1e-9))
        for i in done:
            self._remaining[i] = 0.0
            self._finish(self._flows[i])
        self._request_update()
