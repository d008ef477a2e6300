"""The output contracts: one JSON Schema per kind of JSON document ddpsim writes, shipped beside this module.

Every document carries ``kind``, ``schema_version`` and ``ddpsim_version`` at its top level (the calibration
file, read back by ddpsim itself, keeps its own ``schema`` string and adds ``ddpsim_version``). A document's
``schema_version`` is its schema file's, read from the file, so the two cannot drift; it moves whenever a field
is added, removed or changes meaning (docs/reference.md, "Output contracts", lists each change).

``resolved_scenario`` turns a validated Scenario into the JSON every scenario-based result embeds, and
``resolved_scenario_schema`` derives that part's schema from the same FieldSpecs the loader reads, so the
shipped ``resolved-scenario.schema.json`` is checked against the code (tests/test_output_contracts.py).

Standard library only at import (the scenario modules load inside the functions that need them): the GPU
harness, which has torch and the standard library alone, stamps its ``measure`` document with ``document``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddpsim.scenario.schema import Scenario

# kind -> what it is; each has <kind>.schema.json in this folder
KINDS: dict[str, str] = {
    "run-result": "ddpsim run --json, and result.json of ddpsim run --out",
    "sweep": "ddpsim sweep --json, and sweep.json of its --out folder",
    "sweep-point": "points/<hash>.json of a sweep's --out folder (one point; its result is a run-result)",
    "scale": "ddpsim scale --json, and scaling.json of its --out folder",
    "variability": "ddpsim variability --json, and variability.json of its --out folder",
    "tune-buckets": "ddpsim tune-buckets --json, and recommendation.json of its --out folder",
    "tune-strategy": "ddpsim tune-strategy --json",
    "validate-fsdp": "ddpsim validate-fsdp --json",
    "validation": "ddpsim validate --json, and validation.json of its --out folder",
    "calibration": "the file ddpsim calibrate --out writes (and --json prints)",
    "measure": "ddpsim measure --json: what a measurement campaign wrote into its folder",
}
# referenced by the others, never a document of its own
PARTS = ("resolved-scenario",)
URN = "urn:ddpsim:schema:"


def ddpsim_version() -> str:
    """The installed ddpsim's version (the source tree's, when run from a checkout never installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ddpsim")
    except PackageNotFoundError:  # run from a source tree that was never installed
        # the package's own __init__ is loaded before any module of it: reading its attribute imports nothing
        version_text: str = sys.modules["ddpsim"].__version__
        return version_text


@cache
def _schema_text(name: str) -> str:
    return resources.files("ddpsim.schemas").joinpath(f"{name}.schema.json").read_text(encoding="utf-8")


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema of a kind (or of a part, e.g. ``resolved-scenario``), as shipped."""
    if name not in KINDS and name not in PARTS:
        raise KeyError(f"no schema named {name!r} (kinds: {', '.join(KINDS)})")
    data: dict[str, Any] = json.loads(_schema_text(name))
    return data


@cache  # every simulated point stamps its result: read the file's version once
def schema_version(kind: str) -> int:
    version: int = schema(kind)["properties"]["schema_version"]["const"]
    return version


def document(kind: str, body: dict[str, Any], scenario: Scenario | None = None) -> dict[str, Any]:
    """``body`` as a document of ``kind``: the version fields first, then (for a scenario-based result) the
    scenario's file and every field of it after defaults, then the body."""
    head: dict[str, Any] = {"kind": kind, "schema_version": schema_version(kind), "ddpsim_version": ddpsim_version()}
    if scenario is not None:
        head["scenario"] = scenario.source
        head["resolved_scenario"] = resolved_scenario(scenario)
    # the body's own version fields (a calibration re-written from an older file) give way to this ddpsim's
    return {**head, **{key: value for key, value in body.items() if key not in head}}


def resolved_scenario(scenario: Any) -> dict[str, Any]:
    """Every scenario field after defaults, by its Python name (SI units in the name: ``bandwidth_Bps``,
    ``latency_s``); what the file left unset stays null. Only declared fields: the loaded calibration object,
    the file's path and folder are not scenario values (``calibration_path`` names the calibration)."""
    from ddpsim.scenario.fields import field_specs

    out: dict[str, Any] = {}
    for name, fs in field_specs(type(scenario)):
        value = getattr(scenario, name)
        if fs.kind == "section":
            out[name] = None if value is None else resolved_scenario(value)
        elif isinstance(value, tuple):
            out[name] = [resolved_scenario(v) if dataclasses.is_dataclass(v) else v for v in value]
        else:
            out[name] = value
    return out


def _json_type(hint: Any) -> dict[str, Any]:
    optional = False
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        hint = args[0]
    if dataclasses.is_dataclass(hint):
        out: dict[str, Any] = {"anyOf": [_object_schema(hint), {"type": "null"}]} if optional else _object_schema(hint)
        return out
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        out = {"type": "array", "items": _object_schema(item) if dataclasses.is_dataclass(item) else _json_type(item)}
    else:
        out = {"type": {bool: "boolean", int: "integer", float: "number", str: "string"}[hint]}
    if optional:
        out["type"] = [out["type"], "null"]
    return out


def _object_schema(cls: Any) -> dict[str, Any]:
    from ddpsim.scenario.fields import META

    # Scenario.calibration's type is imported only for type checkers; it is not a declared field
    hints = typing.get_type_hints(cls, localns={"Calibration": object})
    properties: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if META not in f.metadata:
            continue
        fs = f.metadata[META]
        prop = _json_type(hints[f.name])
        unset = f" (null: {fs.default_text})" if fs.default is None and fs.default_text else ""
        prop["description"] = f"scenario key {fs.key}: {fs.doc}{unset}"
        if fs.choices:
            prop["enum"] = list(fs.choices)
        for bound, word in (("minimum", "minimum"), ("above", "exclusiveMinimum"), ("maximum", "maximum")):
            if getattr(fs, bound) is not None and fs.kind not in ("section", "list"):
                prop[word] = getattr(fs, bound)
        properties[f.name] = prop
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def resolved_scenario_schema() -> dict[str, Any]:
    """The schema of ``resolved_scenario``, derived from the scenario's FieldSpecs (what the shipped
    resolved-scenario.schema.json must equal)."""
    from ddpsim.scenario.schema import Scenario

    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"{URN}resolved-scenario",
        "title": "ddpsim resolved scenario",
        "description": "Every scenario field after defaults, by its Python name with the unit in it (SI). "
                       "Generated from ddpsim/scenario/schema.py: python -m ddpsim.schemas writes it.",
        **_object_schema(Scenario),
    }


def validator(kind: str) -> Any:
    """A ``jsonschema`` validator of a kind, with every shipped schema registered for ``$ref``
    (needs the ``jsonschema`` package: pip install 'ddpsim[test]' or jsonschema)."""
    try:
        from jsonschema import Draft202012Validator
        from referencing import Registry, Resource
    except ImportError:
        raise ImportError("validating against ddpsim's schemas needs the jsonschema package: "
                          "pip install jsonschema") from None
    registry: Any = Registry().with_resources(
        (f"{URN}{name}", Resource.from_contents(schema(name))) for name in (*KINDS, *PARTS)
    )
    return Draft202012Validator(schema(kind), registry=registry)
