"""The shipped pooled H200 calibration re-centred on a fresh allocation's probe (its all-reduce sweeps only;
no DDP run read), as ``ddpsim calibrate DIR --recentre ddpsim/calibration/shipped/pooled-h200.json`` writes it.

Run: ``python -m validation.evidence --stage probe-mw`` (and ``probe-mw2``). The calibration is the stage's
output; the validate stages ``heldout-measure-mw-probed`` / ``-mw2-probed`` predict the allocation's DDP runs
with it.
"""

from __future__ import annotations

import json

from ddpsim.fitting.recentre import probe_calibration
from ddpsim.jsonfile import read_json_object

BASE = "ddpsim/calibration/shipped/pooled-h200.json"


def _probed(folder: str) -> str:
    base = read_json_object(BASE, "calibration", field="calibration")
    data, _notes = probe_calibration(base, [folder], base_source=BASE)
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def probe_mw() -> str:
    return _probed("validation/data/h200x2-measure-2026-11-27")


def probe_mw2() -> str:
    return _probed("validation/data/h200x2-measure-2026-11-27b")
