"""A torch.profiler (Kineto) trace of training steps as a measured profile (``model: trace:PATH``).

What is read, per ``ProfilerStep#N`` span:

- every GPU activity (``cat`` kernel, gpu_memcpy, gpu_memset; NCCL kernels aside) is put at the CPU moment
  and thread that launched it: its ``correlation`` id names the ``cuda_runtime`` / ``cuda_driver`` launch
  event (the ``External id`` of the CPU op around the launch where no launch event is kept);
- a launch before backward began on the CPU (the first ``autograd::engine::evaluate_function``) is forward,
  one during backward or on another thread (the autograd engine's device thread) is backward, one after
  backward returned is optimizer (everything the step launches after backward: ``optimizer.step`` and
  whatever the loop does then);
- each ``torch::autograd::AccumulateGrad`` op is one gradient: it is ready on the GPU when every kernel
  launched up to the op's end has finished (segmenting the compute stream at the op); its recorded input
  shape (``record_shapes=True``) and type are the gradient's size and dtype;
- NCCL kernels (a trace taken inside DDP) are counted and timed as a check, never used as the prediction.

The times become a ``ddpsim.profile/1`` record (median over steps, p10 / p90 beside it) that
``ddpsim.workload.profile`` turns into the Workload, as for a harness profile. Parameter names come from the
capture script's metadata (``ddpsim.measure.trace``), else they are made up from the ready order
(``g007.768x3072``) with registration order taken as the reverse of it.

A CPU-only trace has no kernels: ``trace:PATH@cpu`` times CPU ops instead (host time, for tests and
dry runs; it says nothing about a GPU step).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import sys
import zlib
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ddpsim.errors import ScenarioError
from ddpsim.workload.model import DTYPE_BYTES, Workload
from ddpsim.workload.profile import SCHEMA, profile_workload

CAPTURE_KEY = "ddpsim_capture"  # top-level metadata the capture script writes (add_metadata_json)
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "runtime")
ACCUMULATE = "torch::autograd::AccumulateGrad"
ENGINE_PREFIX = "autograd::engine::evaluate_function:"
RETRACE = ("re-trace with torch.profiler.profile(activities=[CPU, CUDA], record_shapes=True, "
           "schedule=schedule(wait=1, warmup=1, active=N)) and prof.step() after every step, "
           "or `python -m ddpsim.measure.trace`")
# the profiler's names for tensor types (Input type) -> ddpsim's dtype names
TORCH_TYPES = {"float": "float32", "c10::Half": "float16", "c10::BFloat16": "bfloat16", "double": "float64"}


@dataclass(frozen=True)
class _Activity:
    """One timed piece of work (a GPU kernel, or a CPU op in CPU mode) and where it was launched."""

    start_us: float
    end_us: float
    launch_us: float
    launch_tid: Any
    elems: int = 0  # an NCCL kernel's message size in elements (Kineto copies it from the collective's record)


@dataclass
class StepTimes:
    """One ProfilerStep's phases in seconds, and each gradient's readiness from backward start."""

    name: str
    forward_s: float
    backward_s: float
    optimizer_s: float
    step_s: float
    ready_s: list[float]  # per AccumulateGrad, in the order they ran
    grads: list[tuple[tuple[int, ...], str]]  # (shape, dtype) per AccumulateGrad, same order
    after_last_grad_s: float = 0.0  # backward work after the last gradient (DDP's finalize)
    nccl_kernels: int = 0
    nccl_s: float = 0.0
    nccl_elems: int = 0  # elements all NCCL kernels of the step carried, where the trace says


@dataclass
class TraceSummary:
    """What one trace file gave: the profile record and what was seen beside it."""

    profile: dict[str, Any]
    steps: list[StepTimes]
    notes: list[str] = field(default_factory=list)


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        # not the strict reader of ddpsim's own files: Kineto writes what it writes (a key twice in a kernel's
        # args, control characters in kernel names); the times used are checked where they are read
        data = json.loads(raw.decode("utf-8", errors="replace"), strict=False)
    except FileNotFoundError:
        raise ScenarioError("trace file not found (relative paths start at the scenario's folder)", file=path) from None
    except json.JSONDecodeError as err:
        raise ScenarioError(f"not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}); a trace cut "
                            "short (the profiler still writing, a full disk) reads so: export it again",
                            file=path) from None
    except (OSError, EOFError, zlib.error) as err:
        # zlib.error: gzip data whose header is right and whose deflate stream is not (a corrupt download)
        raise ScenarioError(f"cannot read the trace: {err}", file=path) from None
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ScenarioError("expected a Kineto trace: a JSON object with a traceEvents list", file=path,
                            field="traceEvents")
    return data


def _complete(path: str, events: list[Any]) -> list[dict[str, Any]]:
    """The complete ('X') events; others (flows, metadata, instants) carry no duration. Every field the
    reader uses of an event it uses is checked here (``_check_event``): a kernel whose duration is text
    was once dropped silently, and the step came out 19% short."""
    out = []
    for index, ev in enumerate(events):
        if isinstance(ev, dict) and ev.get("ph") == "X":
            # the category and name decide whether an event is used: they are checked on every one
            for key in ("cat", "name"):
                if key in ev and not isinstance(ev[key], str):
                    raise ScenarioError(f"expected text, got {json.dumps(ev[key])[:60]}; a trace edited or written "
                                        "by another tool: export it again from torch.profiler", file=path,
                                        field=f"traceEvents[{index}].{key}")
            if _used(ev):
                _check_event(path, index, ev)
            elif not (_finite(ev.get("ts")) and _finite(ev.get("dur"))):
                continue  # an event of a kind never read (python_function, ...): its times do not matter
            out.append(ev)
    return out


def _used(ev: dict[str, Any]) -> bool:
    """Whether the reader times or places this event: GPU work, its launch, a CPU op, a step's span."""
    cat, name = ev.get("cat"), ev.get("name")
    if isinstance(cat, str) and cat.lower() in (*GPU_CATS, *LAUNCH_CATS, "cpu_op"):
        return True
    return isinstance(name, str) and name.startswith(("ProfilerStep#", ACCUMULATE, ENGINE_PREFIX))


