"""Profile mode: each model's world-size-1 training step (forward, backward, optimizer, when each
gradient is ready: profiles/<model>.json), and world-size-1 DDP rows stepped beside plain steps."""
from __future__ import annotations

import datetime
import functools
import os
import time
import traceback

import torch
import torch.distributed as dist

from .common import (
    Marker,
    append_jsonl,
    fingerprint,
    finish_launch,
    get_device,
    idle_sync_s,
    log,
    median,
    quantile,
    synchronize,
    wait_for_gpu_s,
    write_json,
)
from .memory import PeakTracker, profile_memory, settled_allocated_bytes
from .models import MODELS, buffers_bytes, ddp_param_order, file_stem, resolve
from .runner import Runner, cap_value


def profile_model(spec, device, iters=20, warmup=5):
    """World-size-1 times of one training step, and when each parameter's gradient is ready.

    A Python hook per parameter (to record its ready event) costs CPU time in backward: on a
    launch-bound model (258 tensors of mlp-ln-64 on an H100) that made the hooked backward ~30%
    slower than the same model's no_sync compute inside DDP. So iterations alternate: clean ones
    (no hooks) give forward, backward, optimizer and step times; hooked ones give the order and the
    ready times, scaled by clean / hooked backward so that they end where the clean backward ends.

    Two more kinds of iteration measure mechanisms directly. A "lead" iteration waits for the GPU right
    after ``loss.backward()`` returns: how long it waits is how far the backward thread ran ahead of the
    GPU (per-bucket traces: ResNet-50's thread is 9-15 ms ahead at its last bucket, GPT-2's and the MLPs'
    about 0), the slack that host work added on that thread (a comm hook) can use before it delays the
    GPU. An "accumulate" iteration skips ``zero_grad``: its backward adds into the existing ``.grad``
    (an add per parameter in AccumulateGrad), what every micro-step after the first pays under
    gradient accumulation."""
    torch.manual_seed(0)
    baseline_bytes = settled_allocated_bytes(device)
    model = spec.build_on(device)
    model.train()
    order = ddp_param_order(model)
    opt = spec.make_optimizer([p for _, p in order])
    batch = spec.make_batch(device)
    state = {"fired": [], "ev": {}}

    def make_hook(i):
        def h(p):
            state["fired"].append(i)
            state["ev"][i] = Marker(device).record()
        return h

    fwd, bwd, optm, step, bwd_hooked = [], [], [], [], []
    lead, host_bwd, fwd_acc, bwd_acc = [], [], [], []
    ready = [[] for _ in order]
    orders = []
    sync_floor_s = idle_sync_s(device)
    # the peak of the clean steps after warm-up only: an accumulate step's backward adds into gradients that
    # already exist, a higher peak than a training loop that zeroes them (set_to_none) sees
    peaks = PeakTracker(device, baseline_bytes)
    for it in range(warmup + 4 * iters):
        kind = ("clean", "hooked", "lead", "accumulate")[(it - warmup) % 4] if it >= warmup else ("clean", "hooked")[it % 2]
        hooked = kind == "hooked"
        handles = [p.register_post_accumulate_grad_hook(make_hook(i)) for i, (_, p) in enumerate(order)] if hooked else []
        tracked = kind == "clean" and it >= warmup
        if tracked:
            peaks.begin()
        try:
            state["fired"].clear()
            state["ev"].clear()
            m0, m1, m2, m3 = (Marker(device) for _ in range(4))
            m0.record()
            if kind != "accumulate":
                opt.zero_grad(set_to_none=True)
            loss = spec.loss(model, batch)
            m1.record()  # backward start
            t0 = time.perf_counter()
            loss.backward()
            if kind == "lead":
                host_bwd.append(time.perf_counter() - t0)
                lead.append(wait_for_gpu_s(device, sync_floor_s))
            m2.record()
            opt.step()
            m3.record()
            synchronize(device)
            if tracked:
                peaks.end()
        finally:
            for h in handles:
                h.remove()
        if it < warmup or kind == "lead":
            continue
        if kind == "accumulate":
            fwd_acc.append(m1.seconds_since(m0))
            bwd_acc.append(m2.seconds_since(m1))
            continue
        if hooked:
            bwd_hooked.append(m2.seconds_since(m1))
            ready_s = {i: ev.seconds_since(m1) for i, ev in state["ev"].items()}
            orders.append(list(state["fired"]))
            for i, t in ready_s.items():
                ready[i].append(t)
            continue
        fwd.append(m1.seconds_since(m0))
        bwd.append(m2.seconds_since(m1))
        optm.append(m3.seconds_since(m2))
        step.append(m3.seconds_since(m0))
    # the hooks' own CPU time, spread over backward: take it out of the ready times
    ready_scale = min(1.0, median(bwd) / median(bwd_hooked)) if bwd and bwd_hooked else 1.0
    ready = [[t * ready_scale for t in times] for times in ready]
    fired = orders[0] if orders else []
    rank_of = {pi: k for k, pi in enumerate(fired)}
    memory = profile_memory(peaks, model, opt, functools.partial(spec.loss, model, batch), spec.optimizer, spec.precision,
                            spec.batch_size)
    params = []
    for i, (name, p) in enumerate(order):
        params.append({"name": name, "numel": p.numel(), "dtype": str(p.dtype).replace("torch.", ""),
                       "shape": list(p.shape), "grad_ready_s": median(ready[i]) if ready[i] else None,
                       "ready_order": rank_of.get(i)})
    out = {"schema": "ddpsim.profile/1", "model": spec.name, "batch_size": spec.batch_size,
           "precision": spec.precision, "seq_len": spec.seq_len,
           "forward_s": median(fwd), "backward_s": median(bwd), "optimizer_s": median(optm), "step_s": median(step),
           "forward_s_p10": quantile(fwd, 0.1), "forward_s_p90": quantile(fwd, 0.9),
           "backward_s_p10": quantile(bwd, 0.1), "backward_s_p90": quantile(bwd, 0.9),
           "step_s_p10": quantile(step, 0.1), "step_s_p90": quantile(step, 0.9),
           "iterations": len(step), "warmup": warmup,
           "backward_s_hooked": median(bwd_hooked) if bwd_hooked else None, "ready_scale": ready_scale,
           "backward_host_lead_s": median(lead) if lead else None,
           "backward_host_lead_s_p10": quantile(lead, 0.1) if lead else None,
           "backward_host_lead_s_p90": quantile(lead, 0.9) if lead else None,
           "backward_host_s": median(host_bwd) if host_bwd else None, "sync_floor_s": sync_floor_s,
           "forward_accumulate_s": median(fwd_acc) if fwd_acc else None,
           "backward_accumulate_s": median(bwd_acc) if bwd_acc else None,
           "backward_accumulate_s_p10": quantile(bwd_acc, 0.1) if bwd_acc else None,
           "backward_accumulate_s_p90": quantile(bwd_acc, 0.9) if bwd_acc else None,
           "ready_order_stable": all(o == fired for o in orders),
           "optimizer": spec.optimizer, "params": params, "buffers_bytes": buffers_bytes(model),
           "param_bytes": sum(p.numel() * p.element_size() for _, p in order), "memory": memory}
    del model, opt, batch
    settled_allocated_bytes(device)  # the next profile of this launch starts without this one's leftovers
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def _world1_group(device):
    """A one-rank process group for DDP at world size 1 (the profile launch runs without torchrun)."""
    import socket

    if dist.is_initialized():
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kw = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=0, world_size=1, timeout=datetime.timedelta(seconds=120), **kw)


