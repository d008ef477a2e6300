"""Campaign driver (plain python, NOT under torchrun).

For each (shape, transport) it launches ONE ``torchrun --standalone -m ddpsim.measure.worker``
subprocess with the transport's NCCL environment, plus one world-size-1 profile launch and optionally one
micro-benchmark launch.  A shape NxG (nodes x GPUs per node) with N > 1 emulates N nodes on this host
(worker --gpus-per-node G: own NCCL_HOSTID per group; NCCL_NET=Socket NCCL_IB_DISABLE=1 between groups).
Each launch gets a time budget; a launch that hangs is killed (process group) and the campaign goes on.
Configurations a launch never reached are recorded as ``status: "failed"``.  After every launch everything
is packed into DIR/campaign.tar.gz (and optionally a copy elsewhere, --pack-to).

    python -m ddpsim.measure.campaign --out DIR [--fresh] [--quick] [--shapes 1x4,2x2,4x1 | --world-sizes 2,4]
        [--transports nvlink,shm,socket] [--algos default,ring,tree] [--models ...] [--caps 1,5,25,100]
        [--variants none,gbv,fp16,bf16,accum4,find_unused,static_graph] [--rounds 2 --steps 30]
        [--microbench] [--budget-s 480] [--repeat 1 --repeat-caps 25]

A DIR that already holds result files is refused (exit 2) unless --fresh (delete the harness's own result
files there first) or --repeat-only (append repeat launches to an earlier campaign) is given.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from typing import Any

from .records import append_jsonl, read_jsonl

TRANSPORT_ENV = {
    "nvlink": {},
    "shm": {"NCCL_P2P_DISABLE": "1"},
    "socket": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
}
ALWAYS_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# relative cost of a launch, used to split the time budget
TRANSPORT_WEIGHT = {"nvlink": 1.0, "shm": 1.3, "socket": 2.2}
# what the profile launch needs per model, its world-size-1 DDP rows included: five models took 54-62 s on
# 4 x H100 (validation/data/h100x4-options-2026-11-26f, -g); 36-43 s profiled only 3 or 4 of them (-f-w2, -h,
# h100x2-ranks-2026-11-26k), and the runs of a model without a profile cannot be predicted. With every GPU
# profiling at once, five models took 81-105 s on 2 x H100 (h100x2-profiles-2026-11-26l, -m), and the
# world-size-1 DDP rows now alternate DDP and plain steps (twice the steps)
PROFILE_S_PER_MODEL = 25.0


def launch_budget_s(kind: str, remaining_s: float, weight: float, remaining_weight: float, n_models: int) -> float:
    """One launch's share of what is left of the campaign's budget, by weight; the profile and microbench
    launches are cheap and needed, so the weights never starve them."""
    budget = remaining_s * weight / remaining_weight if remaining_weight > 0 else remaining_s
    if kind == "profile":
        return max(budget, min(PROFILE_S_PER_MODEL * n_models + 10.0, 0.5 * remaining_s))
    if kind == "microbench":
        return max(budget, min(40.0, 0.2 * remaining_s))
    return budget


# what a sweep or repeat launch needs to be worth starting: about 10 s of torchrun and NCCL start-up, a short
# sweep and a few DDP steps. Below it a launch ran its sweep and skipped every DDP run (4 x H200 probe at 85 s,
# h200x4-fresh-2026-11-28: six launches planned, two skipped outright, the four that ran wrote no DDP step)
MIN_SWEEP_LAUNCH_S = 30.0


def launch_priority(launch: Launch) -> tuple[int, int]:
    """Which launches a short budget keeps first: sweeps before repeats, and within them the link NCCL picks by
    itself on the shape (NVLink; the network alone on one GPU per node) before the forced slower classes."""
    default = "socket" if launch.shape[1] == 1 else "nvlink"
    rank = 0 if launch.transport == default else {"shm": 1, "socket": 2}.get(launch.transport, 3)
    return (0 if launch.kind == "sweep" else 1, rank)


def select_launches(launches: list[Launch], budget_s: float, n_models: int) -> tuple[list[Launch], list[Launch]]:
    """(kept, dropped): the profile and micro-benchmark launches always, then as many sweep / repeat launches, by
    ``launch_priority``, as the budget gives ``MIN_SWEEP_LAUNCH_S`` each; the kept ones stay in plan order."""
    fixed = [x for x in launches if x.kind not in ("sweep", "repeat")]
    left = budget_s - sum(launch_budget_s(x.kind, budget_s, 0.0, 1.0, n_models) for x in fixed)
    fits = max(0, int(left // MIN_SWEEP_LAUNCH_S))
    ranked = sorted((x for x in launches if x.kind in ("sweep", "repeat")), key=launch_priority)
    dropped = ranked[fits:]
    return [x for x in launches if x not in dropped], [x for x in launches if x in dropped]


def sweep_floor_s(remaining_s: float, sweeps_left: int) -> float:
    """The least a sweep launch is given whatever its weight: the weighted shares gave NVLink's launch 7 s of 61
    beside the slower classes' larger weights, and skipped it."""
    return min(MIN_SWEEP_LAUNCH_S, remaining_s / max(1, sweeps_left))