def _scalar_id(value: Any) -> bool:
    return isinstance(value, int | str) and not isinstance(value, bool)


def _capture(path: str, data: dict[str, Any]) -> dict[str, Any] | None:
    """The capture script's metadata (``ddpsim.measure.trace``), its used fields checked; None without it."""
    capture = data.get(CAPTURE_KEY)
    if capture is None:
        return None
    def bad(key: str, expected: str, value: Any) -> ScenarioError:
        return ScenarioError(f"expected {expected}, got {json.dumps(value)[:60]}; capture again with "
                             "`python -m ddpsim.measure.trace`", file=path, field=f"{CAPTURE_KEY}{key}")
    if not isinstance(capture, dict):
        raise bad("", "an object (the capture's metadata)", capture)
    for key in ("batch_size", "seq_len", "unprofiled_steps"):
        value = capture.get(key)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise bad(f".{key}", "a positive integer", value)
    for key in ("model", "precision"):
        if capture.get(key) is not None and not isinstance(capture[key], str):
            raise bad(f".{key}", "text", capture[key])
    plain = capture.get("unprofiled_step_s")
    if plain is not None and not (_finite(plain) and plain > 0):
        raise bad(".unprofiled_step_s", "seconds as a number > 0", plain)
    params = capture.get("params")
    if params is not None:
        if not isinstance(params, list):
            raise bad(".params", "a list of {name, shape}", params)
        for i, param in enumerate(params):
            if not isinstance(param, dict) or not isinstance(param.get("name"), str):
                raise bad(f".params[{i}]", "an object with a name (text) and a shape", param)
            if not _is_shape(param.get("shape", [])):
                raise bad(f".params[{i}].shape", "a list of integer sizes >= 0", param.get("shape"))
    order = capture.get("ready_order")
    if order is not None and not (isinstance(order, list) and all(isinstance(n, str) for n in order)):
        raise bad(".ready_order", "a list of parameter names", order)
    return capture


def _is_shape(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value)


