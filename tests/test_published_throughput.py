"""The published-throughput stage (validation/evidence/stages/published_throughput.py): its rows quote their
sources' numbers, its model configurations have the published models' parameter counts, its committed output is
what ddpsim predicts now and its summary lines are what its table gives; the catalog's datasheet figures follow
from the GPUs' unit counts and clocks; the measured compute slowdown of a sharded step is the overlap bench's."""

from __future__ import annotations

import json
import math
import os
import re
import statistics

import pytest

from ddpsim.jsonfile import open_data
from validation.evidence.stages.published_throughput import DATA, ROOT, SOURCES, WITHIN, compare

OUTPUT = os.path.join(ROOT, "validation", "reports", "published-throughput", "output.txt")


def _committed_rows() -> dict[str, tuple[str, float, float]]:
    """row label -> (set, ddpsim per GPU, error %) as the committed output prints them."""
    rows = {}
    with open(OUTPUT, encoding="utf-8") as handle:
        for line in handle:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 9 and cells[7].endswith("%") and cells[0] != "source":
                rows[cells[1]] = (cells[4], float(cells[6].replace(",", "")), float(cells[7].rstrip("%")))
    return rows


def test_each_row_quotes_its_sources_number():
    for source in SOURCES:
        quoted = re.findall(r"([\d,]+) (?:img/s|WPS|token/gpu/sec|TPS/GPU)", source.row)
        assert quoted, source.row
        total = float(quoted[-1].replace(",", ""))
        # DeepLearningExamples quote the whole DGX; torchtitan and fms-fsdp quote per GPU
        per_gpu = total / source.gpus if "img/s" in source.row else total
        assert source.per_gpu == pytest.approx(per_gpu), source.row


def test_the_stage_spans_gpu_kinds_and_model_families():
    kinds = {(s.gpu_kind, s.family) for s in SOURCES}
    assert {"V100", "A100", "H100"} <= {k for k, _ in kinds}
    assert {("A100", "CNN"), ("V100", "CNN"), ("A100", "LLM"), ("H100", "LLM")} <= kinds
    assert len(SOURCES) >= 15
    assert sum(not s.fit for s in SOURCES) >= 15


def _llama_params(name: str) -> int:
    with open(os.path.join(ROOT, DATA, f"{name}-config.json")) as f:
        c = json.load(f)
    d, ff, layers, vocab = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    kv = d // c["num_attention_heads"] * c["num_key_value_heads"]
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * ff + 2 * d  # q, o; k, v (grouped); gate, up, down; two RMSNorms
    return layers * per_layer + 2 * vocab * d + d  # untied embedding and head, final norm


# the parameter counts of the models' own cards (Meta's Llama 2 and Llama 3 checkpoints; Code Llama 34B for the
# 34B shape Llama 2's paper describes and never released)
@pytest.mark.parametrize("name,params", [("llama3-8b", 8_030_261_248), ("llama3-70b", 70_553_706_496),
                                         ("llama2-13b", 13_015_864_320), ("llama2-70b", 68_976_648_192),
                                         ("llama2-34b", 33_743_970_304)])
def test_llama_configs_have_the_published_parameter_counts(name, params):
    assert _llama_params(name) == pytest.approx(params, rel=0.002)


@pytest.mark.parametrize("source", [s for s in SOURCES if s.scenario["workload"]["model"] == "resnet50"],
                         ids=lambda s: s.row.split(":")[0])
def test_committed_output_is_what_ddpsim_predicts_now(source):
    committed = _committed_rows()
    assert source.row in committed
    _, predicted, error_pct = committed[source.row]
    now = compare(source)
    assert now.predicted_per_gpu == pytest.approx(predicted, abs=0.6)
    assert now.error * 100 == pytest.approx(error_pct, abs=0.06)


def test_summary_lines_are_what_the_table_gives():
    rows = _committed_rows()
    assert len(rows) == len(SOURCES)
    held = [(error, row) for row, (kind, _, error) in rows.items() if kind == "held out"]
    assert len(held) == sum(not s.fit for s in SOURCES)
    within = sum(abs(error) <= WITHIN * 100 for error, _ in held)
    geomean = math.exp(statistics.fmean(math.log(1 + error / 100) for error, _ in held))
    with open(OUTPUT, encoding="utf-8") as handle:
        text = handle.read()
    assert f"held-out rows: {within} of {len(held)} rows within 15%" in text
    assert f"geometric mean predicted/published {geomean:.3f}" in text


def test_fit_rows_are_the_ones_the_compute_fit_names():
    """A row marked ``fit`` is one the shipped compute fit saw (its figure is quoted among the fit's published
    rows); every other is held out (never fitted)."""
    with open(os.path.join(ROOT, "ddpsim", "hardware", "data", "compute_classes.json")) as f:
        fitted = " ".join(json.load(f)["published_fit_rows"])
    for source in SOURCES:
        figure = re.findall(r"([\d,]+ (?:img/s|WPS|token/gpu/sec|TPS/GPU))", source.row)[-1]
        assert (figure in fitted) == source.fit, source.row
    assert sum(s.fit for s in SOURCES) == 2


