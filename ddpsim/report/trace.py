"""Traces of a simulated run in the shape torch.profiler (Kineto) exports, so that Perfetto and
Holistic Trace Analysis (HTA) read them as they read a profiled step.

Each rank is a host process (the Python thread: ``ProfilerStep#N``, DDP's CPU work, one
``cudaLaunchKernel`` per kernel) and a GPU process (a compute stream, an NCCL stream per collective). A kernel and
its launch share a ``correlation`` id, as in Kineto, so HTA links them and numbers the kernel's
iteration. A bucket's all-reduce kernel has its launch drawn at the moment its last gradient was copied
in (the bucket's ready), with a flow (``ph: s`` / ``f``, ``cat: ac2g``, the correlation as its id)
from there to the kernel; its args give the bucket, its bytes, its parameters, the collective's
algorithm and protocol and the bytes each rank moves. A counter track per GPU gives the all-reduce's
bus bandwidth over time. The simulation models no host run-ahead: every other launch sits at its
kernel's start, with no duration.

``--trace DIR/`` (or an existing folder) writes ``rank<N>.trace.json`` per rank, the directory
``hta.TraceAnalysis(trace_dir=DIR)`` loads; ``--trace FILE`` writes every rank into one file.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from ddpsim.results import Result

HOST_TID = 1
COMPUTE_STREAM = 7  # the stream id Kineto shows for PyTorch's default stream
# FSDP runs all-gathers and reduce-scatters on streams of their own, so they overlap each other
NCCL_STREAMS = {"all-reduce": 20, "all-gather": 21, "reduce-scatter": 22}
HOST_PID_OFFSET = 1_000_000  # host pids after every GPU pid (a GPU's pid is its rank), unique in one file
# HTA stores ids in the smallest integer type that holds them, then writes event indices into a column
# derived from them: ids that fit in int8 fail its load of a trace of more than 127 events (one GPU)
FIRST_ID = 1 << 16
TRACE_FILE = "rank{rank}.trace.json"
_TRACE_FILE_RE = re.compile(r"rank\d+\.trace\.json")

# DDP's own CPU work: the simulation serialises it with the compute stream, so the GPU idles meanwhile
_HOST_LABELS = {
    "ddp-pre-forward", "ddp-post-forward", "ddp-used-map", "bucket-launch", "comm hook (backward thread)",
    "ddp-finalize",
}
_COLLECTIVES = {"all-reduce": "AllReduce", "all-gather": "AllGather", "reduce-scatter": "ReduceScatter"}
_AR_LABEL = re.compile(r"all-reduce bucket (\d+)$")


@dataclass(frozen=True)
class _Interval:
    start_s: float
    end_s: float
    label: str


def _us(seconds: float) -> float:
    # Kineto writes microseconds with nanosecond decimals
    return round(seconds * 1e6, 3)


def _dur(start_s: float, end_s: float) -> float:
    # from the rounded ends, so that ts + dur is the next event's ts exactly
    return round(_us(end_s) - _us(start_s), 3)


def _collective_kind(label: str) -> str | None:
    for prefix in _COLLECTIVES:
        if label.startswith(prefix):
            return prefix
    return None


def _split(intervals: list[tuple[float, float, str]]) -> tuple[list[_Interval], list[_Interval]]:
    """The compute stream's intervals and the collectives', each in time order."""
    ordered = sorted((_Interval(*iv) for iv in intervals), key=lambda iv: (iv.start_s, iv.end_s))
    comm = [iv for iv in ordered if _collective_kind(iv.label)]
    return [iv for iv in ordered if not _collective_kind(iv.label)], comm


def _step_starts(compute: list[_Interval], ddp_shaped: bool) -> list[int]:
    """Index of each step's first interval. A DDP step has one ``forward`` (its synced micro-step),
    preceded by its ``no_sync`` micro-steps and DDP's pre-forward hook; a sharded timeline has a
    forward per unit, so it is one span."""
    if not compute:
        return []
    if not ddp_shaped:
        return [0]
    starts, previous = [], -1
    for i in _forward_indices(compute):
        first = i
        while first > previous + 1 and compute[first - 1].label in ("no_sync micro-step", "ddp-pre-forward"):
            first -= 1
        starts.append(first)
        previous = i
    return starts or [0]


def _forward_indices(compute: list[_Interval]) -> list[int]:
    return [i for i, iv in enumerate(compute) if iv.label == "forward"]


def bucket_ready_s(result: Result) -> dict[tuple[int, int, int], float]:
    """When each bucket became ready, by (rank, step, bucket), in simulation seconds.

    The Result records ready times for rank 0's last step only (``buckets``). Every DDP step of every
    rank runs the same sequence of compute intervals (only their lengths differ with jitter and
    contention), so the interval a bucket became ready at the end of in that step, counted from the
    step's ``forward``, is the one it became ready at the end of in every step. A step whose interval
    there has another label is left out rather than guessed."""
    if result.collectives or not result.buckets or 0 not in result.rank_timelines:
        return {}
    compute0, comm0 = _split(result.rank_timelines[0])
    first = [iv for iv in comm0 if iv.label == "all-reduce bucket 0"]
    forwards0 = _forward_indices(compute0)
    if not first or not forwards0:
        return {}
    t0 = first[-1].start_s - result.buckets[0].start_s  # rank 0's last step's start, as the records count it
    last_forward = forwards0[-1]
    tolerance = 1e-12 + 1e-9 * abs(t0)
    anchors: dict[int, tuple[int, str]] = {}  # bucket -> (position after forward, label)
    for bucket in result.buckets:
        ready = t0 + bucket.ready_s
        for i in range(last_forward, len(compute0)):
            if abs(compute0[i].end_s - ready) <= tolerance:
                anchors[bucket.index] = (i - last_forward, compute0[i].label)
                break
    ready_s: dict[tuple[int, int, int], float] = {}
    for rank, intervals in result.rank_timelines.items():
        compute, _ = _split(intervals)
        forwards = _forward_indices(compute)
        for step, forward in enumerate(forwards):
            limit = forwards[step + 1] if step + 1 < len(forwards) else len(compute)
            for index, (offset, label) in anchors.items():
                i = forward + offset
                if i < limit and compute[i].label == label:
                    ready_s[(rank, step, index)] = compute[i].end_s
    return ready_s


def _kernel(label: str) -> tuple[str, str]:
    """(cat, name) of a compute-stream interval, named so HTA sorts it: NCCL kernels are
    communication, Memcpy is memory, the rest computation (hta/utils/utils.py's get_kernel_type)."""
    if label.startswith("copy-in"):
        return "gpu_memcpy", "Memcpy DtoD (gradient -> bucket)"
    if label.startswith("copy-out"):
        return "gpu_memcpy", f"Memcpy DtoD ({label})"
    return "kernel", label


def _nccl_name(kind: str, algorithm: str, protocol: str) -> str:
    # NCCL's device kernels are named ncclDevKernel_<Op>[_Sum]_<type>_<ALGO>_<PROTO>; the dtype is not simulated
    op = _COLLECTIVES[kind] + ("_Sum" if kind != "all-gather" else "")
    return f"ncclDevKernel_{op}_{algorithm.upper()}_{protocol.upper()}"


def _allreduce_bus_bytes(nbytes: float, n: int) -> float:
    # nccl-tests' bus bandwidth convention for all-reduce: each rank sends 2(n-1)/n of the message
    return nbytes * 2.0 * (n - 1) / n


class _Writer:
    """Events of one rank, with correlation ids unique across every rank of the run."""

    def __init__(self, result: Result, ready: dict[tuple[int, int, int], float], counter: list[int]) -> None:
        self.result = result
        self.ready = ready
        self.counter = counter
        self.buckets = {b.index: b for b in result.buckets}
        self.collectives: dict[str, list[Any]] = defaultdict(list)
        for c in result.collectives:
            self.collectives[f"{c.kind} {c.unit}"].append(c)

    def _next_id(self) -> int:
        self.counter[0] += 1
        return self.counter[0]

    def rank_events(self, rank: int) -> list[dict[str, Any]]:
        result = self.result
        host, gpu = HOST_PID_OFFSET + rank, rank
        device = rank % max(result.gpus_per_node, 1)
        compute, comm = _split(result.rank_timelines[rank])
        events = _metadata(rank, host, gpu, {_collective_kind(iv.label) or "" for iv in comm})
        ddp_shaped = not result.collectives
        starts = _step_starts(compute, ddp_shaped)
        end_s = max([iv.end_s for iv in compute + comm], default=0.0)
        for step, first in enumerate(starts):
            step_end = compute[starts[step + 1]].start_s if step + 1 < len(starts) else end_s
            events.append({
                "ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": host, "tid": HOST_TID,
                "ts": _us(compute[first].start_s), "dur": _dur(compute[first].start_s, step_end),
                "args": {"External id": self._next_id()},
            })

        def gpu_event(iv: _Interval, cat: str, name: str, stream: int, args: dict[str, Any],
                      launch_s: float) -> int:
            correlation = self._next_id()
            ids = {"correlation": correlation, "External id": correlation}
            events.append({
                "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": host, "tid": HOST_TID,
                "ts": _us(launch_s), "dur": 0.0, "args": ids,
            })
            events.append({
                "ph": "X", "cat": cat, "name": name, "pid": gpu, "tid": stream, "ts": _us(iv.start_s),
                "dur": _dur(iv.start_s, iv.end_s),
                "args": {**ids, "device": device, "stream": stream, "ddpsim label": iv.label, **args},
            })
            return correlation

        for iv in compute:
            if iv.label in _HOST_LABELS or iv.label.startswith("FSDP2 host work"):
                events.append({
                    "ph": "X", "cat": "cpu_op", "name": iv.label, "pid": host, "tid": HOST_TID,
                    "ts": _us(iv.start_s), "dur": _dur(iv.start_s, iv.end_s),
                    "args": {"External id": self._next_id()},
                })
            else:
                cat, name = _kernel(iv.label)
                gpu_event(iv, cat, name, COMPUTE_STREAM, {}, iv.start_s)

        occurrences: dict[str, int] = defaultdict(int)
        n = result.world_size
        for iv in comm:
            kind = _collective_kind(iv.label) or "all-reduce"
            step = occurrences[iv.label]
            occurrences[iv.label] += 1
            args: dict[str, Any] = {"Collective name": _COLLECTIVES[kind].lower(), "Group size": n}
            match = _AR_LABEL.match(iv.label)
            ready_s = None
            bus_bytes: float | None = None
            protocol = result.protocol
            if match and int(match.group(1)) in self.buckets:
                bucket = self.buckets[int(match.group(1))]
                bus_bytes = _allreduce_bus_bytes(bucket.bytes, n)
                args.update({"bucket": bucket.index, "bucket bytes": bucket.bytes, "gradient bytes": bucket.grad_bytes,
                             "parameters": bucket.n_params, "step": step, "In msg size": bucket.bytes,
                             "Out msg size": bucket.bytes, "bytes moved per rank": int(round(bus_bytes))})
                # parameter names per bucket, once the Result carries them (issue #28's output contracts)
                names = getattr(bucket, "param_names", None)
                if names:
                    args["parameter names"] = list(names)
                ready_s = self.ready.get((rank, step, bucket.index))
            elif self.collectives.get(iv.label):
                records = self.collectives[iv.label]
                record = records[step % len(records)]
                # the shard group, not the world, takes part in a sharded collective: no group size or bus bytes
                protocol = record.protocol
                args.pop("Group size")
                args.update({"unit": record.unit, "phase": record.kind, "bytes": record.bytes})
            args.update({"algorithm": result.algorithm, "protocol": protocol})
            launch_s = iv.start_s if ready_s is None else ready_s
            if ready_s is not None:
                args["ready ts"] = _us(ready_s)
            stream = NCCL_STREAMS[kind]
            correlation = gpu_event(iv, "kernel", _nccl_name(kind, result.algorithm, protocol), stream, args, launch_s)
            if ready_s is not None:
                # Kineto's launch-to-kernel flow, from the bucket's ready (DDP may launch later: in index order)
                flow = {"cat": "ac2g", "name": "ac2g", "id": correlation}
                events.append({**flow, "ph": "s", "pid": host, "tid": HOST_TID, "ts": _us(ready_s)})
                events.append({**flow, "ph": "f", "bp": "e", "pid": gpu, "tid": stream, "ts": _us(iv.start_s)})
            if bus_bytes is not None and n > 1 and iv.end_s > iv.start_s:
                busbw = bus_bytes / (iv.end_s - iv.start_s) / 1e9
                counter = {"ph": "C", "cat": "counter", "name": "NCCL bus bandwidth (GB/s)", "pid": gpu}
                events.append({**counter, "ts": _us(iv.start_s), "args": {"busbw": round(busbw, 3)}})
                events.append({**counter, "ts": _us(iv.end_s), "args": {"busbw": 0}})
        return events


def _metadata(rank: int, host: int, gpu: int, kinds: set[str]) -> list[dict[str, Any]]:
    def meta(name: str, pid: int, args: dict[str, Any], tid: int | None = None) -> dict[str, Any]:
        event: dict[str, Any] = {"ph": "M", "name": name, "pid": pid, "args": args}
        if tid is not None:
            event["tid"] = tid
        return event

    return [
        meta("process_name", host, {"name": f"rank {rank} host"}),
        meta("process_labels", host, {"labels": "CPU"}),
        meta("process_sort_index", host, {"sort_index": 2 * rank}),
        meta("thread_name", host, {"name": "python (DDP)"}, HOST_TID),
        meta("process_name", gpu, {"name": f"rank {rank} GPU"}),
        meta("process_labels", gpu, {"labels": f"GPU {rank}"}),
        meta("process_sort_index", gpu, {"sort_index": 2 * rank + 1}),
        meta("thread_name", gpu, {"name": f"stream {COMPUTE_STREAM} (compute)"}, COMPUTE_STREAM),
    ] + [meta("thread_name", gpu, {"name": f"stream {stream} (NCCL {kind})"}, stream)
         for kind, stream in NCCL_STREAMS.items() if kind in kinds]


def _summary(result: Result) -> dict[str, Any]:
    """What the trace does not show as events. The Result keeps each link's busy time over the whole
    run, not over time, so link utilisation is a number here rather than a counter track."""
    return {
        "scenario": result.scenario, "model": result.model, "strategy": result.strategy,
        "step_time_s": result.step_time_s, "exposed_comm_s": result.exposed_comm_s,
        "link_utilization_over_run": [
            {"link": link.link, "busy_s": link.busy_s, "utilization": link.utilization} for link in result.links
        ],
    }


def _header(result: Result, rank: int | None) -> dict[str, Any]:
    # HTA finds a trace's rank with the first '"rank": N' in the file (hta/common/trace_file.py): nothing
    # before distributedInfo has one; the one file of every rank has none
    distributed: dict[str, Any] = {"backend": "nccl", **({"rank": rank} if rank is not None else {}),
                                   "world_size": result.world_size, "pg_count": 1,
                                   "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                                                  "pg_size": result.world_size, "ranks": list(range(result.world_size))}]}
    ranks = sorted(result.rank_timelines) if rank is None else [rank]
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {"id": r % max(result.gpus_per_node, 1), "name": result.gpu, "totalGlobalMem": int(result.gpu_memory_bytes)}
            for r in ranks
        ],
        "distributedInfo": distributed,
    }