def _check_event(path: str, index: int, ev: dict[str, Any]) -> None:
    """Refuse, naming ``traceEvents[i].FIELD``, an event whose used fields are not what Kineto writes."""
    def bad(key: str, expected: str, value: Any) -> ScenarioError:
        shown = json.dumps(value)[:60] if not isinstance(value, float) else repr(value)
        return ScenarioError(f"expected {expected}, got {shown} (event {str(ev.get('name'))[:60]!r}); "
                             "a trace edited or written by another tool: export it again from torch.profiler",
                             file=path, field=f"traceEvents[{index}].{key}")
    for key in ("ts", "dur"):
        if key not in ev:
            raise bad(key, "a number of microseconds", None)
        if not _finite(ev[key]) or (key == "dur" and ev[key] < 0):
            raise bad(key, "a finite number of microseconds" + (" >= 0" if key == "dur" else ""), ev[key])
    if "tid" in ev and not _scalar_id(ev["tid"]):
        raise bad("tid", "a thread id (a number or text)", ev["tid"])
    if "args" not in ev:
        return
    args = ev["args"]
    if not isinstance(args, dict):
        raise bad("args", "an object", args)
    for key in ("correlation", "External id"):
        if key in args and not _scalar_id(args[key]):
            raise bad(f"args.{key}", "an id (an integer)", args[key])
    elems = args.get("In msg nelems")
    if elems is not None and not (isinstance(elems, int) and not isinstance(elems, bool) and elems >= 0):
        raise bad("args.In msg nelems", "an integer number of elements >= 0", elems)
    dims = args.get("Input Dims")
    if dims is not None:
        if not isinstance(dims, list):
            raise bad("args.Input Dims", "a list of shapes", dims)
        for k, shape in enumerate(dims):
            # Kineto writes [] for an input that is not a tensor and a list of shapes for a TensorList
            if not (_is_shape(shape) or isinstance(shape, list) and all(_is_shape(s) for s in shape)):
                raise bad(f"args.Input Dims[{k}]", "a shape (a list of integer sizes >= 0) or a list of shapes",
                          shape)
    types = args.get("Input type")
    if types is not None and not (isinstance(types, list) and all(isinstance(t, str) for t in types)):
        raise bad("args.Input type", "a list of type names (text)", types)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _args(ev: dict[str, Any]) -> dict[str, Any]:
    args = ev.get("args")
    return args if isinstance(args, dict) else {}


def _end(ev: dict[str, Any]) -> float:
    return float(ev["ts"]) + float(ev["dur"])


def _is_nccl(ev: dict[str, Any]) -> bool:
    return "nccl" in str(ev.get("name", "")).lower()


def _gpu_activities(path: str, events: list[dict[str, Any]]) -> tuple[list[_Activity], list[_Activity]]:
    """(compute activities, NCCL kernels), each placed at the CPU launch that issued it."""
    launches: dict[Any, dict[str, Any]] = {}
    ops_by_external: dict[Any, dict[str, Any]] = {}
    gpu = []
    for ev in events:
        cat = str(ev.get("cat", "")).lower()
        args = _args(ev)
        if cat in LAUNCH_CATS and "correlation" in args:
            launches[args["correlation"]] = ev
        elif cat in GPU_CATS:
            gpu.append(ev)
        elif cat == "cpu_op" and "External id" in args:
            ops_by_external.setdefault(args["External id"], ev)
    compute: list[_Activity] = []
    nccl: list[_Activity] = []
    unplaced = 0
    for ev in gpu:
        args = _args(ev)
        launch = launches.get(args.get("correlation")) or ops_by_external.get(args.get("External id"))
        if launch is None:
            unplaced += 1
            continue
        elems = args.get("In msg nelems")
        act = _Activity(float(ev["ts"]), _end(ev), float(launch["ts"]), launch.get("tid"),
                        elems if isinstance(elems, int) and not isinstance(elems, bool) else 0)
        (nccl if _is_nccl(ev) else compute).append(act)
    if gpu and unplaced == len(gpu):
        raise ScenarioError("no GPU kernel links to the CPU launch that issued it (no 'correlation' matching a "
                            f"cuda_runtime event, no 'External id' matching a cpu_op): {RETRACE}", file=path)
    return compute, nccl


