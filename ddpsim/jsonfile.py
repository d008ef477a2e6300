"""Read a JSON object from a user's file; every failure is one ScenarioError naming the file."""

from __future__ import annotations

import json
from typing import Any

from ddpsim.errors import ScenarioError


def read_json_object(path: str, what: str, field: str | None = None) -> dict[str, Any]:
    """The top-level object of ``path``; ``what`` names the file in messages ("profile", ...)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise ScenarioError(f"{what} file not found", file=path, field=field) from None
    except json.JSONDecodeError as err:
        message = f"not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})"
        raise ScenarioError(message, file=path, field=field) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ScenarioError(f"cannot read {what}: {err}", file=path, field=field) from None
    if not isinstance(data, dict):
        raise ScenarioError("expected a JSON object at the top level", file=path, field=field)
    return data
