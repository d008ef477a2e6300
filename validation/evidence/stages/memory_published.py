"""Peak memory per GPU against what others published, from the sources' own descriptions (no fit).

1. The ZeRO paper (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models",
   SC'20, Figure 1): model-state memory per GPU of a 7.5 B-parameter model on 64 GPUs with mixed-precision Adam
   (K = 12): baseline 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.9 GB. ddpsim's model states are PyTorch's:
   AMP keeps fp32 parameters and gradients (4 + 4 bytes) and AdamW two fp32 moments (8), the same 16 bytes per
   parameter split otherwise. ZeRO-1 here is PyTorch's ZeroRedundancyOptimizer beside DDP: it shards the
   optimizer's 8 bytes only, where DeepSpeed's stage 1 (P_os) shards 12 (fp32 master weights and moments) and
   keeps 2-byte parameters and gradients; the two are not the same thing, and the row says so. ZeRO-2 is FSDP2
   without resharding after forward: its 16 sharded bytes plus the bf16 parameters it keeps unsharded from
   forward to backward (the paper's replicated 2-byte parameters). ZeRO-3 is FSDP2 resharding after forward,
   counted here as the paper counts it (the sharded states, not the parameters gathered for one block).
2. torchtitan, ``benchmarks/llama3_h100_202412_torchtitan.md`` (pytorch/torchtitan), Table 2: Llama 3.1 8B on
   8 H100 (96 GB HBM2e, Grand Teton), FSDP 8 / CP 1, local batch 1 of 32768 tokens, full activation
   checkpointing, torch.compile + Float8: 83.9 GiB, the memory torchtitan logs (the caching allocator's max
   reserved, which holds the allocated peak plus what the allocator keeps cached).
3. Setups that ran on 80 GB A100s, with no memory figure published (they must fit): the PyTorch FSDP blog's
   Llama 2 7B ("Maximizing training throughput using PyTorch FSDP", IBM and Meta, 2024; foundation-model-stack/
   fms-fsdp): 128 A100 80 GB, FSDP full sharding, bf16 mixed precision, local batch 2 of 4096 tokens, no activation
   checkpointing; and torchtitan's Llama 2 13B (``docs/performance.md``, "LLaMa 2 performance numbers", 64 A100
   80 GB, FSDP2, local batch 2, no activation checkpointing; ``train_configs/llama2_13b.toml``: seq_len 4096,
   AdamW, fused_rmsnorm). Both compute with the bf16 parameters FSDP gathers (no autocast over fp32 weights): the
   zoo's LLaMA with ``compute="bf16"`` (fms-fsdp's RMSNorm in eager PyTorch, torchtitan's fused). The same LLaMA
   under autocast over fp32 parameters (what a ``torch:`` or ``hf:`` model's world-size-1 step runs) is shown beside.
"""

from __future__ import annotations

from typing import Any

from ddpsim.hardware.allocator import allocator_reserve
from ddpsim.loader import scenario_from_dict
from ddpsim.sharded.memory import Precision, memory_by_strategy
from ddpsim.sharded.units import shard_units
from ddpsim.simulation import simulate
from ddpsim.workload.model import Layer, ParamTensor, Workload

ZERO_PSI = 7.5e9
ZERO_GPUS = 64
ZERO_PAPER_GB = {"ddp": 120.0, "zero1": 31.4, "zero2": 16.6, "zero3": 1.9}
TORCHTITAN_GIB = 83.9
TORCHTITAN_SOURCE = "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 2 (FSDP 8, CP 1)"


def zero_paper_workload(blocks: int = 32) -> Workload:
    """7.5 B fp32 parameters in ``blocks`` equal blocks (the unit FSDP2 wraps), no activations: model states only."""
    per_block = int(ZERO_PSI / blocks)
    layers = tuple(Layer(f"layers.{i}", (ParamTensor(f"layers.{i}.weight", per_block),)) for i in range(blocks))
    return Workload("zero-paper-7.5b", layers, batch_size=1, precision="bf16-amp", activation_source="none: states only")


def zero_paper_rows() -> list[dict[str, Any]]:
    """Per strategy: ddpsim's model-state bytes per GPU as the paper counts them, and the paper's."""
    w = zero_paper_workload()
    by = memory_by_strategy(w, ZERO_GPUS, 8, shard_units(w), Precision("bf16", "bf16"), optimizer="adamw",
                            gradient_as_bucket_view=True)
    rows = []
    for strategy, paper_gb in ZERO_PAPER_GB.items():
        m = by[strategy]
        states = m["parameters"] + m["gradients"] + m["optimizer_states"]
        if strategy == "zero2":
            states += m["unsharded_params"]  # the bf16 parameters kept from forward to backward
        rows.append({"strategy": strategy, "ddpsim_gb": states / 1e9, "paper_gb": paper_gb,
                     "error": states / 1e9 / paper_gb - 1.0})
    return rows


def torchtitan_scenario(gpu: str = "H100-SXM") -> dict[str, Any]:
    return {"workload": {"model": "llama3-8b", "batch_size": 1, "precision": "bf16-amp", "seq_len": 32768,
                         "optimizer": "adamw", "activation_checkpointing": "full"},
            "cluster": {"gpu": gpu, "nodes": 1, "gpus_per_node": 8},
            "parallel": {"strategy": "zero3", "param_dtype": "bf16", "reduce_dtype": "fp32"},
            "simulation": {"mode": "fast", "iterations": 1}}