def _cpu_activities(events: list[dict[str, Any]]) -> list[_Activity]:
    return [_Activity(float(ev["ts"]), _end(ev), float(ev["ts"]), ev.get("tid"))
            for ev in events if ev.get("cat") == "cpu_op"]


def _grad_of(path: str, ev: dict[str, Any], step: str) -> tuple[tuple[int, ...], str]:
    args = _args(ev)
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not dims or not isinstance(dims[0], list):
        raise ScenarioError(f"{step}: the AccumulateGrad ops carry no input shapes (the trace was taken without "
                            f"record_shapes=True); {RETRACE}", file=path, field="args.Input Dims")
    if not _is_shape(dims[0]):
        raise ScenarioError(f"{step}: an AccumulateGrad's input is not one tensor's shape: {json.dumps(dims[0])[:60]}",
                            file=path, field="args.Input Dims")
    shape = tuple(int(d) for d in dims[0])
    torch_type = types[0] if isinstance(types, list) and types else "float"
    dtype = TORCH_TYPES.get(str(torch_type))
    if dtype is None:
        raise ScenarioError(f"{step}: a gradient of type {torch_type!r}, expected one of {', '.join(TORCH_TYPES)}",
                            file=path, field="args.Input type")
    return shape, dtype


def _ready_ends(bwd: list[_Activity], at_us: list[float], floor: float) -> list[float]:
    """Per moment in ``at_us``: when every backward activity launched by then has finished (``floor`` at least)."""
    launches = [a.launch_us for a in bwd]  # sorted by launch
    running = np.maximum.accumulate([a.end_us for a in bwd]) if bwd else np.array([])
    out = []
    for t in at_us:
        k = bisect_right(launches, t)
        out.append(max(floor, float(running[k - 1])) if k else floor)
    return out


def _step_times(path: str, span: dict[str, Any], events: list[dict[str, Any]], acts: list[_Activity],
                nccl: list[_Activity], main_tid: Any) -> StepTimes:
    name = str(span["name"])
    s0, s1 = float(span["ts"]), _end(span)
    inside = [ev for ev in events if s0 <= float(ev["ts"]) <= s1]
    accumulates = sorted((ev for ev in inside if ev.get("name") == ACCUMULATE), key=lambda ev: float(ev["ts"]))
    if not accumulates:
        raise ScenarioError(f"{name}: no {ACCUMULATE} op, so no gradient to time (a step without backward, or "
                            f"a trace of inference); {RETRACE}", file=path, field=name)
    engine = [ev for ev in inside if str(ev.get("name", "")).startswith(ENGINE_PREFIX)] or accumulates
    bwd_cpu_start = min(float(ev["ts"]) for ev in engine)
    bwd_cpu_end = max(_end(ev) for ev in engine)
    fwd: list[_Activity] = []
    bwd: list[_Activity] = []
    opt: list[_Activity] = []
    for a in acts:  # sorted by launch
        if not s0 <= a.launch_us <= s1:
            continue
        if a.launch_us < bwd_cpu_start:
            fwd.append(a)
        elif a.launch_us <= bwd_cpu_end or a.launch_tid != main_tid:
            bwd.append(a)  # inside backward, or the autograd engine's device thread after it (DDP's finalize)
        else:
            opt.append(a)
    if not fwd or not bwd:
        raise ScenarioError(f"{name}: no {'forward' if not fwd else 'backward'} work in the step's span; {RETRACE}",
                            file=path, field=name)
    first = min(a.start_us for a in fwd)
    # the GPU may still run the previous step when this one starts on the CPU: forward starts at the later one
    before = [a.end_us for a in acts if a.launch_us < s0 and a.end_us <= first]
    fwd_start = min(max([s0, *before]), first)
    fwd_end = max(a.end_us for a in fwd)
    bwd_start = min(max(fwd_end, bwd_cpu_start), min(a.start_us for a in bwd))
    ready_end = _ready_ends(bwd, [_end(ev) for ev in accumulates], bwd_start)
    bwd_end = max(ready_end)
    bwd_all_end = max(bwd_end, max(a.end_us for a in bwd))
    opt_end = max((a.end_us for a in opt), default=bwd_all_end)
    opt_start = min(max(bwd_all_end, bwd_cpu_end), min((a.start_us for a in opt), default=bwd_all_end))
    step_nccl = [a for a in nccl if s0 <= a.launch_us <= s1]
    us = 1e-6
    return StepTimes(
        name=name, forward_s=(fwd_end - fwd_start) * us, backward_s=(bwd_end - bwd_start) * us,
        optimizer_s=max(0.0, opt_end - opt_start) * us, step_s=(max(opt_end, bwd_all_end) - fwd_start) * us,
        ready_s=[(t - bwd_start) * us for t in ready_end], grads=[_grad_of(path, ev, name) for ev in accumulates],
        after_last_grad_s=(bwd_all_end - bwd_end) * us, nccl_kernels=len(step_nccl),
        nccl_s=sum(a.end_us - a.start_us for a in step_nccl) * us, nccl_elems=sum(a.elems for a in step_nccl))


