"""DDP configurations measured in interleaved rounds: the plan, one live DDP instance (Runner) with
its per-bucket timing hook, and the round-robin driver (run_interleaved)."""
from __future__ import annotations

import contextlib
import re
import time
import traceback
from typing import Any

import torch
import torch.distributed as dist

from .common import Marker, bcast_int, idle_sync_s, median, quantile, synchronize, wait_for_gpu_s
from .memory import RunPeaks, run_peaks
from .models import ddp_param_order, resolve


class BucketTimer:
    """Comm hook that times each bucket: launch (event on the compute stream at hook call), end (event
    recorded in the future's callback, on a stream that waits for the NCCL work), relative to an event
    recorded at backward start.  start_s is inferred: max(launch_s, previous bucket's end_s), because
    all buckets run in index order on one NCCL stream."""

    def __init__(self, W, device, index_of_param):
        self.W = W
        self.device = device
        self.index_of_param = index_of_param
        self.active = False
        self.bw_start = None
        self.bw_cpu = 0.0
        self.cur = []
        self.steps = []
        self.param_indices = {}

    def begin(self, marker):
        self.bw_start = marker
        self.bw_cpu = time.perf_counter()
        self.cur = []

    def hook(self, state, bucket):
        launch = Marker(self.device).record()
        cpu = time.perf_counter()
        buf = bucket.buffer()
        buf.div_(self.W)
        fut = dist.all_reduce(buf, group=state, async_op=True).get_future()
        if not self.active:
            return fut.then(lambda f: f.value()[0])
        idx = bucket.index()
        if idx not in self.param_indices:
            try:
                self.param_indices[idx] = [self.index_of_param.get(id(p), -1) for p in bucket.parameters()]
            except Exception:
                pass
        entry = {"index": idx, "bytes": buf.numel() * buf.element_size(), "launch": launch,
                 "cpu": cpu - self.bw_cpu, "end": None}
        self.cur.append(entry)

        def cb(f):
            entry["end"] = Marker(self.device).record()
            return f.value()[0]

        return fut.then(cb)

    def collect(self):
        if not self.active:
            return
        rows = []
        prev_end = 0.0
        for e in sorted(self.cur, key=lambda e: e["index"]):
            launch_s = e["launch"].seconds_since(self.bw_start)
            end_s = e["end"].seconds_since(self.bw_start) if e["end"] is not None else None
            start_s = max(launch_s, prev_end)
            if end_s is not None:
                prev_end = end_s
            rows.append((e["index"], e["bytes"], launch_s, start_s, end_s, e["cpu"]))
        self.steps.append(rows)
        self.cur = []

    def summary(self):
        if not self.steps:
            return None
        nb = max(len(s) for s in self.steps)
        out = []
        for k in range(nb):
            col = [s[k] for s in self.steps if len(s) > k]
            ends = [c[4] for c in col if c[4] is not None]
            out.append({"index": col[0][0], "bytes": col[0][1],
                        "launch_s": median([c[2] for c in col]), "start_s": median([c[3] for c in col]),
                        "end_s": median(ends) if ends else None,
                        "launch_cpu_s": median([c[5] for c in col]),
                        "start_inferred": True,
                        "param_indices": self.param_indices.get(col[0][0])})
        return out


def parse_list(s, conv=int):
    if s is None or s == "":
        return None
    return [conv(x) for x in str(s).split(",") if x.strip() != ""]


def parse_indices(s):
    if s is None or s == "":
        return None
    return [[int(x) for x in grp.split()] for grp in str(s).split(",")]



# ============================================================================ DDP option variants
# Every run record carries all of these fields explicitly (the defaults are plain DDP).
VARIANT_DEFAULTS = {"gradient_as_bucket_view": False, "comm_hook": None, "timing_hook": False,
                    "grad_accumulation_steps": 1, "find_unused_parameters": False, "static_graph": False}
VARIANT_PARTS: dict[str, dict[str, Any]] = {
    "none": {},
    "gbv": {"gradient_as_bucket_view": True},
    "fp16": {"comm_hook": "fp16"},
    "bf16": {"comm_hook": "bf16"},
    "find_unused": {"find_unused_parameters": True},
    "static_graph": {"static_graph": True},
    "timing": {"timing_hook": True},
}


