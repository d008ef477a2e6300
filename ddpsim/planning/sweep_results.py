"""A sweep's results as data: the ``sweep`` JSON document, a pandas DataFrame, and Parquet.

``sweep.csv`` stays the plain-text table. The DataFrame and Parquet are for notebooks and pipelines; pandas and
pyarrow are optional (ddpsim never needs them): ``sweep_dataframe`` says how to install pandas when it is
missing, and ``sweep.parquet`` is written only when pyarrow is importable.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ddpsim.errors import ScenarioError

# a point's numbers in sweep.csv, the sweep document and the DataFrame (a run-result's fields)
RESULT_COLUMNS = (
    "step_time_s",
    "forward_s",
    "backward_s",
    "optimizer_s",
    "comm_time_s",
    "exposed_comm_s",
    "samples_per_s",
    "tokens_per_s",
    "fits_in_memory",
)
SWEEP_JSON = "sweep.json"
SWEEP_PARQUET = "sweep.parquet"
_JSON_SCALARS = (str, int, float, bool, type(None))


def jsonable(value: Any) -> Any:
    # a YAML scalar may be a date or another type JSON has no word for: its text, as the CSV writes it
    return value if isinstance(value, _JSON_SCALARS) else str(value)


def sweep_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per point of a ``sweep`` document: grid fields, then metrics, status, error and point."""
    fields = [axis["field"] for axis in data["axes"]]
    return [
        {**{f: p["grid"].get(f) for f in fields}, **{m: p["metrics"].get(m) for m in RESULT_COLUMNS},
         "status": p["status"], "error": p["error"], "point": p["point"]}
        for p in data["points"]
    ]


def read_sweep(folder: str) -> dict[str, Any]:
    """The ``sweep`` document a sweep wrote into its ``--out`` folder."""
    from ddpsim.jsonfile import read_json_object

    path = os.path.join(folder, SWEEP_JSON) if os.path.isdir(folder) else folder
    return read_json_object(path, "sweep results (ddpsim sweep --out DIR)", field=SWEEP_JSON)


def sweep_dataframe(source: Any) -> Any:
    """A pandas DataFrame of a sweep, one row per point (the columns of sweep.csv, numbers as numbers).

    ``source``: the sweep's ``--out`` folder (or its sweep.json), a ``sweep`` document, or a ``SweepOutcome``
    (``run_sweep``'s return).
    pandas is not a ddpsim dependency: without it this raises ImportError saying how to install it.
    """
    try:
        import pandas
    except ImportError:
        raise ImportError("sweep_dataframe needs pandas, which ddpsim does not install: pip install pandas "
                          "(or read sweep.csv)") from None
    if isinstance(source, str):
        data = read_sweep(source)
    elif isinstance(source, dict):
        data = source
    else:
        data = source.to_dict()
    return pandas.DataFrame(sweep_rows(data))


def parquet_available() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def write_parquet(data: dict[str, Any], path: str) -> None:
    """sweep.parquet: the rows of ``sweep_rows`` (pyarrow must be importable: ``parquet_available``).

    A grid field whose values mix types (25, "default") is written as text, as Parquet columns have one type."""
    import pyarrow
    import pyarrow.parquet

    rows = sweep_rows(data)
    fields = [axis["field"] for axis in data["axes"]]
    for name in fields:
        kinds = {type(row[name]) for row in rows if row[name] is not None}
        if len(kinds) > 1 and not kinds <= {int, float}:
            for row in rows:
                row[name] = None if row[name] is None else str(row[name])
    try:
        table = pyarrow.Table.from_pylist(rows)
    except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError) as exc:
        raise ScenarioError(f"cannot be written as Parquet: {exc}", file=path, field="--grid") from None
    pyarrow.parquet.write_table(table, path)


def write_sweep_data(data: dict[str, Any], folder: str) -> list[str]:
    """A ``sweep`` document as sweep.json and, where pyarrow is importable, sweep.parquet into ``folder``; the
    names written."""
    with open(os.path.join(folder, SWEEP_JSON), "w", encoding="utf-8") as handle:
        handle.write(json.dumps(data, indent=1) + "\n")
    if not parquet_available():
        return [SWEEP_JSON]
    write_parquet(data, os.path.join(folder, SWEEP_PARQUET))
    return [SWEEP_JSON, SWEEP_PARQUET]
