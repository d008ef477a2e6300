"""The calibrations that ship inside the package, by the names a user types: ``pooled:H200``.

A name is ``SET:GPU``: the set says what was measured (``pooled``: every allocation of that GPU kind
fitted at once; ``x2``, ``x4``: one host of 2 or 4 GPUs; ``x4-multinode``: 4 GPUs as emulated nodes),
the GPU its kind. The files lie in ``ddpsim/calibration/shipped/`` (package data); a path that exists
always wins over a name.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ddpsim.errors import ScenarioError

SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"
# SET:GPU; the GPU as the catalog spells it or its short form (H100 for H100-SXM), any case
_NAME = re.compile(r"^([a-z0-9-]+):([A-Za-z0-9-]+)$")


def shipped_names() -> list[str]:
    """Every shipped calibration's name, e.g. ``pooled:H200``."""
    names = []
    for path in sorted(SHIPPED_DIR.glob("*.json")):
        calibration_set, _, gpu = path.stem.rpartition("-")
        names.append(f"{calibration_set}:{gpu.upper()}")
    return names


def is_shipped_name(text: str) -> bool:
    """Whether ``text`` has the form of a shipped calibration's name and is not an existing file."""
    return _NAME.match(text) is not None and not os.path.exists(text)


def shipped_path(name: str, field: str = "calibration") -> str:
    """The file of a shipped calibration; an unknown name is refused listing the known ones."""
    match = _NAME.match(name)
    if match is None:
        raise ScenarioError(f"expected SET:GPU, e.g. pooled:H200, got {name!r}", field=field)
    calibration_set, gpu = match.group(1), match.group(2).lower().split("-")[0]
    path = SHIPPED_DIR / f"{calibration_set}-{gpu}.json"
    if not path.is_file():
        raise ScenarioError(f"no shipped calibration {name!r} (shipped: {', '.join(shipped_names())}) and no such file",
                            field=field)
    return str(path)


def shipped_for_gpu(gpu: str) -> str | None:
    """The pooled shipped calibration of a catalog GPU kind, to name in a refusal (None: none ships)."""
    from ddpsim.hardware.catalog import get_gpu

    kind = get_gpu(gpu).name
    short = kind.lower().split("-")[0]
    path = SHIPPED_DIR / f"pooled-{short}.json"
    if not path.is_file():
        return None
    # the file of the short name may be a sibling kind's (pooled-h100.json is H100-SXM's, not H100-PCIe's)
    measured_on = json.loads(path.read_text(encoding="utf-8")).get("measured_on") or {}
    return f"pooled:{short.upper()}" if measured_on.get("gpu") == kind else None
