"""Parse quantities written with their unit ("450GB/s", "400Gbps", "3us", "25MB") into SI floats.

The one place that decides decimal vs binary prefixes: "MB", "GB" are powers of 10 and "MiB",
"GiB" powers of 2, as in SI and IEC. Bandwidth in bits ("Gbps", "Gb/s") is divided by 8.
"""

from __future__ import annotations

import math
import re

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_QUANTITY = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-z/]*)\s*$")

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}

_TIME_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}


class UnitError(ValueError):
    """A quantity whose number or unit does not parse; the message says what was expected."""


def _split(text: str | float | int, kind: str) -> tuple[float, str]:
    if isinstance(text, bool):
        raise UnitError(f"expected a {kind} with a unit, got {text!r}")
    if isinstance(text, int | float):
        return _finite(float(text), kind, text), ""
    match = _QUANTITY.match(str(text).replace("µ", "u"))
    if not match:
        raise UnitError(f"expected a {kind} like {_EXAMPLES[kind]}, got {text!r}")
    return _finite(float(match.group(1)), kind, text), match.group(2)


def _finite(value: float, kind: str, original: object) -> float:
    """NaN and infinity are never a quantity: YAML's .nan or an overflowing 1e400 would poison every sum."""
    if not math.isfinite(value):
        raise UnitError(f"expected a finite {kind}, got {original!r}")
    return value


_EXAMPLES = {
    "bandwidth": "'450GB/s' or '400Gbps'",
    "time": "'3us' or '1.5ms'",
    "size": "'25MB' or '25MiB'",
}


def _prefix_scale(prefix: str, kind: str, original: str) -> float:
    if prefix in _BINARY:
        return _BINARY[prefix]
    if prefix in _DECIMAL:
        return _DECIMAL[prefix]
    raise UnitError(f"unknown unit prefix {prefix!r} in {original!r}; expected a {kind} like {_EXAMPLES[kind]}")


def parse_bandwidth_Bps(text: str | float | int) -> float:
    """'450GB/s' -> 4.5e11 bytes/s; '400Gbps' or '400Gb/s' -> 5e10 bytes/s. A bare number is bytes/s."""
    value, unit = _split(text, "bandwidth")
    if unit == "":
        return value
    match = re.fullmatch(r"([KkMGTP]i?)?(B|b)(/s|ps)", unit)
    if not match:
        raise UnitError(f"expected a bandwidth like {_EXAMPLES['bandwidth']}, got {text!r}")
    scale = _prefix_scale(match.group(1) or "", "bandwidth", str(text))
    bits = match.group(2) == "b"
    return _finite(value * scale / (8.0 if bits else 1.0), "bandwidth", text)


def parse_time_s(text: str | float | int) -> float:
    """'3us' -> 3e-6 s. A bare number is seconds."""
    value, unit = _split(text, "time")
    if unit == "":
        return value
    if unit not in _TIME_S:
        raise UnitError(f"unknown time unit {unit!r} in {text!r}; expected one of {sorted(_TIME_S)}")
    return _finite(value * _TIME_S[unit], "time", text)


def parse_size_bytes(text: str | float | int) -> float:
    """'25MB' -> 25e6 bytes; '25MiB' -> 26214400 bytes. A bare number is bytes."""
    value, unit = _split(text, "size")
    if unit == "":
        return value
    match = re.fullmatch(r"([KkMGTP]i?)?B", unit)
    if not match:
        raise UnitError(f"expected a size like {_EXAMPLES['size']}, got {text!r}")
    return _finite(value * _prefix_scale(match.group(1) or "", "size", str(text)), "size", text)


def format_bytes(n_bytes: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n_bytes) >= scale:
            return f"{n_bytes / scale:.2f} {unit}"
    return f"{n_bytes:.0f} B"


def format_time(seconds: float) -> str:
    if abs(seconds) >= 1.0:
        return f"{seconds:.3f} s"
    if abs(seconds) >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def ordinal(n: int) -> str:
    """``2`` -> ``2nd``, ``11`` -> ``11th``, ``23`` -> ``23rd``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