class _PlainStep:
    """The model without DDP, stepped in turn with a DDP instance of it: both then see the same moments of
    the host, whose speed drifts within a launch (a launch-bound model's compute moved 1.45x between
    launches minutes apart on one 2 x H100 allocation, h100x2-profiles-2026-11-26m)."""

    def __init__(self, spec, device):
        torch.manual_seed(0)
        self.model = spec.build_on(device)
        self.model.train()
        self.spec, self.device = spec, device
        self.opt = spec.make_optimizer(list(self.model.parameters()))
        self.batch = spec.make_batch(device)

    def step(self):
        m0, m1 = Marker(self.device), Marker(self.device)
        m0.record()
        self.opt.zero_grad(set_to_none=True)
        self.spec.loss(self.model, self.batch).backward()
        self.opt.step()
        m1.record()
        synchronize(self.device)
        return m1.seconds_since(m0)


def _paired_world1_row(spec, cap, variant, device, steps, warmup, nosync, lead, group):
    """One ``ddp_world1`` row: DDP steps at world size 1 alternated with plain steps of the same model
    (D P D P ...). What DDP adds is the median of each pair's difference, not the difference of two
    medians taken at different times: on allocation m the profile's plain step and its DDP rows, timed one
    after the other, put 7.8 ms of DDP work on LN-MLP-64 whose 2-GPU DDP step was 1.5 ms over its compute."""
    r = Runner(spec, cap, variant, device, 1, group=group)
    twin = _PlainStep(spec, device)
    try:
        r.warmup(warmup)
        for _ in range(warmup):
            twin.step()
        ddp_s, plain_s = [], []
        for _ in range(steps):
            ddp_s.append(r._one_step()["step"])
            plain_s.append(twin.step())
        r.measure_nosync(nosync)
        lead_s = r.measure_lead(lead)
    finally:
        r.close()
        del twin
        if device.type == "cuda":
            torch.cuda.empty_cache()
    row = {"bucket_cap_mb": cap, "variant": variant, "status": "ok", "step_s": median(ddp_s),
           "step_s_p10": quantile(ddp_s, 0.1), "step_s_p90": quantile(ddp_s, 0.9), "steps": len(ddp_s),
           "plain_step_s": median(plain_s), "ddp_minus_plain_s": median([d - p for d, p in zip(ddp_s, plain_s, strict=True)])}
    if nosync:
        row["nosync_step_s"] = median(r.nosync["step"])
    if lead_s is not None:
        row["backward_host_lead_s"] = lead_s
    return row


