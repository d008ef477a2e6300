"""ddpsim: predict how long a PyTorch DDP training step takes on a cluster, and which settings help."""

from ddpsim.results import Result
from ddpsim.scenario import Scenario, load_scenario
from ddpsim.simulation import simulate

__version__ = "0.1.0"
__all__ = ["Result", "Scenario", "load_scenario", "simulate"]
