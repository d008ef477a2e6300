"""Peak memory against what others published (validation/evidence/stages/memory_published.py): the expected
figures are the sources' own, typed in here from them, never ddpsim's output."""

from __future__ import annotations

import pytest

from ddpsim.hardware.allocator import allocator_reserve
from validation.evidence.stages.memory_published import ran_rows, torchtitan_row, zero_paper_rows

# ZeRO paper, Figure 1: 7.5 B parameters, 64 GPUs, K = 12: (2 + 2 + K) psi, ..., (2 + 2 + K) psi / Nd, in GB
PAPER_GB = {"ddp": 120.0, "zero2": 16.6, "zero3": 1.9}


def test_model_states_per_gpu_match_the_zero_paper_where_the_strategies_mean_the_same():
    rows = {r["strategy"]: r for r in zero_paper_rows()}
    for strategy, gb in PAPER_GB.items():
        assert rows[strategy]["ddpsim_gb"] == pytest.approx(gb, rel=0.03), strategy
    # ZeRO-1 here is PyTorch's ZeroRedundancyOptimizer: the fp32 parameters and gradients stay replicated
    # (4 + 4 bytes) and only the 8 bytes of AdamW's moments are sharded, unlike DeepSpeed's stage 1
    assert rows["zero1"]["ddpsim_gb"] == pytest.approx((4 + 4 + 8 / 64) * 7.5, rel=0.01)


def test_torchtitans_llama3_8b_with_full_checkpointing_is_within_15_percent_of_its_reserved_memory():
    row = torchtitan_row()
    # the source reports the caching allocator's max reserved (83.9 GiB on 96 GB H100s, torch.compile and Float8),
    # which holds the allocated peak. The prediction counts eager PyTorch's loss over 32768 x 128256 logits
    # (log-softmax's fp32 output saved, its gradient in and out: 47 GiB) and a residual stream kept at fp32, as
    # autocast over fp32 parameters keeps it, where FSDP2's bf16 compute keeps it at 16 bits: above the reported
    # figure, within 15%
    assert abs(row["error"]) < 0.15
    # compared like with like: the allocator's measured reserve on the prediction (the reserve's own range is
    # derived from the raw measured runs in tests/test_allocator_reserve.py)
    reserve = allocator_reserve()
    low, high = row["reserved_gib"]
    assert low == pytest.approx(row["predicted_gib"] * reserve["min"], rel=1e-3)
    assert high == pytest.approx(row["predicted_gib"] * reserve["max"], rel=1e-3)


def test_the_llama_setups_that_ran_on_80_gb_fit_and_the_reported_one_is_within_15_percent():
    rows = {r["name"]: r for r in ran_rows()}
    assert set(rows) == {"FSDP blog Llama 2 7B", "torchtitan Llama 2 13B", "torchtitan Llama 3.1 8B"}
    for name in ("FSDP blog Llama 2 7B", "torchtitan Llama 2 13B"):
        assert rows[name]["fits_80gb"], rows[name]
    # torchtitan's 8B reports the allocator's max reserved, 83.9 GiB on 96 GB H100s (torch.compile, Float8)
    assert abs(rows["torchtitan Llama 3.1 8B"]["error"]) < 0.15