def torchtitan_row() -> dict[str, Any]:
    result = simulate(scenario_from_dict(torchtitan_scenario()))
    predicted_gib = result.memory_bytes["total"] / 2**30
    reserve = allocator_reserve()
    return {"predicted_gib": predicted_gib, "reported_gib": TORCHTITAN_GIB, "fits_80gb": result.fits_in_memory,
            "error": predicted_gib / TORCHTITAN_GIB - 1.0,
            # like with like: torchtitan reports reserved memory; the allocator's measured reserve on the prediction
            "reserved_gib": (predicted_gib * reserve["min"], predicted_gib * reserve["max"]),
            "reserve_runs": reserve["runs"],
            "parts_gib": {k: v / 2**30 for k, v in result.memory_bytes.items() if k != "total"}}


# name, (layers, d, ff, vocab, kv), GPUs, batch, seq, norm, checkpoint every k-th block, reported GiB or None, source
RAN_IN_80GB = (
    ("FSDP blog Llama 2 7B", (32, 4096, 11008, 32000, None), 128, 2, 4096, "eager", 0, None,
     "pytorch.org blog 'Maximizing training throughput using PyTorch FSDP' (fms-fsdp), 128 A100 80 GB"),
    ("torchtitan Llama 2 13B", (40, 5120, 13824, 32000, None), 64, 2, 4096, "fused", 0, None,
     "pytorch/torchtitan docs/performance.md, Llama 2 13B, batch 2, no AC, 64 A100 80 GB"),
    ("torchtitan Llama 3.1 8B", (32, 4096, 14336, 128256, 1024), 8, 1, 32768, "fused", 1, TORCHTITAN_GIB,
     TORCHTITAN_SOURCE + " (max reserved, torch.compile and Float8, 96 GB H100)"),
)
GPU_80GB_GIB = 80.0  # A100 / H100 80 GB: 80 GiB of HBM (ddpsim/hardware/catalog.py)


def ran_rows() -> list[dict[str, Any]]:
    """Each setup's ZeRO-3 peak per GPU: FSDP's bf16 compute (as the source ran it) and autocast over fp32 weights."""
    from ddpsim.workload.zoo import llama_workload

    rows = []
    for name, (layers, d, ff, vocab, kv), gpus, batch, seq, norm, every, reported, source in RAN_IN_80GB:
        totals = {}
        for compute in ("bf16", "autocast"):
            w = llama_workload(batch, "bf16-amp", seq, layers, d, ff, vocab, kv, compute=compute,
                               norm=norm if compute == "bf16" else "eager")
            m = memory_by_strategy(w, gpus, 8, shard_units(w), Precision("bf16", "fp32"), optimizer="adamw",
                                   checkpoint_every=every)["zero3"]
            totals[compute] = m["total"] / 2**30
        rows.append({"name": name, "predicted_gib": totals["bf16"], "autocast_gib": totals["autocast"],
                     "fits_80gb": totals["bf16"] <= GPU_80GB_GIB, "reported_gib": reported, "source": source,
                     "error": totals["bf16"] / reported - 1.0 if reported else None})
    return rows


def run() -> str:
    lines = ["Model-state memory per GPU, 7.5 B parameters on 64 GPUs, mixed-precision Adam (ZeRO paper, Figure 1):", "",
             "| strategy | ddpsim GB | paper GB | difference | note |", "|---|---|---|---|---|"]
    notes = {"ddp": "16 bytes per parameter either way",
             "zero1": "not the paper's P_os: ZeroRedundancyOptimizer shards the optimizer's 8 bytes only",
             "zero2": "FSDP2 without resharding: 16 bytes sharded + the bf16 parameters kept unsharded",
             "zero3": "16 bytes sharded (the gathered block aside, as the paper counts)"}
    for r in zero_paper_rows():
        lines.append(f"| {r['strategy']} | {r['ddpsim_gb']:.1f} | {r['paper_gb']:.1f} | {100 * r['error']:+.1f}% | "
                     f"{notes[r['strategy']]} |")
    t = torchtitan_row()
    parts = ", ".join(f"{k} {v:.1f}" for k, v in t["parts_gib"].items())
    lines += ["", f"torchtitan Llama 3.1 8B, 8 x H100, FSDP2 (ZeRO-3), batch 1 x 32768 tokens, full activation "
              f"checkpointing ({TORCHTITAN_SOURCE}): predicted {t['predicted_gib']:.1f} GiB per GPU ({parts}); "
              f"reported {t['reported_gib']:.1f} GiB (max reserved, with torch.compile and Float8, on 96 GB H100s): "
              f"{100 * t['error']:+.1f}%; fits an 80 GB H100: {'yes' if t['fits_80gb'] else 'NO'}. With the caching "
              f"allocator's reserve measured over {t['reserve_runs']} H200 steps (ddpsim/hardware/data/allocator_reserve.json), "
              f"the predicted reserved figure is {t['reserved_gib'][0]:.1f} to {t['reserved_gib'][1]:.1f} GiB: "
              f"{100 * (t['reserved_gib'][0] / t['reported_gib'] - 1):+.1f}% to "
              f"{100 * (t['reserved_gib'][1] / t['reported_gib'] - 1):+.1f}% of the reported {t['reported_gib']:.1f} GiB "
              "(torch.compile and Float8 are not modelled).", "",
              "Setups that ran, ZeRO-3 (FSDP) peak per GPU, the source's own LLaMA computing with FSDP's bf16 "
              "parameters; beside it the same model under autocast over fp32 parameters:", "",
              "| setup | predicted GiB | fits 80 GB | reported | autocast GiB | source |", "|---|---|---|---|---|---|"]
    for r in ran_rows():
        reported = (f"{r['reported_gib']:.1f} GiB reserved ({100 * r['error']:+.1f}%)" if r["reported_gib"]
                    else "ran (no figure)")
        lines.append(f"| {r['name']} | {r['predicted_gib']:.1f} | {'yes' if r['fits_80gb'] else 'NO'} | {reported} | "
                     f"{r['autocast_gib']:.1f} | {r['source']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())
