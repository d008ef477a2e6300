"""A Dask sweep ends with one line whatever fails, in whatever order (issue 34): deterministic, no cluster.

``_run_dask`` is driven with a stand-in client and a stand-in ``distributed.wait``, so each order of
failures is played exactly: workers lost one by one then all, the scheduler lost mid-sweep, the scheduler
not answering. Real clusters are exercised in tests/test_sweep.py (worker retirement, no worker at all).
"""

from __future__ import annotations

import io

import pytest

from ddpsim.planning import sweep

distributed = pytest.importorskip("distributed")


class _Future:
    def __init__(self, key: str) -> None:
        self.key = key

    def done(self) -> bool:
        return False


class _Client:
    """Worker counts the scheduler reports, one per poll (None: the scheduler does not answer)."""

    def __init__(self, counts: list[int | None]) -> None:
        self.counts = list(counts)
        self.cancelled: list[str] = []

    def map(self, func, tasks, pure=False):
        return [_Future(f"k{i}") for i in range(len(tasks))]

    def scheduler_info(self):
        count = self.counts.pop(0) if len(self.counts) > 1 else self.counts[0]
        if count is None:
            raise OSError("scheduler gone")
        return {"workers": {f"w{i}": {} for i in range(count)}}

    def cancel(self, futures):
        self.cancelled += [f.key for f in futures]


def _points(n: int) -> list[sweep.SweepPoint]:
    return [sweep.SweepPoint(i, {"ddp.bucket_cap_mb": i + 1}, {}) for i in range(n)]


def _run(client, monkeypatch, wait, no_workers_s=0.2):
    monkeypatch.setattr(distributed, "wait", wait)
    monkeypatch.setattr(sweep, "DASK_POLL_S", 0.01)
    results: dict[int, dict] = {}
    log = io.StringIO()
    sweep._run_dask(_points(3), "s.yaml", ".", client, lambda p, raw: results.__setitem__(p.index, raw), log,
                    no_workers_s=no_workers_s)
    return results, log.getvalue()


def _nothing_finishes(fs, timeout, return_when):
    raise TimeoutError


@pytest.mark.parametrize("counts", [[2, 1, 0], [2, 0], [1, 1, 1, 0], [0]],
                         ids=["one-then-the-other", "both-at-once", "late", "none-from-the-start"])
def test_losing_every_worker_in_any_order_fails_the_points(monkeypatch, counts):
    client = _Client(counts)
    results, log = _run(client, monkeypatch, _nothing_finishes)
    assert sorted(results) == [0, 1, 2]
    assert all("no Dask worker for 0 s" in raw["error"] for raw in results.values())
    assert sorted(client.cancelled) == ["k0", "k1", "k2"]
    lost = [line for line in log.splitlines() if line.startswith("warning: Dask lost")]
    assert len(lost) == sum(1 for a, b in zip(counts, counts[1:], strict=False) if b < a)


def test_a_scheduler_that_stops_answering_fails_the_points(monkeypatch):
    results, _ = _run(_Client([2, None]), monkeypatch, _nothing_finishes)
    assert all("no answer from the Dask scheduler" in raw["error"] for raw in results.values())


def test_a_lost_scheduler_fails_the_points_with_one_line(monkeypatch):
    def cancelled(fs, timeout, return_when):
        raise distributed.client.FuturesCancelledError([])

    results, log = _run(_Client([2]), monkeypatch, cancelled)
    assert all("the Dask scheduler was lost" in raw["error"] for raw in results.values()) and len(results) == 3
    assert log == "warning: lost the Dask scheduler; 3 point(s) not simulated\n"
