"""The harness's JSON and JSONL files (standard library only: the campaign driver and ``ddpsim measure``
read them without importing torch)."""
from __future__ import annotations

import gzip
import json
import os


def append_jsonl(path: str, obj: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(obj, sort_keys=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_json(path: str, obj: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_jsonl(path: str) -> list[dict]:
    """The records of a JSONL file, or of its gzip copy ``path.gz`` (how committed campaigns are stored)."""
    out: list[dict] = []
    if not os.path.exists(path):
        if not os.path.exists(path + ".gz"):
            return out
        path += ".gz"
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line cut by a kill
    return out