# Datasheet peaks from the whitepapers' unit counts and boost clocks (NVIDIA Tesla V100 GPU architecture
# whitepaper: 80 SMs, 5,120 FP32 cores, 640 tensor cores of 64 FMA per clock, 1,530 MHz; NVIDIA A100 Tensor
# Core GPU architecture whitepaper: 108 SMs, 6,912 FP32 cores, 432 tensor cores of 256 dense FP16 FMA per
# clock, 1,410 MHz; NVIDIA H100 Tensor Core GPU architecture whitepaper, SXM5: 132 SMs, 16,896 FP32 cores at
# 1,980 MHz, 528 tensor cores of 512 dense FP16 FMA per clock at 1,830 MHz). TF32 runs at half the FP16 rate.
@pytest.mark.parametrize("name,sms,fp32,tensor,bandwidth", [
    ("V100", 80, 5120 * 2 * 1.530e9, 640 * 64 * 2 * 1.530e9, 900e9),
    ("V100-16GB", 80, 5120 * 2 * 1.530e9, 640 * 64 * 2 * 1.530e9, 900e9),
    ("A100", 108, 6912 * 2 * 1.410e9, 432 * 256 * 2 * 1.410e9, 2039e9),
    ("A100-40GB", 108, 6912 * 2 * 1.410e9, 432 * 256 * 2 * 1.410e9, 1555e9),
    ("H100", 132, 16896 * 2 * 1.980e9, 528 * 512 * 2 * 1.830e9, 3.35e12)])
def test_catalog_peaks_follow_from_unit_counts_and_clocks(name, sms, fp32, tensor, bandwidth):
    from ddpsim.hardware.catalog import get_gpu

    gpu = get_gpu(name)
    assert gpu.sm_count == sms
    assert gpu.peak_flops_per_s["fp32"] == pytest.approx(fp32, rel=0.005)
    assert gpu.peak_flops_per_s["fp16"] == pytest.approx(tensor, rel=0.005)
    assert gpu.memory_bandwidth_Bps == bandwidth
    if name.startswith("V100"):
        # Volta's tensor cores take fp16 only: its TF32 and bf16 work runs on CUDA cores at the fp32 rate
        assert gpu.tensor_keys == ("fp16",)
        assert gpu.peak_flops_per_s["tf32"] == gpu.peak_flops_per_s["bf16"] == gpu.peak_flops_per_s["fp32"]
    else:
        assert set(gpu.tensor_keys) == {"tf32", "bf16", "fp16"}
        assert gpu.peak_flops_per_s["tf32"] == pytest.approx(tensor / 2, rel=0.005)
        assert gpu.peak_flops_per_s["bf16"] == gpu.peak_flops_per_s["fp16"]


def test_compute_rows_name_the_unit_and_whether_the_kind_was_fitted():
    from ddpsim.hardware.catalog import get_gpu
    from ddpsim.hardware.kernel_classes import compute_path, load_class_fit

    fit = load_class_fit()
    v100, a100 = get_gpu("V100"), get_gpu("A100")
    assert compute_path(v100, "fp32", "conv") == ("tf32", "cuda")  # no TF32 on Volta: CUDA cores
    assert compute_path(v100, "bf16-amp", "matmul") == ("bf16", "cuda")
    assert compute_path(v100, "fp16-amp", "conv") == ("fp16", "tensor")
    assert compute_path(a100, "fp32", "conv") == ("tf32", "tensor")
    assert compute_path(a100, "fp32", "matmul") == ("fp32", "cuda")  # allow_tf32 for matmuls is off by default
    assert compute_path(a100, "fp32", "conv", cudnn_tf32=False) == ("fp32", "cuda")
    note = fit.support_note(v100, "bf16-amp")
    assert "CUDA cores" in note and "V100" in note
    for unit, kinds in fit.support.items():
        assert kinds, unit


def test_sharded_compute_slowdown_is_the_overlap_benchs_median():
    from ddpsim.sharded.contention import COMPUTE_SLOWDOWN_BY_LINK

    ratios: dict[str, list[float]] = {}
    for campaign in ("h100x4-overlap-2026-11-27", "h100x4-overlap-2026-11-27b"):
        with open_data(os.path.join(ROOT, "validation", "data", campaign, "overlap.jsonl")) as f:
            for line in f:
                d = json.loads(line)
                if d.get("status") == "ok" and d.get("compute_slowdown_ratio"):
                    ratios.setdefault(d["transport"], []).append(d["compute_slowdown_ratio"])
    for link in ("nvlink", "shm", "socket"):
        assert COMPUTE_SLOWDOWN_BY_LINK[link] == pytest.approx(statistics.median(ratios[link]), abs=0.001)


# Held-out rows that ddpsim prices in about a second each (the zoo's models; the LLM rows of Hugging Face
# configurations take a minute each and are checked by the stage's committed output above): each is within the
# issue's 15% of its published figure. None of them was fitted (the compute fit saw the A100 1-GPU TF32 row, two
# V100 steps of another source, and torchtitan's Llama 2 13B row; see test_fit_rows_are_the_ones_the_compute_fit_names).
_FAST_HELD_OUT = [s for s in SOURCES if not s.fit and s.scenario["workload"]["precision"] == "fp32"
                  or s.row.startswith("7b,")]


@pytest.mark.parametrize("source", _FAST_HELD_OUT, ids=lambda s: f"{s.gpu_kind} {s.row.split(':')[0]}")
def test_held_out_rows_within_15_percent_of_their_published_figure(source):
    assert not source.fit
    assert abs(compare(source).error) <= WITHIN