def variant_options(name: str) -> dict:
    """'none', 'gbv', 'fp16', 'bf16', 'accumK', 'find_unused', 'static_graph', 'timing', or several joined by
    '+' (e.g. 'gbv+bf16') -> the explicit option fields."""
    opts: dict[str, Any] = dict(VARIANT_DEFAULTS)
    for part in name.split("+"):
        m = re.fullmatch(r"accum(\d+)", part)
        if m:
            opts["grad_accumulation_steps"] = int(m.group(1))
        elif part in VARIANT_PARTS:
            opts.update(VARIANT_PARTS[part])
        else:
            raise ValueError(f"unknown DDP variant {part!r} (known: {', '.join(VARIANT_PARTS)}, accumK)")
    if opts["timing_hook"] and opts["comm_hook"]:
        raise ValueError("the timing hook and a compress hook cannot be registered together (one comm hook)")
    if opts["grad_accumulation_steps"] < 1:
        raise ValueError("accumK needs K >= 1")
    return opts


def is_default_ddp(opts: dict) -> bool:
    return all(opts[k] == v for k, v in VARIANT_DEFAULTS.items())


# ============================================================================ (3) DDP runs
class Runner:
    """One live DDP configuration: model, DDP wrapper with its options, optimizer, batch.  Kept alive while
    its group is measured so that rounds can be interleaved without rebuilding."""

    def __init__(self, spec, cap, variant, device, W, seed=0, group=None):
        from torch.nn.parallel import DistributedDataParallel as DDP

        self.spec, self.cap, self.variant, self.device, self.W = spec, cap, variant, device, W
        self.opts = variant_options(variant)
        rank = dist.get_rank()
        self.peaks = RunPeaks(device)  # before the model exists: its resident bytes are what follows
        torch.manual_seed(seed)
        model = spec.build_on(device)
        model.train()
        self.order = ddp_param_order(model)
        index_of_param = {id(p): i for i, (_, p) in enumerate(self.order)}
        kw = dict(bucket_cap_mb=cap, gradient_as_bucket_view=self.opts["gradient_as_bucket_view"],
                  find_unused_parameters=self.opts["find_unused_parameters"],
                  static_graph=self.opts["static_graph"])  # broadcast_buffers: default True
        if device.type == "cuda":
            kw["device_ids"] = [device.index]
        self.ddp = DDP(model, process_group=group, **kw)
        self.model = model
        self.timer = None
        if self.opts["timing_hook"]:
            self.timer = BucketTimer(W, device, index_of_param)
            # the hook's state is the group its all-reduce runs on (None: the default group)
            self.ddp.register_comm_hook(group, self.timer.hook)
        elif self.opts["comm_hook"]:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            hook = {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}
            self.ddp.register_comm_hook(group, hook[self.opts["comm_hook"]])
        self.opt = spec.make_optimizer(self.ddp.parameters())
        self.batch = spec.make_batch(device, seed=1234 + rank)
        self.rounds = []
        self.nosync = None
        self.step_wall_estimate = None
        self.warmup_done = 0
        self.lead_s = None

    def _one_step(self, sync=True, lead_floor_s=None):
        """One optimizer step (K micro-batches, the first K-1 under no_sync).  Returns markers and wall time.
        With ``lead_floor_s`` the host waits for the GPU as soon as the last backward returns: the wait
        (less that floor, one idle synchronize) is how far the backward thread ran ahead of the GPU at world
        size 1; above it the wait also holds the all-reduces still running (DDP's copy-back waits for them)."""
        K = self.opts["grad_accumulation_steps"]
        d = self.device
        m0, mf, m1, m2, m3 = (Marker(d) for _ in range(5))
        w0 = time.perf_counter()
        m0.record()
        self.opt.zero_grad(set_to_none=True)
        for k in range(K):
            last = k == K - 1
            ctx = contextlib.nullcontext() if (sync and last) else self.ddp.no_sync()
            with ctx:
                if last and K > 1:
                    mf.record()
                loss = self.spec.loss(self.ddp, self.batch)
                if K > 1:
                    loss = loss / K
                if last:
                    m1.record()
                    if self.timer is not None and sync:
                        self.timer.begin(m1)
                loss.backward()
                if last:
                    lead_s = wait_for_gpu_s(d, lead_floor_s) if lead_floor_s is not None else None
                    m2.record()
        self.opt.step()
        m3.record()
        synchronize(d)
        wall = time.perf_counter() - w0
        fwd_start = m0 if K == 1 else mf
        return {"step": m3.seconds_since(m0), "wall": wall, "fwd": m1.seconds_since(fwd_start),
                "bwd": m2.seconds_since(m1), "opt": m3.seconds_since(m2), "lead": lead_s}

    def measure_lead(self, n):
        """Median backward-thread lead over n steps (see ``_one_step``); None for n = 0."""
        if n <= 0:
            return None
        floor_s = idle_sync_s(self.device)
        return median([self._one_step(lead_floor_s=floor_s)["lead"] for _ in range(n)])

    def run_steps(self, n, sync=True, timed_hook=False):
        res = {"step": [], "fwd": [], "bwd": [], "opt": [], "wall": []}
        if self.timer is not None:
            self.timer.active = timed_hook and sync
        for _ in range(n):
            r = self._one_step(sync)
            for k in res:
                res[k].append(r[k])
            if self.timer is not None and self.timer.active:
                self.timer.collect()
        if self.timer is not None:
            self.timer.active = False
        return res

    def warmup(self, n):
        # iteration 1 (one bucket) and the rebuild in iteration 2 are excluded; >= 3 so that DDP's logger has
        # sampled the rebuilt layout
        r = self.run_steps(n)
        self.warmup_done += n
        if self.peaks.resident_bytes is None:
            self.peaks.built()
        self.step_wall_estimate = r["wall"][-1] if r["wall"] else None

    def measure_round(self, steps, round_warmup, position, slot, t_launch0):
        if round_warmup:
            self.run_steps(round_warmup)
        t0 = time.perf_counter() - t_launch0
        self.peaks.begin()
        r = self.run_steps(steps, timed_hook=True)
        self.peaks.end()
        self.step_wall_estimate = median(r["wall"])
        self.rounds.append({
            "round": sum(1 for x in self.rounds if x["position"] == "round") if position == "round" else None,
            "position": position, "slot": slot, "t_start_s": t0, "steps": steps, "round_warmup": round_warmup,
            "step_s_median": median(r["step"]), "step_s_p10": quantile(r["step"], 0.1),
            "step_s_p90": quantile(r["step"], 0.9),
            "step_wall_s_median": median(r["wall"]), "step_wall_s_p10": quantile(r["wall"], 0.1),
            "step_wall_s_p90": quantile(r["wall"], 0.9),
            "step_times_s": r["step"], "step_wall_times_s": r["wall"],
            "forward_s_median": median(r["fwd"]), "backward_s_median": median(r["bwd"]),
            "optimizer_s_median": median(r["opt"]),
        })

    def measure_nosync(self, n):
        if n > 0:
            self.nosync = self.run_steps(n, sync=False)

    def _per_rank(self, steps, nosync):
        """{field: [rank 0, rank 1, ...]} of the step, forward and backward medians and the no_sync ones
        (None where not measured); a collective, like ``record``. None at world size 1."""
        if self.W <= 1 or not steps:
            return None
        fields = ("step_s", "forward_s", "backward_s", "nosync_step_s", "nosync_forward_s", "nosync_backward_s")
        mine = [median(steps), median([r["forward_s_median"] for r in self.rounds]),
                median([r["backward_s_median"] for r in self.rounds])]
        mine += [median(nosync[k]) if nosync else float("nan") for k in ("step", "fwd", "bwd")]
        t = torch.tensor(mine, dtype=torch.float64, device=self.device)
        g = [torch.zeros_like(t) for _ in range(self.W)]
        dist.all_gather(g, t)
        table = torch.stack(g).tolist()
        return {f: [None if v != v else v for v in (row[i] for row in table)] for i, f in enumerate(fields)}

    def record(self):
        """The run's measurement fields (a collective: every rank must call it at the same point)."""
        pooled = {k: [] for k in ("step_times_s", "step_wall_times_s")}
        for r in self.rounds:
            pooled["step_times_s"] += r["step_times_s"]
            pooled["step_wall_times_s"] += r["step_wall_times_s"]
        st, wt = pooled["step_times_s"], pooled["step_wall_times_s"]
        ns = self.nosync
        logd = {}
        try:
            raw = self.ddp._get_ddp_logging_data()
            keep = ("bucket_cap_bytes", "bucket_sizes", "has_rebuilt_buckets", "rebuilt_bucket_sizes",
                    "rebuilt_per_bucket_param_indices", "prev_iteration_grad_ready_order_indices", "iteration",
                    "num_buckets_reduced", "total_parameter_size_bytes", "comm_hook", "avg_forward_compute_time",
                    "avg_backward_compute_time", "avg_backward_comm_time", "avg_backward_compute_comm_overlap_time",
                    "find_unused_parameters", "static_graph", "gradient_as_bucket_view")
            logd = {k: raw[k] for k in keep if k in raw}
            logd["_all_keys"] = sorted(raw.keys())
        except Exception as e:  # noqa: BLE001 - a logging-data failure must not lose the measurement
            logd = {"_error": repr(e)}
        step_max = None
        if self.W > 1 and st:
            t = torch.tensor(st, dtype=torch.float64, device=self.device)
            g = [torch.zeros_like(t) for _ in range(self.W)]
            dist.all_gather(g, t)
            step_max = median(torch.stack(g).max(dim=0).values.tolist())
        per_rank = self._per_rank(st, ns)
        memory = run_peaks(self.device, self.peaks.peak_allocated_bytes, self.peaks.peak_reserved_bytes,
                           gather=self.W > 1)
        if memory is not None:
            memory["method"] = RunPeaks.METHOD
        # rebuilt layout when DDP rebuilt its buckets; otherwise (find_unused_parameters: no rebuild) the
        # initial layout, in reverse registration order
        sizes = parse_list(logd.get("rebuilt_bucket_sizes"))
        layout_src = "rebuilt_bucket_sizes"
        if not sizes:
            sizes = parse_list(logd.get("bucket_sizes"))
            layout_src = "bucket_sizes (no rebuild)" if sizes else None
        regular = [r for r in self.rounds if r["position"] == "round"]
        return {
            "step_s_median": median(st), "step_s_p10": quantile(st, 0.1), "step_s_p90": quantile(st, 0.9),
            "step_times_s": st, "step_s_median_max_over_ranks": step_max,
            # every rank's own medians (GPU events on its own streams): whether the ranks of one host run
            # their compute equally fast, or the step waits for the slowest
            "per_rank_s": per_rank,
            "step_wall_s_median": median(wt), "step_wall_s_p10": quantile(wt, 0.1),
            "step_wall_s_p90": quantile(wt, 0.9), "step_wall_times_s": wt,
            "step_time_source": "cuda_event" if self.device.type == "cuda" else "perf_counter",
            "rounds": self.rounds, "n_rounds": len(regular),
            "round_medians_s": [r["step_s_median"] for r in regular],
            "nosync_step_s_median": median(ns["step"]) if ns else None,
            "nosync_step_s_p10": quantile(ns["step"], 0.1) if ns else None,
            "nosync_step_s_p90": quantile(ns["step"], 0.9) if ns else None,
            "nosync_step_times_s": ns["step"] if ns else None,
            "nosync_forward_s_median": median(ns["fwd"]) if ns else None,
            "nosync_backward_s_median": median(ns["bwd"]) if ns else None,
            "nosync_optimizer_s_median": median(ns["opt"]) if ns else None,
            # diagnostic, never used to predict this run: the wait for the GPU once backward returns at this
            # world size; above world size 1 it includes the all-reduces still running (DDP's copy-back waits
            # for them), so it bounds the backward thread's lead from above
            "backward_host_lead_s": self.lead_s,
            "forward_s_median": median([r["forward_s_median"] for r in self.rounds]),
            "backward_s_median": median([r["backward_s_median"] for r in self.rounds]),
            "optimizer_s_median": median([r["optimizer_s_median"] for r in self.rounds]),
            "iterations": len(st), "nosync_iterations": len(ns["step"]) if ns else 0, "warmup": self.warmup_done,
            "bucket_sizes_bytes": sizes,
            "bucket_param_indices": parse_indices(logd.get("rebuilt_per_bucket_param_indices")),
            "grad_ready_order": parse_list(logd.get("prev_iteration_grad_ready_order_indices")),
            "bucket_layout_source": (f"ddp._get_ddp_logging_data(): {layout_src} / rebuilt_per_bucket_param_indices "
                                     "(reducer variable index == registration order)") if layout_src else None,
            "ddp_logging": logd,
            "per_bucket": self.timer.summary() if self.timer is not None else None,
            "per_bucket_samples": ([[list(r) for r in st_] for st_ in self.timer.steps]
                                   if self.timer is not None else None),
            "n_params": len(self.order), "param_bytes": sum(p.numel() * p.element_size() for _, p in self.order),
            "memory": memory,
        }

    def close(self):
        del self.ddp, self.model, self.opt, self.batch
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def ddp_run(spec, cap, device, W, warmup=3, steps=10, nosync_steps=10, comm_hook=None, seed=0, variant=None,
            lead_steps=0, group=None):
    """One configuration measured in one round (the pre-interleaving API; comm_hook='timing' = variant 'timing')."""
    if variant is None:
        variant = "timing" if comm_hook == "timing" else (comm_hook or "none")
    r = Runner(spec, cap, variant, device, W, seed, group=group)
    try:
        r.warmup(warmup)
        r.measure_round(steps, 0, "round", 0, time.perf_counter())
        r.measure_nosync(nosync_steps)
        r.lead_s = r.measure_lead(lead_steps)
        rec = r.record()
    finally:
        r.close()
    return rec


