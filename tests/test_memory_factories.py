"""User factories of validation/campaigns/memory_factories.py: priced without refusal on the CPU, and (where the
campaign's GPU measurements are committed) predicted against them within the issue's targets: 10% mean, 20% max."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from ddpsim.workload.torch_import_memory import torch_version_ok  # noqa: E402
from validation.campaigns import memory_factories  # noqa: E402
from validation.evidence.stages.memory_factories import DATA, predict, records  # noqa: E402


def test_the_campaign_covers_ten_models_in_bf16_and_fp32_with_and_without_checkpointing():
    runs = memory_factories.runs()
    assert len({m for m, _, _ in runs}) >= 10
    assert {(p, c) for _, p, c in runs} == {("bf16", False), ("bf16", True), ("fp32", False)}


@pytest.mark.skipif(not torch_version_ok(torch)[0], reason="MemTracker is used on the tested torch versions only")
def test_a_factory_with_autocast_in_its_loss_fn_is_priced_at_bf16():
    record = {"model": "convnext", "precision": "bf16", "checkpointing": "none", "batch_size": 8, "seq_len": None,
              "factory": "validation.campaigns.memory_factories:convnext_bf16", "peak_allocated_bytes": 1.0}
    bf16 = predict(record)
    fp32 = predict(dict(record, precision="fp32", factory="validation.campaigns.memory_factories:convnext_fp32"))
    assert "MemTracker" in bf16["source"] and "MemTracker" in fp32["source"]
    # activations dominate this step: bf16 keeps about half of fp32's (weights and states are the same)
    assert 0.4 < bf16["predicted_bytes"] / fp32["predicted_bytes"] < 0.8


@pytest.mark.skipif(not os.path.exists(DATA), reason="the GPU campaign's measurements are not committed")
def test_predicted_peaks_hold_against_the_gpu_campaign():
    predicted = [predict(r) for r in records()]
    refused = [p for p in predicted if "refused" in p]
    assert not refused, refused
    errors = [abs(p["error"]) for p in predicted]
    assert sum(errors) / len(errors) <= 0.10 and max(errors) <= 0.20, predicted
