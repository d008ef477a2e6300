"""ddpsim against throughput others published for whole training setups, from their own descriptions.

Each source's cluster, model, batch, precision and parallelism is written as a scenario as the source describes
it, with what the source leaves unsaid stated as an assumption of the row. Compute is the shipped per-kernel-class
estimate (``ddpsim/hardware/data/compute_classes.json``), no calibration. Its fit sees the project's H100/H200
profiles and four published steps (``benchmarks/fit_compute_classes.py``
``PUBLISHED_FIT``: two V100 steps of another source, and two rows here, marked ``fit``); every other row is
``held out`` (never used to fit anything). Error = predicted / published throughput per GPU - 1 (negative: ddpsim slower).

Run: ``python -m validation.evidence.stages.published_throughput`` (a few minutes: the LLM sources import
Hugging Face configurations on the meta device).
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DATA = "validation/data/published-throughput"
# the targets, on the held-out rows
WITHIN = 0.15
TARGET_FRACTION = 0.80
TARGET_GEOMEAN = (0.90, 1.10)
TARGET_KIND_BIAS = 0.10

_DLE = ("NVIDIA DeepLearningExamples PyTorch/Classification/ConvNets/resnet50v1.5/README.md (Training performance "
        "results, pytorch-21.03 NGC container, synthetic-free DALI pipeline; batch per GPU from ConvNets/configs.yml: "
        "DGX1V FP32 112, AMP 256 channels-last; DGXA100 TF32 and AMP 256, AMP channels-last)")
_TITAN_A100 = ("pytorch/torchtitan docs/performance.md at 0413364 (FSDP2 on 64 A100 80GB; Llama 3 seq 8192, Llama 2 "
               "seq 4096; WPS per GPU)")
_TITAN_H100 = ("pytorch/torchtitan docs/performance.md at eaea6f6 (Grand Teton: 8 H100 96GB HBM2e at 2.4 TB/s per "
               "host, 500 W, NVLink; 400 Gb/s RDMA per GPU; Llama 3.1 8B, FSDP, local batch 2, selective AC)")
_FMS = ("foundation-model-stack/fms-fsdp README.md (128 A100, Llama 2 architecture, 4k context, SDPA flash, "
        "token/gpu/sec)")

_DGXA100 = {"type": "nvswitch", "bandwidth": "300GB/s"}  # A100 NVLink 3: 600 GB/s total, 300 per direction
_DGX1 = {"type": "nvlink-ring"}
# The A100 sources do not name their network: assumed DGX A100-like nodes, one 200 Gb/s HDR InfiniBand NIC per GPU
_A100_IB = {"type": "rail-fat-tree", "nic_bandwidth": "200Gbps", "latency": "5us"}
# torchtitan's own H100 (96 GB HBM2e at 2.4 TB/s, 500 W): "the actual peak TFLOPs number is between SXM and NVL,
# and we don't know its exact value" -> the middle of the two datasheets' dense peaks (BF16 989.4 and 835.5 TF,
# FP32 67 and 60 TF)
_H100_96 = {"name": "H100-96GB-HBM2e-500W", "peak_tflops": {"bf16": (989.4 + 835.5) / 2, "fp32": (67 + 60) / 2},
            "memory_bandwidth": "2.4TB/s", "memory": "96GB", "nvlink_bandwidth": "450GB/s"}


@dataclass(frozen=True)
class Published:
    """One published row: where it is, what it says, the scenario that describes its setup."""

    source: str       # the document, for the citation
    row: str          # the row as the source labels it
    per_gpu: float    # published throughput per GPU (samples/s or tokens/s)
    unit: str
    gpu_kind: str     # V100, A100, H100: the kind its bias is reported under
    family: str       # CNN or LLM
    scenario: dict[str, Any]
    assumed: str = ""  # what the source leaves unsaid, or has that ddpsim does not model
    fit: bool = False  # True: the compute fit saw this figure (benchmarks/fit_compute_classes.py PUBLISHED_FIT)

    @property
    def document(self) -> str:
        return self.source.split(" (")[0]

    @property
    def gpus(self) -> int:
        cluster = self.scenario["cluster"]
        return int(cluster.get("nodes", 1)) * int(cluster.get("gpus_per_node", 8))


def _rn50(gpu: str, gpus: int, batch: int, precision: str, intra: dict[str, str]) -> dict[str, Any]:
    cluster: dict[str, Any] = {"gpu": gpu, "nodes": 1, "gpus_per_node": gpus}
    if gpus > 1:
        cluster["intra_node"] = intra
    # configs.yml runs the mixed-precision rows with memory_format nhwc, the others in PyTorch's default NCHW
    memory_format = "channels_last" if precision != "fp32" else "channels_first"
    return {"workload": {"model": "resnet50", "batch_size": batch, "precision": precision,
                         "optimizer": "sgd_momentum", "memory_format": memory_format}, "cluster": cluster}


def _dle_rows() -> list[Published]:
    rows = []
    # (GPU, kind, system, table row: GPUs -> (fp32/tf32 img/s, amp img/s)), as the README's tables give them
    tables = (("A100", "A100", "DGX A100 (8x A100 80GB)", "TF32", 256, _DGXA100, {1: (938, 2470), 8: (7248, 16621)}),
              ("V100-16GB", "V100", "DGX-1 16GB (8x V100 16GB)", "FP32", 112, _DGX1, {1: (367, 1200), 8: (2855, 8322)}),
              ("V100", "V100", "DGX-1 32GB (8x V100 32GB)", "FP32", 112, _DGX1, {1: (356, 1156), 8: (2766, 8056)}))
    for gpu, kind, system, fp32_name, fp32_batch, intra, table in tables:
        for gpus, (fp32, amp) in table.items():
            rows.append(Published(_DLE, f"{system}, {gpus} GPU(s), {fp32_name}, batch {fp32_batch}: {fp32} img/s",
                                  fp32 / gpus, "img/s", kind, "CNN", _rn50(gpu, gpus, fp32_batch, "fp32", intra),
                                  "DALI data loading assumed never to stall the GPU",
                                  fit=gpu == "A100" and gpus == 1))
            rows.append(Published(_DLE, f"{system}, {gpus} GPU(s), mixed precision, batch 256: {amp} img/s",
                                  amp / gpus, "img/s", kind, "CNN", _rn50(gpu, gpus, 256, "fp16-amp", intra),
                                  "DALI data loading assumed never to stall the GPU; channels-last as the source runs it"))
    return rows


def _llm(model: str, batch: int, seq: int, gpu: Any, nodes: int, strategy: str = "zero3", ac: str = "none",
         shard_group: str = "world", intra: dict[str, str] | None = None,
         inter: dict[str, str] | None = None) -> dict[str, Any]:
    cluster: dict[str, Any] = {"gpu": gpu, "nodes": nodes, "gpus_per_node": 8, "intra_node": intra or _DGXA100}
    if nodes > 1:
        cluster["inter_node"] = inter or _A100_IB
    return {"workload": {"model": model, "batch_size": batch, "precision": "bf16-amp", "seq_len": seq,
                         "optimizer": "adamw", "activation_checkpointing": ac},
            "parallel": {"strategy": strategy, "param_dtype": "bf16", "reduce_dtype": "fp32",
                         "shard_group": shard_group},
            "cluster": cluster}


def _hf(name: str) -> str:
    return f"hf:{DATA}/{name}-config.json"


_SEL_OP = "selective op activation checkpointing (recomputes a few ops; priced as none)"
_H100_ROWS_ASSUMED = ("the source's 96 GB HBM2e / 500 W H100 described as its own GPU at the middle of the SXM and NVL "
                      "datasheets' dense peaks (the source: 'between SXM and NVL', exact value unknown)")


def _llm_rows() -> list[Published]:
    return [
        Published(_TITAN_A100, "Llama 3 8B, local batch 1, selective op AC: 2973 WPS (58.2% MFU)", 2973, "tokens/s",
                  "A100", "LLM", _llm(_hf("llama3-8b"), 1, 8192, "A100", 8), _SEL_OP + "; network assumed"),
        Published(_TITAN_A100, "Llama 3 8B, local batch 1, selective layer AC: 2904 WPS (56.8% MFU)", 2904, "tokens/s",
                  "A100", "LLM", _llm(_hf("llama3-8b"), 1, 8192, "A100", 8, ac="every_2"),
                  "selective layer AC as every 2nd block (torchtitan's default option '2'); network assumed"),
        Published(_TITAN_A100, "Llama 3 70B, local batch 1, full AC: 331 WPS (51.7% MFU)", 331, "tokens/s",
                  "A100", "LLM", _llm(_hf("llama3-70b"), 1, 8192, "A100", 8, ac="full"), "network assumed"),
        Published(_TITAN_A100, "Llama 2 13B, local batch 2, no AC: 2162 WPS (61.1% MFU)", 2162, "tokens/s",
                  "A100", "LLM", _llm(_hf("llama2-13b"), 2, 4096, "A100", 8), "network assumed", fit=True),
        Published(_TITAN_A100, "Llama 2 70B, local batch 2, full AC: 353 WPS (50.5% MFU)", 353, "tokens/s",
                  "A100", "LLM", _llm(_hf("llama2-70b"), 2, 4096, "A100", 8, ac="full"), "network assumed"),
        Published(_TITAN_H100, "Table 1, 8 GPUs, FSDP: 5,762 TPS/GPU", 5762, "tokens/s", "H100", "LLM",
                  _llm(_hf("llama3-8b"), 2, 8192, _H100_96, 1, intra={"type": "nvswitch", "bandwidth": "450GB/s"}),
                  "selective AC as torchtitan's llama3_8b.toml sets it, op: " + _SEL_OP + "; " + _H100_ROWS_ASSUMED),
        Published(_TITAN_H100, "Table 3, 128 GPUs, FSDP: 5,605 TPS/GPU", 5605, "tokens/s", "H100", "LLM",
                  _llm(_hf("llama3-8b"), 2, 8192, _H100_96, 16, intra={"type": "nvswitch", "bandwidth": "450GB/s"},
                       inter={"type": "rail-fat-tree", "nic_bandwidth": "400Gbps", "latency": "5us"}),
                  "selective AC as torchtitan's llama3_8b.toml sets it, op: " + _SEL_OP + "; " + _H100_ROWS_ASSUMED),
        Published(_FMS, "7b, 128 A100, HSDP, no AC, batch 2: 3760 token/gpu/sec", 3760, "tokens/s", "A100", "LLM",
                  _llm("llama-7b", 2, 4096, "A100", 16, shard_group="node"),
                  "HSDP as sharding within a node, replicas across nodes; network assumed"),
        Published(_FMS, "13b, 128 A100, HSDP, no AC, batch 1: 1700 token/gpu/sec", 1700, "tokens/s", "A100", "LLM",
                  _llm(_hf("llama2-13b"), 1, 4096, "A100", 16, shard_group="node"),
                  "HSDP as sharding within a node; network assumed"),
        Published(_FMS, "34b, 128 A100, FSDP, AC, batch 8: 772 token/gpu/sec", 772, "tokens/s", "A100", "LLM",
                  _llm(_hf("llama2-34b"), 8, 4096, "A100", 16, ac="full"),
                  "34b as Llama 2's 34B shape (8192 wide, 48 layers, GQA 8); AC as full; network assumed"),
        Published(_FMS, "70b, 128 A100, FSDP, AC, batch 6: 380 token/gpu/sec", 380, "tokens/s", "A100", "LLM",
                  _llm(_hf("llama2-70b"), 6, 4096, "A100", 16, ac="full"), "AC as full; network assumed"),
    ]


SOURCES: tuple[Published, ...] = (*_dle_rows(), *_llm_rows())


@dataclass(frozen=True)
class Comparison:
    published: Published
    predicted_per_gpu: float
    step_s: float

    @property
    def ratio(self) -> float:
        return self.predicted_per_gpu / self.published.per_gpu

    @property
    def error(self) -> float:
        return self.ratio - 1


def compare(source: Published) -> Comparison:
    from ddpsim.loader import scenario_from_dict
    from ddpsim.simulation import simulate

    result = simulate(scenario_from_dict(source.scenario, file=f"<{source.row}>", base_dir=ROOT))
    total = result.tokens_per_s if source.unit == "tokens/s" and result.tokens_per_s else result.samples_per_s
    return Comparison(source, total / source.gpus, result.step_time_s)


@dataclass(frozen=True)
class Summary:
    rows: int
    within: int
    geomean: float
    bias_by_kind: dict[str, float]  # mean signed error per GPU kind

    @property
    def fraction_within(self) -> float:
        return self.within / self.rows if self.rows else 0.0

    def meets(self) -> bool:
        return (self.fraction_within >= TARGET_FRACTION and TARGET_GEOMEAN[0] <= self.geomean <= TARGET_GEOMEAN[1]
                and all(abs(b) <= TARGET_KIND_BIAS for b in self.bias_by_kind.values()))


def summarize(comparisons: list[Comparison]) -> Summary:
    kinds: dict[str, list[float]] = {}
    for c in comparisons:
        kinds.setdefault(c.published.gpu_kind, []).append(c.error)
    geomean = math.exp(sum(math.log(c.ratio) for c in comparisons) / len(comparisons)) if comparisons else 0.0
    return Summary(len(comparisons), sum(abs(c.error) <= WITHIN for c in comparisons), geomean,
                   {k: sum(v) / len(v) for k, v in sorted(kinds.items())})


def table(comparisons: list[Comparison]) -> str:
    lines = ["| source | published row | GPU | GPUs | set | published per GPU | ddpsim per GPU | error | assumed |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in comparisons:
        p = c.published
        lines.append(f"| {p.document} | {p.row} | {p.gpu_kind} | {p.gpus} | {'fit' if p.fit else 'held out'} | "
                     f"{p.per_gpu:,.0f} {p.unit} | {c.predicted_per_gpu:,.0f} | {c.error * 100:+.1f}% | "
                     f"{p.assumed or '-'} |")
    return "\n".join(lines)


def _summary_line(name: str, s: Summary) -> str:
    bias = ", ".join(f"{k} {v * 100:+.1f}%" for k, v in s.bias_by_kind.items())
    return (f"{name}: {s.within} of {s.rows} rows within {WITHIN:.0%} ({s.fraction_within:.0%}; target "
            f"{TARGET_FRACTION:.0%}), geometric mean predicted/published {s.geomean:.3f} (target "
            f"{TARGET_GEOMEAN[0]:.2f}-{TARGET_GEOMEAN[1]:.2f}), mean bias per GPU kind {bias} (target within "
            f"{TARGET_KIND_BIAS:.0%}): {'met' if s.meets() else 'NOT met'}")


def scaling_lines(comparisons: list[Comparison]) -> list[str]:
    """Published against predicted scaling between rows of one source and setting that differ only in their GPU
    count (throughput per GPU at n GPUs x n / at the smaller count)."""
    lines = []
    by_key: dict[str, list[Comparison]] = {}
    for c in comparisons:
        p = c.published
        w, cluster = p.scenario["workload"], p.scenario["cluster"]
        key = repr((p.document, str(cluster["gpu"]), w["model"], w["precision"], w["batch_size"],
                    w.get("activation_checkpointing")))
        by_key.setdefault(key, []).append(c)
    for group in by_key.values():
        if len(group) != 2 or group[0].published.gpus == group[1].published.gpus:
            continue
        small, large = sorted(group, key=lambda c: c.published.gpus)
        n = large.published.gpus / small.published.gpus
        published = large.published.per_gpu / small.published.per_gpu * n
        predicted = large.predicted_per_gpu / small.predicted_per_gpu * n
        lines.append(f"- {large.published.row.split(':')[0]}, against {small.published.gpus} GPU(s): published "
                     f"x{published:.2f}, ddpsim x{predicted:.2f} for x{n:g} the GPUs ({predicted / published - 1:+.1%})")
    return lines


def main(argv: list[str] | None = None) -> int:
    comparisons = [compare(source) for source in SOURCES]
    print("Published training throughput against ddpsim (no calibration; compute from the shipped class fit)\n")
    for doc in dict.fromkeys(s.source for s in SOURCES):
        print(f"- {doc}")
    print()
    print(table(comparisons))
    held = [c for c in comparisons if not c.published.fit]
    print()
    print(_summary_line("held-out rows", summarize(held)))
    print(_summary_line("all rows", summarize(comparisons)))
    for family in ("CNN", "LLM"):
        print(_summary_line(f"held-out {family} rows", summarize([c for c in held if c.published.family == family])))
    print("\nScaling with the GPU count, as published and as predicted:")
    for line in scaling_lines(comparisons):
        print(line)
    return 0


def run() -> str:
    """The stage's output (validation/reports/published-throughput/output.txt): what main printed."""
    from validation.evidence.stages import printed

    return printed(lambda: main([]), __name__)


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    raise SystemExit(main())