def _keys(grads: list[tuple[tuple[int, ...], str]]) -> list[tuple[tuple[int, ...], str, int]]:
    """(shape, dtype, k): the k-th gradient of that shape and dtype, which names one tensor in every step."""
    seen: dict[tuple[tuple[int, ...], str], int] = {}
    out = []
    for g in grads:
        out.append((g[0], g[1], seen.get(g, 0)))
        seen[g] = seen.get(g, 0) + 1
    return out


def _numel(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


def _names(capture: dict[str, Any] | None, grads: list[tuple[tuple[int, ...], str]],
           notes: list[str]) -> tuple[list[str], list[str]]:
    """(names in ready order, names in registration order): the capture's own names where its hook order
    matches the trace's gradients shape for shape, else names made from the ready order."""
    params = capture.get("params") if capture else None
    order = capture.get("ready_order") if capture else None
    if isinstance(params, list) and isinstance(order, list):
        shapes = {p.get("name"): tuple(p.get("shape", ())) for p in params if isinstance(p, dict)}
        if len(order) == len(grads) and all(shapes.get(n) == g[0] for n, g in zip(order, grads, strict=True)):
            registered = [str(p["name"]) for p in params if isinstance(p, dict) and p.get("name") in set(order)]
            return [str(n) for n in order], registered
        notes.append("the capture's parameter names do not match the trace's gradients shape for shape: "
                     "names made up from the ready order")
    made = [f"g{k:03d}." + ("x".join(str(d) for d in g[0]) or "scalar") for k, g in enumerate(grads)]
    return made, list(reversed(made))


def _precision(capture: dict[str, Any] | None, events: list[dict[str, Any]], grads: list[tuple[tuple[int, ...], str]],
               bwd_cpu_start: float) -> str:
    if capture and capture.get("precision") in ("fp32", "bf16-amp", "fp16-amp"):
        return str(capture["precision"])
    # fp32 parameters with half-precision forward ops: autocast. bf16 parameters: bf16 compute as well.
    if all(dtype == "bfloat16" for _, dtype in grads):
        return "bf16-amp"
    if all(dtype == "float16" for _, dtype in grads):
        return "fp16-amp"
    seen = {str(t) for ev in events if ev.get("cat") == "cpu_op" and float(ev["ts"]) < bwd_cpu_start
            for t in (_args(ev).get("Input type") or []) if t in ("c10::BFloat16", "c10::Half")}
    return "bf16-amp" if "c10::BFloat16" in seen else "fp16-amp" if "c10::Half" in seen else "fp32"


def _batch_size(capture: dict[str, Any] | None, events: list[dict[str, Any]], span: dict[str, Any],
                shapes: set[tuple[int, ...]], main_tid: Any, bwd_cpu_start: float) -> tuple[int | None, str]:
    """The capture's batch size, else the leading dimension of the first forward op's first input that is
    not shaped like a parameter (the batch entering the model), with where it was read."""
    if capture and isinstance(capture.get("batch_size"), int):
        return int(capture["batch_size"]), "the capture's metadata"
    s0 = float(span["ts"])
    for ev in sorted(events, key=lambda e: float(e["ts"])):
        t = float(ev["ts"])
        if not s0 <= t < bwd_cpu_start or ev.get("tid") != main_tid or ev.get("cat") != "cpu_op":
            continue
        for dims in _args(ev).get("Input Dims") or []:
            if _is_shape(dims) and len(dims) >= 2 and tuple(dims) not in shapes:
                return int(dims[0]), f"{ev.get('name')}'s input {list(dims)}"
    return None, ""


def _quantile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q * 100))


