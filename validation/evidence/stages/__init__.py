"""The evidence pipeline's stages: each computes one committed output under ``validation/reports/`` from
``validation/data`` and the committed calibrations, by calling the library (never the CLI's flags)."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import replace

from ddpsim.calibration.file import Calibration


def printed(main: Callable[[], int], module: str) -> str:
    """A folded benchmark's stage output: what its ``main()`` printed (it raises where main failed)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        status = main()
    if status:
        raise RuntimeError(f"{module}: exit {status}")
    return buffer.getvalue()


def across_gpus(calibration: Calibration) -> Calibration:
    """A calibration allowed on other GPU kinds than its own, as ``--allow-other-gpu`` allows it: the evidence
    predicts H100 campaigns with H200 calibrations on purpose (how far a calibration carries), where a user's
    command refuses it."""
    return replace(calibration, other_gpu_allowed=True)
