"""PyTorch's caching allocator holds more than a step's allocated peak: its measured reserve on top of it.

Package data (``data/allocator_reserve.json``) written by ``benchmarks/allocator_reserve.py --write`` from the
project's peak-memory runs; a planner reads the range, never one silent factor."""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any


@functools.cache
def allocator_reserve() -> dict[str, Any]:
    """``max_memory_reserved / max_memory_allocated`` of measured steps: min, median, max, runs and sources."""
    with resources.files("ddpsim.hardware").joinpath("data/allocator_reserve.json").open(encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data