def read_trace(path: str, cpu_times: bool = False) -> TraceSummary:
    """Read a Kineto trace (JSON, gzip too) into a ``ddpsim.profile/1`` record; a trace that cannot give
    the profile raises ScenarioError naming the file and what to re-trace with."""
    data = _read(path)
    events = _complete(path, data["traceEvents"])
    capture = _capture(path, data)
    # the CPU's spans: Kineto copies each onto the GPU's timeline too (cat gpu_user_annotation)
    spans = sorted((ev for ev in events if str(ev.get("name", "")).startswith("ProfilerStep#")
                    and str(ev.get("cat", "")).lower() != "gpu_user_annotation"), key=lambda ev: float(ev["ts"]))
    if not spans:
        raise ScenarioError(f"no ProfilerStep#N spans, so no step to time; {RETRACE}", file=path, field="traceEvents")
    main_tid = spans[0].get("tid")
    spans = [ev for ev in spans if ev.get("tid") == main_tid]
    if not any(ev.get("name") == ACCUMULATE for ev in events):
        raise ScenarioError(f"no {ACCUMULATE} op in the trace, so no gradient to time (the traced steps ran no "
                            f"backward); {RETRACE}", file=path, field="traceEvents")
    nccl: list[_Activity] = []
    if cpu_times:
        acts = _cpu_activities(events)
    else:
        acts, nccl = _gpu_activities(path, events)
        if not acts:
            raise ScenarioError("no GPU kernels in the trace (taken without ProfilerActivity.CUDA, or on the CPU): "
                                f"{RETRACE}; a CPU trace times host ops only with trace:PATH@cpu", file=path,
                                field="traceEvents")
    acts.sort(key=lambda a: a.launch_us)
    steps = [_step_times(path, span, events, acts, nccl, main_tid) for span in spans]
    first = steps[0]
    keys = _keys(first.grads)
    for st in steps[1:]:
        if sorted(_keys(st.grads)) != sorted(keys):
            raise ScenarioError(f"{st.name} accumulated {len(st.grads)} gradients, {first.name} {len(first.grads)} "
                                "(or of other shapes): one backward per step is what a profile holds "
                                "(gradient accumulation over micro-steps is not read)", file=path, field=st.name)
    notes: list[str] = []
    ready_names, registered = _names(capture, first.grads, notes)
    name_of = dict(zip(keys, ready_names, strict=True))
    ready: dict[str, list[float]] = {n: [] for n in ready_names}
    for st in steps:
        for key, t in zip(_keys(st.grads), st.ready_s, strict=True):
            ready[name_of[key]].append(t)
    grad_of = {n: g for n, g in zip(ready_names, first.grads, strict=True)}
    rank = {n: k for k, n in enumerate(ready_names)}
    params = [{"name": n, "numel": _numel(grad_of[n][0]), "dtype": grad_of[n][1], "shape": list(grad_of[n][0]),
               "grad_ready_s": float(np.median(ready[n])), "ready_order": rank[n]} for n in registered]
    engine_start = min(float(ev["ts"]) for ev in events if ev.get("name") == ACCUMULATE)
    shapes = {g[0] for g in first.grads}
    batch, batch_from = _batch_size(capture, events, spans[0], shapes, main_tid, engine_start)
    model = str(capture.get("model")) if capture and capture.get("model") else os.path.basename(path).split(".")[0]
    series = {k: [getattr(st, k) for st in steps] for k in ("forward_s", "backward_s", "optimizer_s", "step_s")}
    profile: dict[str, Any] = {
        "schema": SCHEMA, "model": model, "batch_size": batch, "precision": _precision(capture, events, first.grads,
                                                                                         engine_start),
        "seq_len": capture.get("seq_len") if capture else None,
        **{k: float(np.median(v)) for k, v in series.items()},
        **{f"{k}_p{q}": _quantile(v, q / 100) for k, v in series.items() for q in (10, 90)},
        "iterations": len(steps), "params": params, "source": "trace", "trace": os.path.abspath(path),
        "timed": "cpu ops (host time)" if cpu_times else "gpu kernels",
        "ready_order_stable": all(st.grads == first.grads for st in steps),
        "batch_size_from": batch_from,
    }
    _remove_profiler_overhead(profile, capture, notes)
    # the capture's measured memory and optimizer (the record contract), where it wrote them
    for field_name in ("memory", "optimizer"):
        if capture and field_name in capture:
            profile[field_name] = capture[field_name]
    if isinstance(data.get("distributedInfo"), dict):
        profile["distributed"] = data["distributedInfo"]
    nccl_steps = [st for st in steps if st.nccl_kernels]
    if nccl_steps:
        profile["ddp_check"] = {
            "nccl_kernels_per_step": float(np.median([st.nccl_kernels for st in nccl_steps])),
            "nccl_kernel_s_per_step": float(np.median([st.nccl_s for st in nccl_steps])),
            "nccl_elements_per_step": int(np.median([st.nccl_elems for st in nccl_steps])),
            "gradient_elements": sum(_numel(g[0]) for g in first.grads),
            "after_last_gradient_s": float(np.median([st.after_last_grad_s for st in nccl_steps])),
            "why": "NCCL kernels seen in the traced steps (DDP's own all-reduces): a check beside the prediction, "
                   "not used by it; backward and gradient times here include DDP's reducer work"}
    return TraceSummary(profile, steps, notes)


