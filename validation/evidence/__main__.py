"""``python -m validation.evidence``: rerun the stages, then assemble docs/accuracy.md.

    python -m validation.evidence              # every stage (the slow cross-validations too: about 80 CPU minutes)
    python -m validation.evidence --fast       # no stage: assemble from the committed stage outputs only
    python -m validation.evidence --quick      # the stages that take seconds, then assemble
    python -m validation.evidence --stage cross-model --stage heldout-mlp-wide
    python -m validation.evidence --check      # exit 1 if docs/accuracy.md is not what --fast would write
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from validation.evidence.assemble import ROOT, assemble, read_manifest, write
from validation.evidence.figures import FigureError
from validation.evidence.reports import ReportError
from validation.evidence.stage import run_stage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.evidence", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--fast", action="store_true", help="rerun no stage; assemble from committed outputs")
    which.add_argument("--quick", action="store_true", help="rerun only the stages without cpu_minutes")
    which.add_argument("--stage", action="append", default=[], help="rerun this stage only (repeatable)")
    which.add_argument("--check", action="store_true", help="compare docs/accuracy.md with the assembly; write nothing")
    parser.add_argument("--jobs", type=int, default=2, help="processes for a cross-validation's folds")
    args = parser.parse_args(argv)
    os.chdir(ROOT)  # reports name their data folders relative to the repository
    try:
        manifest = read_manifest(ROOT)
        if args.check:
            with open(manifest["output"], encoding="utf-8") as handle:
                current = handle.read()
            if current != assemble(ROOT, manifest):
                print(f"{manifest['output']}: not current; run 'make evidence-fast' (or 'make evidence')", file=sys.stderr)
                return 1
            print(f"{manifest['output']}: current")
            return 0
        stages = manifest["stages"]
        unknown = [name for name in args.stage if name not in stages]
        if unknown:
            print(f"{os.path.join('validation', 'evidence', 'manifest.json')}: no stage {', '.join(unknown)}",
                  file=sys.stderr)
            return 2
        if args.stage:
            todo = args.stage
        elif args.fast:
            todo = []
        else:
            todo = [n for n, s in stages.items() if not (args.quick and s.get("cpu_minutes"))]
        for name in todo:
            start = time.monotonic()
            path = run_stage(ROOT, name, stages[name], args.jobs)
            print(f"stage {name}: {path} ({time.monotonic() - start:.0f} s)", file=sys.stderr)
        print(f"wrote {write(ROOT)}")
    except (FigureError, ReportError, OSError, KeyError) as error:
        print(f"evidence: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
