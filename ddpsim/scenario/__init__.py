"""Scenario schema and loading."""

# The schema takes its link types from ddpsim.topology.link_kinds, and ddpsim.topology's builder
# imports the schema: importing the topology package first lets both finish in either order.
import ddpsim.topology  # noqa: F401  (import order, see above)
from ddpsim.scenario.load import apply_overrides, load_scenario, read_scenario_dict, scenario_from_dict
from ddpsim.scenario.schema import Scenario, fields_markdown

__all__ = ["Scenario", "apply_overrides", "fields_markdown", "load_scenario", "read_scenario_dict", "scenario_from_dict"]
