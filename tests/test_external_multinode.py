"""Multi-node all-reduce against published nccl-tests tables (../shared/external; skipped when absent).

Echo's Azure NDv4 logs (8 x A100 per node, 8 x 200 Gb/s HDR rails, nccl-tests at 2, 4, 8 and 16
nodes) are the only multi-node source with several node counts. Two scenario numbers are fitted
on the 4-node rows alone: the network latency (ddpsim reads it against NCCL's NET hop latencies,
5 us = NCCL's table) and a NIC bandwidth scale (the fabric reached about 125 GB/s bus bandwidth
against a 200 GB/s line rate at every node count). The 8- and 16-node rows are predicted with them.

The 2-node rows are held out too. There ``auto`` runs rings, as NCCL's tuning says (its model
gives a 2-node tree the ring's bus bandwidth x 0.92 / 2 as algorithm bandwidth), although the flow
model would price NCCL's tree faster (it sends half the ring's bytes through each NIC); the
measured 2-node bus bandwidth (about 125 GB/s, as at 4-16 nodes) agrees with rings. The H100
tables (vpbench 4 nodes, GCP A3 Mega 2 nodes) have one node count each, so nothing can be fitted
on one count and checked on another; ``validation/evidence/stages/external_accuracy.py`` prints their uncalibrated errors
for the record (no test here: there is nothing to hold them against)
(the A3 Mega run reached 338 GB/s bus bandwidth over 8 x 200 Gb/s, more than any ring can: NCCL ran
its NVLS tree there, which ddpsim now picks on H100 NVSwitch nodes; tests/test_external.py checks it).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from ddpsim.collectives import CollectiveModel
from ddpsim.topology import build_topology
from validation import external as ext

pytestmark = pytest.mark.skipif(not ext.available(), reason="external data folder absent (set DDPSIM_EXTERNAL_DIR)")

HDR_NIC_Bps = 200e9 / 8  # 200 Gb/s HDR InfiniBand per GPU (Echo's nccl-test-log/README.md)


def ndv4_model(gpus: int, latency_us: float, nic_scale: float) -> CollectiveModel:
    spec = ext.cluster_spec("A100-40GB", gpus // 8, 8, {"type": "nvswitch", "bandwidth": ext.A100_NVLINK},
                            {"type": "rail-fat-tree", "nic_bandwidth": HDR_NIC_Bps * nic_scale,
                             "latency": f"{latency_us}us"})
    return CollectiveModel(build_topology(spec))


def echo_rows() -> dict[int, list[ext.Measured]]:
    rows = [r for r in ext.load_allreduce("echo_nccl_allreduce_a100.csv") if r.nodes > 1]  # >= 1 MiB
    out: dict[int, list[ext.Measured]] = {}
    for r in rows:
        out.setdefault(r.gpus, []).append(r)
    return out


def errors_pct(model: CollectiveModel, rows: Sequence[ext.Measured], algorithm: str = "auto") -> list[float]:
    return [(model.allreduce_time_s(r.bytes, algorithm) / r.time_s - 1) * 100 for r in rows]


def mean_abs(errors: Sequence[float]) -> float:
    return sum(abs(e) for e in errors) / len(errors)


def fit(rows: Sequence[ext.Measured]) -> tuple[float, float]:
    """(network latency us, NIC scale) minimising mean |error| on ``rows``: a coarse grid, then a
    finer one around its best point."""
    gpus = rows[0].gpus

    def cost(point: tuple[float, float]) -> float:
        return mean_abs(errors_pct(ndv4_model(gpus, *point), rows))

    coarse = min(itertools.product((5.0, 8.0, 11.0, 14.0, 17.0), (0.5, 0.6, 0.7, 0.8, 0.9)), key=cost)
    fine = itertools.product([coarse[0] + d for d in (-1.5, 0.0, 1.5)], [coarse[1] + d for d in (-0.04, 0.0, 0.04)])
    return min(fine, key=cost)


def test_echo_a100_fit_on_4_nodes_predicts_8_and_16() -> None:
    by_gpus = echo_rows()
    assert sorted(by_gpus) == [16, 32, 64, 128]
    latency_us, scale = fit(by_gpus[32])
    report = [f"fitted on 4 nodes: network latency {latency_us:g} us, NIC scale {scale:.2f}"]
    held_out = {}
    for gpus, rows in sorted(by_gpus.items()):
        model = ndv4_model(gpus, latency_us, scale)
        errors = errors_pct(model, rows)
        ring = errors_pct(model, rows, "ring")
        report.append(f"  {gpus:>3} GPUs ({gpus // 8:>2} nodes): mean |e| {mean_abs(errors):5.1f} %, max "
                      f"{max(map(abs, errors)):5.1f} %, bias {sum(errors) / len(errors):+5.1f} %; rings forced: "
                      f"mean |e| {mean_abs(ring):5.1f} %, max {max(map(abs, ring)):5.1f} %")
        if gpus != 32:
            held_out[gpus] = errors
    print("\n".join(report))
    # measured at commit time: fitted 11 us / 0.70; mean |e| 4.7 % (2 nodes), 5.2 % (8), 4.6 % (16);
    # max 17.4 % (2 nodes), 15.8 % (8 nodes, 512 MiB, where the measured busbw jumps 10 % above its
    # neighbours), 14.6 % (16 nodes)
    for gpus, errors in held_out.items():
        assert mean_abs(errors) < 8.0, (gpus, errors)
        assert max(map(abs, errors)) < 19.0, (gpus, errors)
    assert 0.6 <= scale <= 0.8  # about 125 of 200 GB/s


def test_echo_a100_2_nodes_auto_runs_rings() -> None:
    # NCCL's tuning (and so auto) runs rings on these 2 nodes at every size from 4 MiB
    by_gpus = echo_rows()
    latency_us, scale = fit(by_gpus[32])
    model = ndv4_model(16, latency_us, scale)
    assert all(model.choose(r.bytes)[0] == "ring" for r in by_gpus[16] if r.bytes >= 4 * 2**20)
