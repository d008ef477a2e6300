"""ddpsim against throughput others published for whole training setups, from their own descriptions.

Each source's cluster, model, batch, precision and parallelism is written as a scenario exactly as the
source describes it; nothing is fitted to these numbers (compute is the shipped per-kernel-class estimate,
``ddpsim/hardware/data/compute_classes.json``, fitted on the project's own H100/H200 profiles; no
calibration). Error = predicted / published throughput per GPU - 1 (negative: ddpsim predicts slower).

Run: ``python -m validation.evidence.stages.published_throughput`` (about a minute: one source imports an
8B Hugging Face model on the meta device).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DATA = "validation/data/published-throughput"
TARGET = 0.20  # the target: within 20% on at least four sources

_DLE = ("NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md (Training performance "
        "results, pytorch-21.03 NGC container; batch per GPU from ConvNets/configs.yml)")
_TITAN = "pytorch/torchtitan docs/performance.md (Llama 3 performance numbers, FSDP2, 64 A100 80GB)"
_TITAN_H100 = ("pytorch/torchtitan docs/performance.md (Table 1: Llama 3.1 8B, 8 GPUs, FSDP, Grand Teton hosts: H100 "
               "96GB HBM2e at 2.4 TB/s, 500 W power limit, NVLink)")
_FMS = "foundation-model-stack/fms-fsdp README.md (7b row: 128 A100, HSDP, no activation checkpointing, batch 2)"


@dataclass(frozen=True)
class Published:
    """One published row: where it is, what it says, the scenario that describes its setup."""

    source: str       # the document, for the citation
    row: str          # the row as the source labels it
    per_gpu: float    # published throughput per GPU (samples/s or tokens/s)
    unit: str
    scenario: dict[str, Any]
    not_modelled: str = ""  # what the source's setup has that ddpsim does not model

    @property
    def document(self) -> str:
        """The source document (a repository's file), whichever of its tables the row quotes."""
        return self.source.split(" (")[0].split(",")[0]

    @property
    def gpus(self) -> int:
        cluster = self.scenario["cluster"]
        return int(cluster.get("nodes", 1)) * int(cluster.get("gpus_per_node", 8))


def _rn50(gpu: str, gpus: int, batch: int, precision: str, intra: dict[str, str]) -> dict[str, Any]:
    cluster: dict[str, Any] = {"gpu": gpu, "nodes": 1, "gpus_per_node": gpus}
    if gpus > 1:
        cluster["intra_node"] = intra
    return {"workload": {"model": "resnet50", "batch_size": batch, "precision": precision}, "cluster": cluster}


_DGXA100 = {"type": "nvswitch", "bandwidth": "300GB/s"}  # A100 NVLink 3: 600 GB/s total, 300 per direction
_DGX1 = {"type": "nvlink-ring"}

SOURCES: tuple[Published, ...] = (
    Published(_DLE, "DGX A100 (8x A100 80GB), 1 GPU, TF32, batch 256: 938 img/s", 938, "img/s",
              _rn50("A100", 1, 256, "fp32", _DGXA100), "DALI data loading"),
    Published(_DLE, "DGX A100 (8x A100 80GB), 8 GPUs, TF32, batch 256: 7248 img/s", 7248 / 8, "img/s",
              _rn50("A100", 8, 256, "fp32", _DGXA100), "DALI data loading"),
    Published(_DLE, "DGX A100 (8x A100 80GB), 8 GPUs, mixed precision, batch 256: 16621 img/s", 16621 / 8, "img/s",
              _rn50("A100", 8, 256, "fp16-amp", _DGXA100), "channels-last (NHWC) memory format"),
    Published(_DLE, "DGX-1 (8x V100 16GB), 8 GPUs, FP32, batch 112: 2855 img/s", 2855 / 8, "img/s",
              _rn50("V100-16GB", 8, 112, "fp32", _DGX1)),
    Published(_DLE, "DGX-1 (8x V100 16GB), 8 GPUs, mixed precision, batch 256: 8322 img/s", 8322 / 8, "img/s",
              _rn50("V100-16GB", 8, 256, "fp16-amp", _DGX1), "channels-last (NHWC) memory format"),
    Published(_TITAN, "Llama 3 8B, 64 A100 80GB, local batch 1, selective op AC: 2973 WPS", 2973, "tokens/s",
              {"workload": {"model": f"hf:{DATA}/llama3-8b-config.json", "batch_size": 1, "precision": "bf16-amp",
                            "seq_len": 8192},
               "parallel": {"strategy": "zero3"},
               "cluster": {"gpu": "A100", "nodes": 8, "gpus_per_node": 8, "intra_node": _DGXA100}},
              "selective activation checkpointing (recompute; would make ddpsim slower still)"),
    Published(_TITAN_H100, "FSDP, local batch 2, selective activation checkpointing: 5,762 TPS/GPU", 5762, "tokens/s",
              {"workload": {"model": f"hf:{DATA}/llama3-8b-config.json", "batch_size": 2, "precision": "bf16-amp",
                            "seq_len": 8192},
               "parallel": {"strategy": "zero3"},
               # the source's own H100 variant, described as the scenario's own GPU (not in the catalog)
               "cluster": {"gpu": {"name": "H100-96GB-HBM2e-500W", "peak_tflops": {"bf16": 989.4, "fp32": 67},
                                   "memory_bandwidth": "2.4TB/s", "memory": "96GB", "nvlink_bandwidth": "450GB/s"},
                           "nodes": 1, "gpus_per_node": 8}},
              "selective activation checkpointing; the 500 W power limit (the datasheet's peak is at 700 W)"),
    Published(_FMS, "Llama 2 7B, 128 A100, HSDP, batch 2, 4k context: 3760 token/gpu/sec", 3760, "tokens/s",
              {"workload": {"model": "llama-7b", "batch_size": 2, "precision": "bf16-amp", "seq_len": 4096},
               "parallel": {"strategy": "zero3"},
               "cluster": {"gpu": "A100", "nodes": 1, "gpus_per_node": 8, "intra_node": _DGXA100}},
              "HSDP: simulated as its shard group (ZeRO-3 over one node's 8 GPUs); the replicas' gradient "
              "all-reduce across the 16 nodes is left out"),
)


@dataclass(frozen=True)
class Comparison:
    published: Published
    predicted_per_gpu: float
    step_s: float

    @property
    def error(self) -> float:
        return self.predicted_per_gpu / self.published.per_gpu - 1


def compare(source: Published) -> Comparison:
    from ddpsim.loader import scenario_from_dict
    from ddpsim.simulation import simulate

    result = simulate(scenario_from_dict(source.scenario, file=f"<{source.row}>", base_dir=ROOT))
    total = result.tokens_per_s if source.unit == "tokens/s" and result.tokens_per_s else result.samples_per_s
    return Comparison(source, total / source.gpus, result.step_time_s)


def table(comparisons: list[Comparison]) -> str:
    lines = ["| source | published row | GPUs | published per GPU | ddpsim per GPU | error | not modelled |",
             "|---|---|---|---|---|---|---|"]
    for c in comparisons:
        p = c.published
        lines.append(f"| {p.document} | {p.row} | {p.gpus} | {p.per_gpu:,.0f} {p.unit} | "
                     f"{c.predicted_per_gpu:,.0f} | {c.error * 100:+.1f}% | {p.not_modelled or '-'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    comparisons = [compare(source) for source in SOURCES]
    print("Published training throughput against ddpsim (no fit to these numbers; no calibration)\n")
    for doc in dict.fromkeys(s.source for s in SOURCES):  # the documents and the parts of them quoted
        print(f"- {doc}")
    print()
    print(table(comparisons))
    within = [c for c in comparisons if abs(c.error) <= TARGET]
    sources_within = {c.published.document for c in within}
    print(f"\nwithin {TARGET:.0%}: {len(within)} of {len(comparisons)} rows, {len(sources_within)} of "
          f"{len({s.document for s in SOURCES})} source documents (target: 4 sources)")
    signed = sum(c.error for c in comparisons) / len(comparisons)
    print(f"mean signed error {signed * 100:+.1f}%, mean |error| "
          f"{sum(abs(c.error) for c in comparisons) / len(comparisons) * 100:.1f}%")
    return 0


def run() -> str:
    """The stage's output (validation/reports/published-throughput/output.txt): what main printed."""
    from validation.evidence.stages import printed

    return printed(lambda: main([]), __name__)


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    raise SystemExit(main())