def plan_configs(models, caps, timing_cap):
    """Priority order: timing cap first (+ its comm-hook timing run), then the other caps spread out,
    so that a launch running out of budget drops the least informative caps."""
    caps = list(caps)
    first = [timing_cap] if timing_cap in caps else []
    rest = [c for c in caps if c not in first]
    # spread: smallest, largest, then the middle ones
    spread = []
    while rest:
        spread.append(rest.pop(0))
        if rest:
            spread.append(rest.pop())
    out = []
    for cap in first:
        for m in models:
            out.append((m, cap, None))
        for m in models:
            out.append((m, cap, "timing"))
    if timing_cap is not None and timing_cap not in caps:
        for m in models:
            out.append((m, timing_cap, "timing"))
    for cap in spread:
        for m in models:
            out.append((m, cap, None))
    return out


def plan_runs(models, caps, variants, batch_sizes=None, variant_caps=None, timing_cap=None, cap_models=None):
    """Configurations (model, batch_size or None, cap, variant), grouped by model (and batch size): every cap
    with variant 'none' (only for the models in ``cap_models`` when given; the others get the variant caps),
    then every other variant at ``variant_caps`` (default: the first cap), then the timing-hook run at
    timing_cap.  Order inside a model group = measurement order within each round."""
    out = []
    bss = batch_sizes or [None]
    vcaps = variant_caps if variant_caps is not None else caps[:1]
    for m in models:
        for bs in bss:
            seen = set()

            def add(cap, var, m=m, bs=bs, seen=seen):
                if (cap, var) not in seen:
                    seen.add((cap, var))
                    out.append((m, bs, cap, var))

            if "none" in variants:
                for cap in (caps if cap_models is None or m in cap_models else vcaps):
                    add(cap, "none")
            for var in variants:
                if var == "none":
                    continue
                for cap in vcaps:
                    add(cap, var)
            if timing_cap is not None:
                add(timing_cap, "timing")
    return out


