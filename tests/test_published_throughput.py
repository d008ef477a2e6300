"""The published-throughput comparison (validation/evidence/stages/published_throughput.py): its rows quote
their sources' numbers, its Llama 3 8B config is Llama 3 8B, and its committed output is what ddpsim
predicts now (the ResNet-50 rows, recomputed here in seconds)."""

from __future__ import annotations

import json
import os
import re

import pytest

from validation.evidence.stages.published_throughput import DATA, ROOT, SOURCES, compare

OUTPUT = os.path.join(ROOT, "validation", "reports", "published-throughput", "output.txt")


def _committed_rows() -> dict[str, tuple[float, float]]:
    """row label -> (ddpsim per GPU, error %) as the committed output prints them."""
    rows = {}
    with open(OUTPUT, encoding="utf-8") as handle:
        for line in handle:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 7 and cells[5].endswith("%") and cells[0] != "source":
                rows[cells[1]] = (float(cells[4].replace(",", "")), float(cells[5].rstrip("%")))
    return rows


def test_each_row_quotes_its_sources_number():
    for source in SOURCES:
        quoted = re.findall(r"([\d,]+) (?:img/s|WPS|token/gpu/sec|TPS/GPU)", source.row)
        assert quoted, source.row
        total = float(quoted[-1].replace(",", ""))
        # DeepLearningExamples quote the whole DGX; torchtitan and fms-fsdp quote per GPU
        per_gpu = total / source.gpus if "img/s" in source.row else total
        assert source.per_gpu == pytest.approx(per_gpu), source.row


def test_llama3_8b_config_has_llama3_8bs_parameters():
    with open(os.path.join(ROOT, DATA, "llama3-8b-config.json")) as f:
        c = json.load(f)
    d, ff, layers, vocab = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    kv = d // c["num_attention_heads"] * c["num_key_value_heads"]
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * ff + 2 * d  # q, o; k, v (grouped); gate, up, down; two RMSNorms
    total = layers * per_layer + 2 * vocab * d + d  # untied embedding and head, final norm
    assert total == pytest.approx(8.03e9, rel=0.001)  # Meta's model card: 8B (8,030,261,248 parameters)


@pytest.mark.parametrize("source", [s for s in SOURCES if s.scenario["workload"]["model"] == "resnet50"],
                         ids=lambda s: s.row.split(":")[0])
def test_committed_output_is_what_ddpsim_predicts_now(source):
    committed = _committed_rows()
    assert source.row in committed
    predicted, error_pct = committed[source.row]
    now = compare(source)
    assert now.predicted_per_gpu == pytest.approx(predicted, abs=0.6)
    assert now.error * 100 == pytest.approx(error_pct, abs=0.06)


def test_output_counts_the_rows_within_the_target():
    rows = _committed_rows()
    assert len(rows) == len(SOURCES)
    within = sum(abs(error) <= 20 for _, error in rows.values())
    with open(OUTPUT, encoding="utf-8") as handle:
        assert f"within 20%: {within} of {len(SOURCES)} rows" in handle.read()