# the harness's own result files/folders in DIR (what --fresh deletes; nothing else there is touched)
RESULT_FILES = ("allreduce.jsonl", "ddp_runs.jsonl", "launches.jsonl", "profile_failures.jsonl", "microbench.jsonl",
                "netprobe.jsonl", "overlap.jsonl", "fsdp_runs.jsonl")
RESULT_DIRS = ("profiles", "logs")
RESULT_GLOBS = ("allreduce_*_w*.txt",)


def existing_results(out: str) -> list[str]:
    """Paths of harness result files/folders already in DIR (sorted)."""
    found = [os.path.join(out, f) for f in RESULT_FILES if os.path.lexists(os.path.join(out, f))]
    found += [os.path.join(out, d) for d in RESULT_DIRS if os.path.lexists(os.path.join(out, d))]
    for pat in RESULT_GLOBS:
        found += [p for p in glob.glob(os.path.join(glob.escape(out), pat)) if os.path.isfile(p)]
    return sorted(found)


def remove_results(paths: list[str]) -> None:
    for p in paths:
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.remove(p)


def gpu_list(cpu_slots: int = 0) -> list[str]:
    if cpu_slots:
        return ["cpu"] * cpu_slots  # dry run on CPU with gloo (tests, checking a command before GPU time)
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis:
        return [x.strip() for x in vis.split(",") if x.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
        n = sum(1 for line in out.splitlines() if line.startswith("GPU "))
        if n:
            return [str(i) for i in range(n)]
    except Exception:
        pass
    try:
        import torch
        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:
        return []


# between emulated nodes: NCCL's socket network transport (no InfiniBand on one host, no multi-node NVLink)
INTER_NODE_ENV = {"NCCL_NET": "Socket", "NCCL_IB_DISABLE": "1", "NCCL_MNNVL_ENABLE": "0"}
NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,ENV,TUNING,NET"}


def parse_shape(s: str) -> Shape:
    """'2x2' -> (nodes, gpus_per_node)."""
    n, g = s.lower().split("x")
    return int(n), int(g)


def launch_env(transport: str, gpus: list[str], nodes: int = 1, nccl_debug: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    for k in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_NET", "NCCL_IB_DISABLE", "NCCL_HOSTID",
              "NCCL_DEBUG_FILE"):
        env.pop(k, None)
    env.update(ALWAYS_ENV)
    env.update(TRANSPORT_ENV.get(transport, {}))
    if nodes > 1:
        env.update(INTER_NODE_ENV)
    if nccl_debug:
        env.update(NCCL_DEBUG_ENV)
    if gpus and gpus[0] != "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""  # CPU dry run (--cpu-slots): gloo
    env["DDPSIM_GPUS_ON_HOST"] = str(len([g for g in gpus if g != "cpu"]) and len(gpu_list()))
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "4")
    return env


def run_launch(cmd: list[str], env: dict[str, str], budget_s: float, log_path: str,
               grace_s: float = 30) -> tuple[str, int | None, float]:
    """Run one subprocess in its own process group; kill the group after budget_s + grace_s."""
    t0 = time.time()
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "w") as logf:
        logf.write(f"# cmd: {' '.join(cmd)}\n")
        logf.flush()
        p = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        status, rc = "ok", None
        try:
            rc = p.wait(timeout=budget_s + grace_s)
            if rc != 0:
                status = "failed"
        except subprocess.TimeoutExpired:
            status = "timeout"
            end_group(p)
            rc = p.returncode
        except BaseException:  # Ctrl-C or SIGTERM in the parent: its own session does not see it
            end_group(p, wait_s=5)
            raise
    return status, rc, time.time() - t0


