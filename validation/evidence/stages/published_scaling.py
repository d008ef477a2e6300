"""Scaling and the cost of small buckets, against what others published (issue #42 item 3, #46 item 1).

Two sources, each written as a scenario from its own description, nothing fitted to them:

- The PyTorch DDP benchmark (pytorch/pytorch benchmarks/distributed/ddp/README.md at bf69c14, copied in
  ``../shared/external/pytorch_ddp_benchmark_v100.csv``; its README says how): torchvision ResNet-50 /
  ResNet-101 / ResNeXt-50 / ResNeXt-101, batch 32 per GPU, fp32, SGD with momentum,
  ``broadcast_buffers=False``, DGX-1 V100 (NVLink hybrid cube mesh; 2 nodes with 4 x 100 Gb/s InfiniBand
  each for 16 GPUs), PyTorch 1.4, NCCL. Step times at ``bucket_cap_mb`` 25 (p50) and the slow-down at
  ``bucket_cap_mb`` 1 (p75, the printed diff against the 25 MB run).
- NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md, "Training
  performance results" (pytorch-21.03 NGC container): DGX-1 16GB (8x V100 16GB) FP32 367 / 2855 img/s and
  mixed precision 1200 / 8322 img/s at 1 / 8 GPUs (strong scaling 7.76x and 6.93x); DGX A100 (8x A100 80GB)
  TF32 938 / 7248 and mixed precision 2470 / 16621 img/s (7.72x and 6.72x). Batch per GPU from
  ConvNets/configs.yml: DGX1V FP32 112, AMP 256 (NHWC); DGXA100 256.

Held out: every row here. No constant of ddpsim was set from these sources: the arrival wait
(``ddpsim/ddp/arrival.py``) has no fitted constant; the DGX-1 ring bandwidth is link counting
(``ddpsim/topology/dgx1.py``); ``compute_slowdown`` (2) and ``bucket_launch`` (40 us) are ddpsim's defaults,
fitted on 4 x H200 over NVLink (no V100 or A100 measurement: the output says so). Compute is the shipped
estimate for each GPU (V100 fp32 is about 2x slow today: the compute issue, not this one), so the step
times are shown but the targets are on ratios (scaling, the slow-down as a percentage of the step; the arrival
wait scales with the backward's kernel time, so the slow-down in milliseconds carries the compute error).

Targets (issue #42): 8-GPU scaling within 5% of published; the cap-1 vs cap-25 slow-down within 2x.

Run: ``python -m validation.evidence.stages.published_scaling`` (several minutes: the torch importer traces three
torchvision models on the meta device; each once).
"""

from __future__ import annotations

import contextlib
import csv
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BENCHMARK_CSV = os.path.join(ROOT, "..", "shared", "external", "pytorch_ddp_benchmark_v100.csv")
SCALING_TARGET = 0.05
SLOWDOWN_FACTOR_TARGET = 2.0
WORLD_SIZES = (1, 2, 4, 8, 16)
# the benchmark's models: the zoo's ResNet-50, the others as torchvision builds them (scaling_models.py)
_FACTORIES = "torch:validation.evidence.stages.scaling_models:"
MODELS = {"resnet50": "resnet50", "resnet101": _FACTORIES + "resnet101",
          "resnext50_32x4d": _FACTORIES + "resnext50_32x4d", "resnext101_32x8d": _FACTORIES + "resnext101_32x8d"}

_DLE = ("NVIDIA DeepLearningExamples PyTorch/Classification/ConvNets/resnet50v1.5/README.md, Training performance "
        "results (pytorch-21.03); batch per GPU from ConvNets/configs.yml")


@dataclass(frozen=True)
class Scaling:
    """One published pair of 1- and 8-GPU throughputs."""

    row: str
    gpu: str
    precision: str
    batch: int
    one_gpu_img_s: float
    eight_gpu_img_s: float
    published: float  # the strong scaling as the table prints it
    intra: dict[str, Any]
    not_modelled: str = ""