def ddp_world1(spec, device, caps, variants=("none", "gbv", "fp16", "bf16"), steps=20, warmup=3, group=None):
    """DDP's own per-rank cost on this host: the model wrapped in DDP at world size 1 (its reducer hooks,
    bucket copies, the launch of each bucket's one-rank all-reduce) against plain steps of the same model
    taken in turn with them; with a compression hook also the hook's own work on the backward thread (cast, ``div_``,
    ``fut.then``), whose cost per bucket moves with the host as much as the reducer's does. Nothing crosses a link, so what it adds is the work every rank of a larger job does too;
    on a launch-bound model it is host time on the backward thread, which differs between machines.
    ``group``: this rank's own one-rank group when every GPU's profile runs at once (None: the default group,
    started here at world size 1)."""
    if group is None:
        _world1_group(device)
    out = []
    for cap in caps:
        for variant in variants:
            try:
                # plain DDP also times no_sync micro-steps: on a slow host they cost more than the plain
                # profile step (4 x H100 "e": BERT-large +22%), what accumulation's micro-steps pay
                nosync = steps if variant == "none" else 0
                # and how far its backward thread runs ahead of the GPU with DDP's reducer on it: the slack a
                # comm hook's host work uses up before it delays the GPU (4 x H100 "g": BERT-large 4.5 ms
                # without DDP, 0.5 ms with it; GPT-2 6.7 and 6.8 ms)
                lead = steps // 2 if variant == "none" else 0
                row = _paired_world1_row(spec, cap, variant, device, steps, warmup, nosync, lead, group)
            except Exception as e:  # noqa: BLE001 - e.g. the bf16 hook needs NCCL: recorded, the others go on
                out.append({"bucket_cap_mb": cap, "variant": variant, "status": "failed", "error": repr(e)[:300]})
                continue
            out.append(row)
    return out


def _concurrent_group(device):
    """Under torchrun with several ranks: a gloo process group that starts every rank's profile of a model
    together and gathers the results, and this rank's own one-rank group for its world-size-1 DDP.  None
    for the one-process profile."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=900))
    backend = "nccl" if device.type == "cuda" else "gloo"
    # every rank creates every group, in the same order (new_group is a collective of the default group)
    groups = [dist.new_group([r], backend=backend) for r in range(dist.get_world_size())]
    return groups[dist.get_rank()]


def _profile_one(a, spec, device, fp, ddp_caps, warm, own_group):
    """One model's profile on this rank (and its world-size-1 DDP rows)."""
    if warm and not a.quick:
        # the launch's first model once untimed: on the third 4 x H100 allocation the first
        # profile (ResNet-50) ran its forward at 20 ms against 13 ms on two others, slower than
        # its own DDP steps later in the launch (a cold GPU or library, not the model)
        profile_model(spec, device, iters=3, warmup=3)
    prof = profile_model(spec, device, iters=a.profile_iters, warmup=2 if a.quick else 5)
    prof["fingerprint"] = fp
    prof["launch_id"] = a.launch_id
    prof["status"] = "ok"
    prof["model_source"] = spec.source
    if ddp_caps:
        try:  # the profile above stands whatever happens here (a process group that will not start)
            prof["ddp_world1"] = ddp_world1(spec, device, ddp_caps, steps=a.profile_iters,
                                            warmup=2 if a.quick else 3, group=own_group)
        except Exception as e:  # noqa: BLE001
            prof["ddp_world1_error"] = repr(e)[:300]
    return prof


