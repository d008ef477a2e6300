"""Time intervals on one axis: how long a set of possibly overlapping intervals covers."""

from __future__ import annotations


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of ``intervals`` ((start, stop) pairs, any order, overlaps counted once)."""
    total = 0.0
    current: list[float] | None = None
    for start, stop in sorted(intervals):
        if current is None or start > current[1]:
            if current is not None:
                total += current[1] - current[0]
            current = [start, stop]
        else:
            current[1] = max(current[1], stop)
    if current is not None:
        total += current[1] - current[0]
    return total
