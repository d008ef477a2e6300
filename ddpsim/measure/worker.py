"""Measurement worker. Runs under torchrun (sweep / microbench modes) or as a plain process (profile mode).

sweep mode (one process group for the launch, plus one per forced NCCL algorithm):
  (0) shape: --gpus-per-node G gives every G consecutive local ranks their own NCCL_HOSTID (set here, before
      the process group exists), so NCCL treats them as separate nodes and talks between them through its
      network transport (the campaign sets NCCL_NET=Socket NCCL_IB_DISABLE=1).  Under a real
      `torchrun --nnodes N` nothing is emulated: nodes = WORLD_SIZE / LOCAL_WORLD_SIZE.
  (1) all-reduce sweeps 4 KiB .. 1 GiB, once per --algos entry (default: NCCL's choice; ring/tree: a new
      communicator created while NCCL_ALGO=Ring/Tree is set, NCCL reads it at communicator init)
      -> allreduce.jsonl + nccl-tests text files
  (2) DDP configurations (model x batch size x bucket cap x option variant), built per model group and
      measured in interleaved rounds (A B C A B C), the reference configuration at the start and at the end
      of the launch -> ddp_runs.jsonl
microbench mode: microbench.jsonl (see microbench.py)
profile mode: profiles/<model>.json.  As a plain process: one GPU alone, no process group.  Under torchrun with
  W ranks: every GPU profiles the same model at once (as in a DDP step, the host runs W processes), each
  rank's profile under profiles/ranks/, the slowest rank's as profiles/<model>.json

Only rank 0 writes.  Everything uses RANK/WORLD_SIZE/LOCAL_RANK from torchrun, nothing assumes one host.
Device-agnostic: on a machine without CUDA it runs on CPU with gloo and perf_counter timing.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

try:
    import torch
except ModuleNotFoundError as _no_torch:  # `python -m ... --help` on a host without torch
    from .needs_torch import without_torch

    without_torch(__name__, __doc__, _no_torch)
import torch.distributed as dist

from . import nccl_log
from .common import (
    Marker,
    append_jsonl,
    bcast_int,
    fingerprint,
    finish_launch,
    get_device,
    hostname_count,
    log,
    nccl_tests_text,
    stats3,
    synchronize,
)
from .models import resolve
from .profile import profile_main
from .runner import (
    cap_value,
    is_default_ddp,
    parse_list,
    parse_reference,
    plan_runs,
    run_interleaved,
    variant_options,
)
from .shape import parse_node_gpus, shape_label, shape_setup
from .spec import ModelSpec

KiB = 1024


# ============================================================================ (1) all-reduce sweep
def allreduce_sweep(device: torch.device, W: int, quick: bool = False, budget_s: float = 40.0, min_bytes: int = 4 * KiB,
                    max_bytes: int = 1 << 30, group: dist.ProcessGroup | None = None) -> list[dict[str, Any]]:
    sizes = []
    s = min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s *= 2
    buf = torch.zeros(max_bytes // 4, dtype=torch.float32, device=device)
    for _ in range(5):
        dist.all_reduce(buf[:1024], group=group)
    dist.all_reduce(buf[: (16 << 20) // 4], group=group)
    synchronize(device)
    per_size = max(0.05, min(1.5, budget_s / len(sizes)))
    max_reps = 10 if quick else 50
    min_reps = 3
    t_begin = time.perf_counter()
    rows = []
    for nbytes in sizes:
        t = buf[: nbytes // 4]
        nwarm = 2 if nbytes >= (256 << 20) else 5
        w0 = time.perf_counter()
        for _ in range(nwarm):
            dist.all_reduce(t, group=group)
        synchronize(device)
        est = (time.perf_counter() - w0) / nwarm
        reps = max(min_reps, min(max_reps, int(per_size / max(est, 1e-6))))
        if time.perf_counter() - t_begin > budget_s:
            reps = min_reps
        reps = bcast_int(reps, device)
        marks = [(Marker(device), Marker(device)) for _ in range(reps)]
        for a, b in marks:
            a.record()
            dist.all_reduce(t, group=group)
            b.record()
        synchronize(device)
        us = [b.seconds_since(a) * 1e6 for a, b in marks]
        med, p10, p90 = stats3(us)
        algbw = nbytes / (med * 1e-6) / 1e9
        rows.append({"bytes": nbytes, "repeats": reps, "warmup": nwarm, "time_us_median": med, "time_us_p10": p10,
                     "time_us_p90": p90, "algbw_GBps": algbw, "busbw_GBps": algbw * 2 * (W - 1) / W})
    del buf
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


ALGO_ENV = {"ring": "Ring", "tree": "Tree"}


def sweep_name(transport: str, W: int, shape: dict[str, Any], algo: str) -> str:
    if shape["nodes"] == 1 and algo == "default":
        return f"allreduce_{transport}_w{W:d}.txt"  # the name earlier campaigns used
    return f"allreduce_{transport}_w{W:d}_{shape_label(shape)}_{algo}.txt"


def net_probe(a: argparse.Namespace, device: torch.device, W: int, fp: dict[str, Any], shape: dict[str, Any],
              launch_id: str, probe_round: int = 0) -> float:
    """Point-to-point patterns across the (emulated) nodes: the network endpoint's rates (netprobe.py).
    Returns the round's wall time in seconds."""
    from . import netprobe

    base = {"schema": "ddpsim.netprobe/1", "fingerprint": fp, "world_size": W, "transport": a.transport,
            "launch_id": launch_id, "probe_round": probe_round, **shape}
    t0 = time.perf_counter()
    try:
        recs = netprobe.probe(device, W, shape["gpus_per_node"], budget_s=30.0 if not a.quick else 5.0)
        if dist.get_rank() == 0:
            for r in recs:
                append_jsonl(os.path.join(a.out, "netprobe.jsonl"), dict(base, status="ok", error=None, **r))
            log(f"net probe: {len(recs)} patterns in {time.perf_counter() - t0:.1f}s: " + ", ".join(
                f"{r['pattern']} {r['flow_GBps']:.2f} GB/s per flow" for r in recs))
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the probe's 256 MiB buffers are not kept cached under the DDP runs that follow
        # rank 0's duration for every rank: the DDP budget it reserves must be the same on all of them
        return bcast_int(round(1000 * (time.perf_counter() - t0)), device) / 1000
    except Exception:
        # a rank that failed leaves the others inside a collective: record it and end the launch
        log("net probe FAILED", traceback.format_exc()[-600:])
        append_jsonl(os.path.join(a.out, "netprobe.jsonl"),
                     dict(base, bench="net_p2p", status="failed", rank=dist.get_rank(),
                          error=traceback.format_exc()[-4000:]))
        raise


