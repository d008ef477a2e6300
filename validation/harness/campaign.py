"""Campaign driver (plain python, NOT under torchrun).

For each (transport, world size) it launches ONE ``torchrun --standalone -m validation.harness.worker``
subprocess with the transport's NCCL environment, plus one world-size-1 profile launch.  Each launch gets a
time budget; a launch that hangs is killed (process group) and the campaign goes on.  Configurations a
launch never reached are recorded as ``status: "failed"``.  At the end (and after every launch) everything
is packed into DIR/campaign.tar.gz (and optionally a copy elsewhere, --pack-to).

    python -m validation.harness.campaign --out DIR [--fresh] [--quick] [--world-sizes 2,4]
        [--transports nvlink,shm,socket] [--models ...] [--caps 1,5,10,25,50,200] [--budget-s 480]
        [--repeat 1 --repeat-caps 25]

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

from .common import append_jsonl, read_jsonl

TRANSPORT_ENV = {
    "nvlink": {},
    "shm": {"NCCL_P2P_DISABLE": "1"},
    "socket": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
}
ALWAYS_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# relative cost of a launch, used to split the time budget
TRANSPORT_WEIGHT = {"nvlink": 1.0, "shm": 1.3, "socket": 2.2}


# the harness's own result files/folders in DIR (what --fresh deletes; nothing else there is touched)
RESULT_FILES = ("allreduce.jsonl", "ddp_runs.jsonl", "launches.jsonl", "profile_failures.jsonl")
RESULT_DIRS = ("profiles", "logs")
RESULT_GLOBS = ("allreduce_*_w*.txt",)


def existing_results(out):
    """Paths of harness result files/folders already in DIR (sorted)."""
    found = [os.path.join(out, f) for f in RESULT_FILES if os.path.lexists(os.path.join(out, f))]
    found += [os.path.join(out, d) for d in RESULT_DIRS if os.path.lexists(os.path.join(out, d))]
    for pat in RESULT_GLOBS:
        found += [p for p in glob.glob(os.path.join(glob.escape(out), pat)) if os.path.isfile(p)]
    return sorted(found)


def remove_results(paths):
    for p in paths:
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.remove(p)


def gpu_list():
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


def launch_env(transport, gpus):
    env = dict(os.environ)
    for k in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"):
        env.pop(k, None)
    env.update(ALWAYS_ENV)
    env.update(TRANSPORT_ENV.get(transport, {}))
    env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    env["DDPSIM_GPUS_ON_HOST"] = str(len(gpu_list()))
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "4")
    return env


def run_launch(cmd, env, budget_s, log_path, grace_s=30):
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
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    p.wait(timeout=10)
                    break
                except subprocess.TimeoutExpired:
                    continue
            rc = p.returncode
    return status, rc, time.time() - t0


def tail(path, n=3000):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def pack(out, extra=None):
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


def expected_configs(models, caps, timing_cap):
    from .worker import plan_configs
    return plan_configs(models, caps, timing_cap)


def record_missing(out, launch_id, transport, W, models, caps, timing_cap, why):
    """Configurations a launch never wrote: record them as failed."""
    from .models import MODELS
    have = {(r.get("model"), str(r.get("bucket_cap_mb")), r.get("comm_hook"))
            for r in read_jsonl(os.path.join(out, "ddp_runs.jsonl")) if r.get("launch_id") == launch_id}
    n = 0
    for (m, cap, hook) in expected_configs(models, caps, timing_cap):
        if (m, str(cap), hook) in have:
            continue
        spec = MODELS[m]
        append_jsonl(os.path.join(out, "ddp_runs.jsonl"), {
            "schema": "ddpsim.ddp_run/1", "status": "failed", "error": why, "model": m,
            "batch_size": spec.batch_size, "precision": spec.precision, "seq_len": spec.seq_len,
            "bucket_cap_mb": cap, "world_size": W, "transport": transport, "launch_id": launch_id,
            "comm_hook": hook, "fingerprint": None})
        n += 1
    return n


def summary(out):
    runs = read_jsonl(os.path.join(out, "ddp_runs.jsonl"))
    ar = read_jsonl(os.path.join(out, "allreduce.jsonl"))
    lines = ["", "=== all-reduce (largest size) ==="]
    for r in ar:
        if r.get("rows"):
            big = r["rows"][-1]
            small = r["rows"][0]
            lines.append(f"{r.get('launch_id')!s:<22} {small['bytes']:4d} B {small['time_us_median']:7.1f} us | "
                         f"{big['bytes']:10d} B {big['time_us_median']:9.1f} us busbw {big['busbw_GBps']:7.2f} GB/s")
        else:
            lines.append(f"{r.get('launch_id')!s:<22} FAILED {(r.get('error') or '')[-200:]}")
    lines.append("=== ddp runs: ok/failed/skipped per launch ===")
    agg = {}
    for r in runs:
        k = r.get("launch_id")
        agg.setdefault(k, {"ok": 0, "failed": 0, "skipped": 0})
        agg[k][r.get("status", "failed")] = agg[k].get(r.get("status", "failed"), 0) + 1
    for k, v in agg.items():
        lines.append(f"{k!s:<22} ok {v['ok']:3d} failed {v['failed']:3d} skipped {v['skipped']:3d}")
    lines.append("=== step medians (s): model cap hook -> per launch (step / nosync) ===")
    for r in runs:
        if r.get("status") == "ok":
            lines.append(f"{r['launch_id']!s:<18} {r['model']!s:<10} cap {r['bucket_cap_mb']!s:>5} "
                         f"{r.get('comm_hook') or '-'!s:<6} step {r['step_s_median']:.4f} "
                         f"[{r['step_s_p10']:.4f},{r['step_s_p90']:.4f}] "
                         f"nosync {r.get('nosync_step_s_median') or -1:.4f} "
                         f"nbuckets {len(r.get('bucket_sizes_bytes') or [])}")
    fails = [r for r in runs if r.get("status") == "failed"]
    for r in fails[:10]:
        lines.append(f"FAILED {r.get('launch_id')} {r.get('model')} cap {r.get('bucket_cap_mb')}: "
                     f"{(r.get('error') or '').strip().splitlines()[-1:]}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fresh", action="store_true",
                    help="delete the harness's result files already in DIR (jsonl, .txt sweeps, profiles/, logs/) "
                         "first; without it a DIR holding results is refused")
    ap.add_argument("--quick", action="store_true", help="tiny iteration counts, 2 caps (smoke test)")
    ap.add_argument("--world-sizes", default="2,4")
    ap.add_argument("--transports", default="nvlink,shm,socket")
    ap.add_argument("--models", default="resnet50,gpt2-124m,mlp-heavy")
    ap.add_argument("--caps", default=None, help="default 1,5,10,25,50,200 (quick: 5,25)")
    ap.add_argument("--timing-cap", default="25", help="cap of the extra comm-hook timing run ('none' for no run)")
    ap.add_argument("--budget-s", type=float, default=480.0, help="whole campaign wall budget")
    ap.add_argument("--repeat", type=int, default=1,
                    help="extra launches per (transport, world) re-running --repeat-caps (repeat noise)")
    ap.add_argument("--repeat-caps", default="25")
    ap.add_argument("--repeat-only", action="store_true", help="only the repeat launches (append to DIR)")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--skip-allreduce", action="store_true")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--pack-to", default=None, help="also copy the tarball here after every launch")
    ap.add_argument("--nnodes-note", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    t0 = time.time()
    out = os.path.abspath(a.out)
    if a.fresh and a.repeat_only:
        print("[campaign] --fresh and --repeat-only contradict (--repeat-only appends to DIR's results)",
              file=sys.stderr, flush=True)
        return 2
    old = existing_results(out) if os.path.isdir(out) else []
    if old and a.fresh:
        remove_results(old)
        print(f"[campaign] --fresh: removed {len(old)} earlier result path(s) from {out}", flush=True)
    elif old and not a.repeat_only:
        print(f"[campaign] {out} already holds results ({', '.join(os.path.basename(p) for p in old)}): "
              "pass --fresh to delete them first, or use another --out", file=sys.stderr, flush=True)
        return 2
    os.makedirs(out, exist_ok=True)
    gpus = gpu_list()
    worlds = [int(w) for w in a.world_sizes.split(",") if w]
    worlds_ok = [w for w in worlds if w <= len(gpus)]
    for w in worlds:
        if w not in worlds_ok:
            print(f"[campaign] world size {w:d} > {len(gpus):d} GPUs: skipped", flush=True)
    transports = [t for t in a.transports.split(",") if t]
    caps = a.caps or ("5,25" if a.quick else "1,5,10,25,50,200")
    models = [m for m in a.models.split(",") if m]
    timing_cap = None if a.timing_cap in ("none", "") else (int(float(a.timing_cap))
                                                            if float(a.timing_cap).is_integer() else float(a.timing_cap))
    caps_l = [int(c) if float(c).is_integer() else float(c) for c in caps.split(",")]
    steps = a.steps or (3 if a.quick else 10)

    # launch list: (kind, transport, world, n, weight)
    launches = []
    if not a.no_profile and not a.repeat_only and gpus:
        launches.append(("profile", "none", 1, 0, 1.0))
    if not a.repeat_only:
        for W in worlds_ok:
            for tr in transports:
                launches.append(("sweep", tr, W, 0, TRANSPORT_WEIGHT.get(tr, 1.5) * (1.0 + 0.15 * (W - 2))))
    for n in range(1, a.repeat + 1):
        for W in worlds_ok:
            for tr in transports:
                launches.append(("repeat", tr, W, n, 0.25 * TRANSPORT_WEIGHT.get(tr, 1.5)))

    # a launch id already present in DIR gets the next free number (append-friendly)
    used = {r.get("launch_id") for r in read_jsonl(os.path.join(out, "ddp_runs.jsonl"))}
    used |= {r.get("launch_id") for r in read_jsonl(os.path.join(out, "allreduce.jsonl"))}
    with open(os.path.join(out, "campaign_args.json"), "w") as f:
        json.dump({"argv": sys.argv, "args": vars(a), "gpus": gpus, "launches": [x[:4] for x in launches]}, f,
                  indent=1)

    mod_prefix = __package__ or "validation.harness"
    worker_mod = mod_prefix + ".worker"
    for i, (kind, tr, W, n, wgt) in enumerate(launches):
        remaining = a.budget_s - (time.time() - t0)
        rem_w = sum(x[4] for x in launches[i:])
        budget = remaining * wgt / rem_w if rem_w > 0 else remaining
        if remaining < 20 or budget < 15:
            print(f"[campaign] out of budget: skipping {kind} {tr} w{W:d} #{n:d}", flush=True)
            if kind != "profile":
                lid = f"{tr}_w{W:d}_{n:d}"
                rc_caps = caps_l if kind == "sweep" else [int(c) for c in a.repeat_caps.split(",")]
                record_missing(out, lid, tr, W, models, rc_caps, timing_cap if kind == "sweep" else None,
                               "not run: campaign budget exhausted before this launch")
            continue
        if kind == "profile":
            lid = "profile_w1_0"
            cmd = [sys.executable, "-m", worker_mod, "--mode", "profile", "--out", out, "--models", a.models,
                   "--launch-id", lid, "--budget-s", str(budget - 10)]
            if a.quick:
                cmd += ["--quick", "--profile-iters", "3"]
            env = launch_env("nvlink", gpus[:1])
        else:
            m = n
            while f"{tr}_w{W:d}_{m:d}" in used:
                m += 1
            lid = f"{tr}_w{W:d}_{m:d}"
            used.add(lid)
            run_caps = caps if kind == "sweep" else a.repeat_caps
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={W:d}",
                   "-m", worker_mod, "--mode", "sweep", "--out", out, "--transport", tr, "--launch-id", lid,
                   "--models", a.models, "--caps", run_caps, "--steps", str(steps),
                   "--budget-s", str(max(10.0, budget - 15))]
            if kind == "repeat":
                cmd += ["--skip-allreduce", "--no-timing-run"]
            else:
                if timing_cap is None:
                    cmd += ["--no-timing-run"]
                else:
                    cmd += ["--timing-cap", str(timing_cap)]
                if a.skip_allreduce:
                    cmd += ["--skip-allreduce"]
                cmd += ["--allreduce-budget-s", str(6.0 if a.quick else min(40.0, 0.3 * budget))]
            if tr == "socket":
                cmd += ["--nosync-steps", str(max(3, int(steps * 0.6)))]
            if a.quick:
                cmd += ["--quick", "--warmup", "3"]
            env = launch_env(tr, gpus[:W])
        print(f"[campaign] {time.time() - t0:5.0f}s  launch {lid!s:<16} budget {budget:5.0f}s  "
              f"{' '.join(cmd[2:])}", flush=True)
        status, rc, wall = run_launch(cmd, env, budget, os.path.join(out, "logs", lid + ".log"))
        logtail = tail(os.path.join(out, "logs", lid + ".log"))
        append_jsonl(os.path.join(out, "launches.jsonl"), {
            "launch_id": lid, "kind": kind, "transport": tr, "world_size": W, "status": status, "rc": rc,
            "wall_s": wall, "budget_s": budget, "cmd": cmd, "nccl_env": {k: v for k, v in env.items()
                                                                       if k.startswith("NCCL_")},
            "log_tail": logtail[-1500:] if status != "ok" else None})
        print(f"[campaign] {time.time() - t0:5.0f}s  launch {lid!s:<16} {status} rc={rc} in {wall:.0f}s",
              flush=True)
        if status != "ok":
            print(logtail[-1500:], flush=True)
        if kind != "profile":
            run_caps_l = caps_l if kind == "sweep" else [int(c) for c in a.repeat_caps.split(",")]
            nmiss = record_missing(out, lid, tr, W, models, run_caps_l, timing_cap if kind == "sweep" else None,
                                   f"not run: launch {lid} ended with {status} (rc={rc}); see logs/{lid}.log")
            if nmiss:
                print(f"[campaign] {nmiss:d} configurations of {lid} recorded as failed (never written)",
                      flush=True)
            if kind == "sweep" and not a.skip_allreduce:
                have_ar = any(r.get("launch_id") == lid for r in read_jsonl(os.path.join(out, "allreduce.jsonl")))
                if not have_ar:
                    append_jsonl(os.path.join(out, "allreduce.jsonl"), {
                        "schema": "ddpsim.allreduce/1", "status": "failed", "world_size": W, "transport": tr,
                        "launch_id": lid, "dtype": "float32", "rows": [], "fingerprint": None,
                        "error": f"launch {lid} ended with {status} (rc={rc}): {logtail[-800:]}"})
        try:
            pack(out, a.pack_to)
        except Exception as e:
            print(f"[campaign] pack failed: {e!r}", flush=True)
    pack(out, a.pack_to)
    print(summary(out), flush=True)
    print(f"[campaign] done in {time.time() - t0:.0f}s -> {os.path.join(out, 'campaign.tar.gz')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