def slowest_rank_profile(profiles):
    """The profile a DDP step follows when every GPU of the host ran its own at once: the slowest rank's
    (each bucket's all-reduce waits for the last rank to launch it; on 2 x H100 the second rank ran
    launch-bound compute 13-52% slower than the first, h100x2-ranks-2026-11-26j and -k), with every rank's
    times beside it.  ``profiles``: one per rank, a dict with status 'ok' or an error."""
    ok = [(r, p) for r, p in enumerate(profiles) if p.get("status") == "ok"]
    if not ok:
        return None
    rank, chosen = max(ok, key=lambda rp: rp[1]["step_s"])
    out = dict(chosen)
    out["concurrent"] = {
        "ranks": len(profiles), "profiled_rank": rank,
        "why": "every GPU of the host profiled at once; the slowest rank's profile, which a DDP step waits for",
        "per_rank": [{"rank": r, "status": p.get("status"), "gpu": (p.get("gpu") or None),
                      **{k: p.get(k) for k in ("step_s", "forward_s", "backward_s", "optimizer_s")}}
                     for r, p in enumerate(profiles)],
    }
    return out


def profile_main(a, models, batch_sizes, t_start):
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = get_device(local_rank)
    own_group = _concurrent_group(device)
    W = dist.get_world_size() if own_group is not None else 1
    rank = dist.get_rank() if own_group is not None else 0
    fp = fingerprint(device, W, "none", 1)
    fp["profile_ranks"] = W
    ddp_caps = [cap_value(c) for c in a.profile_ddp_caps.split(",") if c] if a.profile_ddp_caps else []
    warm = True

    def failure(name, bs, status, error):
        if rank == 0:
            append_jsonl(os.path.join(a.out, "profile_failures.jsonl"),
                         {"model": name, "batch_size": bs, "status": status, "error": error, "fingerprint": fp,
                          "launch_id": a.launch_id})

    for name in models:
        for bs in (batch_sizes or [None]):
            go = [time.perf_counter() - t_start <= a.budget_s]
            if own_group is not None:
                dist.broadcast_object_list(go, 0)  # rank 0's clock decides, so that every rank skips alike
            if not go[0]:
                log("budget exhausted, skipping profile", name)
                continue
            t0 = time.perf_counter()
            try:
                spec = resolve(name, bs)
                ok, why = spec.available()
            except Exception:  # noqa: BLE001
                spec, ok, why = None, False, traceback.format_exc()[-4000:]
            if not ok:
                log("profile SKIPPED", name, why)
                failure(name, spec.batch_size if spec is not None else bs, "skipped", why)
                continue
            if own_group is not None:
                dist.barrier()  # start together: each rank's profile runs beside the others'
            try:
                prof = _profile_one(a, spec, device, fp, ddp_caps, warm, own_group)
                prof["gpu"] = str(device)
            except Exception:  # noqa: BLE001
                prof = {"status": "failed", "error": traceback.format_exc()[-4000:]}
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            warm = False
            profiles = [prof]
            if own_group is not None:
                profiles = [None] * W
                dist.all_gather_object(profiles, prof)
            if rank != 0:
                continue
            default_bs = MODELS[name].batch_size if name in MODELS else None
            stem = file_stem(name, spec.batch_size, default_bs if default_bs is not None else spec.batch_size)
            for r, p in enumerate(profiles):
                if p.get("status") != "ok":
                    log("profile FAILED", name, f"rank {r:d}", p.get("error", "")[-800:])
                    failure(name, bs, "failed", f"rank {r:d} of {W:d}: " + p.get("error", ""))
            if own_group is None:
                chosen = prof if prof.get("status") == "ok" else None
            else:
                chosen = slowest_rank_profile(profiles)
                for r, p in enumerate(profiles):
                    if p.get("status") == "ok":
                        write_json(os.path.join(a.out, "profiles", "ranks", f"{stem}.r{r:d}.json"), p)
            if chosen is None:
                continue
            write_json(os.path.join(a.out, "profiles", stem + ".json"), chosen)
            steps = " ".join(f"{p['step_s']:.4f}" for p in profiles if p.get("status") == "ok")
            log(f"profile {name} bs {spec.batch_size} step {chosen['step_s']:.4f} s fwd {chosen['forward_s']:.4f} "
                f"bwd {chosen['backward_s']:.4f} opt {chosen['optimizer_s']:.4f} (ranks: {steps}) "
                f"({time.perf_counter() - t0:.1f}s)")
    if own_group is not None:
        finish_launch(a.launch_id or "profile", t_start)
    return 0
