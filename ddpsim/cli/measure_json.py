"""``ddpsim measure --json``: the campaign as usual, its output (and its launched processes') on stderr, and
on stdout one ``measure`` document of what the folder holds at the end.

Here, not in ``ddpsim/measure``: the harness imports nothing of ddpsim outside itself (it runs on GPU hosts
with torch and the standard library), while the document is stamped by ``ddpsim.schemas``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from typing import Any

JSON_FLAG = "--json"


def measure_document(out: str, plan: dict[str, Any], exit_code: int, wall_s: float) -> dict[str, Any]:
    """The ``measure`` document (ddpsim/schemas/measure.schema.json): the plan, and the records the folder holds
    by file and status (a resumed campaign counts the earlier launches' records too)."""
    from ddpsim.measure.cli import _next_commands
    from ddpsim.measure.records import read_jsonl
    from ddpsim.schemas import document

    def by_status(name: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in read_jsonl(os.path.join(out, name)):
            status = str(record.get("status", "ok"))
            counts[status] = counts.get(status, 0) + 1
        return counts

    folder = os.path.join(out, "profiles")
    profiles = sorted(n[:-5] for n in os.listdir(folder) if n.endswith(".json")) if os.path.isdir(folder) else []
    have_runs = bool(read_jsonl(os.path.join(out, "ddp_runs.jsonl")))
    have_sweeps = bool(read_jsonl(os.path.join(out, "allreduce.jsonl")))
    return document("measure", {
        "out": out, "plan": plan, "exit_code": exit_code, "wall_s": wall_s,
        "ddp_runs": by_status("ddp_runs.jsonl"), "allreduce_sweeps": by_status("allreduce.jsonl"),
        "fsdp_runs": by_status("fsdp_runs.jsonl"), "profiles": profiles,
        "profile_failures": len(read_jsonl(os.path.join(out, "profile_failures.jsonl"))),
        "next": [line.strip() for line in _next_commands(out, have_runs, have_sweeps, profiles)],
    })


def _out_folder(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--out" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--out="):
            return arg.split("=", 1)[1]
    return None


def run(argv: list[str]) -> int:
    """``ddpsim measure ARGS --json``: ``argv`` without the flag."""
    from ddpsim.measure.cli import main as measure

    sys.stdout.flush()
    stdout_fd = os.dup(1)
    os.dup2(2, 1)  # the launched processes inherit file descriptor 1: point it at stderr for them too
    t0 = time.time()
    try:
        with contextlib.redirect_stdout(sys.stderr):  # and this process's own prints, whatever sys.stdout is
            rc = measure(argv)
    finally:
        sys.stdout.flush()
        os.dup2(stdout_fd, 1)
        os.close(stdout_fd)
    out = _out_folder(argv)
    plan_file = os.path.join(out, "plan.json") if out else ""
    if rc == 2 or not os.path.isfile(plan_file):
        return rc  # bad arguments, or --help: nothing was measured, and stderr said why
    with open(plan_file, encoding="utf-8") as handle:
        plan = json.load(handle)
    print(json.dumps(measure_document(os.path.abspath(out or "."), plan, rc, time.time() - t0), indent=2), flush=True)
    return rc
