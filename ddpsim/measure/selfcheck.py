"""GPU self-check of the harness: every CUDA path of ``ddpsim measure`` on whatever GPUs this host has.

    python -m ddpsim.measure.selfcheck --out DIR        (or: make gpu-check)

Runs, each as the campaign runs it (its own launch, its own time limit): the world-size-1 profile (with its
world-size-1 DDP rows and its memory record), the trace capture, the allocator's peak counters, DDP under
torchrun at each link class the host has (nvlink = NCCL's default, shm, socket; 2+ GPUs), and FSDP2 ZeRO-2 /
ZeRO-3 with an fp32 BatchNorm model and a bf16 decoder (2+ GPUs). Each result is checked for its shape, its
device and every field ddpsim reads. Prints one line per check (``ok`` or ``FAIL`` with one line per problem),
writes DIR/selfcheck.json, exits 1 when a check failed, 2 on a bad argument or a host without a GPU.
About 2 minutes on 2 x H200 (at most --budget-s, 180 s by default).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

SCHEMA = "ddpsim.selfcheck/1"
CHECK_MODEL = "ddpsim.measure.selfcheck:check_model"  # fp32, SGD, BatchNorm buffers
BF16_MODEL = "llama-tiny@precision=bf16@optimizer=adamw"  # bf16 autocast, AdamW, a decoder's blocks
LINK_CLASSES = ("nvlink", "shm", "socket")
# what NCCL prints as "via ..." for each forced link class (nccl_log.topology's nccl_transports_seen)
TRANSPORT_SEEN = {"nvlink": "P2P", "shm": "SHM", "socket": "NET/Socket"}


def check_model():
    """A small fp32 convolutional net with BatchNorm (buffers), as a user's model: (model, make_batch)."""
    def block(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

    model = nn.Sequential(block(3, 32), block(32, 64), block(64, 64),
                          nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)))

    def make_batch(batch_size: int, device: Any, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator(device="cpu").manual_seed(seed)
        x = torch.randn(batch_size, 3, 32, 32, generator=g)
        return x.to(device), torch.randint(0, 10, (batch_size,), generator=g).to(device)

    return model, make_batch


# ----------------------------------------------------------------------------- the plan
@dataclass
class Check:
    name: str  # profile, trace, peak, ddp:<class>, fsdp
    gpus: int  # GPUs its launch uses
    link_class: str | None = None
    status: str = "pending"  # ok | failed | skipped
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


def plan_checks(n_gpus: int, link_classes: tuple[str, ...] = LINK_CLASSES) -> list[Check]:
    """The checks a host of ``n_gpus`` GPUs runs: the one-GPU paths always, DDP per link class and FSDP on 2+."""
    if n_gpus < 1:
        raise ValueError("no GPU on this host: the self-check runs the CUDA paths (use a GPU host)")
    checks = [Check("peak", 1), Check("profile", 1), Check("trace", 1)]
    if n_gpus >= 2:
        checks += [Check(f"ddp:{c}", n_gpus, link_class=c) for c in link_classes]
        checks.append(Check("fsdp", n_gpus))
    return checks


# ----------------------------------------------------------------------------- validators (pure: tested on CPU)
def _need(rec: dict, keys: tuple[str, ...], where: str) -> list[str]:
    return [f"{where}: field {k} missing" for k in keys if rec.get(k) is None]


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


PROFILE_FIELDS = ("schema", "model", "batch_size", "precision", "forward_s", "backward_s", "optimizer_s", "step_s",
                  "params", "fingerprint", "memory", "gpu")
MEMORY_INTS = ("peak_allocated_bytes", "peak_reserved_bytes", "parameter_bytes", "gradient_bytes",
               "optimizer_state_bytes", "buffer_bytes", "activation_bytes", "batch_size")


def check_memory(mem: Any, where: str) -> list[str]:
    """A profile's (or trace's) ``memory`` object as the record contract has it, measured on a GPU."""
    if not isinstance(mem, dict):
        return [f"{where}: memory missing"]
    out = [f"{where}: memory.{k} is {mem.get(k)!r}, expected an int"
           for k in MEMORY_INTS if not isinstance(mem.get(k), int) or isinstance(mem.get(k), bool)]
    if out:
        return out
    for k in ("peak_allocated_bytes", "peak_reserved_bytes", "parameter_bytes", "gradient_bytes", "activation_bytes"):
        if mem[k] <= 0:
            out.append(f"{where}: memory.{k} = {mem[k]}, expected > 0")
    if mem["peak_reserved_bytes"] < mem["peak_allocated_bytes"]:
        out.append(f"{where}: peak reserved {mem['peak_reserved_bytes']} < peak allocated {mem['peak_allocated_bytes']}")
    # at the end of the forward everything below is alive at once (the gradients were set to None)
    live = mem["parameter_bytes"] + mem["optimizer_state_bytes"] + mem["buffer_bytes"] + mem["activation_bytes"]
    if mem["peak_allocated_bytes"] < live:
        out.append(f"{where}: peak allocated {mem['peak_allocated_bytes']} < parameters + optimizer states + buffers "
                   f"+ activations {live} alive together after the forward")
    by_layer = mem.get("activation_bytes_by_layer")
    if not isinstance(by_layer, dict) or sum(by_layer.values()) != mem["activation_bytes"]:
        out.append(f"{where}: memory.activation_bytes_by_layer does not sum to activation_bytes")
    for k in ("activation_method", "optimizer", "precision"):
        if not isinstance(mem.get(k), str):
            out.append(f"{where}: memory.{k} missing")
    return out


def check_profile(prof: dict, where: str, expect_ddp_rows: bool = True) -> list[str]:
    out = _need(prof, PROFILE_FIELDS, where)
    if out:
        return out
    if prof.get("status") != "ok":
        out.append(f"{where}: status {prof.get('status')!r}")
    if not str(prof["gpu"]).startswith("cuda"):
        out.append(f"{where}: measured on {prof['gpu']!r}, not a GPU")
    for k in ("forward_s", "backward_s", "step_s"):
        if not prof[k] > 0:
            out.append(f"{where}: {k} = {prof[k]}, expected > 0")
    params = prof["params"]
    if not params or any(p.get("grad_ready_s") is None or not p.get("shape") for p in params):
        out.append(f"{where}: params lack shapes or gradient ready times")
    if prof["memory"].get("batch_size") != prof["batch_size"]:
        out.append(f"{where}: memory.batch_size {prof['memory'].get('batch_size')} != batch_size {prof['batch_size']}")
    out += check_memory(prof["memory"], where)
    if expect_ddp_rows:
        rows = prof.get("ddp_world1") or []
        bad = [r for r in rows if r.get("status") != "ok"]
        if not rows:
            out.append(f"{where}: no world-size-1 DDP rows")
        for r in bad:
            out.append(f"{where}: world-size-1 DDP {r.get('variant')} {r.get('status')}: "
                       f"{str(r.get('error'))[-160:]}")
    return out


def check_run_memory(mem: Any, world: int, where: str) -> list[str]:
    """A DDP / FSDP run's ``memory``: the peaks, the max over ``world`` ranks."""
    if not isinstance(mem, dict):
        return [f"{where}: memory missing"]
    per_rank = mem.get("per_rank")
    if not isinstance(per_rank, list) or len(per_rank) != world:
        return [f"{where}: memory.per_rank has {len(per_rank) if isinstance(per_rank, list) else 'no'} rows, "
                f"expected {world}"]
    out = []
    for k in ("peak_allocated_bytes", "peak_reserved_bytes"):
        if not _positive_int(mem.get(k)) or mem[k] != max(r.get(k, -1) for r in per_rank):
            out.append(f"{where}: memory.{k} = {mem.get(k)!r}, not the max over the ranks")
    return out


def check_ddp_runs(runs: list[dict], world: int, link_class: str, where: str) -> list[str]:
    if not runs:
        return [f"{where}: no DDP run recorded"]
    out = []
    for r in runs:
        tag = f"{where} {r.get('model')} cap {r.get('bucket_cap_mb')} {r.get('variant')}"
        if r.get("status") != "ok":
            out.append(f"{tag}: {r.get('status')}: {(str(r.get('error') or '').strip().splitlines() or [''])[-1][:160]}")
            continue
        out += _need(r, ("step_s_median", "bucket_sizes_bytes", "fingerprint", "per_rank_s"), tag)
        if r.get("world_size") != world:
            out.append(f"{tag}: world_size {r.get('world_size')}, expected {world}")
        if r.get("transport") != link_class:
            out.append(f"{tag}: transport {r.get('transport')!r}, expected {link_class!r}")
        seen = r.get("nccl_transports_seen") or []
        if not any(str(v).startswith(TRANSPORT_SEEN[link_class]) for v in seen):
            out.append(f"{tag}: NCCL connected via {seen}, expected {TRANSPORT_SEEN[link_class]} for {link_class}")
        sizes = r.get("bucket_sizes_bytes") or []
        if sizes and r.get("param_bytes") and sum(sizes) != r["param_bytes"]:
            out.append(f"{tag}: buckets hold {sum(sizes)} bytes, the parameters {r['param_bytes']}")
        if r.get("variant") == "timing" and not r.get("per_bucket"):
            out.append(f"{tag}: the timing run has no per-bucket times")
        out += check_run_memory(r.get("memory"), world, tag)
    return out


def check_fsdp_runs(runs: list[dict], world: int, expected: dict[tuple[str, str], str], where: str) -> list[str]:
    """``expected``: (model, strategy) -> the parameter dtype the run must have used."""
    out = []
    got = {(r.get("model"), r.get("strategy")): r for r in runs}
    for (model, strategy), dtype in expected.items():
        tag = f"{where} {model} {strategy}"
        r = got.get((model, strategy))
        if r is None:
            out.append(f"{tag}: not recorded")
            continue
        if r.get("status") != "ok":
            out.append(f"{tag}: {r.get('status')}: {(str(r.get('error') or '').strip().splitlines() or [''])[-1][:160]}")
            continue
        if strategy != "ddp" and r.get("param_dtype") != dtype:
            out.append(f"{tag}: parameters in {r.get('param_dtype')}, expected {dtype}")
        if strategy != "ddp" and not r.get("units"):
            out.append(f"{tag}: no FSDP units recorded")
        if r.get("world_size") != world:
            out.append(f"{tag}: world_size {r.get('world_size')}, expected {world}")
        if not _positive_int(r.get("peak_memory_bytes")):
            out.append(f"{tag}: peak_memory_bytes {r.get('peak_memory_bytes')!r}")
        out += check_run_memory(r.get("memory"), world, tag)
    return out


def check_trace(data: dict, steps: int, where: str) -> list[str]:
    capture = data.get("ddpsim_capture")
    if isinstance(capture, str):
        capture = json.loads(capture)
    if not isinstance(capture, dict):
        return [f"{where}: no ddpsim_capture metadata"]
    out = _need(capture, ("model", "params", "ready_order", "unprofiled_step_s", "gpu"), where)
    if not str(capture.get("device", "")).startswith("cuda"):
        out.append(f"{where}: captured on {capture.get('device')!r}, not a GPU")
    out += check_memory(capture.get("memory"), where)
    events = data.get("traceEvents") or []
    if not any(e.get("cat") == "kernel" for e in events):
        out.append(f"{where}: no GPU kernel events")
    spans = {e.get("name") for e in events if str(e.get("name", "")).startswith("ProfilerStep#")}
    if len(spans) != steps:
        out.append(f"{where}: {len(spans)} ProfilerStep spans, expected {steps}")
    return out


# ----------------------------------------------------------------------------- running the checks
def _launch(cmd: list[str], env: dict[str, str], limit_s: float, log_path: str) -> str | None:
    """Runs one launch; None when it ended with 0, else the reason in one line (its log's last line)."""
    from .campaign import run_launch

    status, rc, wall = run_launch(cmd, env, max(5.0, limit_s), log_path, grace_s=0)
    if status == "ok":
        return None
    try:
        with open(log_path) as f:
            last = [ln.strip() for ln in f.read().splitlines() if ln.strip()][-1:] or [""]
    except OSError:
        last = [""]
    return f"launch {status} (rc={rc}, {wall:.0f} s): {last[0][:200]} (log: {log_path})"


def _read_jsonl(path: str) -> list[dict]:
    from .common import read_jsonl

    return read_jsonl(path) if os.path.exists(path) else []


def run_peak(out: str, gpus: list[str], limit_s: float) -> list[str]:
    """The allocator counters the records read: a known allocation must show in the peaks."""
    from .memory import PeakTracker, run_peaks

    device = torch.device("cuda:0")
    torch.cuda.set_device(device)
    torch.zeros(1, device=device)  # the allocator of a device no tensor touched yet has no statistics to reset
    tracker = PeakTracker(device)
    size = 64 << 20
    with tracker.step():
        block = torch.empty(size, dtype=torch.uint8, device=device)
        del block
    problems = []
    if tracker.peak_allocated_bytes is None or tracker.peak_allocated_bytes < size:
        problems.append(f"peak: max_memory_allocated {tracker.peak_allocated_bytes} after a {size}-byte allocation")
    row = run_peaks(device, tracker.peak_allocated_bytes, tracker.peak_reserved_bytes, gather=False)
    problems += check_run_memory(row, 1, "peak")
    return problems


def run_profile(out: str, gpus: list[str], limit_s: float) -> list[str]:
    from .campaign import launch_env
    from .models import file_stem

    folder = os.path.join(out, "profile")
    cmd = [sys.executable, "-m", "ddpsim.measure.worker", "--mode", "profile", "--out", folder, "--launch-id",
           "selfcheck_profile", "--models", f"{CHECK_MODEL}@batch=16,{BF16_MODEL}", "--profile-iters", "3",
           "--profile-ddp-caps", "25", "--budget-s", str(limit_s), "--quick"]
    why = _launch(cmd, launch_env("nvlink", gpus[:1]), limit_s, os.path.join(folder, "launch.log"))
    problems = [f"profile: {why}"] if why else []
    for model in (f"{CHECK_MODEL}@batch=16", BF16_MODEL):
        path = os.path.join(folder, "profiles", file_stem(model) + ".json")
        if not os.path.exists(path):
            problems.append(f"profile {model}: no {path}")
            continue
        with open(path) as f:
            problems += check_profile(json.load(f), f"profile {model}")
    return problems


def run_trace(out: str, gpus: list[str], limit_s: float) -> list[str]:
    from .campaign import launch_env

    path = os.path.join(out, "trace", "trace.json.gz")
    steps = 2
    cmd = [sys.executable, "-m", "ddpsim.measure.trace", "--model", f"{CHECK_MODEL}@batch=16", "--out", path,
           "--steps", str(steps), "--warmup", "1"]
    why = _launch(cmd, launch_env("nvlink", gpus[:1]), limit_s, os.path.join(out, "trace", "launch.log"))
    if why:
        return [f"trace: {why}"]
    with gzip.open(path, "rt") as f:
        return check_trace(json.load(f), steps, "trace")


def run_ddp(out: str, gpus: list[str], limit_s: float, link_class: str) -> list[str]:
    from .campaign import launch_env

    folder = os.path.join(out, f"ddp_{link_class}")
    world = len(gpus)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
           "-m", "ddpsim.measure.worker", "--mode", "sweep", "--out", folder, "--transport", link_class,
           "--launch-id", f"selfcheck_{link_class}", "--models", f"{CHECK_MODEL}@batch=16", "--caps", "1",
           "--timing-cap", "1", "--rounds", "1", "--steps", "3", "--warmup", "3", "--round-warmup", "1",
           "--nosync-steps", "2", "--budget-s", str(max(10.0, limit_s - 10))]
    if link_class == "nvlink":  # one short all-reduce sweep: the sweep's CUDA path, on one class only
        cmd += ["--allreduce-budget-s", "5", "--allreduce-max-bytes", str(16 << 20)]
    else:
        cmd += ["--skip-allreduce"]
    why = _launch(cmd, launch_env(link_class, gpus, nccl_debug=True), limit_s, os.path.join(folder, "launch.log"))
    problems = [f"ddp:{link_class}: {why}"] if why else []
    problems += check_ddp_runs(_read_jsonl(os.path.join(folder, "ddp_runs.jsonl")), world, link_class,
                               f"ddp:{link_class}")
    if link_class == "nvlink" and not any(r.get("status", "ok") == "ok"
                                          for r in _read_jsonl(os.path.join(folder, "allreduce.jsonl"))):
        problems.append("ddp:nvlink: no all-reduce sweep recorded")
    return problems


