"""``python -m ddpsim.schemas``: rewrite resolved-scenario.schema.json from the scenario's FieldSpecs, after a
scenario field changed (then move the schema_version of every kind that embeds it: docs/reference.md)."""

from __future__ import annotations

import json
import os

from ddpsim.schemas import resolved_scenario_schema

if __name__ == "__main__":
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resolved-scenario.schema.json")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(resolved_scenario_schema(), indent=1) + "\n")
    print(f"wrote {path}")