def allreduce_sweeps(a: argparse.Namespace, device: torch.device, W: int, backend: str, fp: dict[str, Any],
                     shape: dict[str, Any], topo_fn: Callable[[], dict[str, Any]], nccl_path: str | None,
                     launch_id: str) -> None:
    rank = dist.get_rank()
    algos = [x for x in a.algos.split(",") if x]
    per_algo_budget = a.allreduce_budget_s / max(1, len(algos))
    for algo in algos:
        t0 = time.perf_counter()
        base = {"schema": "ddpsim.allreduce/1", "fingerprint": fp, "world_size": W, "transport": a.transport,
                "dtype": "float32", "launch_id": launch_id, **shape,
                "algorithm_forced": None if algo == "default" else algo}
        group = None
        try:
            env_before = os.environ.get("NCCL_ALGO")
            if algo != "default":
                os.environ["NCCL_ALGO"] = ALGO_ENV[algo]
                try:
                    group = dist.new_group(backend=backend)
                    # make sure the communicator exists (read NCCL_ALGO) before the variable goes back
                    dist.all_reduce(torch.zeros(1, device=device), group=group)
                    synchronize(device)
                finally:
                    if env_before is None:
                        os.environ.pop("NCCL_ALGO", None)
                    else:
                        os.environ["NCCL_ALGO"] = env_before
            off = nccl_log.size_of(nccl_path)
            rows = allreduce_sweep(device, W, quick=a.quick, budget_s=per_algo_budget,
                                   max_bytes=a.allreduce_max_bytes, group=group)
            choices = nccl_log.tuning_choices(nccl_log.read_from(nccl_path, off)) if rank == 0 else {}
            for row in rows:
                c = choices.get(row["bytes"])
                row["nccl_algo"] = c["algo"] if c else None
                row["nccl_proto"] = c["proto"] if c else None
                row["nccl_channels"] = c["channels"] if c else None
                row["nccl_choice_mixed"] = c["mixed"] if c else None
            verified = None
            if algo != "default" and choices:
                verified = all(r["nccl_algo"] == ALGO_ENV[algo].upper() for r in rows if r["nccl_algo"])
            rec = dict(base, status="ok", error=None, **topo_fn(),
                       method="torch.distributed.all_reduce SUM in place, per-call CUDA events, median",
                       nccl_algo_env=(ALGO_ENV.get(algo) if algo != "default" else env_before),
                       algorithm_forced_verified=verified, rows=rows)
            if rank == 0:
                append_jsonl(os.path.join(a.out, "allreduce.jsonl"), rec)
                with open(os.path.join(a.out, sweep_name(a.transport, W, shape, algo)), "w") as f:
                    f.write(nccl_tests_text(rec))
                big = rows[-1]
                picks = sorted({f"{r['nccl_algo']}/{r['nccl_proto']}" for r in rows if r["nccl_algo"]})
                log(f"allreduce {algo} done in {time.perf_counter() - t0:.1f}s; {big['bytes']:d} B: "
                    f"{big['time_us_median']:.1f} us busbw {big['busbw_GBps']:.2f} GB/s; NCCL picked {picks}")
        except Exception:  # noqa: BLE001
            log("allreduce sweep FAILED", algo, traceback.format_exc()[-600:])
            if rank == 0:
                append_jsonl(os.path.join(a.out, "allreduce.jsonl"),
                             dict(base, status="failed", error=traceback.format_exc()[-4000:], rows=[]))
            if device.type == "cuda":
                torch.cuda.empty_cache()
        finally:
            if group is not None:
                try:
                    dist.destroy_process_group(group)
                except Exception:  # noqa: BLE001
                    pass


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m ddpsim.measure.worker",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--mode", choices=["sweep", "profile", "microbench"], default="sweep")
    ap.add_argument("--out", required=True)
    ap.add_argument("--transport", default="nvlink", help="label of the intra-node transport (the campaign sets its env)")
    ap.add_argument("--launch-id", default=None)
    ap.add_argument("--models", default="resnet50,gpt2-124m,mlp-heavy",
                    help="built-in names or module:factory, comma separated")
    ap.add_argument("--batch-sizes", default=None, help="per-GPU batch sizes (every model x each); default: the model's")
    ap.add_argument("--caps", default="1,5,10,25,50,200")
    ap.add_argument("--variants", default="none",
                    help="DDP option variants: none,gbv,fp16,bf16,accum4,find_unused,static_graph,timing (a+b combines)")
    ap.add_argument("--variant-caps", default=None, help="caps at which the non-'none' variants run (default: first cap)")
    ap.add_argument("--cap-sweep-models", default=None,
                    help="models that get every --caps entry (default: all); the others only the variant caps")
    ap.add_argument("--max-live", type=int, default=6, help="DDP instances alive at once (interleaved together)")
    ap.add_argument("--timing-cap", type=float, default=25)
    ap.add_argument("--no-timing-run", action="store_true")
    ap.add_argument("--reference", default=None,
                    help="model:cap[:variant] measured first and last in the launch ('none': no reference); "
                         "default: first model at the timing cap (or the first cap)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds per configuration")
    ap.add_argument("--round-warmup", type=int, default=2, help="untimed steps before each round")
    ap.add_argument("--gpus-per-node", type=int, default=None,
                    help="emulate nodes of G GPUs on this host (own NCCL_HOSTID per group of G local ranks)")
    ap.add_argument("--node-gpus", default=None, metavar="G1,G2,...",
                    help="emulate nodes of uneven GPU counts on this host, in rank order (e.g. 3,1)")
    ap.add_argument("--inter-node-transport", default=None, help="label recorded for the inter-node transport")
    ap.add_argument("--algos", default="default", help="all-reduce sweeps: default,ring,tree")
    ap.add_argument("--skip-allreduce", action="store_true")
    ap.add_argument("--net-probe", action="store_true",
                    help="across nodes: point-to-point patterns over the network (netprobe.jsonl, see netprobe.py)")
    ap.add_argument("--net-probe-rounds", type=int, default=1, choices=(1, 2, 3),
                    help="times the probe runs in the launch: last; 2: also before the DDP runs; 3: also before "
                         "the all-reduce sweeps (the probe's drift within a launch; a round with nothing between "
                         "it and the next is left out). An early round that fails ends the launch, as the last "
                         "does; the DDP runs leave 1.5 x an early round's time (else 10 s) for the last")
    ap.add_argument("--skip-ddp", action="store_true")
    ap.add_argument("--overlap-bench", action="store_true",
                    help="before the DDP runs, time each model's backward beside all-reduces (overlap.jsonl, "
                         "see overlap.py): the compute and comm slowdowns measured instead of fitted")
    ap.add_argument("--allreduce-budget-s", type=float, default=40.0, help="all sweeps of the launch together")
    ap.add_argument("--allreduce-max-bytes", type=int, default=1 << 30)
    ap.add_argument("--budget-s", type=float, default=1e9, help="skip remaining configs past this")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30, help="timed steps per configuration per round")
    ap.add_argument("--nosync-steps", type=int, default=None)
    ap.add_argument("--profile-iters", type=int, default=20)
    ap.add_argument("--profile-ddp-caps", default="25",
                    help="caps (MB) at which the profile launch also times DDP at world size 1: plain, with "
                         "gradient_as_bucket_view and with the fp16/bf16 compress hooks (empty: not measured)")
    ap.add_argument("--quick", action="store_true")
    return ap