def cap_value(c):
    c = str(c)
    return int(float(c)) if float(c).is_integer() else float(c)


def parse_reference(s, default_model=None):
    """'model:cap[:variant]' (model may itself be module:factory: the cap is the last numeric field)."""
    if s is None or s.lower() == "none":
        return None
    parts = s.split(":")
    var = "none"
    if len(parts) >= 3 and not re.fullmatch(r"[0-9.]+", parts[-1]):
        var = parts.pop()
    cap = cap_value(parts.pop())
    model = ":".join(parts) or default_model
    return (model, None, cap, var)


def run_interleaved(plan, reference, device, W, base_fn, write_fn, *, t_launch0, budget_s, rounds=2, steps=30,
                    warmup=3, round_warmup=2, nosync_steps=10, build_s=3.0, max_live=6, log_fn=print):
    """Measure ``plan`` (list of (model, bs, cap, variant)) in model groups, ``rounds`` interleaved rounds per
    group, the ``reference`` configuration first and last in the launch.  ``base_fn(key, spec)`` gives a record's
    identifying fields, ``write_fn(rec)`` stores it (rank 0).  Budget decisions are rank 0's (broadcast)."""
    rank = dist.get_rank()
    slot = [0]
    specs = {}

    def spec_of(key):
        m, bs, _, _ = key
        if (m, bs) not in specs:
            specs[(m, bs)] = resolve(m, bs)
        return specs[(m, bs)]

    def elapsed():
        return time.perf_counter() - t_launch0

    def est_round(r):
        return (r.step_wall_estimate or 1.0) * (steps + round_warmup) + 0.5

    def finish(key, runner, status="ok", error=None):
        spec = spec_of(key)
        rec = dict(base_fn(key, spec), status=status, error=error)
        if runner is not None and runner.rounds:
            try:
                rec.update(runner.record())
            except Exception:  # noqa: BLE001
                rec.update(status="failed", error=traceback.format_exc()[-4000:])
        elif status == "ok":
            rec.update(status="skipped", error=f"launch time budget exhausted ({budget_s:.0f}s) before any round")
        rec["is_reference"] = key == reference
        write_fn(rec)
        if rank == 0 and rec["status"] == "ok":
            log_fn(f"{key[0]!s:<11} bs {spec.batch_size:<4d} cap {key[2]!s:>4} {key[3]!s:<12} "
                   f"step {rec['step_s_median']:.4f} rounds {rec['round_medians_s']} "
                   f"nosync {rec['nosync_step_s_median'] or -1:.4f} buckets {len(rec['bucket_sizes_bytes'] or [])}")

    def build(key):
        spec = spec_of(key)
        ok, why = spec.available()
        if not ok:
            return None, ("skipped", why)
        try:
            r = Runner(spec, key[2], key[3], device, W)
            r.warmup(warmup)
            return r, None
        except Exception:  # noqa: BLE001 - a failing configuration is recorded and the launch goes on
            if device.type == "cuda":
                torch.cuda.empty_cache()
            return None, ("failed", traceback.format_exc()[-4000:])

    def measure(r, position):
        r.measure_round(steps, round_warmup, position, slot[0], t_launch0)
        slot[0] += 1

    ref_runner = None
    if reference is not None:
        skip = bcast_int(1 if elapsed() + build_s > budget_s else 0, device)
        if not skip:
            ref_runner, err = build(reference)
            if ref_runner is None:
                finish(reference, None, *err)
                reference = None
            else:
                measure(ref_runner, "reference_start")
    # reserve time for the reference at the end of the launch
    def reserve():
        return est_round(ref_runner) if ref_runner is not None else 0.0

    groups = []
    for key in plan:
        g = (key[0], key[1])
        # a model group larger than max_live is measured in chunks (GPU memory: every member is alive)
        if not groups or groups[-1][0] != g or len(groups[-1][1]) >= max_live:
            groups.append((g, []))
        groups[-1][1].append(key)
    for _, keys in groups:
        runners, errors = {}, {}
        for key in keys:
            if key == reference and ref_runner is not None:
                runners[key] = ref_runner
                continue
            skip = bcast_int(1 if elapsed() + build_s + reserve() > budget_s else 0, device)
            if skip:
                errors[key] = ("skipped", f"launch time budget exhausted ({budget_s:.0f}s)")
                continue
            r, err = build(key)
            if r is None:
                errors[key] = err
            else:
                runners[key] = r
        for _ in range(rounds):
            for key in keys:
                r = runners.get(key)
                if r is None:
                    continue
                skip = bcast_int(1 if elapsed() + est_round(r) + reserve() > budget_s else 0, device)
                if skip:
                    continue
                try:
                    measure(r, "round")
                except Exception:  # noqa: BLE001
                    errors[key] = ("failed", traceback.format_exc()[-4000:])
                    runners.pop(key).close()
                    if key == reference:
                        ref_runner = None  # its record is written as failed below
        for key in keys:
            r = runners.get(key)
            if r is not None and r.opts == VARIANT_DEFAULTS and key != reference:
                lead_steps = max(2, nosync_steps // 2)
                skip = bcast_int(1 if elapsed() + (r.step_wall_estimate or 1.0) * (nosync_steps + lead_steps)
                                 + reserve() > budget_s else 0, device)
                if not skip:
                    r.measure_nosync(nosync_steps)
                    # a diagnostic, never read to predict: the wait for the GPU once backward returns at this
                    # world size, which includes the all-reduces still running (an upper bound on the
                    # thread's lead; the profile's world-size-1 DDP lead is the one ddpsim uses)
                    r.lead_s = r.measure_lead(lead_steps)
        for key in keys:
            if key == reference and ref_runner is not None:
                continue  # written after the end-of-launch measurement
            r = runners.get(key)
            if r is not None:
                finish(key, r)
                r.close()
            else:
                finish(key, None, *errors.get(key, ("failed", "not built")))
    if ref_runner is not None:
        # rank 0 decides for all: a rank that measured while another skipped would wait in its all-reduces
        if bcast_int(1 if budget_s - elapsed() > 0 else 0, device):
            measure(ref_runner, "reference_end")
        ref_runner.measure_nosync(nosync_steps if bcast_int(1 if elapsed() + 5 < budget_s else 0, device) else 0)
        finish(reference, ref_runner)
        ref_runner.close()
