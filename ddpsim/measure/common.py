"""Shared helpers: fingerprint, timers (CUDA events or CPU fallback), statistics, JSONL output,
nccl-tests text writer.  Standard library + torch only."""
from __future__ import annotations

import math
import os
import socket
import subprocess
import time

import torch
import torch.distributed as dist


# ----------------------------------------------------------------------------- statistics
def quantile(xs: list[float], q: float) -> float | None:
    """Linear-interpolated quantile (same as numpy's default)."""
    if not xs:
        return None
    s = sorted(xs)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median(xs: list[float]) -> float | None:
    return quantile(xs, 0.5)


def median_of(xs: list[float]) -> float:
    """The median of values that exist (the caller computes with it): an empty list is an error."""
    m = quantile(xs, 0.5)
    if m is None:
        raise ValueError("the median of no values")
    return m


# ----------------------------------------------------------------------------- timers
class Marker:
    """A point in time on the compute stream: a CUDA event on GPU, perf_counter on CPU."""

    __slots__ = ("ev", "t")

    def __init__(self, device: torch.device):
        self.ev: torch.cuda.Event | None = torch.cuda.Event(enable_timing=True) if device.type == "cuda" else None
        self.t: float | None = None

    def record(self, stream: torch.cuda.Stream | None = None) -> Marker:
        if self.ev is not None:
            if stream is None:
                self.ev.record()
            else:
                self.ev.record(stream)
        else:
            self.t = time.perf_counter()
        return self

    def seconds_since(self, start: Marker) -> float:
        """Seconds from start to self (call after synchronize)."""
        if self.ev is not None and start.ev is not None:
            return start.ev.elapsed_time(self.ev) / 1e3
        if self.t is None or start.t is None:
            raise ValueError("seconds_since: both markers must be recorded, on the same kind of device")
        return self.t - start.t


# the gate kernel: an n x n fp32 matmul (3 x 16 MiB at 2048), about 0.1-1 ms on a data-centre GPU, so that a
# gate of 20 ms is some tens of launches: the CPU enqueues them, and the work behind, long before they end
GATE_N = 2048
_gates: dict[torch.device, tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]] = {}


def gate_launches(seconds: float, launch_s: float) -> int:
    """Gate kernels to queue for a hold of ``seconds`` when one takes ``launch_s`` (at least one)."""
    return max(1, math.ceil(seconds / launch_s))


def _gate(device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """This device's gate operands and one matmul's seconds, timed with CUDA events at first use."""
    if device not in _gates:
        a = torch.randn(GATE_N, GATE_N, device=device)
        b = torch.randn(GATE_N, GATE_N, device=device)
        c = torch.empty(GATE_N, GATE_N, device=device)
        for _ in range(3):  # warm-up: cuBLAS's handle and workspace
            torch.matmul(a, b, out=c)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        reps = 10
        start.record()
        for _ in range(reps):
            torch.matmul(a, b, out=c)
        end.record()
        end.synchronize()
        _gates[device] = (a, b, c, max(start.elapsed_time(end) / 1e3 / reps, 1e-6))
    return _gates[device]


def hold_stream(device: torch.device, seconds: float) -> None:
    """Hold the current stream for about ``seconds`` (matmuls calibrated on this GPU at first use) so that
    work queued behind it starts together. Public torch API only (not torch.cuda._sleep, whose cycles
    assumed a clock); exactness does not matter, the hold only has to outlast the CPU's enqueueing."""
    if device.type == "cuda" and seconds > 0:
        a, b, c, launch_s = _gate(device)
        for _ in range(gate_launches(seconds, launch_s)):
            torch.matmul(a, b, out=c)


def rank0_count(v: int, device: torch.device) -> int:
    """Rank 0's count for every rank: the number of collectives must be the same everywhere."""
    import torch.distributed as dist

    if dist.get_world_size() == 1:
        return int(v)
    t = torch.tensor([int(v)], dtype=torch.int64, device=device)
    dist.broadcast(t, 0)
    return int(t.item())


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ----------------------------------------------------------------------------- fingerprint
_DRIVER_CACHE: tuple[str, int] | None = None


def _nvidia_smi() -> tuple[str, int]:
    global _DRIVER_CACHE
    if _DRIVER_CACHE is None:
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20,
            ).stdout.strip().splitlines()
            out = [line for line in out if line.strip()]
            _DRIVER_CACHE = (out[0].split(",")[0].strip() if out else "unknown", len(out))
        except Exception:
            _DRIVER_CACHE = ("unknown", 0)
    return _DRIVER_CACHE


def hostname_count() -> int:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        names = [None] * dist.get_world_size()
        dist.all_gather_object(names, socket.gethostname())
        return len(set(names))
    return 1


def fingerprint(device: torch.device, world_size: int, transport: str, n_hosts: int = 1) -> dict:
    driver, smi_count = _nvidia_smi()
    if device.type == "cuda":
        gpu_name = torch.cuda.get_device_name(device)
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:
            nccl = "unknown"
    else:
        gpu_name, nccl = "cpu", "none"
    gpus_on_host = int(os.environ.get("DDPSIM_GPUS_ON_HOST", "0")) or smi_count or (
        torch.cuda.device_count() if torch.cuda.is_available() else 0)
    return {
        "gpu_name": gpu_name,
        "gpu_count": world_size,
        "gpus_on_host": gpus_on_host,
        "driver": driver,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "transport": transport,
        "nccl_algo": os.environ.get("NCCL_ALGO", "auto"),
        "nccl_proto": os.environ.get("NCCL_PROTO", "auto"),
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        "hostname_count": n_hosts,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        # extra context (not required by the schema)
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
    }