@dataclass
class SweepLaunch:
    """A sweep or microbench launch once its process group exists: who and where this rank is."""
    a: argparse.Namespace
    launch_id: str
    shape: dict[str, Any]
    nccl_path: str | None
    device: torch.device
    backend: str
    rank: int
    W: int
    fp: dict[str, Any]
    _topology: dict[str, Any] = field(default_factory=dict)

    def topo(self) -> dict[str, Any]:
        """What NCCL printed about the default communicator (rank 0 reads the first one in its file)."""
        if not self._topology.get("nccl_nnodes_seen") and self.rank == 0:
            self._topology.update(nccl_log.topology(nccl_log.read_from(self.nccl_path), self.shape["nodes"]))
        return dict(self._topology) or nccl_log.topology("", self.shape["nodes"])


def start_launch(a: argparse.Namespace) -> SweepLaunch:
    """The shape's environment, then the process group, the fingerprint and NCCL's view of the topology."""
    launch_id = a.launch_id or f"{a.transport}_w{os.environ.get('WORLD_SIZE', '1')}_0"
    node_gpus = parse_node_gpus(a.node_gpus)
    if node_gpus and a.net_probe:
        raise SystemExit("--net-probe needs even nodes (--gpus-per-node), not --node-gpus")
    shape, nccl_path = shape_setup(a.gpus_per_node, a.out, launch_id, a.inter_node_transport, node_gpus)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = get_device(local_rank)
    backend = "nccl" if device.type == "cuda" else "gloo"
    kw: dict[str, Any] = {}
    if device.type == "cuda":
        kw["device_id"] = device
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=300), **kw)
    rank, W = dist.get_rank(), dist.get_world_size()
    n_hosts = hostname_count()  # also the first collective: NCCL has printed its init lines by now
    launch = SweepLaunch(a, launch_id, shape, nccl_path, device, backend, rank, W,
                         fingerprint(device, W, a.transport, n_hosts))
    log(f"launch {launch_id} world {W:d} device {device} backend {backend} hosts {n_hosts:d} shape "
        f"{shape_label(shape)} emulated {shape['nodes_emulated']} "
        f"NCCL nNodes {launch.topo().get('nccl_nnodes_seen')} via {launch.topo().get('nccl_transports_seen')}")
    return launch


