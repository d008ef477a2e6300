"""``ddpsim measure --plan sharded``: DDP, ZeRO-2 and ZeRO-3 (FSDP2) steps and peak memory per link class.

One torchrun launch of ``ddpsim.measure.fsdp`` per link class on all the host's GPUs, each with its share of
the budget, killed past it (the configurations it never reached are simply absent: the records say what ran).
Resumable like the other plans: a link class whose launch ended ok in ``launches.jsonl`` is skipped.
"""
from __future__ import annotations

import os
import sys
import time

from . import campaign
from .records import append_jsonl, read_jsonl

DEFAULT_MODELS = ("gpt2-124m", "llama-1b")
# relative cost of a link class's launch (the wire carries about 1.5 x DDP's bytes per step under ZeRO-3)
WEIGHT = {"nvlink": 1.0, "shm": 1.5, "socket": 3.0}


def run(out: str, models: list[str], link_classes: list[str], gpus: list[str], budget_s: float, quick: bool) -> int:
    t0 = time.time()
    done = campaign.done_launches(out)
    world = len(gpus)
    steps = 3 if quick else 15
    if ("profile", "none", 1, 1) not in done:
        # each model's world-size-1 step (profiles/): the compute `ddpsim validate-fsdp` predicts from
        launch_id = "profile_w1_0"
        profile_budget_s = min(30.0 * len(models), 0.3 * budget_s)
        cmd = [sys.executable, "-m", "ddpsim.measure.worker", "--mode", "profile", "--out", out, "--launch-id",
               launch_id, "--models", ",".join(models), "--profile-ddp-caps", "", "--budget-s",
               str(profile_budget_s), "--profile-iters",
               "3" if quick or gpus[0] == "cpu" else "10"]
        print(f"[sharded] world-size-1 profiles of {', '.join(models)}", flush=True)
        status, rc, wall = campaign.run_launch(cmd, campaign.launch_env("nvlink", gpus[:1]),
                                               profile_budget_s + 30,
                                               os.path.join(out, "logs", launch_id + ".log"))
        append_jsonl(os.path.join(out, "launches.jsonl"), {
            "launch_id": launch_id, "kind": "profile", "transport": "none", "world_size": 1, "nodes": 1,
            "gpus_per_node": 1, "status": status, "rc": rc, "wall_s": wall, "cmd": cmd})
        print(f"[sharded]     {status} (rc={rc}) in {wall:.0f} s", flush=True)
    todo = [c for c in link_classes if ("fsdp", c, world, 1) not in done]
    for c in link_classes:
        if c not in todo:
            print(f"[sharded] {c}: done in an earlier run, skipped", flush=True)
    for i, transport in enumerate(todo):
        remaining = budget_s - (time.time() - t0)
        share = remaining * WEIGHT.get(transport, 1.5) / sum(WEIGHT.get(c, 1.5) for c in todo[i:])
        launch_id = f"fsdp_{transport}_w{world}"
        if share < 20:
            print(f"[sharded] out of budget: {transport} not measured", flush=True)
            continue
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
               "-m", "ddpsim.measure.fsdp", "--out", out, "--models", ",".join(models), "--transport", transport,
               "--steps", str(steps), "--warmup", "2" if quick else "3", "--launch-id", launch_id]
        env = campaign.launch_env(transport, gpus)
        print(f"[sharded] [{i + 1}/{len(todo)}] DDP, ZeRO-2, ZeRO-3 over {transport}, {world} GPUs: up to "
              f"{share:.0f} s; {time.time() - t0:.0f} s gone, {remaining:.0f} s of the budget left", flush=True)
        status, rc, wall = campaign.run_launch(cmd, env, share - 30 if share > 60 else share,
                                               os.path.join(out, "logs", launch_id + ".log"))
        append_jsonl(os.path.join(out, "launches.jsonl"), {
            "launch_id": launch_id, "kind": "fsdp", "transport": transport, "world_size": world, "nodes": 1,
            "gpus_per_node": world, "status": status, "rc": rc, "wall_s": wall, "cmd": cmd})
        print(f"[sharded]     {status} (rc={rc}) in {wall:.0f} s", flush=True)
    return 0


def summary_lines(out: str) -> list[str]:
    """Per model, link class and strategy: the median step and the peak memory, or why it failed."""
    lines = ["", "=== ddpsim measure (sharded): step and peak memory per GPU ==="]
    for r in read_jsonl(os.path.join(out, "fsdp_runs.jsonl")):
        what = f"  {r.get('model')} {r.get('transport')} {r.get('strategy')}"
        if r.get("strategy") != "ddp":
            what += f" ({r.get('param_dtype')} params)"
        if r.get("status") == "ok":
            peak = r.get("peak_memory_bytes")
            lines.append(f"{what}: {1e3 * r['step_s_median']:.1f} ms"
                         + (f", peak {peak / 2**30:.2f} GiB" if peak else ""))
        else:
            last = (str(r.get("error") or "").strip().splitlines() or [""])[-1]
            lines.append(f"{what}: {r.get('status')}: {last[:200]}")
    lines += ["", "next:", f"  ddpsim validate-fsdp {out}   (predicted against these steps and peaks)"]
    return lines