def run_fsdp(out: str, gpus: list[str], limit_s: float) -> list[str]:
    from .campaign import launch_env

    folder = os.path.join(out, "fsdp")
    world = len(gpus)
    models = [CHECK_MODEL + "@batch=16", BF16_MODEL]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
           "-m", "ddpsim.measure.fsdp", "--out", folder, "--models", ",".join(models), "--strategies",
           "ddp,zero2,zero3", "--steps", "2", "--warmup", "2", "--transport", "nvlink", "--launch-id",
           "selfcheck_fsdp"]
    why = _launch(cmd, launch_env("nvlink", gpus), limit_s, os.path.join(folder, "launch.log"))
    # the fp32 BatchNorm model keeps fp32 parameters (auto), the bf16 decoder gets bf16 ones
    expected = {(m, s): ("fp32" if m == models[0] else "bf16") for m in models for s in ("ddp", "zero2", "zero3")}
    problems = [f"fsdp: {why}"] if why else []
    return problems + check_fsdp_runs(_read_jsonl(os.path.join(folder, "fsdp_runs.jsonl")), world, expected, "fsdp")


RUNNERS: dict[str, Callable[..., list[str]]] = {"peak": run_peak, "profile": run_profile, "trace": run_trace,
                                                "fsdp": run_fsdp}
