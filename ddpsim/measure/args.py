"""The options of ``ddpsim measure``: standard library only, so that ``ddpsim --help`` lists them without
importing torch."""
from __future__ import annotations

import argparse
import math
import re
import sys
from typing import NoReturn

from .plans import DEFAULT_MODELS, LINK_CLASSES, PLANS

DESCRIPTION = """Measure this GPU host for ddpsim: all-reduce sweeps per link class, DDP step times of your
models, their world-size-1 profiles. Writes a folder that `ddpsim calibrate` and `ddpsim validate` read.
Running the same command again resumes it. Needs torch only (python -m ddpsim.measure is the same command).

--model takes a built-in name (resnet50, gpt2-124m, mlp-heavy, bert-large, vit-b16, mlp-ln-64, mlp-wide),
a factory `package.module:function` returning (model, make_batch) or (model, make_batch, loss_fn), or
`hf:CONFIG` (a Hugging Face config class, config.json or hub name; random weights). Options follow the
name: @batch=B @precision=fp32|bf16 @optimizer=sgd|adamw @seq=S (sequence models).
Across hosts: docs/measure-harness.md, "Several hosts" (torchrun --nnodes)."""
EXAMPLES = """examples:
  ddpsim measure --out runs/my-host --model mypkg.models:build@batch=16@precision=bf16@optimizer=adamw
  ddpsim measure --out runs/probe --plan probe --model hf:GPT2Config --model resnet50"""

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(s|m|min|h)?\s*$")


class MeasureArgError(ValueError):
    pass


def parse_budget_s(text: str) -> float:
    """'600', '600s', '10m', '1.5h' -> seconds."""
    m = _DURATION.match(text)
    if not m:
        raise MeasureArgError(f"--budget {text!r}: expected a duration such as 600s or 10m")
    value = float(m.group(1)) * {None: 1, "s": 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]
    if not math.isfinite(value) or value < 30:
        raise MeasureArgError(f"--budget {text!r}: at least 30 s (one launch needs about that)")
    return value


PARSER_KW = {"description": DESCRIPTION, "epilog": EXAMPLES, "formatter_class": argparse.RawDescriptionHelpFormatter}


class _Parser(argparse.ArgumentParser):
    """A usage error is one line and exit 2, as ddpsim's own parser does (this room imports nothing of it)."""

    def error(self, message: str) -> NoReturn:
        print(f"ddpsim: error: measure: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    return add_arguments(_Parser(prog="ddpsim measure", **PARSER_KW))  # type: ignore[arg-type]


def add_arguments(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``ddpsim measure`` on ``ap`` (its own parser, or the ddpsim command's subparser)."""
    ap.add_argument("--out", required=True, metavar="DIR", help="output folder (created; resumable)")
    ap.add_argument("--model", action="append", metavar="SPEC",
                    help=f"a model to measure (repeatable; default: {', '.join(DEFAULT_MODELS)})")
    ap.add_argument("--plan", choices=sorted(PLANS), default="default",
                    help="; ".join(f"{p.name}: {p.buys}" for p in PLANS.values()))
    ap.add_argument("--budget", default=None, metavar="DURATION",
                    help="wall-clock budget, e.g. 10m (default: the plan's, 10 minutes at most)")
    ap.add_argument("--shapes", default=None, metavar="NxG,...",
                    help="nodes x GPUs per node; N > 1 emulates N nodes on this host (default: 1xG for all "
                         "G GPUs)")
    ap.add_argument("--link-classes", default=",".join(LINK_CLASSES), metavar="LIST",
                    help="intra-node link classes to force: nvlink (NCCL's default), shm, socket")
    ap.add_argument("--fresh", action="store_true", help="delete DIR's earlier results first")
    ap.add_argument("--cpu-slots", type=int, default=0, metavar="N",
                    help="dry run on the CPU with gloo, pretending N devices (checks a command before GPU time)")
    return ap