def _remove_profiler_overhead(profile: dict[str, Any], capture: dict[str, Any] | None, notes: list[str]) -> None:
    """Scale the traced times to the step the capture timed without the profiler, where it did.

    The profiler adds host time to every op it records; a launch-bound step (the GPU waiting on the host)
    runs longer traced than not: GPT-2 at batch 8 on an H200 took 43.9 ms traced and 30.5 ms untraced
    (validation/data/h200x2-trace-2026-11-27). Every phase and gradient-ready time is scaled by the one
    ratio, a first-order correction: the overhead falls on the phases in proportion to their recorded ops,
    which the ratio does not see (a user's decoder: scaled forward 1.2x, backward 0.9x its untraced times).
    Timing each phase untraced needs a sync between them, which makes a launch-bound backward read long
    (validation/data/h200x2-trace-2026-11-27d, +16.7% against -9.1% and +6.4% with the one ratio)."""
    plain = capture.get("unprofiled_step_s") if capture else None
    traced = profile["step_s"]
    if not (isinstance(plain, (int, float)) and _finite(plain) and plain > 0):
        profile["profiler_overhead"] = {"scale": 1.0, "why": "not measured: the trace does not record its steps "
                                        "timed without the profiler (trace with `python -m ddpsim.measure.trace`), "
                                        "so the times include the profiler's own host overhead"}
        notes.append("the traced times include the profiler's own host overhead (not measured: capture with "
                     "`python -m ddpsim.measure.trace` to measure and remove it)")
        return
    scale = min(1.0, float(plain) / traced)
    profile["profiler_overhead"] = {
        "traced_step_s": traced, "unprofiled_step_s": float(plain), "unprofiled_steps": capture.get("unprofiled_steps")
        if capture else None, "scale": scale,
        "why": "every time scaled by the untraced over the traced median step (the capture timed both)"
        if scale < 1 else "the untraced step was not faster: nothing removed"}
    if scale < 1:
        for key in [k for k in profile if k.startswith(("forward_s", "backward_s", "optimizer_s", "step_s"))]:
            profile[key] *= scale
        for param in profile["params"]:
            param["grad_ready_s"] *= scale