# seconds each check may take (its launch is killed past it), within the whole budget
LIMIT_S = {"peak": 10.0, "profile": 45.0, "trace": 30.0, "ddp": 30.0, "fsdp": 45.0}


def run_checks(checks: list[Check], out: str, gpus: list[str], budget_s: float) -> list[Check]:
    t0 = time.time()
    for c in checks:
        left = budget_s - (time.time() - t0)
        if left < 5:
            c.status, c.problems = "failed", [f"{c.name}: not run, the self-check's {budget_s:.0f} s were spent"]
            continue
        limit = min(LIMIT_S[c.name.split(":")[0]], left)
        t = time.time()
        try:
            if c.link_class is not None:
                c.problems = run_ddp(out, gpus[:c.gpus], limit, c.link_class)
            else:
                c.problems = RUNNERS[c.name](out, gpus[:c.gpus], limit)
        except Exception as e:  # noqa: BLE001 - a check that raises is a failed check, the others still run
            c.problems = [f"{c.name}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"]
        c.seconds = time.time() - t
        c.status = "failed" if c.problems else "ok"
        print(f"{'ok  ' if c.status == 'ok' else 'FAIL'} {c.name} ({c.seconds:.1f} s)", flush=True)
        for p in c.problems:
            print(f"FAIL {p}", flush=True)
    return checks