def run_microbench(launch: SweepLaunch, t_start: float) -> None:
    """The micro-benchmarks (microbench.py) within the launch's budget; one that fails is recorded as failed."""
    from . import microbench

    a, device, W = launch.a, launch.device, launch.W
    base = {"schema": "ddpsim.microbench/1", "launch_id": launch.launch_id, "world_size": W,
            "transport": a.transport, **launch.shape, "fingerprint": launch.fp}
    benches: tuple[tuple[str, Callable[[], list[dict]]], ...] = (
        ("allreduce_overlap", lambda: microbench.allreduce_overlap(device, W)),
        ("allreduce_launch_cpu", lambda: microbench.allreduce_launch_cpu(device, W)),
        ("cast", lambda: microbench.casts(device)))
    for name, fn in benches:
        t0 = time.perf_counter()
        if t0 - t_start > a.budget_s:
            log("microbench budget exhausted, skipping", name)
            continue
        try:
            recs = fn()
            if launch.rank == 0:
                for r in recs:
                    append_jsonl(os.path.join(a.out, "microbench.jsonl"), dict(base, status="ok", **r))
            log(f"microbench {name}: {len(recs)} records in {time.perf_counter() - t0:.1f}s")
        except Exception:  # noqa: BLE001
            log("microbench FAILED", name, traceback.format_exc()[-800:])
            if launch.rank == 0:
                append_jsonl(os.path.join(a.out, "microbench.jsonl"),
                             dict(base, bench=name, status="failed", error=traceback.format_exc()[-4000:]))