_INPUT_NOTE = ("data loading: benchmark_training reads ImageNet JPEGs with data_backend pytorch and 8 (DGX-1) or 16 "
              "(DGX A100) CPU workers per GPU (configs.yml); 8 GPUs share the host's CPUs")
_DGX1_RING = {"type": "nvlink-ring", "bandwidth": "150GB/s"}  # ddpsim.topology.dgx1.ring_bandwidth_Bps(8)
_DGXA100 = {"type": "nvswitch", "bandwidth": "300GB/s"}  # 12 NVLink3 per A100: 300 GB/s per direction
DLE_SCALING: tuple[Scaling, ...] = (
    Scaling("DGX-1 16GB, FP32, batch 112: 367 -> 2855 img/s (7.76x)", "V100-16GB", "fp32", 112, 367, 2855, 7.76,
            _DGX1_RING),
    Scaling("DGX-1 16GB, mixed precision, batch 256: 1200 -> 8322 img/s (6.93x)", "V100-16GB", "fp16-amp", 256,
            1200, 8322, 6.93, _DGX1_RING, _INPUT_NOTE),
    Scaling("DGX A100 80GB, TF32, batch 256: 938 -> 7248 img/s (7.72x)", "A100", "fp32", 256, 938, 7248, 7.72,
            _DGXA100),
    Scaling("DGX A100 80GB, mixed precision, batch 256: 2470 -> 16621 img/s (6.72x)", "A100", "fp16-amp", 256,
            2470, 16621, 6.72, _DGXA100, _INPUT_NOTE),
)


