"""The example outputs printed in the user docs, each the output of the command the doc shows above it.

``python -m validation.doc_examples --write`` runs every command and rewrites its block in place;
``tests/test_doc_examples.py`` fails when a block is not what its command prints now. A command's block is
the first fenced block after the command's first mention in backticks in the doc's prose. ``whole``: the block is the whole
output; otherwise (the README's worked example, "among other rows") every line of the block is a line
of the output (a row cut short ends with "..."), and ``--write`` leaves such a block to be edited by hand.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Example:
    doc: str  # relative to the repository
    command: str  # as the doc prints it; run from a folder where scenarios/ is the repository's
    whole: bool = True


EXAMPLES = (
    Example("README.md", "ddpsim run scenarios/quickstart.yaml", whole=False),
    Example("docs/reference.md", "ddpsim tune-buckets scenarios/whatif-allreduce-algorithms-h100-128x8-gpt2.yaml --out DIR"),
    Example("docs/reference.md", "ddpsim scale scenarios/h100-2x8-ib400-gpt2.yaml --nodes 1,2,4,8,16 --price-per-gpu-hour 2.5"),
)


def block_span(text: str, command: str) -> tuple[int, int]:
    """Start and end offsets of the body of the first fenced block after the command's mention in prose."""
    at = text.index(f"`{command}`")  # in prose, not in a list of commands
    match = re.compile(r"^```[a-z]*\n(.*?)^```", re.S | re.M).search(text, at)
    if match is None:
        raise ValueError(f"no fenced block after {command!r}")
    return match.start(1), match.end(1)


def run(command: str) -> str:
    """What the command prints, run as the docs show it (``ddpsim`` is this interpreter's ``-m ddpsim``)."""
    argv = shlex.split(command)
    assert argv[0] == "ddpsim"
    with tempfile.TemporaryDirectory() as folder:
        os.symlink(ROOT / "scenarios", Path(folder) / "scenarios")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg", "COLUMNS": "110"}
        done = subprocess.run([sys.executable, "-m", "ddpsim", *argv[1:]], capture_output=True, text=True,
                              cwd=folder, env=env, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{command}: exit {done.returncode}: {done.stderr[-1000:]}")
    return done.stdout


def stale(example: Example) -> list[str]:
    """The block's lines that the command does not print now (empty: the block is current)."""
    text = (ROOT / example.doc).read_text()
    start, end = block_span(text, example.command)
    block, printed = text[start:end], run(example.command)
    if example.whole:
        return [] if block.strip() == printed.strip() else [f"{example.doc}: the block after {example.command!r} "
                                                            f"is not its output; now:\n{printed}"]
    lines = [line.rstrip() for line in printed.splitlines()]

    def shown(line: str) -> bool:  # a row the doc cut short ends with "..."
        text = line.rstrip()
        return any(out.startswith(text[:-3].rstrip()) for out in lines) if text.endswith("...") else text in lines

    return [f"{example.doc}: {line!r} not in the output of {example.command!r}"
            for line in block.splitlines() if not shown(line)]


def write(example: Example) -> None:
    path = ROOT / example.doc
    text = path.read_text()
    start, end = block_span(text, example.command)
    printed = "\n".join(line.rstrip() for line in run(example.command).strip().splitlines()) + "\n"
    path.write_text(text[:start] + printed + text[end:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite every whole block with its command's output")
    args = parser.parse_args()
    problems = []
    for example in EXAMPLES:
        if args.write and example.whole:
            write(example)
        problems += stale(example)
    print("\n".join(problems) or "every example output is current")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