def end_group(p: subprocess.Popen[bytes], wait_s: float = 10) -> None:
    """SIGTERM to a launch's process group (torchrun and its ranks), SIGKILL if still there after ``wait_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        try:
            p.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue


def tail(path: str, n: int = 3000) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def pack(out: str, extra: str | None = None) -> None:
    tmp = os.path.join(out, "campaign.tar.gz.tmp")
    with tarfile.open(tmp, "w:gz") as tf:
        for root, _dirs, files in os.walk(out):
            for fn in sorted(files):
                if fn.startswith("campaign.tar.gz"):
                    continue
                full = os.path.join(root, fn)
                tf.add(full, arcname=os.path.relpath(full, out))
    final = os.path.join(out, "campaign.tar.gz")
    os.replace(tmp, final)
    if extra:
        os.makedirs(os.path.dirname(os.path.abspath(extra)), exist_ok=True)
        with open(final, "rb") as src, open(extra + ".tmp", "wb") as dst:
            dst.write(src.read())
        os.replace(extra + ".tmp", extra)


def expected_configs(models: list[str], caps: list[int | float],
                     timing_cap: int | float | None) -> list[tuple[str, int | float, str]]:
    """The pre-interleaving plan (kept for callers of the old API)."""
    from .runner import plan_configs
    return plan_configs(models, caps, timing_cap)


def expected_runs(models: list[str], caps: list[int | float], variants: list[str], batch_sizes: list[int] | None,
                  variant_caps: list[int | float] | None, timing_cap: int | float | None, reference: RunKey | None,
                  cap_models: list[str] | None = None) -> list[RunKey]:
    """(model, batch_size, cap, variant) a launch should write, batch sizes resolved."""
    from .models import resolve
    from .runner import plan_runs

    keys = plan_runs(models, caps, variants, batch_sizes, variant_caps, timing_cap, cap_models)
    if reference is not None and reference not in keys:
        keys.append(reference)
    out: list[RunKey] = []
    for m, bs, cap, var in keys:
        try:
            rbs = resolve(m, bs).batch_size
        except Exception:  # noqa: BLE001 - an unimportable custom model: keep the requested batch size
            rbs = bs
        out.append((m, rbs, cap, var))
    return out


def failures_of(out: str, launch_ids: set[str]) -> int:
    """Launches of ``launch_ids`` that did not end ok, and DDP configurations and profiles of them recorded as failed."""
    launches = [r for r in read_jsonl(os.path.join(out, "launches.jsonl"))
                if r.get("launch_id") in launch_ids and r.get("status") != "ok"]
    runs = [r for r in read_jsonl(os.path.join(out, "ddp_runs.jsonl"))
            if r.get("launch_id") in launch_ids and r.get("status") == "failed"]
    # a profile that failed (a factory that raises) is a failure even when the budget dropped every DDP launch
    profiles = [r for r in read_jsonl(os.path.join(out, "profile_failures.jsonl"))
                if r.get("launch_id") in launch_ids and r.get("status") == "failed"]
    return len(launches) + len(runs) + len(profiles)


def done_launches(out: str) -> set[tuple[Any, Any, Any, Any]]:
    """(kind, transport, world size, nodes) of the launches in DIR/launches.jsonl that ended ok."""
    return {(r.get("kind"), r.get("transport"), r.get("world_size"), r.get("nodes"))
            for r in read_jsonl(os.path.join(out, "launches.jsonl")) if r.get("status") == "ok"}


def _what(kind: str, transport: str, nodes: int, gpus_per_node: int) -> str:
    world = nodes * gpus_per_node
    if kind == "profile":
        return f"world-size-1 profiles ({world} GPU{'s' if world > 1 else ''} at once)"
    shape = f"{nodes} emulated nodes x {gpus_per_node} GPUs" if nodes > 1 else f"{world} GPUs"
    return {"sweep": "all-reduce sweeps and DDP runs", "repeat": "repeat DDP runs",
            "microbench": "micro-benchmarks"}.get(kind, kind) + f" over {transport}, {shape}"


def record_missing(out: str, launch_id: str, base: dict[str, Any], keys: list[RunKey], why: str) -> int:
    """Configurations a launch never wrote: record them as failed."""
    have = {(r.get("model"), r.get("batch_size"), str(r.get("bucket_cap_mb")), r.get("variant", "none"))
            for r in read_jsonl(os.path.join(out, "ddp_runs.jsonl")) if r.get("launch_id") == launch_id}
    from .runner import is_default_ddp, variant_options

    n = 0
    for (m, bs, cap, var) in keys:
        if (m, bs, str(cap), var) in have:
            continue
        opts = variant_options(var)
        append_jsonl(os.path.join(out, "ddp_runs.jsonl"), dict(
            base, schema="ddpsim.ddp_run/1", status="failed", error=why, model=m, batch_size=bs,
            bucket_cap_mb=cap, launch_id=launch_id, variant=var, **opts, ddp_options_default=is_default_ddp(opts),
            fingerprint=None))
        n += 1
    return n


def trim_nccl_logs(out: str) -> None:
    """logs/nccl_<launch>_r0.log -> .trimmed.txt beside it (INIT/GRAPH lines, no per-call TUNING lines)."""
    from . import nccl_log

    for p in sorted(glob.glob(os.path.join(glob.escape(out), "logs", "nccl_*_r0.log"))):
        with open(p[:-4] + ".trimmed.txt", "w") as f:
            f.write(nccl_log.trim(nccl_log.read_from(p)))


def summary(out: str) -> str:
    runs = read_jsonl(os.path.join(out, "ddp_runs.jsonl"))
    ar = read_jsonl(os.path.join(out, "allreduce.jsonl"))
    lines = ["", "=== all-reduce (smallest / largest size; NCCL's pick per size where logged) ==="]
    for r in ar:
        tag = f"{r.get('launch_id')!s:<18} {r.get('algorithm_forced') or 'default':<7}"
        if r.get("rows"):
            big, small = r["rows"][-1], r["rows"][0]
            picks = [f"{x['bytes'] >> 10}K:{x.get('nccl_algo')}/{x.get('nccl_proto')}" for x in r["rows"][::4]
                     if x.get("nccl_algo")]
            lines.append(f"{tag} {small['time_us_median']:7.1f} us | {big['bytes']:10d} B {big['time_us_median']:9.1f} us "
                         f"busbw {big['busbw_GBps']:7.2f} GB/s nNodes {r.get('nccl_nnodes_seen')} "
                         f"ok={r.get('nccl_nnodes_verified')} forced_ok={r.get('algorithm_forced_verified')} "
                         f"{' '.join(picks)}")
        else:
            lines.append(f"{tag} FAILED {(r.get('error') or '')[-200:]}")
    lines.append("=== ddp runs: ok/failed/skipped per launch ===")
    agg: dict[Any, dict[str, int]] = {}
    for r in runs:
        k = r.get("launch_id")
        agg.setdefault(k, {"ok": 0, "failed": 0, "skipped": 0})
        agg[k][r.get("status", "failed")] = agg[k].get(r.get("status", "failed"), 0) + 1
    for k, v in agg.items():
        lines.append(f"{k!s:<22} ok {v['ok']:3d} failed {v['failed']:3d} skipped {v['skipped']:3d}")
    lines.append("=== step medians (ms): launch model cap variant: pooled [round medians] ===")
    for r in runs:
        if r.get("status") == "ok":
            rm = " ".join(f"{x * 1e3:.1f}" for x in (r.get("round_medians_s") or []))
            ref = [x["step_s_median"] * 1e3 for x in r.get("rounds") or [] if x["position"] != "round"]
            lines.append(f"{r['launch_id']!s:<16} {r['model']!s:<10} cap {r['bucket_cap_mb']!s:>4} "
                         f"{r.get('variant') or r.get('comm_hook') or '-'!s:<12} {r['step_s_median'] * 1e3:8.2f} [{rm}]"
                         + (f" ref {' '.join(f'{x:.1f}' for x in ref)}" if ref else ""))
    fails = [r for r in runs if r.get("status") == "failed"]
    for r in fails[:10]:
        lines.append(f"FAILED {r.get('launch_id')} {r.get('model')} cap {r.get('bucket_cap_mb')} {r.get('variant')}: "
                     f"{(r.get('error') or '').strip().splitlines()[-1:]}")
    mb = read_jsonl(os.path.join(out, "microbench.jsonl"))
    if mb:
        lines.append(f"=== microbench: {sum(1 for r in mb if r.get('status') == 'ok')} ok, "
                     f"{sum(1 for r in mb if r.get('status') != 'ok')} failed ===")
        for r in mb:
            if r.get("bench") == "allreduce_overlap" and r.get("status") == "ok":
                lines.append(f"{r['kernel']:<5} {r['bytes'] >> 10:6d} KiB allreduce x{r['allreduce_slowdown_ratio']:.2f} "
                             f"kernel x{r['kernel_slowdown_ratio']:.2f}")
    probes = read_jsonl(os.path.join(out, "netprobe.jsonl"))
    if probes:
        lines.append("=== net probe: per-flow rate of each point-to-point pattern ===")
        for r in probes:
            if r.get("status") == "ok":
                lines.append(f"{r['launch_id']!s:<16} r{r.get('probe_round', 0)} {r['pattern']:<18} {len(r['flows']):2d} flows "
                             f"{r['time_s_median'] * 1e3:8.2f} ms  {r['flow_GBps']:6.2f} GB/s per flow")
            else:
                lines.append(f"{r.get('launch_id')!s:<16} FAILED {(r.get('error') or '')[-200:]}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m ddpsim.measure.campaign", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fresh", action="store_true",
                    help="delete the harness's result files already in DIR (jsonl, .txt sweeps, profiles/, logs/) "
                         "first; without it a DIR holding results is refused")
    ap.add_argument("--quick", action="store_true", help="tiny iteration counts, 2 caps (smoke test)")
    ap.add_argument("--world-sizes", default="2,4", help="single-node shapes 1xW (ignored with --shapes)")
    ap.add_argument("--shapes", default=None, help="NxG list: N (emulated) nodes of G GPUs, e.g. 1x4,2x2,4x1")
    ap.add_argument("--transports", default="nvlink,shm,socket", help="intra-node transports")
    ap.add_argument("--algos", default="default", help="all-reduce sweeps per launch: default,ring,tree")
    ap.add_argument("--models", default="resnet50,gpt2-124m,mlp-heavy")
    ap.add_argument("--batch-sizes", default=None)
    ap.add_argument("--caps", default=None, help="default 1,5,10,25,50,200 (quick: 5,25)")
    ap.add_argument("--variants", default="none")
    ap.add_argument("--variant-caps", default=None)
    ap.add_argument("--cap-sweep-models", default=None, help="models that get every cap (default: all)")
    ap.add_argument("--max-live", type=int, default=6, help="DDP instances alive at once per launch")
    ap.add_argument("--skip-ddp", action="store_true", help="all-reduce sweeps only")
    ap.add_argument("--timing-cap", default="25", help="cap of the extra timing-hook run ('none' for no run)")
    ap.add_argument("--reference", default=None, help="model:cap[:variant] first and last in every launch")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=None, help="timed steps per config per round (default 30)")
    ap.add_argument("--net-steps", type=int, default=None,
                    help="steps per round in launches that use sockets (default: --steps)")
    ap.add_argument("--round-warmup", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=480.0, help="whole campaign wall budget")
    ap.add_argument("--repeat", type=int, default=0,
                    help="extra launches per (shape, transport) re-running --repeat-caps (launch-to-launch noise)")
    ap.add_argument("--repeat-caps", default="25")
    ap.add_argument("--repeat-only", action="store_true", help="only the repeat launches (append to DIR)")
    ap.add_argument("--launch-index-base", type=int, default=0, help="first launch number (ids <...>_<n>)")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--profile-gpus", type=int, default=1,
                    help="GPUs that profile every model at once, the slowest rank's profile kept (0: as many as "
                         "the campaign's largest shape uses). Default 1, one GPU alone: on three 2 x H100 "
                         "allocations profiling at once predicted no better (validation/evidence/stages/concurrent_profile.py)")
    ap.add_argument("--microbench", action="store_true", help="one micro-benchmark launch (largest world, nvlink)")
    ap.add_argument("--overlap-bench", action="store_true",
                    help="each sweep launch also times every model's backward beside all-reduces (overlap.jsonl)")
    ap.add_argument("--skip-allreduce", action="store_true")
    ap.add_argument("--net-probe", action="store_true",
                    help="multi-node launches also run point-to-point patterns over the network (netprobe.jsonl)")
    ap.add_argument("--net-probe-rounds", type=int, default=1, choices=(1, 2, 3),
                    help="probe rounds per multi-node launch (worker --net-probe-rounds)")
    ap.add_argument("--flat-weights", action="store_true",
                    help="every sweep launch gets the same share of the budget (the probe plan: on 2 x H200 at "
                         "110 s the weighted shares left NVLink's launch 10 s and skipped it, 2026-11-28)")
    ap.add_argument("--no-nccl-debug", action="store_true", help="do not set NCCL_DEBUG=INFO in sweep launches")
    ap.add_argument("--cpu-slots", type=int, default=0, help="dry run: pretend N devices, run on CPU with gloo")
    ap.add_argument("--resume", action="store_true",
                    help="DIR holds an earlier run of this plan: skip the launches that ended ok, rerun the rest")
    ap.add_argument("--pack-to", default=None, help="also copy the tarball here after every launch")
    return ap


Shape = tuple[int, int]  # (nodes, GPUs per node)
RunKey = tuple[str, int | None, int | float | None, str]  # (model, batch size, cap MB, variant)


@dataclass(frozen=True)
class Launch:
    """One subprocess of the campaign: ``kind`` profile / sweep / repeat / microbench over ``transport`` on
    ``shape``; ``index`` numbers its launch id, ``weight`` its share of the budget."""
    kind: str
    transport: str
    shape: Shape
    index: int
    weight: float

    @property
    def world(self) -> int:
        return self.shape[0] * self.shape[1]


@dataclass
class CampaignPlan:
    """What the options ask for, resolved: the launches in order and what each sweep should write."""
    out: str
    gpus: list[str]
    models: list[str]
    caps: str
    caps_l: list[int | float]
    variants: list[str]
    batch_sizes: list[int] | None
    variant_caps: list[int | float] | None
    cap_models: list[str] | None
    timing_cap: int | float | None
    steps: int
    net_steps: int
    reference: RunKey | None
    launches: list[Launch] = field(default_factory=list)


def _refuse_folder(a: argparse.Namespace, out: str) -> str | None:
    """Why DIR cannot be used with these options (None: it can); --fresh removes the earlier results here."""
    if a.fresh and a.repeat_only:
        return "--fresh and --repeat-only contradict (--repeat-only appends to DIR's results)"
    if a.fresh and a.resume:
        return "--fresh and --resume contradict (--resume keeps DIR's results)"
    old = existing_results(out) if os.path.isdir(out) else []
    if old and a.fresh:
        remove_results(old)
        print(f"[campaign] --fresh: removed {len(old)} earlier result path(s) from {out}", flush=True)
    elif old and not a.repeat_only and not a.resume:
        return (f"{out} already holds results ({', '.join(os.path.basename(p) for p in old)}): "
                "pass --fresh to delete them first, or use another --out")
    return None


def plan_campaign(a: argparse.Namespace, out: str) -> CampaignPlan:
    """The launch list from the options: (kind, transport, shape, index, weight); a shape with G == 1 has no
    intra-node transport: one launch, labelled 'socket' (everything goes through the network transport)."""
    from .runner import cap_value, parse_list, parse_reference

    gpus = gpu_list(a.cpu_slots)
    if a.shapes:
        shapes = [parse_shape(x) for x in a.shapes.split(",") if x and x != "none"]
    else:
        shapes = [(1, int(w)) for w in a.world_sizes.split(",") if w]
    shapes_ok = [s for s in shapes if s[0] * s[1] <= len(gpus)]
    for s in shapes:
        if s not in shapes_ok:
            print(f"[campaign] shape {s[0]}x{s[1]} needs {s[0] * s[1]} GPUs > {len(gpus):d}: skipped", flush=True)
    transports = [t for t in a.transports.split(",") if t]
    caps = a.caps or ("5,25" if a.quick else "1,5,10,25,50,200")
    models = [m for m in a.models.split(",") if m]
    timing_cap = None if a.timing_cap in ("none", "") else cap_value(a.timing_cap)
    caps_l = [cap_value(c) for c in caps.split(",")]
    steps = a.steps or (3 if a.quick else 30)
    if a.reference is not None:
        reference = parse_reference(a.reference, models[0])
    else:
        reference = (models[0], None, timing_cap if timing_cap in caps_l else caps_l[0], "none")
    plan = CampaignPlan(out, gpus, models, caps, caps_l, [v for v in a.variants.split(",") if v],
                        parse_list(a.batch_sizes), parse_list(a.variant_caps, cap_value),
                        [m for m in a.cap_sweep_models.split(",") if m] if a.cap_sweep_models else None,
                        timing_cap, steps, a.net_steps or steps, reference)
    launches = plan.launches
    if not a.no_profile and not a.repeat_only and gpus:
        # small weight: launch_budget_s gives the profile launch what its models need
        n_prof = a.profile_gpus or max([s[0] * s[1] for s in shapes_ok] or [1])
        launches.append(Launch("profile", "none", (1, min(n_prof, len(gpus))), 0, 0.1 + 0.05 * len(models)))
    units = []
    for shp in shapes_ok:
        trs = ["socket"] if (shp[1] == 1 and shp[0] > 1) else transports
        for tr in trs:
            net = tr == "socket" or shp[0] > 1
            w = TRANSPORT_WEIGHT.get("socket" if net else tr, 1.5) * (1.0 + 0.15 * (shp[0] * shp[1] - 2))
            if a.flat_weights:  # the probe: few DDP steps, so each launch costs about its start and sweep
                w = 1.0
            units.append((tr, shp, w))
    if not a.repeat_only:
        for tr, shp, w in units:
            launches.append(Launch("sweep", tr, shp, a.launch_index_base, w))
    if a.microbench and not a.repeat_only and gpus:
        W = max(s[0] * s[1] for s in shapes_ok) if shapes_ok else len(gpus)
        launches.append(Launch("microbench", "nvlink", (1, W), a.launch_index_base, 0.2))
    for n in range(1, a.repeat + 1):
        for tr, shp, w in units:
            launches.append(Launch("repeat", tr, shp, a.launch_index_base + n, 0.25 * w))
    return plan


def _launch_id(launch: Launch, used: set[str]) -> str:
    """A launch id not in ``used`` (added to it): sweeps count up from their index past earlier launches'."""
    N, G = launch.shape
    if launch.kind not in ("sweep", "repeat"):
        return {"profile": f"profile_w{launch.world:d}_0",
                "microbench": f"microbench_w{launch.world:d}_{launch.index:d}"}[launch.kind]
    base = f"{launch.transport}_w{launch.world:d}" if N == 1 else f"{launch.transport}_{N:d}x{G:d}"
    m = launch.index
    while f"{base}_{m:d}" in used:
        m += 1
    used.add(f"{base}_{m:d}")
    return f"{base}_{m:d}"