def run_sweep(launch: SweepLaunch, models: list[str], batch_sizes: list[int] | None, caps: list[int | float],
              variants: list[str], nosync: int, t_start: float) -> None:
    """All-reduce sweeps, the overlap bench, the DDP runs, with the network probe's rounds around them."""
    a, device, W, fp, shape, launch_id = launch.a, launch.device, launch.W, launch.fp, launch.shape, launch.launch_id
    probing = a.net_probe and shape["nodes"] > 1
    probe_round = 0
    # the DDP runs leave time for the last round: an early round's duration x 1.5, else 10 s (rounds on
    # 4 x H100 took 3.6 to 5.5 s)
    probe_reserve_s = 10.0 if probing else 0.0
    # an early round runs only where something follows it before the next round (no rounds back to back)
    if probing and a.net_probe_rounds >= 3 and not a.skip_allreduce:
        probe_reserve_s = 1.5 * net_probe(a, device, W, fp, shape, launch_id, probe_round)
        probe_round += 1
    if not a.skip_allreduce:
        allreduce_sweeps(a, device, W, launch.backend, fp, shape, launch.topo, launch.nccl_path, launch_id)
    if a.overlap_bench:
        overlap_bench(a, models, batch_sizes, device, W, fp, shape, launch_id)
    if probing and a.net_probe_rounds >= 2 and not a.skip_ddp:
        probe_reserve_s = 1.5 * net_probe(a, device, W, fp, shape, launch_id, probe_round)
        probe_round += 1
    if not a.skip_ddp:
        run_ddp(launch, models, batch_sizes, caps, variants, nosync, t_start, a.budget_s - probe_reserve_s)
    if probing:
        # the last round runs last: where it fails, it ends the launch and loses nothing else
        net_probe(a, device, W, fp, shape, launch_id, probe_round)


