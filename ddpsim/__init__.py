"""ddpsim: predict how long a PyTorch DDP training step takes on a cluster, and which settings help."""

from ddpsim.results import Result
from ddpsim.scenario import Scenario, load_scenario

__version__ = "0.1.0"
__all__ = ["Result", "Scenario", "load_scenario", "simulate"]


def simulate(scenario: Scenario) -> Result:
    """Simulate the scenario's steady-state DDP step (see ``ddpsim.simulate.simulate``)."""
    from ddpsim.simulate import simulate as _simulate

    return _simulate(scenario)
