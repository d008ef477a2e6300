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
        draws = _gauss(random.Random(seed), world * iterations)
        factors[:] = np.exp(-sigma * sigma / 2 + draws * sigma).reshape(iterations, world).T
    if straggler_rank is not None and 0 <= straggler_rank < world:
        factors[straggler_rank] *= straggler_slowdown
    return factors


def _gauss(rng: random.Random, count: int) -> np.ndarray:
    """``count`` successive ``rng.gauss(0, 1)`` draws, as arrays: numpy's MT19937 set to the Random's
    state gives the same 32-bit words, turned into ``random()`` and Box-Muller pairs as CPython's
    ``Random.gauss`` does (131,072 draws in milliseconds instead of half a second; the same numbers,
    up to how numpy's and the C library's cos, sin and log round, which agree here to the bit)."""
    _, internal, pending = rng.getstate()
    start = 0 if pending is None else 1
    pairs = (count - start + 1) // 2
    words = np.random.MT19937()
    words.state = {"bit_generator": "MT19937",
                   "state": {"key": np.array(internal[:624], dtype=np.uint32), "pos": internal[624]}}
    raw = words.random_raw(4 * pairs).astype(np.uint64).reshape(-1, 2)
    uniform = ((raw[:, 0] >> 5).astype(np.float64) * 67108864.0 + (raw[:, 1] >> 6).astype(np.float64)) \
        * (1.0 / 9007199254740992.0)
    angle = uniform[0::2] * (2 * math.pi)
    radius = np.sqrt(-2.0 * np.log(1.0 - uniform[1::2]))
    z = np.empty(start + 2 * pairs)
    if pending is not None:
        z[0] = pending
    z[start::2] = np.cos(angle) * radius
    z[start + 1::2] = np.sin(angle) * radius
    return z[:count]


def _maximal(rows: np.ndarray, block: int = 512) -> np.ndarray:
    """Indices of rows that no other row weakly exceeds in every column: one per distinct such row,
    the lowest index that has it.

    A row is beaten only by rows of larger sum (or by an equal row, which has the same sum): visited
    by decreasing sum (ties by index), a row is maximal unless a maximal row found before it, or an
    earlier row of its own block, is at least as large everywhere (a row beaten by a beaten row is
    beaten by whatever beat that one). Blocks of rows are checked at once against the rows found so
    far and among themselves. One column: the largest value, at its lowest index.
    """
    if rows.shape[1] == 1:
        return np.array([int(np.argmax(rows[:, 0]))], dtype=np.int64)
    order = np.lexsort((np.arange(len(rows)), -rows.sum(axis=1)))
    front: list[np.ndarray] = []
    front_rows = np.empty((0, rows.shape[1]))
    for start in range(0, len(order), block):
        index = order[start:start + block]
        candidates = rows[index]
        if len(front_rows):
            beaten = np.zeros(len(index), dtype=bool)
            for first in range(0, len(front_rows), block):
                part = front_rows[first:first + block]
                beaten |= np.all(candidates[:, None, :] <= part[None, :, :], axis=2).any(axis=1)
            index, candidates = index[~beaten], candidates[~beaten]
        earlier = np.tri(len(index), k=-1, dtype=bool)  # [i, j]: row j comes before row i
        beaten = (np.all(candidates[None, :, :] >= candidates[:, None, :], axis=2) & earlier).any(axis=1)
        front.append(index[~beaten])
        front_rows = np.vstack([front_rows, candidates[~beaten]])
    return np.concatenate(front) if front else np.zeros(0, dtype=np.int64)


def plan_ranks(factors: np.ndarray, fold: bool = True, classes: np.ndarray | None = None) -> RankPlan:
    """Fold identical ranks and drop dominated ones (see the module docstring); rank 0 is always
    simulated, as the Result's breakdown is rank 0's. ``fold=False``: simulate every rank.
    ``classes``: per rank, its kind (ranks of different kinds never fold together). A simulated rank
    is the lowest rank of its class."""
    world = factors.shape[0]
    if not fold:
        return RankPlan({r: tuple(factors[r].tolist()) for r in range(world)}, {r: (r,) for r in range(world)}, 0)
    kinds = np.zeros(world) if classes is None else np.asarray(classes, dtype=np.float64)
    table = np.column_stack((kinds, factors))
    reps = {0}
    for kind in np.unique(kinds):
        same = np.flatnonzero(kinds == kind)
        reps.update(same[_maximal(factors[same])].tolist())
    factors_by_rep: dict[int, tuple[float, ...]] = {}
    members: dict[int, tuple[int, ...]] = {}
    # a rank's members are the ranks of its row: looked up among those of its first step's factor (sorted
    # once where there are many simulated ranks, a pass over the ranks for each of a few)
    column = table[:, 1] if table.shape[1] > 1 else table[:, 0]
    by_value = np.argsort(column, kind="stable") if len(reps) > 16 else None
    for rep in sorted(reps):
        factors_by_rep[rep] = tuple(factors[rep].tolist())
        if by_value is None:
            same = np.flatnonzero(column == column[rep])
        else:
            ordered = column[by_value]
            same = by_value[np.searchsorted(ordered, column[rep], "left"):np.searchsorted(ordered, column[rep], "right")]
        members[rep] = tuple(np.sort(same[np.all(table[same] == table[rep], axis=1)]).tolist())
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
