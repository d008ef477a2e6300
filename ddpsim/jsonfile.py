"""Read JSON from a user's file; every failure is one ScenarioError naming the file (and the field).

Measured data may be stored gzip-compressed beside its name (``ddp_runs.jsonl.gz`` for ``ddp_runs.jsonl``):
the committed campaigns are, so that a checkout fits what a GPU host takes. Every reader names the plain
file and ``open_data`` finds either.

Python's json module accepts what JSON does not (``NaN``, ``Infinity``) and keeps the last of a key
written twice; measured data with either is a broken measurement, not a number, so both are refused
here, for every JSON and JSONL file ddpsim reads.
"""

from __future__ import annotations

import glob
import gzip
import json
import math
import os
from typing import IO, Any

from ddpsim.errors import ScenarioError

GZIP_SUFFIX = ".gz"


def data_path(path: str | os.PathLike[str]) -> str | None:
    """The file that holds ``path``'s text: ``path`` itself, else its compressed copy ``path.gz``; None if neither."""
    name = os.fspath(path)
    for candidate in (name, name + GZIP_SUFFIX):
        if os.path.isfile(candidate):
            return candidate
    return None


def has_data(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` or its compressed copy exists."""
    return data_path(path) is not None


def open_data(path: str | os.PathLike[str], errors: str = "strict") -> IO[str]:
    """``path`` opened as UTF-8 text, read through gzip when only ``path.gz`` exists (FileNotFoundError
    names ``path`` when neither does)."""
    found = data_path(path)
    if found is None:
        raise FileNotFoundError(2, "No such file or directory", os.fspath(path))
    if found.endswith(GZIP_SUFFIX):
        return gzip.open(found, "rt", encoding="utf-8", errors=errors)
    return open(found, encoding="utf-8", errors=errors)


def data_name(name: str) -> str:
    """A data file's name as readers ask for it: ``ddp_runs.jsonl`` for ``ddp_runs.jsonl.gz``."""
    return name.removesuffix(GZIP_SUFFIX)


def glob_data(pattern: str, recursive: bool = False) -> list[str]:
    """``glob.glob(pattern)`` that also finds compressed copies, named as their plain files (sorted, once each)."""
    found = set(glob.glob(pattern, recursive=recursive))
    found.update(data_name(p) for p in glob.glob(pattern + GZIP_SUFFIX, recursive=recursive))
    return sorted(found)


class BadJSONValue(ValueError):
    """Valid to Python's parser, invalid as data: ``field`` is the dotted path of the value."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def non_finite_field(value: Any, path: str = "") -> str | None:
    """The dotted path of the first NaN or infinite number inside ``value`` (None: every number is finite)."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path or "<value>")
    if isinstance(value, dict):
        for key, item in value.items():
            found = non_finite_field(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = non_finite_field(item, f"{path}[{index}]")
            if found:
                return found
    return None


def strict_loads(text: str) -> Any:
    """``json.loads`` that refuses a key written twice in one object and NaN or infinite numbers
    (BadJSONValue naming the field); syntax errors stay ``json.JSONDecodeError``."""
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as dup:
        # the parser does not say where the object sits; the key is what the user searches for
        raise BadJSONValue("written twice in one object (JSON keeps only the last)", dup.key) from None
    bad = non_finite_field(data)
    if bad:
        raise BadJSONValue("not a finite number (NaN or Infinity is a broken measurement, not a value)", bad)
    return data


def read_json_object(path: str, what: str, field: str | None = None) -> dict[str, Any]:
    """The top-level object of ``path``; ``what`` names the file in messages ("profile", ...)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = strict_loads(handle.read())
    except FileNotFoundError:
        raise ScenarioError(f"{what} file not found", file=path, field=field) from None
    except json.JSONDecodeError as err:
        message = f"not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})"
        raise ScenarioError(message, file=path, field=field) from None
    except BadJSONValue as err:
        raise ScenarioError(str(err), file=path, field=err.field) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ScenarioError(f"cannot read {what}: {err}", file=path, field=field) from None
    if not isinstance(data, dict):
        raise ScenarioError("expected a JSON object at the top level", file=path, field=field)
    return data
