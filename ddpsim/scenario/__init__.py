"""The scenario's schema: its fields, their units and bounds, and the validated Scenario value (reading a
file into one is ``ddpsim.loader``'s, which stands above the rooms the loader calls)."""

from ddpsim.scenario.schema import Scenario, fields_markdown

__all__ = ["Scenario", "fields_markdown"]
