"""Which ranks a step simulation has to run, and why the engine ran in the mode it did.

Ranks interact only through the collectives: an all-reduce starts when the last rank has
joined it, every rank waits for its end, and the step ends on the slowest rank. A rank is
otherwise described entirely by its compute factor per step (1, times the straggler slowdown,
times its jitter draw). Hence:

* Ranks with the same factors in every step behave identically (same events at the same times):
  one representative stands for its whole class. Exact.
* A rank that is at most as slow as another rank in every step (factors <= componentwise) can
  never be the last to join an all-reduce, nor the last to finish a step: leaving it out changes
  no shared time. This rests on a rank's step being monotone in its compute factor and in its
  start time (a slower or later rank joins every bucket no earlier), by induction over steps;
  ``tests/test_fold.py`` checks the result against simulating every rank, with compute and
  communication slowdowns and in-flight limits. What is lost: the timelines of dropped ranks,
  and ``critical_rank`` among exact ties (the lowest simulated rank wins).

Ranks of different GPU kinds (``cluster.node_groups``) run different costs, not one cost scaled,
so ``classes`` keeps them apart: a rank folds with, and is dropped for, ranks of its own kind only.
Which node a rank sits on does not matter here: an all-reduce is priced for the whole cluster
(uneven nodes included) and every rank waits for its end.

Identical ranks (no perturbation, a degraded link) fold into one; one straggler gives two
simulated ranks; jitter with one step gives rank 0 and the slowest rank; jitter over d steps
gives the Pareto front of n points in d dimensions, O(log(n)^(d-1)) ranks for independent draws.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RankPlan:
    """The ranks to simulate.

    factors: per simulated rank, its compute factor in each step.
    members: per simulated rank, the ranks it stands for (identical factors; itself first).
    dropped: ranks simulated by no one (dominated by a slower simulated rank at every step).
    """

    factors: dict[int, tuple[float, ...]]
    members: dict[int, tuple[int, ...]]
    dropped: int

    @property
    def world_size(self) -> int:
        return sum(len(m) for m in self.members.values()) + self.dropped

    def describe(self) -> str:
        n, simulated = self.world_size, len(self.factors)
        if simulated == n:
            return f"all {n} ranks simulated"
        text = f"{simulated} of {n} ranks simulated ({n - self.dropped - simulated} identical ranks folded"
        if self.dropped:
            text += f", {self.dropped} ranks never the slowest dropped"
        return text + ")"


def draw_factors(world: int, iterations: int, seed: int, jitter_cv: float,
                 straggler_rank: int | None, straggler_slowdown: float) -> np.ndarray:
    """Compute factor of every rank in every step, shape (world, iterations).

    Jitter is lognormal with mean 1 and the given coefficient of variation, drawn from
    ``random.Random(seed)`` step by step, rank by rank (the order the per-rank processes drew
    them in the first step, so one-step results are unchanged); drawing them up front keeps the
    draws independent of which ranks are simulated.
    """
    factors = np.ones((world, iterations))
    if jitter_cv > 0:
        sigma = math.sqrt(math.log1p(jitter_cv**2))
        rng = random.Random(seed)
        for step in range(iterations):
            factors[:, step] = [math.exp(rng.gauss(-sigma * sigma / 2, sigma)) for _ in range(world)]
    if straggler_rank is not None and 0 <= straggler_rank < world:
        factors[straggler_rank] *= straggler_slowdown
    return factors


def _maximal(rows: np.ndarray) -> np.ndarray:
    """Indices of the rows that no other row weakly exceeds in every column (rows are distinct).

    A dominating row has a larger sum, so rows visited by decreasing sum need only be checked
    against the maximal rows found so far (a row beaten by a dropped row is beaten by whatever
    beat that one).
    """
    order = np.argsort(-rows.sum(axis=1), kind="stable")
    front: list[int] = []
    front_rows = np.empty((0, rows.shape[1]))
    for i in order.tolist():
        if len(front) and np.any(np.all(front_rows >= rows[i], axis=1)):
            continue
        front.append(i)
        front_rows = rows[front]
    return np.array(front, dtype=np.int64)


def plan_ranks(factors: np.ndarray, fold: bool = True, classes: np.ndarray | None = None) -> RankPlan:
    """Fold identical ranks and drop dominated ones (see the module docstring); rank 0 is always
    simulated, as the Result's breakdown is rank 0's. ``fold=False``: simulate every rank.
    ``classes``: per rank, its kind (ranks of different kinds never fold together)."""
    world = factors.shape[0]
    if not fold:
        return RankPlan({r: tuple(factors[r].tolist()) for r in range(world)}, {r: (r,) for r in range(world)}, 0)
    kinds = np.zeros(world) if classes is None else np.asarray(classes, dtype=np.float64)
    rows, first, inverse = np.unique(np.column_stack((kinds, factors)), axis=0, return_index=True,
                                     return_inverse=True)
    inverse = inverse.reshape(-1)
    keep = np.zeros(len(rows), dtype=bool)
    keep[inverse[0]] = True
    for kind in np.unique(rows[:, 0]):
        same = np.flatnonzero(rows[:, 0] == kind)
        if len(same) > 1:
            keep[same[_maximal(rows[same, 1:])]] = True
        else:
            keep[same] = True
    members_of = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[members_of], np.arange(len(rows) + 1))
    factors_by_rep: dict[int, tuple[float, ...]] = {}
    members: dict[int, tuple[int, ...]] = {}
    for cls in sorted(np.flatnonzero(keep).tolist(), key=lambda c: int(first[c])):
        rep = int(first[cls])
        factors_by_rep[rep] = tuple(rows[cls, 1:].tolist())
        members[rep] = tuple(members_of[bounds[cls]:bounds[cls + 1]].tolist())
    dropped = world - sum(len(m) for m in members.values())
    return RankPlan(factors_by_rep, members, dropped)


def mode_reason(requested: str, mode: str, world: int, detailed_max_gpus: int, plan: RankPlan) -> str:
    """Why the engine ran in ``mode``, and which ranks it simulated."""
    if requested == "auto":
        cmp = "<=" if mode == "detailed" else ">"
        why = f"auto: {world} GPUs {cmp} {detailed_max_gpus}, so {mode}"
    else:
        why = f"simulation.mode: {mode}"
    return f"{why}; {plan.describe()}"