def expected_of(a: argparse.Namespace, plan: CampaignPlan, launch: Launch) -> list[RunKey]:
    """The DDP configurations a sweep or repeat launch should write (none for the others, or --skip-ddp)."""
    from .runner import cap_value

    if launch.kind == "sweep" and not a.skip_ddp:
        return expected_runs(plan.models, plan.caps_l, plan.variants, plan.batch_sizes, plan.variant_caps,
                             plan.timing_cap, plan.reference, plan.cap_models)
    if launch.kind == "repeat" and not a.skip_ddp:
        return expected_runs(plan.models, [cap_value(c) for c in a.repeat_caps.split(",")], ["none"],
                             plan.batch_sizes, None, None, plan.reference)
    return []


def launch_command(a: argparse.Namespace, plan: CampaignPlan, launch: Launch, lid: str,
                   budget: float) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of one launch."""
    kind, tr, (N, G), W = launch.kind, launch.transport, launch.shape, launch.world
    worker_mod = (__package__ or "ddpsim.measure") + ".worker"
    common_args = ["--models", a.models, "--round-warmup", str(a.round_warmup), "--max-live", str(a.max_live)]
    if a.batch_sizes:
        common_args += ["--batch-sizes", a.batch_sizes]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={W:d}"]
    if kind == "profile":
        # several GPUs: under torchrun, each rank profiles the same model at the same time, so the host
        # runs as many processes as in the DDP launches that follow
        runner = [sys.executable] if W == 1 else torchrun
        cmd = runner + ["-m", worker_mod, "--mode", "profile", "--out", plan.out, "--launch-id", lid,
                        "--budget-s", str(budget - 10)] + common_args
        if a.quick:
            cmd += ["--quick", "--profile-iters", "3"]
        return cmd, launch_env("nvlink", plan.gpus[:W])
    if kind == "microbench":
        cmd = torchrun + ["-m", worker_mod, "--mode", "microbench", "--out", plan.out, "--transport", tr,
                          "--launch-id", lid, "--budget-s", str(max(10.0, budget - 15))]
        return cmd, launch_env(tr, plan.gpus[:W])
    run_caps, run_variants = (plan.caps, a.variants) if kind == "sweep" else (a.repeat_caps, "none")
    st = plan.net_steps if (tr == "socket" or N > 1) else plan.steps
    cmd = torchrun + ["-m", worker_mod, "--mode", "sweep", "--out", plan.out, "--transport", tr, "--launch-id", lid,
                      "--caps", run_caps, "--variants", run_variants, "--steps", str(st), "--rounds", str(a.rounds),
                      "--budget-s", str(max(10.0, budget - 15))] + common_args
    ref = plan.reference
    cmd += ["--reference", "none" if ref is None else ":".join([ref[0], str(ref[2]), ref[3]])]
    if a.variant_caps and kind == "sweep":
        cmd += ["--variant-caps", a.variant_caps]
    if a.cap_sweep_models and kind == "sweep":
        cmd += ["--cap-sweep-models", a.cap_sweep_models]
    if a.skip_ddp:
        cmd += ["--skip-ddp"]
    if N > 1:
        cmd += ["--gpus-per-node", str(G), "--inter-node-transport", "socket"]
        if a.net_probe:  # repeat launches too: the probe's launch-to-launch spread on one allocation
            cmd += ["--net-probe", "--net-probe-rounds", str(a.net_probe_rounds)]
    if a.overlap_bench and kind == "sweep":
        cmd += ["--overlap-bench"]
    if kind == "repeat":
        cmd += ["--skip-allreduce", "--no-timing-run"]
    else:
        if plan.timing_cap is None:
            cmd += ["--no-timing-run"]
        else:
            cmd += ["--timing-cap", str(plan.timing_cap)]
        if a.skip_allreduce:
            cmd += ["--skip-allreduce"]
        cmd += ["--algos", a.algos, "--allreduce-budget-s", str(6.0 if a.quick else min(60.0, 0.3 * budget, 0.5 * max(10.0, budget - 15)))]
        if a.quick or a.cpu_slots:
            # a quick sweep still leaves its latency floor (calibrate refuses one that stops on it: 1 MiB
            # did on a CPU dry run); on CPU slots 1 MiB keeps the dry run short
            cmd += ["--allreduce-max-bytes", str(1 << 20 if a.cpu_slots else 1 << 28)]
    cmd += ["--nosync-steps", str(max(3, min(10, int(st * 0.5))))]
    if a.quick:
        cmd += ["--quick", "--warmup", "3"]
    return cmd, launch_env(tr, plan.gpus[:W], N, nccl_debug=not a.no_nccl_debug and not a.cpu_slots)


def _miss_base(launch: Launch) -> dict[str, Any]:
    """The shape fields of a configuration recorded as failed (never written by its launch)."""
    N, G = launch.shape
    return {"world_size": launch.world, "transport": launch.transport, "nodes": N, "gpus_per_node": G,
            "nodes_emulated": N > 1, "inter_node_transport": "socket" if N > 1 else None}


def record_launch(a: argparse.Namespace, plan: CampaignPlan, launch: Launch, lid: str, keys: list[RunKey],
                  outcome: tuple[str, int | None, float], cmd: list[str], env: dict[str, str], budget: float,
                  t0: float) -> None:
    """After a launch: its record, the configurations and sweeps it never wrote recorded as failed."""
    status, rc, wall = outcome
    out, tr, W = plan.out, launch.transport, launch.world
    N, G = launch.shape
    logtail = tail(os.path.join(out, "logs", lid + ".log"))
    append_jsonl(os.path.join(out, "launches.jsonl"), {
        "launch_id": lid, "kind": launch.kind, "transport": tr, "world_size": W, "nodes": N, "gpus_per_node": G,
        "status": status, "rc": rc, "wall_s": wall, "budget_s": budget, "cmd": cmd,
        "nccl_env": {k: v for k, v in env.items() if k.startswith("NCCL_")},
        "t_start_s": time.time() - t0 - wall, "log_tail": logtail[-1500:] if status != "ok" else None})
    print(f"[campaign] {time.time() - t0:5.0f}s  launch {lid!s:<16} {status} rc={rc} in {wall:.0f}s", flush=True)
    if status != "ok":
        print(logtail[-1500:], flush=True)
    if launch.kind not in ("sweep", "repeat"):
        return
    nmiss = record_missing(out, lid, _miss_base(launch), keys,
                           f"not run: launch {lid} ended with {status} (rc={rc}); see logs/{lid}.log")
    if nmiss:
        print(f"[campaign] {nmiss:d} configurations of {lid} recorded as failed (never written)", flush=True)
    if launch.kind == "sweep" and not a.skip_allreduce:
        have = {r.get("algorithm_forced") or "default" for r in read_jsonl(os.path.join(out, "allreduce.jsonl"))
                if r.get("launch_id") == lid}
        for algo in [x for x in a.algos.split(",") if x]:
            if algo not in have:
                append_jsonl(os.path.join(out, "allreduce.jsonl"), {
                    "schema": "ddpsim.allreduce/1", "status": "failed", "world_size": W, "transport": tr,
                    "launch_id": lid, "dtype": "float32", "rows": [], "fingerprint": None,
                    "nodes": N, "gpus_per_node": G, "algorithm_forced": None if algo == "default" else algo,
                    "error": f"launch {lid} ended with {status} (rc={rc}): {logtail[-800:]}"})


def run_campaign(a: argparse.Namespace, plan: CampaignPlan, t0: float) -> set[str]:
    """Every launch of the plan in turn, each within its share of the budget; the launch ids that ran."""
    out, launches = plan.out, plan.launches
    used = {r.get("launch_id") for r in read_jsonl(os.path.join(out, "ddp_runs.jsonl"))}
    used |= {r.get("launch_id") for r in read_jsonl(os.path.join(out, "allreduce.jsonl"))}
    used_ids = {str(x) for x in used if x is not None}
    done = done_launches(out) if a.resume else set()
    ran: set[str] = set()  # launch ids of this invocation
    launches, dropped = select_launches(launches, a.budget_s - (time.time() - t0), len(plan.models))
    if dropped:
        print(f"[campaign] a {a.budget_s:.0f} s budget runs {len(launches)} of {len(launches) + len(dropped)} launches "
              f"(at least {MIN_SWEEP_LAUNCH_S:.0f} s a sweep): dropping "
              f"{', '.join(_what(x.kind, x.transport, *x.shape) for x in dropped)}; about "
              f"{a.budget_s + MIN_SWEEP_LAUNCH_S * len(dropped):.0f} s runs them all", flush=True)
        for launch in dropped:
            keys = expected_of(a, plan, launch)
            if keys:
                record_missing(out, _launch_id(launch, used_ids), _miss_base(launch), keys,
                               "not run: dropped, the campaign budget was too small for every launch")
    for i, launch in enumerate(launches):
        (N, G), W = launch.shape, launch.world
        if (launch.kind, launch.transport, W, N) in done:
            print(f"[campaign] [{i + 1}/{len(launches)}] {launch.kind} {launch.transport} {N}x{G}: done in an "
                  "earlier run, skipped", flush=True)
            continue
        remaining = a.budget_s - (time.time() - t0)
        budget = launch_budget_s(launch.kind, remaining, launch.weight, sum(x.weight for x in launches[i:]),
                                 len(plan.models))
        if launch.kind in ("sweep", "repeat"):
            later = sum(1 for x in launches[i + 1:] if x.kind in ("sweep", "repeat"))
            budget = max(budget, sweep_floor_s(remaining, later + 1))
            budget = min(budget, max(sweep_floor_s(remaining, later + 1), remaining - MIN_SWEEP_LAUNCH_S * later))
        lid = _launch_id(launch, used_ids)
        keys = expected_of(a, plan, launch)
        if remaining < 20 or budget < 15:
            print(f"[campaign] out of budget: skipping {launch.kind} {lid}", flush=True)
            if keys:
                record_missing(out, lid, _miss_base(launch), keys,
                               "not run: campaign budget exhausted before this launch")
            continue
        cmd, env = launch_command(a, plan, launch, lid, budget)
        print(f"[campaign] [{i + 1}/{len(launches)}] {_what(launch.kind, launch.transport, N, G)}: launch {lid}, "
              f"up to {budget:.0f} s; {time.time() - t0:.0f} s gone, {remaining:.0f} s of the budget left", flush=True)
        print(f"[campaign]     {' '.join(cmd[2:])}", flush=True)
        outcome = run_launch(cmd, env, budget, os.path.join(out, "logs", lid + ".log"))
        ran.add(lid)
        record_launch(a, plan, launch, lid, keys, outcome, cmd, env, budget, t0)
        try:
            trim_nccl_logs(out)
            pack(out, a.pack_to)
        except Exception as e:  # noqa: BLE001
            print(f"[campaign] pack failed: {e!r}", flush=True)
    return ran


def report(out: str, ran: set[str], t0: float, pack_to: str | None) -> int:
    """The packed folder and its summary; the exit code (1: some launch or configuration of ``ran`` failed)."""
    trim_nccl_logs(out)
    pack(out, pack_to)
    print(summary(out), flush=True)
    print(f"[campaign] done in {time.time() - t0:.0f}s -> {os.path.join(out, 'campaign.tar.gz')}", flush=True)
    failed = failures_of(out, ran)
    if failed:
        print(f"[campaign] {failed} launches or configurations failed (exit 1): see the records' errors and logs/",
              flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    t0 = time.time()
    out = os.path.abspath(a.out)
    refused = _refuse_folder(a, out)
    if refused:
        print(f"[campaign] {refused}", file=sys.stderr, flush=True)
        return 2
    os.makedirs(out, exist_ok=True)
    plan = plan_campaign(a, out)
    with open(os.path.join(out, "campaign_args.json"), "w") as f:
        json.dump({"argv": sys.argv, "args": vars(a), "gpus": plan.gpus,
                   "launches": [[x.kind, x.transport, list(x.shape), x.index] for x in plan.launches]}, f, indent=1)
    ran = run_campaign(a, plan, t0)
    return report(out, ran, t0, a.pack_to)


if __name__ == "__main__":
    sys.exit(main())
