"""ddpsim: predict how long a PyTorch DDP training step takes on a cluster, and which settings help.

The public names load on first use, so that ``ddpsim.measure`` (the GPU harness) runs on a host that has
torch and the standard library only: importing this package pulls in no simulator dependency.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddpsim.loader import load_scenario
    from ddpsim.results import Result
    from ddpsim.scenario import Scenario
    from ddpsim.simulation import simulate

__version__ = "0.1.0"
__all__ = ["Result", "Scenario", "load_scenario", "simulate"]

_HOME = {"Result": "ddpsim.results", "Scenario": "ddpsim.scenario", "load_scenario": "ddpsim.loader",
         "simulate": "ddpsim.simulation"}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'ddpsim' has no attribute {name!r}")
