"""ddpsim against others' published measurements (../shared/external; skipped when absent).

These are regression guards with bounds measured once and given margin, not accuracy claims:
see validation/evidence/stages/external_accuracy.py for the full tables and the causes of the large errors.
"""

from __future__ import annotations

import pytest

from validation import external as ext

pytestmark = [
    pytest.mark.skipif(not ext.available(), reason="external data folder absent (set DDPSIM_EXTERNAL_DIR)"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),  # fitter overflow on degenerate starts
]


def test_dgx1_ring_count_matches_the_link_map():
    # 2 GPUs share one NVLink; 8 GPUs embed 3 rings each run both ways (6 NVLinks per GPU)
    assert [ext.dgx1_nvlink_rings(n) for n in range(2, 9)] == [1, 2, 4, 0, 2, 4, 6]


def test_calibrated_single_node_a100_held_out():
    stats = [s for s in ext.single_node_calibrated() if s.label.startswith("A100")]
    assert sorted(int(s.label.split()[1]) for s in stats) == [3, 4, 5, 6, 7]  # only held-out counts
    errors = [abs(e) for s in stats for e in s.errors_pct]
    # measured: pooled mean 11.6 %, worst count 18.4 % (4 GPUs; vTrain's 4-GPU small sizes are
    # faster than its 3-GPU ones, which no n-monotone model follows). Bound with margin: 20 %.
    assert sum(errors) / len(errors) < 20.0
    assert max(s.mean_abs_pct for s in stats) < 30.0


def test_ddp_v100_8_gpus():
    _, comparisons, _ = ext.ddp_benchmark(gpu_counts=(8,))
    (eight,) = comparisons
    # measured -4.5 %: mostly the ~3 % DDP cost already present at 1 GPU (0.100 s with DDP vs
    # 0.097 s without) that ddpsim does not charge; 10 % leaves room for the 3-decimal rounding.
    assert abs(eight.error_pct) < 10.0


def test_uncalibrated_multi_node_a100_guard():
    stats = ext.multi_node_uncalibrated()
    assert [s.n for s in stats] == [15, 13, 13, 13]
    for s in stats:
        # measured mean |e| 45.7-60.6 %, always too fast: NDv4 reached ~125 GB/s busbw against the
        # 200 GB/s rail ceiling, and ddpsim picks its tree (2x ring bandwidth) at 2 and 16 nodes.
        # Guard only: fails if a change makes this worse, or flips the sign without a look here.
        assert s.mean_abs_pct < 70.0
        assert s.mean_signed_pct < 0.0


def _busbw_errors(label_start: str, min_bytes: int) -> list[float]:
    _, detail = ext.h100_uncalibrated()
    return [predicted / measured - 1 for label, size, measured, predicted, _ in detail
            if label.startswith(label_start) and size >= min_bytes]


def test_nvls_8_h100_reaches_the_measured_bus_bandwidth():
    # vpbench's 8 x H100 (NCCL 2.24, NVLS on by default): 469-480 GB/s busbw from 1 GiB; ddpsim's NVLS
    # (datasheet 450 GB/s x NVLink 0.79 x NCCL's nvlsEfficiency 0.85, nothing fitted) gives 467-470.
    # Target: within 10 %. Below 1 GiB ddpsim is too fast (NCCL's NVLS pipeline fill is not modelled).
    errors = _busbw_errors("H100 8 GPUs (vpbench", 2**30)
    assert len(errors) == 4
    assert max(abs(e) for e in errors) < 0.10


def test_a3_mega_large_sizes_run_the_nvls_tree():
    # GCP A3 Mega, 2 x 8 H100, 8 x 200 Gb/s per VM: 318-339 GB/s busbw from 2 GiB, above the 188 GB/s
    # a ring reaches over those NICs; the NVLS tree (NIC-bound at 2 x 15/16 x 8 x 25 GB/s x 0.94) gives
    # 351-352. Within 15 % from 2 GiB only: below, GPUDirect-TCPXO's latency is not modelled.
    errors = _busbw_errors("H100 16 GPUs (GCP A3 Mega", 2 * 2**30)
    assert len(errors) == 3
    assert max(abs(e) for e in errors) < 0.15