def benchmark_rows(path: str = BENCHMARK_CSV) -> list[dict[str, str]]:
    """The benchmark CSV's rows; empty where ../shared/external is absent."""
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def dgx1_cluster(gpus: int) -> dict[str, Any]:
    """DGX-1 V100 nodes as the benchmark ran them: the first ``gpus`` GPUs of one node, or 2 nodes of 8 with
    4 x 100 Gb/s InfiniBand each; NCCL's rings get the NVLinks the hybrid cube mesh gives those GPUs."""
    from ddpsim.topology.dgx1 import ring_bandwidth_Bps

    per_node = min(gpus, 8)
    cluster: dict[str, Any] = {"gpu": "V100-16GB", "nodes": max(1, gpus // 8), "gpus_per_node": per_node}
    if per_node > 1:
        cluster["intra_node"] = {"type": "nvlink-ring", "bandwidth": f"{ring_bandwidth_Bps(per_node) / 1e9:g}GB/s"}
    if gpus > 8:
        cluster["inter_node"] = {"type": "fat-tree", "nic_bandwidth": "100Gbps", "nics_per_node": 4}
    return cluster


@contextlib.contextmanager
def _workloads_resolved_once() -> Iterator[None]:
    """Each workload resolved once for the whole stage: the torch importer traces each torchvision model on the
    meta device (most of a minute on a shared core), and every scenario of a model here has the same workload."""
    import ddpsim.simulation as simulation

    original = simulation.load_workload
    cache: dict[Any, Any] = {}

    def resolved(spec: Any, base_dir: str) -> Any:
        if (spec, base_dir) not in cache:
            cache[(spec, base_dir)] = original(spec, base_dir)
        return cache[(spec, base_dir)]

    simulation.load_workload = resolved  # type: ignore[assignment]
    try:
        yield
    finally:
        simulation.load_workload = original  # type: ignore[assignment]


def _simulate(model: str, batch: int, precision: str, cluster: dict[str, Any], cap_mb: float,
              broadcast_buffers: bool = True) -> Any:
    from ddpsim.loader import scenario_from_dict
    from ddpsim.simulation import simulate

    data = {"workload": {"model": model, "batch_size": batch, "precision": precision, "optimizer": "sgd_momentum"},
            "cluster": cluster, "ddp": {"bucket_cap_mb": cap_mb, "broadcast_buffers": broadcast_buffers}}
    return simulate(scenario_from_dict(data, file=f"<{model} {cluster['nodes']}x{cluster['gpus_per_node']}>",
                                       base_dir=ROOT))


def _published(rows: list[dict[str, str]], model: str, gpus: int, **match: str) -> dict[str, str] | None:
    for row in rows:
        if row["model"] == model and int(row["gpus"]) == gpus and all(row[k] == v for k, v in match.items()):
            return row
    return None


@dataclass(frozen=True)
class BenchmarkPoint:
    model: str
    gpus: int
    published_step_s: float | None  # cap 25, p50 (1 GPU: without DDP)
    predicted_step_s: float
    published_slowdown: float | None  # cap 1 over cap 25, p75, as printed (fraction)
    published_slowdown_s: float | None
    predicted_slowdown: float
    predicted_slowdown_s: float


def benchmark_points(rows: list[dict[str, str]]) -> list[BenchmarkPoint]:
    points = []
    for model, name in MODELS.items():
        for gpus in WORLD_SIZES:
            cluster = dgx1_cluster(gpus)
            at25 = _simulate(name, 32, "fp32", cluster, 25, broadcast_buffers=False).step_time_s
            at1 = _simulate(name, 32, "fp32", cluster, 1, broadcast_buffers=False).step_time_s
            base = _published(rows, model, gpus, table="main(example output)", percentile="50",
                              ddp="0" if gpus == 1 else "1")
            diff = next((r for r in rows if r["model"] == model and int(r["gpus"]) == gpus
                         and r["table"].startswith("diff") and r["percentile"] == "75"), None)
            points.append(BenchmarkPoint(
                model, gpus, float(base["step_s"]) if base else None, at25,
                -float(diff["diff_pct_vs_bucket25"]) / 100 if diff else None,
                float(diff["step_s"]) - float(diff["derived_bucket25_step_s"]) if diff else None,
                at1 / at25 - 1, at1 - at25))
    return points


def _ratio(predicted: float, published: float | None) -> float | None:
    if published is None or published <= 0 or predicted <= 0:
        return None
    return max(predicted / published, published / predicted)


def _fmt(value: float | None, spec: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, spec)


def benchmark_tables(points: list[BenchmarkPoint]) -> tuple[list[str], int, int, int]:
    lines = ["| model | GPUs | published step ms (cap 25, p50) | ddpsim ms | published scaling | ddpsim scaling | "
             "published cap-1 slow-down (p75) | ddpsim | factor apart | published ms | ddpsim ms | factor apart |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    within = within_ms = total = 0
    for p in points:
        one = next(q for q in points if q.model == p.model and q.gpus == 1)
        pub_scaling = (p.gpus * one.published_step_s / p.published_step_s
                       if p.published_step_s and one.published_step_s else None)
        pred_scaling = p.gpus * one.predicted_step_s / p.predicted_step_s
        pct = _ratio(p.predicted_slowdown, p.published_slowdown) if p.gpus > 1 else None
        ms = _ratio(p.predicted_slowdown_s, p.published_slowdown_s) if p.gpus > 1 else None
        if p.gpus > 1 and pct is not None:
            total += 1
            within += pct <= SLOWDOWN_FACTOR_TARGET
            within_ms += ms is not None and ms <= SLOWDOWN_FACTOR_TARGET
        lines.append(
            f"| {p.model} | {p.gpus} | {_fmt(p.published_step_s, '.0f', 1e3)} | {p.predicted_step_s * 1e3:.0f} | "
            f"{_fmt(pub_scaling, '.2f')}x | {pred_scaling:.2f}x | {_fmt(p.published_slowdown, '+.1f', 100)}% | "
            f"{p.predicted_slowdown * 100:+.2f}% | {_fmt(pct, '.1f')} | {_fmt(p.published_slowdown_s, '.1f', 1e3)} | "
            f"{p.predicted_slowdown_s * 1e3:.2f} | {_fmt(ms, '.1f')} |")
    return lines, within, within_ms, total


def dle_table() -> tuple[list[str], int]:
    lines = ["| published row | ddpsim 1 GPU ms | ddpsim 8 GPUs ms | ddpsim scaling | published | error | not modelled |",
             "|---|---|---|---|---|---|---|"]
    within = 0
    for s in DLE_SCALING:
        one = _simulate("resnet50", s.batch, s.precision, {"gpu": s.gpu, "nodes": 1, "gpus_per_node": 1}, 25)
        eight = _simulate("resnet50", s.batch, s.precision,
                          {"gpu": s.gpu, "nodes": 1, "gpus_per_node": 8, "intra_node": s.intra}, 25)
        predicted = 8 * one.step_time_s / eight.step_time_s
        error = predicted / s.published - 1
        within += abs(error) <= SCALING_TARGET
        lines.append(f"| {s.row} | {one.step_time_s * 1e3:.0f} | {eight.step_time_s * 1e3:.0f} | {predicted:.2f}x | "
                     f"{s.published:.2f}x | {error * 100:+.1f}% | {s.not_modelled or '-'} |")
    return lines, within


def main(argv: list[str] | None = None) -> int:
    print("Scaling and the cost of small buckets against published figures (no fit to them; no calibration)\n")
    print(f"- {_DLE}")
    print("- pytorch/pytorch@bf69c14 benchmarks/distributed/ddp/README.md (../shared/external/"
          "pytorch_ddp_benchmark_v100.csv)")
    print("Held out: every row. ddpsim's defaults compute_slowdown 2 and bucket_launch 40 us were fitted on 4 x H200 "
          "NVLink (no V100 or A100 measurement); the arrival wait and the DGX-1 ring bandwidth have no fitted "
          "constant.\n")
    with _workloads_resolved_once():
        return _report()


def _report() -> int:
    lines, within = dle_table()
    print(f"NVIDIA's 8-GPU strong scaling (target: within {SCALING_TARGET:.0%})\n")
    print("\n".join(lines))
    print(f"\nwithin {SCALING_TARGET:.0%}: {within} of {len(DLE_SCALING)} rows")
    print("\nWhat 8 GPUs cost per step, from the published figures (batch / per-GPU throughput, 8 GPUs less 1): the "
          "same gradients (fp32 under AMP too) and buckets go through DDP in both precisions of a machine")
    for s in DLE_SCALING:
        loss_s = s.batch * 8 / s.eight_gpu_img_s - s.batch / s.one_gpu_img_s
        print(f"- {s.row}: +{loss_s * 1e3:.1f} ms")
    print("so DDP accounts for about 9-10 ms a step on either machine (the FP32/TF32 rows); the mixed-precision rows "
          "lose 2-4 times that at 2.3-2.9 times the images per second: the host's input pipeline, which ddpsim does "
          "not model")
    rows = benchmark_rows()
    if not rows:
        print("\nPyTorch DDP benchmark: ../shared/external/pytorch_ddp_benchmark_v100.csv absent; not compared")
        return 0
    lines, within, within_ms, total = benchmark_tables(benchmark_points(rows))
    print("\nPyTorch DDP benchmark, DGX-1 V100, fp32 batch 32 (1 GPU: without DDP, which ddpsim simulates at world "
          "size 1; slow-down = step at cap 1 over cap 25 - 1; factor apart = the larger over the smaller)\n")
    print("\n".join(lines))
    print(f"\ncap-1 slow-down within a factor {SLOWDOWN_FACTOR_TARGET:g} (the target): {within} of {total} as a "
          f"percentage of the step; {within_ms} of {total} in milliseconds. The percentage is the measure: the arrival "
          "wait scales with the backward's kernel time, so milliseconds carry any error of ddpsim's V100 compute "
          "(the step columns above) that the percentages are free of")
    print("1 GPU: the benchmark's DDP ran with one rank (PyTorch 1.4: reducer, copies and NCCL calls, +3% over no DDP "
          "and +0.3 to +1.2% more at cap 1); ddpsim simulates world size 1 as training without DDP")
    return 0


def run() -> str:
    """The stage's output (validation/reports/published-scaling/output.txt): what main printed."""
    from validation.evidence.stages import printed

    return printed(lambda: main([]), __name__)


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    raise SystemExit(main())
