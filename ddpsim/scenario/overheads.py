"""The DDP overhead terms: what a scenario's ``overheads`` section may set and a calibration may fit.

Declared apart from the rest of the schema because two values hold them: the Scenario (``schema.py``)
and the Calibration (``calibration/file.py``), which checks a file's fitted terms against these names.
Both sit above this module, so neither has to import the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpsim.scenario.fields import BANDWIDTH_BOUNDS, FACTOR_BOUNDS, LATENCY_BOUNDS, spec


@dataclass(frozen=True)
class OverheadSpec:
    """DDP costs beyond compute and wire time; defaults are used until a calibration replaces them.

    The defaults of ``bucket_launch_s`` (40 us) and ``compute_slowdown`` (2.0) are what ``ddpsim
    calibrate`` fitted on 4 x H200 over NVLink (validation/data, caps 5 and 50, both world sizes);
    the other terms default to "no effect": the same fit's in-flight limit (1) and buffer sync (2 ms)
    describe that machine and ResNet-50's BatchNorm buffers more than DDP in general. Every slowdown
    is a factor >= 1 (1 = no effect).
    """

    bucket_launch_s: float = spec("bucket_launch", "time",
                                  "per bucket, on the communication stream before its all-reduce", "40us", **LATENCY_BOUNDS)
    copy_bandwidth_Bps: float | None = spec("copy_bandwidth", "bandwidth", "gradient copies into and out of buckets",
                                            None, default_text="70% of GPU memory bandwidth", **BANDWIDTH_BOUNDS)
    compute_slowdown: float = spec("compute_slowdown", "number",
                                   "compute runs this many times slower while an all-reduce is in flight", 2.0,
                                   **FACTOR_BOUNDS)
    comm_slowdown: float = spec("comm_slowdown", "number",
                                "an all-reduce runs this many times slower while compute kernels run", 1.0, **FACTOR_BOUNDS)
    allreduce_stretch: float = spec("allreduce_stretch", "number",
                                    "every all-reduce inside DDP takes this many times the isolated call", 1.0,
                                    **FACTOR_BOUNDS)
    idle_start_wait_s: float = spec("idle_start_wait", "time",
                                    "an all-reduce that starts on an idle NCCL stream waits this long for the "
                                    "other ranks; one queued behind another does not", "0us", **LATENCY_BOUNDS)
    max_inflight_buckets: int | None = spec("max_inflight_buckets", "int",
                                            "the launch path blocks after this many outstanding all-reduces", None,
                                            minimum=1, maximum=1_000_000, default_text="never blocks")
    bucket_cpu_s: float = spec("bucket_cpu", "time",
                               "per bucket, on the compute stream (a CPU-bound launch holding up backward)", "0us",
                               **LATENCY_BOUNDS)
    hook_cpu_s: float = spec("hook_cpu", "time",
                             "per bucket with a comm hook: DDP calling the Python hook and its future callback "
                             "on the backward thread (measured 135us on 4 x H200, microbench.jsonl of "
                             "validation/data/h200x4-options-2026-11-26)", "135us", **LATENCY_BOUNDS)
    buffer_sync_s: float = spec("buffer_sync", "time",
                                "DDP's per-step buffer broadcast beyond its wire time (BatchNorm models)", "0ms",
                                **LATENCY_BOUNDS)