# ----------------------------------------------------------------------------- output
# in records.py (no torch: the campaign driver reads them); here for the modules that take them from common
from .records import append_jsonl as append_jsonl  # noqa: E402
from .records import read_jsonl as read_jsonl  # noqa: E402
from .records import write_json as write_json  # noqa: E402


def nccl_tests_text(rec: dict) -> str:
    """Render an allreduce record in nccl-tests ``all_reduce_perf`` layout."""
    fp = rec.get("fingerprint", {})
    rows = rec.get("rows", [])
    W = rec.get("world_size", 0)
    lines = []
    minb = rows[0]["bytes"] if rows else 0
    maxb = rows[-1]["bytes"] if rows else 0
    lines.append(f"# nThread 1 nGpus 1 minBytes {minb:d} maxBytes {maxb:d} step: 2(factor) "
                 f"warmup iters: {rec.get('warmup', 'var')} iters: var "
                 "agg iters: 1 validation: 0 graph: 0")
    lines.append("#")
    lines.append("# ddpsim harness: torch.distributed.all_reduce (SUM, float32), one call per timing, CUDA events "
                 "around each call; time = median over repeats (see allreduce.jsonl for p10/p90 and repeats).")
    lines.append("# The in-place and out-of-place columns hold the SAME measured numbers (PyTorch all_reduce is "
                 "in-place only); #wrong is N/A (no data check).")
    lines.append(f"# transport {rec.get('transport')} world_size {W:d} gpu {fp.get('gpu_name')} "
                 f"nccl {fp.get('nccl')} torch {fp.get('torch')} launch {rec.get('launch_id')}")
    lines.append("#")
    lines.append("# Using devices")
    for r in range(W):
        lines.append(f"#  Rank {r:2d} Group  0 Pid      0 on {'host':>10} device {r:2d} [0x00] {fp.get('gpu_name')}")
    lines.append("#")
    lines.append("#                                                              out-of-place                       in-place          ")
    lines.append("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong")
    lines.append("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ")
    bus = []
    for row in rows:
        t = row["time_us_median"]
        ab, bb = row["algbw_GBps"], row["busbw_GBps"]
        bus.append(bb)
        half = f"{t:8.2f}  {ab:6.2f}  {bb:6.2f}  {'N/A':>5}"
        lines.append(f"{row['bytes']:12d}  {row['bytes'] // 4:12d}  {'float':>8}  {'sum':>6}  {-1:6d}  {half}  {half}")
    lines.append("# Out of bounds values : 0 OK")
    lines.append(f"# Avg bus bandwidth    : {sum(bus) / len(bus) if bus else 0.0:g} ")
    lines.append("#")
    return "\n".join(lines) + "\n"


def parse_nccl_tests_text(text: str) -> list[dict]:
    """Minimal parser of all_reduce_perf output rows (used by tests; tolerant of N/A)."""
    rows = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        f = line.split()
        if len(f) < 9:
            continue
        rows.append({"bytes": int(f[0]), "count": int(f[1]), "type": f[2], "redop": f[3],
                     "time_us": float(f[5]), "algbw": float(f[6]), "busbw": float(f[7])})
    return rows


# ----------------------------------------------------------------------------- shared by the worker modes
def log(*a: object) -> None:
    print(f"[worker r{os.environ.get('RANK', '0')} {time.strftime('%H:%M:%S')}]", *a, flush=True)


def stats3(xs: list[float]) -> tuple[float, float, float]:
    """Median, p10, p90 of values that exist (an empty list is an error)."""
    return median_of(xs), quantile(xs, 0.1) or 0.0, quantile(xs, 0.9) or 0.0


def get_device(local_rank: int) -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def bcast_int(v: int, device: torch.device) -> int:
    """Rank 0's value, agreed by all ranks (keeps collective counts identical)."""
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return int(v)
    t = torch.tensor([int(v)], dtype=torch.int64, device=device)
    dist.broadcast(t, 0)
    return int(t.item())


def idle_sync_s(device: torch.device, n: int = 20) -> float:
    """What one synchronize costs on an idle device: taken off each measured wait for the GPU."""
    synchronize(device)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return median_of(times)


def wait_for_gpu_s(device: torch.device, floor_s: float) -> float:
    """How long the host waits for the GPU from now, less one idle synchronize: called right after
    ``loss.backward()`` returns, how far the backward thread ran ahead of the GPU."""
    t0 = time.perf_counter()
    synchronize(device)
    return max(0.0, time.perf_counter() - t0 - floor_s)


def finish_launch(launch_id: str, t_start: float) -> None:
    """Every rank together: free what holds the process group, then destroy it.

    A DDP instance's reducer keeps its process group and its Python comm hook (the per-bucket timer) alive;
    held in a reference cycle, it is freed only by the cyclic collector, which may not run before the
    interpreter finalizes. Freed there, after the group is gone and while Python tears itself down, its
    C++ destructor takes the GIL for the hook's Python objects and the rank aborts (SIGABRT, 1 run in 10
    under load: whether a collection ran late in the launch depends on how many steps the budget allowed).
    So the cycles are collected here, while the interpreter and the group are whole."""
    import gc

    gc.collect()
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    gc.collect()
    log(f"launch {launch_id} done in {time.perf_counter() - t_start:.1f}s")
