"""Max-min fair rates of flows that share capacitated links (progressive filling, vectorised).

Flows are described by the links they cross, either as a list of integer arrays or as a
``LinkMatrix`` in CSR form (``indptr``/``indices``), which is what the hot paths build directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

# Links whose fair share is within this relative distance of the bottleneck level saturate
# together; symmetric flows then freeze in one round instead of one round per float wobble.
_LEVEL_RTOL = 1e-12


class LinkMatrix(NamedTuple):
    """Flows x links incidence in CSR form: flow f crosses ``indices[indptr[f]:indptr[f+1]]``."""

    indptr: np.ndarray
    indices: np.ndarray

    @property
    def n_flows(self) -> int:
        return len(self.indptr) - 1

    @classmethod
    def from_lists(cls, flow_links: Sequence[Sequence[int] | np.ndarray]) -> LinkMatrix:
        lengths = np.fromiter((len(links) for links in flow_links), dtype=np.int64, count=len(flow_links))
        indptr = np.zeros(len(flow_links) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        if indptr[-1]:
            indices = np.concatenate([np.asarray(links, dtype=np.int64) for links in flow_links])
        else:
            indices = np.zeros(0, dtype=np.int64)
        return cls(indptr, indices)


def max_min_rates(
    flow_links: LinkMatrix | Sequence[Sequence[int] | np.ndarray],
    capacity_Bps: np.ndarray,
    multiplicity: np.ndarray | None = None,
) -> np.ndarray:
    """Max-min fair rate (bytes/s) of every flow; a flow that crosses no link gets ``inf``.

    ``multiplicity``: flow f stands for that many identical flows (same links), each of which
    gets the returned rate; lets symmetric workloads be described once.

    Progressive filling: all unfrozen flows grow at one common rate until some link is full;
    the flows crossing a full link freeze at that rate; repeat with what capacity is left.
    Each round is a few ``bincount`` passes over the incidence, so rounds cost O(links + entries)
    and the number of rounds is the number of distinct bottleneck levels.
    """
    matrix = flow_links if isinstance(flow_links, LinkMatrix) else LinkMatrix.from_lists(flow_links)
    capacity = np.asarray(capacity_Bps, dtype=np.float64)
    n_flows, n_links = matrix.n_flows, len(capacity)
    indptr, indices = matrix.indptr, matrix.indices
    rates = np.full(n_flows, np.inf)
    if n_flows == 0 or len(indices) == 0:
        return rates
    flow_of_entry = np.repeat(np.arange(n_flows), np.diff(indptr))
    remaining = capacity.copy()
    if multiplicity is None:
        entry_weight = np.ones(len(indices))
    else:
        entry_weight = np.asarray(multiplicity, dtype=np.float64)[flow_of_entry]
    active_count = np.bincount(indices, weights=entry_weight, minlength=n_links)
    entry_active = np.ones(len(indices), dtype=bool)
    frozen = np.diff(indptr) == 0  # flows without links stay at inf
    while True:
        used = active_count > 0.5  # counts are whole numbers; float subtraction leaves dust
        if not used.any():
            break
        share = np.full(n_links, np.inf)
        share[used] = np.maximum(remaining[used], 0.0) / active_count[used]
        level = share.min()
        saturated = share <= level * (1.0 + _LEVEL_RTOL)
        hit = entry_active & saturated[indices]
        newly = np.zeros(n_flows, dtype=bool)
        newly[flow_of_entry[hit]] = True
        newly &= ~frozen
        rates[newly] = level
        frozen |= newly
        leaving = entry_active & newly[flow_of_entry]
        counts = np.bincount(indices[leaving], weights=entry_weight[leaving], minlength=n_links)
        remaining -= counts * level
        active_count -= counts
        entry_active &= ~leaving
    return rates
