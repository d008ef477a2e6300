"""``ddpsim measure``: measure a GPU host for ddpsim in one command (torch and the standard library only).

Runs a plan (plans.py) as one campaign (campaign.py) into an output folder that ``ddpsim calibrate`` and
``ddpsim validate`` read. The folder is resumable: the same command again skips what already ran.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from . import campaign, sharded_plan
from .args import MeasureArgError, build_parser, parse_budget_s
from .plans import DEFAULT_MODELS, LINK_CLASSES, PLANS, shapes_for
from .records import read_jsonl
from .sharded_plan import DEFAULT_MODELS as SHARDED_MODELS

EXIT_INTERRUPTED = 130  # as ddpsim's other commands: 128 + SIGINT


def _require_torch() -> None:
    """The harness runs models with torch: without it, say what to install (before anything is written)."""
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError as e:
        raise MeasureArgError(f"needs torch, which does not import here ({e}): pip install torch "
                              "(the harness needs torch and the Python standard library only)") from None


def _out_folder(text: str) -> str:
    """``--out`` as an absolute path, refused when it names a file or lies under one, or cannot be created."""
    out = os.path.abspath(text)
    if os.path.exists(out) and not os.path.isdir(out):
        raise MeasureArgError(f"--out {text}: is a file, not a folder")
    parent = out
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise MeasureArgError(f"--out {text}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise MeasureArgError(f"--out {text}: {parent} is not writable")
    return out


def _models(specs: list[str], sharded: bool = False) -> list[str]:
    from .models import resolve
    from .spec import ModelArgError

    for spec in specs:
        if "," in spec:
            raise MeasureArgError(f"--model {spec!r}: one model per --model (repeat the flag), no commas")
        try:
            if sharded:  # the FSDP harness's own built-ins (llama-1b) too
                from .fsdp import resolve_model

                resolve_model(spec)
            else:
                resolve(spec)
        except ModelArgError as e:
            raise MeasureArgError(f"--model: {e}") from e
    return specs


def _shapes(text: str | None, n_gpus: int) -> list[str]:
    if text is None:
        return shapes_for(n_gpus)
    shapes = [s.strip() for s in text.split(",") if s.strip()]
    for s in shapes:
        m = re.fullmatch(r"([1-9][0-9]*)x([1-9][0-9]*)", s)
        if not m:
            raise MeasureArgError(f"--shapes {s!r}: expected NxG, e.g. 1x4 or 2x2")
        if int(m.group(1)) * int(m.group(2)) > n_gpus:
            raise MeasureArgError(f"--shapes {s}: needs {int(m.group(1)) * int(m.group(2))} GPUs, this host has "
                                  f"{n_gpus}")
    return shapes


def _link_classes(text: str) -> list[str]:
    classes = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in classes if c not in LINK_CLASSES]
    if bad or not classes:
        raise MeasureArgError(f"--link-classes {text!r}: expected some of {', '.join(LINK_CLASSES)}")
    return classes


def _check_folder(out: str, plan_record: dict, fresh: bool) -> bool:
    """True to resume. Refuses a folder that holds another plan's results (or results of unknown plan)."""
    path = os.path.join(out, "plan.json")
    if fresh or not os.path.isdir(out):
        return False
    earlier = None
    if os.path.isfile(path):
        try:
            with open(path) as f:
                earlier = json.load(f)
        except (OSError, ValueError) as e:
            raise MeasureArgError(f"{path}: not readable JSON ({e}); --fresh starts the folder over") from e
    if earlier is None:
        if campaign.existing_results(out):
            raise MeasureArgError(f"{out}: holds measurements of no known plan (no plan.json): pass --fresh to "
                                  "delete them, or another --out")
        return False
    if earlier != plan_record:
        changed = sorted(k for k in set(earlier) | set(plan_record) if earlier.get(k) != plan_record.get(k))
        raise MeasureArgError(f"{path}: an earlier run of another plan ({', '.join(changed)} differ): the same "
                              "command resumes it; --fresh replaces it; or use another --out")
    return True


