"""How a scenario field is declared: its YAML key, unit kind, default, bounds and doc (``FieldSpec``).

Every section of the schema (``schema.py``) and the overhead terms (``overheads.py``) declare their
fields with ``spec()`` and ``section()``; the loader reads a section generically from these specs and
``schema.fields_markdown()`` writes the README's field table from them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ddpsim.units import parse_bandwidth_Bps, parse_size_bytes, parse_time_s

# How a value is written in YAML; ``fields_markdown`` shows these words.
KIND_TEXT = {
    "text": "text",
    "int": "integer",
    "number": "number",
    "bool": "true / false",
    "choice": "one of",
    "bandwidth": 'bandwidth ("450GB/s", "400Gbps")',
    "time": 'time ("3us", "1.5ms")',
    "mib": 'MiB (5) or a size ("25MB", "25MiB")',
    "path": "file path",
    "section": "section",
    "list": "list",
}
_PARSERS = {"bandwidth": parse_bandwidth_Bps, "time": parse_time_s, "size": parse_size_bytes}

META = "ddpsim"


@dataclass(frozen=True)
class FieldSpec:
    """One YAML field: key, kind, default (as written in YAML), bounds and doc.

    ``default`` is ``REQUIRED``, ``None`` (optional: absent means "not set") or a value as a user
    would write it ("40us", 2.0). ``low_rule`` / ``high_rule`` phrase a bound for messages.
    """

    key: str
    kind: str
    doc: str
    default: Any = None
    choices: tuple[str, ...] = ()
    minimum: float | None = None  # inclusive
    above: float | None = None  # exclusive lower bound
    maximum: float | None = None  # inclusive
    low_rule: str = ""  # how a value below the lower bound is told ("is a factor >= 1")
    high_rule: str = ""  # how a value above the upper bound is told
    default_text: str = ""  # when the default is not a plain value ("by type", "one per GPU")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def si_default(self) -> Any:
        """The default in the dataclass's unit (what a missing field becomes)."""
        if self.default is None or self.default is REQUIRED:
            return None
        parser = _PARSERS.get(self.kind)
        return parser(self.default) if parser is not None else self.default


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


def spec(key: str, kind: str, doc: str, default: Any = None, *, code_default: bool = True, **bounds: Any) -> Any:
    """A dataclass field described by a FieldSpec; its Python default is the YAML default in SI.

    ``code_default=False`` keeps the field required in Python (an earlier field has no default, or the
    default depends on another field, as intra-node bandwidth on the link type).
    """
    field_spec = FieldSpec(key, kind, doc, default, **bounds)
    metadata = {META: field_spec}
    if field_spec.required or not code_default:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=field_spec.si_default(), metadata=metadata)


def section(key: str, doc: str, factory: Any = None, *, optional: bool | None = None) -> Any:
    """A nested section; ``optional`` (default: it has a factory) says whether YAML may omit it."""
    omittable = factory is not None if optional is None else optional
    metadata = {META: FieldSpec(key, "section", doc, None if omittable else REQUIRED)}
    if factory is None:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default_factory=factory, metadata=metadata)


def field_specs(cls: type) -> list[tuple[str, FieldSpec]]:
    """(attribute name, FieldSpec) of every YAML field of a dataclass, in declaration order."""
    return [(f.name, f.metadata[META]) for f in dataclasses.fields(cls) if META in f.metadata]


# bounds shared by many fields
FACTOR_BOUNDS: dict[str, Any] = {"minimum": 1.0, "maximum": 1000.0, "low_rule": "is a factor >= 1"}
BANDWIDTH_BOUNDS: dict[str, Any] = {"minimum": 1e3, "maximum": 1e15}  # 1 kB/s to 1 PB/s: beyond, times underflow or explode
LATENCY_BOUNDS: dict[str, Any] = {"minimum": 0.0, "maximum": 3600.0}