def kineto_traces(result: Result) -> dict[int, dict[str, Any]]:
    """One Kineto-shaped trace per rank the Result has a timeline of."""
    ready = bucket_ready_s(result)
    writer = _Writer(result, ready, [FIRST_ID])
    traces = {}
    for rank in sorted(result.rank_timelines):
        traces[rank] = {
            **_header(result, rank),
            "traceEvents": writer.rank_events(rank),
            "traceName": f"ddpsim {result.scenario} rank {rank}",
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": 0,
            "ddpsim": _summary(result),
        }
    return traces


def perfetto_trace(result: Result) -> dict[str, Any]:
    """Every rank in one trace (a host and a GPU process each), with the per-rank traces' events."""
    ready = bucket_ready_s(result)
    writer = _Writer(result, ready, [FIRST_ID])
    events = [e for rank in sorted(result.rank_timelines) for e in writer.rank_events(rank)]
    return {
        **_header(result, None),
        "traceEvents": events,
        "traceName": f"ddpsim {result.scenario}",
        "displayTimeUnit": "ms",
        "ddpsim": _summary(result),
    }


def is_trace_dir(path: str) -> bool:
    """``--trace`` names a folder (one file per rank) when it ends in a separator or is one already."""
    return path.endswith(("/", os.sep)) or os.path.isdir(path)


def write_trace(result: Result, path: str) -> list[str]:
    """Write the trace(s) for ``--trace PATH``; returns the files written."""
    from ddpsim.outdir import atomic_dir, atomic_write_text

    if not is_trace_dir(path):
        atomic_write_text(path, json.dumps(perfetto_trace(result)))
        return [path]
    # without its trailing separator, a file of that name is refused as not a folder
    path = path.rstrip("/" + os.sep) or path
    traces = kineto_traces(result)
    names = {TRACE_FILE.format(rank=rank) for rank in traces}
    with atomic_dir(path) as staging:
        for rank, trace in traces.items():
            with open(os.path.join(staging, TRACE_FILE.format(rank=rank)), "w", encoding="utf-8") as handle:
                json.dump(trace, handle)
    # rank files of an earlier, larger run would be read by HTA as ranks of this one
    for name in os.listdir(path):
        if _TRACE_FILE_RE.fullmatch(name) and name not in names:
            os.remove(os.path.join(path, name))
    return [os.path.join(path, name) for name in sorted(names)]