def load_trace(path: str, cpu_times: bool = False) -> Workload:
    """The Workload a trace gives, built by the same code as a harness profile's."""
    summary = read_trace(path, cpu_times)
    prof = summary.profile
    if prof["batch_size"] is None:
        raise ScenarioError("the trace does not say its batch size (no forward op with a batch-shaped input, no "
                            "capture metadata); trace with `python -m ddpsim.measure.trace`", file=path)
    workload = profile_workload(prof, path)
    lines = [f"trace {path}: {prof['iterations']} steps timed from {prof['timed']}, step {prof['step_s'] * 1e3:.2f} ms "
             f"(p10 {prof['step_s_p10'] * 1e3:.2f}, p90 {prof['step_s_p90'] * 1e3:.2f}), forward "
             f"{prof['forward_s'] * 1e3:.2f}, backward {prof['backward_s'] * 1e3:.2f}, optimizer "
             f"{prof['optimizer_s'] * 1e3:.2f} ms; batch size {prof['batch_size']} from {prof['batch_size_from']}"]
    if "ddp_check" in prof:
        chk = prof["ddp_check"]
        lines.append(f"trace {path}: taken inside DDP: {chk['nccl_kernels_per_step']:.0f} NCCL kernels per step, "
                     f"{chk['nccl_kernel_s_per_step'] * 1e3:.2f} ms of them (a check, not the prediction)")
    assert workload.measured is not None
    how = (f"a torch.profiler trace, median of {prof['iterations']} steps timed from {prof['timed']}, step p10 "
           f"{prof['step_s_p10'] * 1e3:.2f} ms, p90 {prof['step_s_p90'] * 1e3:.2f} ms")
    overhead = prof["profiler_overhead"]
    if overhead["scale"] < 1:
        how += (f"; the profiler's overhead removed: x{overhead['scale']:.3f}, the step timed without it "
                f"({overhead['unprofiled_step_s'] * 1e3:.2f} ms) over the traced one ({overhead['traced_step_s'] * 1e3:.2f} ms)")
    elif "traced_step_s" not in overhead:
        how += "; includes the profiler's own host overhead (not measured)"
    if "ddp_check" in prof:
        chk = prof["ddp_check"]
        how += (f"; taken inside DDP, so backward holds DDP's reducer work; its {chk['nccl_kernels_per_step']:.0f} NCCL "
                f"kernels per step took {chk['nccl_kernel_s_per_step'] * 1e3:.3g} ms (a check, not the prediction)")
    return replace(workload, measured=replace(workload.measured, how=how),
                   notes=(*workload.notes, *lines, *summary.notes))


def _summary_json(summary: TraceSummary) -> dict[str, Any]:
    prof = summary.profile
    keep = ("model", "batch_size", "batch_size_from", "precision", "iterations", "timed", "forward_s", "backward_s",
            "optimizer_s", "step_s", "step_s_p10", "step_s_p90", "ddp_check", "distributed", "ready_order_stable",
            "profiler_overhead")
    return {"schema": "ddpsim.trace-summary/1", **{k: prof[k] for k in keep if k in prof},
            "gradients": len(prof["params"]),
            "gradient_bytes": sum(p["numel"] * DTYPE_BYTES[p["dtype"]] for p in prof["params"]),
            "steps": [{"name": st.name, "forward_s": st.forward_s, "backward_s": st.backward_s,
                       "optimizer_s": st.optimizer_s, "step_s": st.step_s, "nccl_kernels": st.nccl_kernels,
                       "nccl_s": st.nccl_s} for st in summary.steps],
            "notes": summary.notes}


def main(argv: list[str] | None = None) -> int:
    """``python -m ddpsim.workload.trace TRACE [--profile-out FILE] [--cpu]``: what ddpsim reads from a trace,
    as JSON; ``--profile-out`` writes it as a ``ddpsim.profile/1`` file (for a campaign's profiles/ folder)."""
    parser = argparse.ArgumentParser(prog="python -m ddpsim.workload.trace", description=main.__doc__)
    parser.add_argument("trace")
    parser.add_argument("--profile-out", help="write the profile record here")
    parser.add_argument("--model", help="the model name to write into the profile (a campaign's runs' name)")
    parser.add_argument("--cpu", action="store_true", help="time CPU ops (a trace without GPU kernels)")
    args = parser.parse_args(argv)
    try:
        summary = read_trace(args.trace, args.cpu)
    except ScenarioError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.model:
        summary.profile["model"] = args.model
    if args.profile_out:
        from ddpsim.outdir import atomic_write_text

        atomic_write_text(args.profile_out, json.dumps(summary.profile, indent=1) + "\n")
    print(json.dumps(_summary_json(summary), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
