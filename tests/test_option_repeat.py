"""DDP options on a 4 x H200 allocation no calibration saw, the whole plan launched twice
(validation/data/h200x4-options-2026-11-27; CI has no GPU, these are its committed measurements).

The issue's rule: an option's effect counts where it exceeds 5% in both launches, in the same
direction. Which cases count is decided by the measurements alone; ddpsim's predicted effect is then
checked against them. The bound on the count right is the state when the data was committed (a
regression guard: 15 of 16, the miss is the fp16 hook on ResNet-50 at 2 GPUs)."""

import os
from collections import defaultdict

from ddpsim.calibration.file import read_calibration
from ddpsim.fitting.validate import option_effects, validate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "validation", "data", "h200x4-options-2026-11-27")
CALIBRATION = os.path.join(ROOT, "ddpsim", "calibration", "shipped", "x4-h200.json")


def _cases():
    v = validate([DATA], read_calibration(CALIBRATION))
    cases = defaultdict(list)
    for row, measured, predicted in option_effects(v.rows):
        cases[(row.model, row.world_size, row.option)].append((measured - 1, predicted - 1))
    return v, cases


def test_every_run_is_held_out_and_both_launches_are_there():
    v, cases = _cases()
    assert len(v.rows) >= 110 and all(r.held_out for r in v.rows)
    assert sum(len(c) == 2 for c in cases.values()) >= 45


def test_option_direction_where_the_repeat_launch_agrees():
    _, cases = _cases()
    counted = {k: c for k, c in cases.items()
               if len(c) == 2 and (all(m > 0.05 for m, _ in c) or all(m < -0.05 for m, _ in c))}
    assert len(counted) >= 12
    right = [k for k, c in counted.items() if (c[0][1] > 0) == (c[0][0] > 0) and c[0][1] != 0]
    assert len(right) >= len(counted) - 1, sorted(set(counted) - set(right))
    # accumulation x4 runs four forward/backward passes per step: every model and GPU count measured in
    # both launches (8 of the 9: BERT-large at 4 GPUs ran in one) agrees, and its size (about +200 to
    # +260%) is predicted within a factor 1.5
    accum = {k: c for k, c in counted.items() if k[2] == "accum4"}
    assert len(accum) == 8
    for c in accum.values():
        mean = sum(m for m, _ in c) / 2
        assert mean / 1.5 <= c[0][1] <= mean * 1.5