def report(checks: list[Check], gpus: list[str], total_s: float) -> dict:
    fp: dict[str, Any] = {"torch": torch.__version__, "gpus": len(gpus)}
    if torch.cuda.is_available():
        fp["gpu_name"] = torch.cuda.get_device_name(0)
        fp["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        fp["cuda"] = torch.version.cuda
    return {"schema": SCHEMA, "ok": all(c.status == "ok" for c in checks), "total_s": total_s, "fingerprint": fp,
            "checks": [{"name": c.name, "status": c.status, "seconds": round(c.seconds, 2), "gpus": c.gpus,
                        "link_class": c.link_class, "problems": c.problems} for c in checks]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ddpsim.measure.selfcheck", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, metavar="DIR", help="folder for the launches' output and selfcheck.json")
    ap.add_argument("--budget-s", type=float, default=180.0, help="all checks together (default 180)")
    ap.add_argument("--link-classes", default=",".join(LINK_CLASSES), help="DDP link classes to check")
    a = ap.parse_args(argv)
    classes = tuple(c for c in a.link_classes.split(",") if c)
    bad = [c for c in classes if c not in LINK_CLASSES]
    if bad or a.budget_s < 30:
        print(f"ddpsim: error: selfcheck: --link-classes {','.join(bad)} not in {', '.join(LINK_CLASSES)}"
              if bad else "ddpsim: error: selfcheck: --budget-s must be at least 30", file=sys.stderr)
        return 2
    from .campaign import gpu_list

    gpus = gpu_list() if torch.cuda.is_available() else []
    try:
        checks = plan_checks(len(gpus), classes)
    except ValueError as e:
        print(f"ddpsim: error: selfcheck: {e}", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    print(f"ddpsim selfcheck: {len(gpus)} GPUs; checks: {', '.join(c.name for c in checks)}", flush=True)
    t0 = time.time()
    run_checks(checks, os.path.abspath(a.out), gpus, a.budget_s)
    rec = report(checks, gpus, time.time() - t0)
    with open(os.path.join(a.out, "selfcheck.json"), "w") as f:
        json.dump(rec, f, indent=1)
    failed = [c.name for c in checks if c.status != "ok"]
    print(f"ddpsim selfcheck: {'FAILED: ' + ', '.join(failed) if failed else 'all ok'} in {rec['total_s']:.0f} s "
          f"-> {os.path.join(a.out, 'selfcheck.json')}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
