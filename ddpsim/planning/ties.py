"""One tie rule for every recommendation (tune-buckets, tune-strategy, validate's decision check): options
predicted within ``MIN_GAIN_REL`` of the fastest are tied, and of the tied the simplest is recommended
(PyTorch's default bucket cap, plain DDP): a gain below the simulator's resolution is not worth a change."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

# Predicted gains below this are within the simulator's resolution (about 5% mean error on held-out
# GPU runs, see README): such options count as tied.
MIN_GAIN_REL = 0.02

Key = TypeVar("Key", bound=Hashable)


def tied_with_fastest(step_time_s: Mapping[Key, float], min_gain_rel: float = MIN_GAIN_REL) -> list[Key]:
    """The options whose step is within ``min_gain_rel`` of the fastest, in the mapping's order."""
    fastest = min(step_time_s.values())
    return [key for key, step_s in step_time_s.items() if step_s <= fastest * (1 + min_gain_rel)]


def pick_simplest(step_time_s: Mapping[Key, float], complexity: Callable[[Key], float],
                  min_gain_rel: float = MIN_GAIN_REL) -> Key:
    """Of the options tied with the fastest, the one of least ``complexity`` (the first on equal)."""
    return min(tied_with_fastest(step_time_s, min_gain_rel), key=complexity)
