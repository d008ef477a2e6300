"""What torch's fp16/bf16 compression hooks cost the backward thread, beyond DDP calling a Python hook.

Measured by ``validation/experiments/hook_mechanism.py`` on 2 x H100 with NVLink, torch 2.11, NCCL 2.28.9
(``validation/data/hook-mechanism-h100x2-2026-11-26/hook_mechanism.json``): ResNet-50, GPT-2 124M,
ViT-B/16 and mlp-ln-64 at bucket_cap_mb=25, each with no hook, DDP's C++ all-reduce hook, a Python
all-reduce hook, torch's fp16/bf16 compress hooks and variants that isolate one mechanism each.

What it does NOT come from (each hypothesis tested on the GPU, all small against the 5-44% seen):
  * the 16-bit all-reduce: NCCL takes the same time per byte in fp16/bf16 as in fp32 (12.5 MiB:
    67.6 us fp16, 66.8 us bf16, 68.1 us fp32; 25 MiB fp32 116 us), so the hook halves the wire time;
  * the cast kernels (to 16 bit on the compute stream, back on a pool stream in the future's
    callback): about 20 us each per 25 MiB bucket; they are priced by the copy bandwidth already;
  * contention with backward: the compute stream's kernel time per step is the same with and
    without a hook (within 5%);
  * the caching allocator: one cudaMalloc in all timed steps of all variants (``num_device_alloc``
    deltas; 40 steps each), also for the hooks that allocate their 16-bit tensor every step;
  * synchronisation: no blocking CUDA call in the hook path (profiler runtime calls).

What it comes from: the backward thread.  These steps are host-bound (the compute stream is busy 29%
of the step for mlp-ln-64, 52% for ViT-B/16, 63% for GPT-2): the autograd thread issuing backward's
kernels is the bottleneck, and everything a hook does on it delays every backward kernel behind it.
Per bucket, the thread's time in ``loss.backward()`` (perf_counter) grows, against no hook, by
  * 108-140 us (median 116) for calling any Python hook (``allreduce_hook`` against DDP's built-in
    C++ ALLREDUCE hook): ddpsim's ``overheads.hook_cpu`` (135 us measured on H200) prices this part;
  * 275-951 us (median 476) for the fp16 or bf16 compress hook: its cast (an allocation and a
    kernel), div_, ``fut.then`` with the decompress copy's launch (64-110 us more inside the hook
    than ``allreduce_hook``, timed around the hook call), and a slower thread around them: 100 us of
    busy waiting added inside the hook cost the backward thread 158 us (mlp-ln-64) and 243 us (GPT-2)
    and the step 190-320 us on all four models.
``COMPRESS_HOOK_EXTRA_S`` is the second median less the first: what the compress hooks cost the
backward thread beyond the Python call that ``overheads.hook_cpu`` already charges.  Medians over the
three host-bound models (and both hooks); ResNet-50 is left out: its thread runs ahead of the GPU
(18 ms of thread time against 28 ms of GPU backward), so its thread time does not reach the step.
It is charged on the compute stream only once the backward thread has used up its lead over the GPU:
the profile measures that lead under DDP at world size 1 (``Workload.ddp_world1_lead_s``; 4 x H100
"g": ResNet-50 21.6 ms, GPT-2 6.8 ms, BERT-large 0.5 ms, ViT-B/16 and mlp-ln-64 under 0.1 ms), and a
GPU-bound backward hides the hook (ResNet-50: +1 to +3% measured for the hooks). Without that
measurement the hook is charged in full, as for a host-bound backward, and ``ddpsim run`` says so.
"""

from __future__ import annotations

from statistics import median

MEASUREMENT = "validation/data/hook-mechanism-h100x2-2026-11-26/hook_mechanism.json"
# backward-thread time per bucket, hook minus no hook (s): (model, hook) -> measured
COMPRESS_HOOK_THREAD_S = {
    ("mlp-ln-64", "fp16"): 397e-6, ("mlp-ln-64", "bf16"): 275e-6,
    ("gpt2-124m", "fp16"): 555e-6, ("gpt2-124m", "bf16"): 657e-6,
    ("vit-b16", "fp16"): 951e-6, ("vit-b16", "bf16"): 345e-6,
}
# backward-thread time per bucket, Python allreduce_hook minus DDP's C++ ALLREDUCE hook (s)
PYTHON_HOOK_THREAD_S = {"mlp-ln-64": 116e-6, "gpt2-124m": 140e-6, "vit-b16": 108e-6}
COMPRESS_HOOK_EXTRA_S = median(COMPRESS_HOOK_THREAD_S.values()) - median(PYTHON_HOOK_THREAD_S.values())
COMPRESS_HOOKS = ("fp16", "bf16")


def compress_hook_extra_s(comm_hook: str) -> float:
    """Backward-thread time per bucket that a compress hook adds beyond calling a Python hook (0 for none)."""
    return COMPRESS_HOOK_EXTRA_S if comm_hook in COMPRESS_HOOKS else 0.0
