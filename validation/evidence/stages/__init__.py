"""The evidence pipeline's stages: each computes one committed output under ``validation/reports/`` from
``validation/data`` and the committed calibrations, by calling the library (never the CLI's flags)."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable


def printed(main: Callable[[], int], module: str) -> str:
    """A folded benchmark's stage output: what its ``main()`` printed (it raises where main failed)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        status = main()
    if status:
        raise RuntimeError(f"{module}: exit {status}")
    return buffer.getvalue()
