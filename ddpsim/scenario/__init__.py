"""Scenario schema and loading."""

from ddpsim.scenario.load import apply_overrides, load_scenario, read_scenario_dict, scenario_from_dict
from ddpsim.scenario.schema import Scenario, fields_markdown

__all__ = ["Scenario", "apply_overrides", "fields_markdown", "load_scenario", "read_scenario_dict", "scenario_from_dict"]