def run_ddp(launch: SweepLaunch, models: list[str], batch_sizes: list[int] | None, caps: list[int | float],
            variants: list[str], nosync: int, t_start: float, budget_s: float) -> None:
    """The DDP configurations in interleaved rounds (runner.py), the reference first and last."""
    a, W = launch.a, launch.W
    timing_cap = None if a.no_timing_run else cap_value(a.timing_cap)
    cap_models = [m for m in a.cap_sweep_models.split(",") if m] if a.cap_sweep_models else None
    plan = plan_runs(models, caps, variants, batch_sizes, parse_list(a.variant_caps, cap_value), timing_cap,
                     cap_models)
    if a.reference is None:
        ref_cap = timing_cap if timing_cap in caps else caps[0]
        reference = (models[0], batch_sizes[0] if batch_sizes else None, ref_cap, "none")
    else:
        reference = parse_reference(a.reference, models[0])
    topo_fields = launch.topo()

    def base_fn(key: tuple[str, int | None, int | float, str], spec: ModelSpec) -> dict[str, Any]:
        m, _bs, cap, var = key
        opts = variant_options(var)
        return {"schema": "ddpsim.ddp_run/1", "model": m, "batch_size": spec.batch_size,
                "precision": spec.precision, "seq_len": spec.seq_len, "bucket_cap_mb": cap, "world_size": W,
                "transport": a.transport, "launch_id": launch.launch_id, "variant": var, **opts,
                "ddp_options_default": is_default_ddp(opts), "zero_grad_set_to_none": True,
                "model_source": spec.source, **launch.shape, **topo_fields, "fingerprint": launch.fp}

    def write_fn(rec: dict[str, Any]) -> None:
        if launch.rank == 0:
            append_jsonl(os.path.join(a.out, "ddp_runs.jsonl"), rec)

    run_interleaved(plan, reference, launch.device, W, base_fn, write_fn, t_launch0=t_start, budget_s=budget_s,
                    rounds=a.rounds, steps=a.steps, warmup=a.warmup, round_warmup=a.round_warmup,
                    nosync_steps=nosync, max_live=a.max_live, log_fn=log)


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    t_start = time.perf_counter()
    models = [m for m in a.models.split(",") if m]
    batch_sizes = parse_list(a.batch_sizes)
    caps = [cap_value(c) for c in a.caps.split(",") if c]
    variants = [v for v in a.variants.split(",") if v]
    for v in variants:
        variant_options(v)  # fail early on a typo
    nosync = min(a.steps, 10) if a.nosync_steps is None else a.nosync_steps
    os.makedirs(a.out, exist_ok=True)
    if a.mode == "profile":
        return profile_main(a, models, batch_sizes, t_start)
    launch = start_launch(a)  # sweep / microbench: under torchrun
    if a.mode == "microbench":
        run_microbench(launch, t_start)
    else:
        run_sweep(launch, models, batch_sizes, caps, variants, nosync, t_start)
    finish_launch(launch.launch_id, t_start)
    return 0


def overlap_bench(a: argparse.Namespace, models: list[str], batch_sizes: list[int] | None, device: torch.device,
                  W: int, fp: dict[str, Any], shape: dict[str, Any], launch_id: str) -> None:
    """Each model's backward beside all-reduces (overlap.py); a model that fails is recorded as failed."""
    from . import overlap

    rank = dist.get_rank()
    base = {"schema": "ddpsim.overlap/1", "launch_id": launch_id, "world_size": W, "transport": a.transport,
            **shape, "fingerprint": fp}
    sizes: list[int | None] = list(batch_sizes) if batch_sizes else [None]
    for name in models:
        for bs in sizes:
            t0 = time.perf_counter()
            try:
                spec = resolve(name, bs)
                recs = overlap.model_overlap(spec, device, reps=2 if a.quick else 5)
                status = [dict(base, status="ok", **r) for r in recs]
            except Exception:  # noqa: BLE001
                log("overlap bench FAILED", name, traceback.format_exc()[-800:])
                status = [dict(base, bench="model_overlap", model=name, status="failed",
                               error=traceback.format_exc()[-4000:])]
            if rank == 0:
                for r in status:
                    append_jsonl(os.path.join(a.out, "overlap.jsonl"), r)
            log(f"overlap bench {name}: {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    sys.exit(main())