def _write_json_atomic(path: str, obj: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def summary_lines(out: str, models: list[str], dry_run: bool = False) -> list[str]:
    """Per model and link class: DDP runs ok of planned; profiles; all-reduce sweeps; failures."""
    runs = read_jsonl(os.path.join(out, "ddp_runs.jsonl"))
    sweeps = read_jsonl(os.path.join(out, "allreduce.jsonl"))
    failures = read_jsonl(os.path.join(out, "profile_failures.jsonl"))
    profiles_dir = os.path.join(out, "profiles")
    profiled = set()
    if os.path.isdir(profiles_dir):
        for name in os.listdir(profiles_dir):
            if name.endswith(".json"):
                try:
                    with open(os.path.join(profiles_dir, name)) as f:
                        profiled.add(json.load(f).get("model"))
                except (OSError, ValueError):
                    continue
    lines = ["", "=== ddpsim measure: what was measured ==="]
    classes = sorted({str(r.get("transport")) for r in runs} | {str(r.get("transport")) for r in sweeps})
    for model in models:
        cells = []
        for c in classes:
            mine = [r for r in runs if r.get("model") == model and str(r.get("transport")) == c]
            if mine:
                skipped = sum(r.get("status") == "skipped" for r in mine)
                cells.append(f"{c} {sum(r.get('status') == 'ok' for r in mine)}/{len(mine)} runs ok"
                             + (f" ({skipped} skipped: the budget ran out; --budget or fewer models)" if skipped else ""))
        prof = "profile ok" if model in profiled else "NO PROFILE (its runs cannot be predicted)"
        lines.append(f"  {model}: {prof}; " + ("; ".join(cells) if cells else "no DDP runs"))
    for c in classes:
        mine = [r for r in sweeps if str(r.get("transport")) == c]
        if mine:
            lines.append(f"  all-reduce sweeps over {c}: {sum(r.get('status', 'ok') != 'failed' for r in mine)}/"
                         f"{len(mine)} ok")
    for r in failures[-5:]:  # the error's last line (the exception), whole; the traceback is in the record
        last_line = (str(r.get("error") or "").strip().splitlines() or [""])[-1]
        lines.append(f"  profile of {r.get('model')} {r.get('status')}: {last_line[:300]} "
                     f"(traceback: {os.path.join(out, 'profile_failures.jsonl')})")
    bad = [r for r in runs if r.get("status") == "failed"]
    if bad:
        last = str(bad[-1].get("error") or "").strip().splitlines()[-1:] or [""]
        lines.append(f"  {len(bad)} DDP runs failed; the last: {bad[-1].get('model')} cap "
                     f"{bad[-1].get('bucket_cap_mb')}: {last[0][:300]}")
    if dry_run:
        return lines + ["", "a dry run on CPU slots: it checked the plan and the models, not a GPU; calibrate and "
                        "validate refuse its records (no GPU of the catalog measured them)"]
    lines += ["", "next:"] + _next_commands(out, bool(runs), bool(sweeps), sorted(profiled))
    return lines


def _next_commands(out: str, have_runs: bool, have_sweeps: bool, profiled: list[str]) -> list[str]:
    """What the folder is good for, from what it holds."""
    cal = os.path.join(out, "calibration.json")
    try:
        with open(os.path.join(out, "plan.json")) as f:
            probe_plan = json.load(f).get("plan") == "probe"
    except (OSError, ValueError, AttributeError):
        probe_plan = False
    if have_runs and not probe_plan:
        return [f"  ddpsim calibrate {out} --out {cal}   (fits the DDP overheads on the runs at caps 5 and 50)",
                f"  ddpsim validate {out} --calibration {cal}   (predicts the runs the fit left out)",
                f"  ddpsim validate {out} --cross model   (each model predicted by a fit on the others)"]
    if have_sweeps:  # the probe: this allocation's links (and DDP steps) on a calibration pooled over others
        return [f"  ddpsim calibrate {out} --recentre POOLED --out {cal}   (POOLED: a shipped pooled calibration, "
                "pooled:H100 or pooled:H200, or your own file)"]
    stems = ", ".join(profiled) or "none"
    return [f"  profiles only (one GPU, or no sweep ran): use one as `workload.model: profile:{out}/profiles/"
            f"<model>.json` in a scenario (profiled: {stems}); calibrate needs a host of 2 or more GPUs"]


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM ends the campaign as Ctrl-C does: its launch's process group is ended, exit 130."""
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt("terminated")

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    try:
        a = ap.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        with _sigterm_as_interrupt():
            return run(a)
    except KeyboardInterrupt:
        # run_launch has ended the launch's process group; the folder resumes with the same command
        lead = "\n" if sys.stderr.isatty() else ""
        print(f"{lead}ddpsim: measure: interrupted (the same command resumes)", file=sys.stderr)
        return EXIT_INTERRUPTED


def run(a: argparse.Namespace) -> int:
    """One measurement campaign from parsed arguments (``ddpsim measure``); the exit code."""
    try:
        # every option and path first, then torch and the models, the GPUs last
        plan = PLANS[a.plan]
        budget_s = parse_budget_s(a.budget) if a.budget else plan.budget_s
        link_classes = _link_classes(a.link_classes)
        if a.cpu_slots < 0:
            raise MeasureArgError(f"--cpu-slots {a.cpu_slots}: expected 1 or more (0: the host's GPUs)")
        out = _out_folder(a.out)
        _require_torch()
        default_models = SHARDED_MODELS if plan.name == "sharded" else DEFAULT_MODELS
        models = _models(a.model or list(default_models), sharded=plan.name == "sharded")
        gpus = campaign.gpu_list(a.cpu_slots)
        if not gpus:
            raise MeasureArgError("no GPU found (nvidia-smi, torch.cuda): run it on a GPU host, or --cpu-slots N "
                                  "for a dry run on the CPU (it checks the harness and your models; calibrate and "
                                  "validate refuse what it measures)")
        shapes = _shapes(a.shapes, len(gpus))
        if plan.name == "sharded" and len(gpus) < 2:
            raise MeasureArgError("--plan sharded: needs a host of 2 or more GPUs (it shards over all of them)")
        record = {"plan": plan.name, "models": models, "shapes": shapes, "link_classes": link_classes,
                  "budget_s": budget_s, "devices": len(gpus), "cpu_dry_run": bool(a.cpu_slots)}
        resume = _check_folder(out, record, a.fresh)
    except MeasureArgError as e:
        print(f"ddpsim: error: measure: {e}", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    print(f"ddpsim measure: plan {plan.name} ({plan.buys})", flush=True)
    print(f"  models: {', '.join(models)}; shapes: {', '.join(shapes) or 'none (one GPU: profiles only)'}; "
          f"link classes: {', '.join(link_classes)}; budget {budget_s:.0f} s; {len(gpus)} "
          f"{'CPU slots (dry run)' if a.cpu_slots else 'GPUs'}" + ("; resuming" if resume else ""), flush=True)
    argv_c = ["--out", out, "--models", ",".join(models), "--transports", ",".join(link_classes),
              "--budget-s", str(budget_s), "--shapes", ",".join(shapes) or "none"] + plan.campaign_args()
    if a.fresh:
        argv_c.append("--fresh")
    if resume:
        argv_c.append("--resume")
    if a.cpu_slots:
        argv_c += ["--cpu-slots", str(a.cpu_slots)]
    if not resume:
        _write_json_atomic(os.path.join(out, "plan.json"), record)
    t0 = time.time()
    if plan.name == "sharded":
        if a.fresh:
            campaign.remove_results(campaign.existing_results(out))
        rc = sharded_plan.run(out, models, link_classes, gpus, budget_s, plan.quick)
        for line in sharded_plan.summary_lines(out):
            print(line, flush=True)
        print(f"ddpsim measure: done in {time.time() - t0:.0f} s -> {out}", flush=True)
        return rc
    rc = campaign.main(argv_c)  # 1: some launch or configuration failed (the summary says which)
    for line in summary_lines(out, models, dry_run=bool(a.cpu_slots)):
        print(line, flush=True)
    print(f"ddpsim measure: done in {time.time() - t0:.0f} s -> {out}", flush=True)
    return rc
