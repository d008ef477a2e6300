"""Check ddpsim against all-reduce and DDP step times that others measured and published.

The data are CSVs in a folder outside the repository (never copied in; see its README.md):
``$DDPSIM_EXTERNAL_DIR`` if set, else ``../shared/external`` next to the repository root.

Every comparison is a held-out one: where something is fitted (a link calibration, a NIC scale, the
1-GPU compute time), the rows it is reported on are not the rows it was fitted on, and each result
says which rows were used for what. Hardware values are datasheet numbers chosen here once, not
tuned to the rows (see ``A100_NVLINK``, ``DGX1_NVLINK_MULTIPLICITY`` and the scenario builders).

Conventions: nccl-tests files are read at their out-of-place time (what ``measurements.read_nccl_tests``
reads by default); vTrain's LUT at its in-place time (the column vTrain's own predictor reads).
Errors are ``predicted / measured - 1`` in percent; positive means ddpsim predicts too slow.
"""

from __future__ import annotations

import csv
import itertools
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpsim.collectives import CollectiveModel, ProtocolTable
from ddpsim.collectives.nvls import nvls_of
from ddpsim.fitting.fit import fit_link_class
from ddpsim.fitting.measurements import AllReduceSample
from ddpsim.loader import scenario_from_dict
from ddpsim.scenario.schema import ClusterSpec
from ddpsim.topology import build_topology

ENV_VAR = "DDPSIM_EXTERNAL_DIR"
MIB = 1024 * 1024

# Datasheet link values (per GPU, per direction) the uncalibrated scenarios use.
A100_NVLINK = "300GB/s"  # NVLink3: 12 links x 25 GB/s per direction (600 GB/s bidirectional)
H100_NVLINK = "450GB/s"  # NVLink4: 18 links x 25 GB/s per direction (900 GB/s bidirectional)
V100_NVLINK_PER_LINK_GBps = 25.0  # NVLink2: 6 links per GPU, 25 GB/s per direction each
# DGX-1V hybrid cube mesh (NVIDIA's DGX-1 V100 whitepaper, `nvidia-smi topo -m`): NVLinks between
# GPU pairs, 2 = a doubled ("NV2") pair. GPUs 0-3 and 4-7 are quads; i and i+4 are joined.
DGX1_NVLINK_MULTIPLICITY: dict[tuple[int, int], int] = {
    (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2,
    (1, 2): 2, (1, 3): 1, (1, 5): 2,
    (2, 3): 2, (2, 6): 1,
    (3, 7): 1,
    (4, 5): 1, (4, 6): 1, (4, 7): 2,
    (5, 6): 2, (5, 7): 1,
    (6, 7): 2,
}


# -- data folder and loaders ---------------------------------------------------------------------
def default_dir() -> Path:
    """``$DDPSIM_EXTERNAL_DIR``, else ``<repo root>/../shared/external``."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1].parent / "shared" / "external"


def available(data_dir: str | os.PathLike[str] | None = None) -> bool:
    """True when the folder holds the CSVs this module reads (tests skip otherwise)."""
    folder = Path(data_dir) if data_dir is not None else default_dir()
    return all((folder / name).is_file() for name in (
        "vtrain_allreduce_lut.csv", "echo_nccl_allreduce_a100.csv", "pytorch_ddp_benchmark_v100.csv"))


def read_rows(name: str, data_dir: str | os.PathLike[str] | None = None) -> list[dict[str, str]]:
    folder = Path(data_dir) if data_dir is not None else default_dir()
    with open(folder / name, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


@dataclass(frozen=True)
class Measured:
    """One measured all-reduce: ``bytes`` per rank on ``gpus`` ranks over ``nodes`` hosts."""

    hardware: str
    gpus: int
    nodes: int
    bytes: int
    time_s: float


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def load_allreduce(name: str, data_dir: str | os.PathLike[str] | None = None, *,
                   min_bytes: int = MIB, powers_of_two: bool = True) -> list[Measured]:
    """All-reduce rows of one CSV with ``msg_bytes >= min_bytes``; 1-GPU rows dropped (no exchange).

    ``powers_of_two`` keeps only 2^k sizes: the vTrain LUT has every MiB to 1 GiB, and its
    neighbouring sizes add run time without adding information.
    """
    out = []
    for row in read_rows(name, data_dir):
        size, gpus = int(row["msg_bytes"]), int(row["gpus"])
        if gpus < 2 or size < min_bytes or (powers_of_two and not _is_power_of_two(size)):
            continue
        if "ip_time_ns" in row:
            time_s = float(row["ip_time_ns"]) * 1e-9
        else:
            time_s = float(row["oop_time_us"]) * 1e-6
        out.append(Measured(row["hardware"], gpus, int(row["nodes"]), size, time_s))
    return out


# -- error statistics ------------------------------------------------------------------------------
@dataclass
class ErrorStats:
    """|error| statistics of one group of predictions (percent)."""

    label: str
    pairs: list[tuple[float, float]] = field(default_factory=list)  # (predicted, measured)
    note: str = ""

    def add(self, predicted: float, measured: float) -> None:
        self.pairs.append((predicted, measured))

    @property
    def errors_pct(self) -> list[float]:
        return [(p / m - 1) * 100 for p, m in self.pairs]

    @property
    def n(self) -> int:
        return len(self.pairs)

    @property
    def mean_abs_pct(self) -> float:
        return sum(abs(e) for e in self.errors_pct) / max(self.n, 1)

    @property
    def max_abs_pct(self) -> float:
        return max((abs(e) for e in self.errors_pct), default=0.0)

    @property
    def mean_signed_pct(self) -> float:
        return sum(self.errors_pct) / max(self.n, 1)


def format_table(title: str, stats: Sequence[ErrorStats]) -> str:
    lines = [title, f"  {'group':<34} {'n':>3} {'mean|e|%':>9} {'max|e|%':>8} {'bias%':>7}  note"]
    for s in stats:
        if s.n == 0:
            lines.append(f"  {s.label:<34} {0:>3} {'-':>9} {'-':>8} {'-':>7}  {s.note}")
            continue
        lines.append(f"  {s.label:<34} {s.n:>3} {s.mean_abs_pct:>9.1f} {s.max_abs_pct:>8.1f} "
                     f"{s.mean_signed_pct:>+7.1f}  {s.note}")
    return "\n".join(lines)


# -- scenarios ------------------------------------------------------------------------------------
def cluster_spec(gpu: str, nodes: int, gpus_per_node: int, intra: dict[str, Any],
                 inter: dict[str, Any] | None = None) -> ClusterSpec:
    """A validated ClusterSpec through the scenario loader (so units and defaults are the user's)."""
    cluster: dict[str, Any] = {"gpu": gpu, "nodes": nodes, "gpus_per_node": gpus_per_node, "intra_node": intra}
    if inter is not None:
        cluster["inter_node"] = inter
    return scenario_from_dict({"workload": {"model": "mlp", "batch_size": 1}, "cluster": cluster}).cluster


def dgx1_nvlink_rings(n: int) -> int:
    """Directed rings over GPUs 0..n-1 of a DGX-1V that use direct NVLinks only, packed into the links.

    NCCL on a mesh runs one channel per ring it can embed; each channel gets one link's bandwidth
    per direction, so a ring all-reduce's bus bandwidth is (rings x 25 GB/s). Found by brute force
    (n <= 8: at most 5,040 directed Hamiltonian cycles), then a depth-first packing of cycles into the
    link multiplicities (each direction of a link carries as many rings as it has NVLinks). 0 when
    no all-NVLink ring exists (5 GPUs: GPU 4 reaches only GPU 0); NCCL then detours over PCIe or
    through another GPU, which the presets cannot express.
    """
    if n < 2:
        return 0
    cap: dict[tuple[int, int], int] = {}
    for (a, b), m in DGX1_NVLINK_MULTIPLICITY.items():
        if a < n and b < n:
            cap[(a, b)] = cap[(b, a)] = m
    if n == 2:
        return cap.get((0, 1), 0)
    cycles = []
    for perm in itertools.permutations(range(1, n)):
        order = (0, *perm)
        edges = [(order[i], order[(i + 1) % n]) for i in range(n)]
        if all(e in cap for e in edges):
            cycles.append(edges)
    out_cap = [sum(c for (a, _), c in cap.items() if a == g) for g in range(n)]
    bound = min(out_cap)  # a GPU cannot send on more rings than it has links
    best = 0

    def pack(start: int, used: dict[tuple[int, int], int], count: int) -> None:
        nonlocal best
        best = max(best, count)
        if best >= bound:
            return
        for i in range(start, len(cycles)):
            if all(used.get(e, 0) < cap[e] for e in cycles[i]):
                for e in cycles[i]:
                    used[e] = used.get(e, 0) + 1
                pack(i, used, count + 1)
                for e in cycles[i]:
                    used[e] -= 1
                if best >= bound:
                    return

    pack(0, {}, 0)
    return best


def single_node_cluster(hardware: str, gpus: int, bandwidth: str | None = None,
                        latency: str | None = None) -> ClusterSpec | None:
    """The uncalibrated scenario of one node (None where the presets cannot describe it).

    A100: NVSwitch, datasheet NVLink3 bandwidth; latency left at the loader's default (3 us), so
    the prediction is exactly what a user writing only the datasheet number gets.
    V100: DGX-1V is a mesh, not a switch: an ``nvlink-ring`` whose per-direction bandwidth is the
    NVLink rings the GPU subset can embed x 25 GB/s (``dgx1_nvlink_rings``).
    """
    intra: dict[str, Any] = {}
    if hardware == "A100":
        intra = {"type": "nvswitch", "bandwidth": bandwidth or A100_NVLINK}
    elif hardware == "H100":
        intra = {"type": "nvswitch", "bandwidth": bandwidth or H100_NVLINK}
    elif hardware == "V100":
        rings = dgx1_nvlink_rings(gpus)
        if rings == 0 and bandwidth is None:
            return None
        intra = {"type": "nvlink-ring", "bandwidth": bandwidth or f"{rings * V100_NVLINK_PER_LINK_GBps}GB/s"}
    else:
        raise ValueError(f"no scenario for hardware {hardware!r}")
    if latency is not None:
        intra["latency"] = latency
    return cluster_spec(hardware, 1, gpus, intra)


def predict_allreduce(cluster: ClusterSpec, sizes: Iterable[int], table: ProtocolTable | None = None,
                      algorithm: str = "auto") -> dict[int, float]:
    """ddpsim's FAST all-reduce time per size, with NCCL-style algorithm/protocol choice."""
    model = CollectiveModel(build_topology(cluster), table)
    return {s: model.allreduce_time_s(s, algorithm, "auto") for s in sizes}


def _group(rows: Iterable[Measured], key: Callable[[Measured], Any]) -> dict[Any, list[Measured]]:
    out: dict[Any, list[Measured]] = {}
    for row in rows:
        out.setdefault(key(row), []).append(row)
    return dict(sorted(out.items()))


def _compare(label: str, rows: Sequence[Measured], predicted: dict[int, float], note: str = "") -> ErrorStats:
    stats = ErrorStats(label, note=note)
    for row in rows:
        stats.add(predicted[row.bytes], row.time_s)
    return stats


def _samples(rows: Iterable[Measured], link_class: str, scale: Callable[[Measured], float] | None = None,
             ) -> list[AllReduceSample]:
    # ``scale`` divides the bytes: fitting per NVLink ring on a mesh (see v100 calibrated)
    return [AllReduceSample(link_class, r.gpus, r.nodes, round(r.bytes / (scale(r) if scale else 1.0)),
                            r.time_s, "external") for r in rows]


# -- 1. single-node all-reduce (vTrain LUT) -----------------------------------------------------
def single_node_uncalibrated(data_dir: str | os.PathLike[str] | None = None, algorithm: str = "auto",
                              source: str = "vtrain") -> list[ErrorStats]:
    """Datasheet scenarios vs measured single-node all-reduce.

    ``algorithm="ring"`` is a diagnostic: NCCL runs rings inside one node, while ddpsim's auto
    choice may pick its tree there. ``source="echo"``: the 2/4/8-GPU rows of Echo's A100 logs
    (nccl-tests), a second A100 NVSwitch measurement to tell vTrain-specific latency apart.
    """
    if source == "echo":
        rows = [r for r in load_allreduce("echo_nccl_allreduce_a100.csv", data_dir) if r.nodes == 1]
        rows = [Measured("A100", r.gpus, r.nodes, r.bytes, r.time_s) for r in rows]
    else:
        rows = load_allreduce("vtrain_allreduce_lut.csv", data_dir)
    out = []
    for (hardware, gpus), group in _group(rows, lambda r: (r.hardware, r.gpus)).items():
        label = f"{hardware} {gpus} GPUs ({source}, {algorithm})"
        cluster = single_node_cluster(hardware, gpus)
        if cluster is None:
            out.append(ErrorStats(label, note="no all-NVLink ring on DGX-1 GPUs 0-4: skipped"))
            continue
        model = CollectiveModel(build_topology(cluster))
        big = max(r.bytes for r in group)
        note = f"at {big >> 20} MiB: {'/'.join(model.choose(big, algorithm))}"
        if hardware == "V100":
            note += f"; nvlink-ring {cluster.intra_node.bandwidth_Bps / 1e9:g} GB/s"
        out.append(_compare(label, group, {r.bytes: model.allreduce_time_s(r.bytes, algorithm) for r in group}, note))
    return out


def fit_single_node(rows: Sequence[Measured], hardware: str) -> dict[str, Any]:
    """``fit_link_class`` on the given rows (the caller passes only the 2- and 8-GPU rows)."""
    if hardware == "V100":
        # Per NVLink ring: bytes / rings so that one bandwidth describes every GPU subset.
        return fit_link_class(_samples(rows, "nvlink", lambda r: float(dgx1_nvlink_rings(r.gpus))))
    return fit_link_class(_samples(rows, "nvlink"))


def single_node_calibrated(data_dir: str | os.PathLike[str] | None = None,
                           fit_gpus: tuple[int, ...] = (2, 8)) -> list[ErrorStats]:
    """Fit on ``fit_gpus`` rows, report on the other GPU counts only (held out).

    V100 twice: fitted as if bandwidth did not depend on the GPU subset ("naive", what
    ``ddpsim calibrate`` would do) and fitted per NVLink ring with the DGX-1 ring count.
    """
    rows = load_allreduce("vtrain_allreduce_lut.csv", data_dir)
    out = []
    for hardware in ("A100", "V100"):
        hw_rows = [r for r in rows if r.hardware == hardware]
        fit_rows = [r for r in hw_rows if r.gpus in fit_gpus]
        variants = [("", fit_link_class(_samples(fit_rows, "nvlink")), False)]
        if hardware == "V100":
            variants.append((" per-ring", fit_single_node(fit_rows, "V100"), True))
        for suffix, entry, per_ring in variants:
            table = ProtocolTable.from_dict(entry["protocol_table"])
            for gpus, group in _group((r for r in hw_rows if r.gpus not in fit_gpus), lambda r: r.gpus).items():
                label = f"{hardware}{suffix} {gpus} GPUs"
                bandwidth = entry["bandwidth_Bps"]
                if per_ring:
                    rings = dgx1_nvlink_rings(gpus)
                    if rings == 0:
                        out.append(ErrorStats(label, note="no all-NVLink ring: skipped"))
                        continue
                    bandwidth *= rings
                intra = {"type": "nvswitch" if hardware == "A100" else "nvlink-ring",
                         "bandwidth": bandwidth, "latency": entry["latency_s"]}
                cluster = cluster_spec(hardware, 1, gpus, intra)
                # ring: what the fit describes (calibration_file applies the fit's algorithm on one node)
                predicted = predict_allreduce(cluster, {r.bytes for r in group}, table, entry["algorithm"])
                # the fit's own error on its rows: a failed fit shows here, not as a held-out surprise
                out.append(_compare(label, group, predicted,
                                    f"fit on {fit_gpus} GPUs, fit's own mean error {entry['fit_mean_error_pct']:.1f}%"))
    return out


# -- 2. multi-node A100 (Echo, Azure ND A100 v4) --------------------------------------------------
def ndv4_cluster(gpus: int, intra: dict[str, Any] | None = None, nic_scale: float = 1.0) -> ClusterSpec:
    """N/8 nodes of 8 A100 on NVSwitch, one 200 Gb/s HDR InfiniBand NIC per GPU on a rail fat tree."""
    return cluster_spec("A100-40GB", gpus // 8, 8, intra or {"type": "nvswitch", "bandwidth": A100_NVLINK},
                        {"type": "rail-fat-tree", "nic_bandwidth": 200e9 / 8 * nic_scale})


def multi_node_uncalibrated(data_dir: str | os.PathLike[str] | None = None,
                            algorithm: str = "auto") -> list[ErrorStats]:
    rows = [r for r in load_allreduce("echo_nccl_allreduce_a100.csv", data_dir) if r.nodes > 1]
    out = []
    for gpus, group in _group(rows, lambda r: r.gpus).items():
        model = CollectiveModel(build_topology(ndv4_cluster(gpus)))
        predicted = {r.bytes: model.allreduce_time_s(r.bytes, algorithm) for r in group}
        big = max(r.bytes for r in group)
        out.append(_compare(f"A100 {gpus} GPUs ({gpus // 8} nodes, {algorithm})", group, predicted,
                            f"at {big >> 20} MiB: {'/'.join(model.choose(big, algorithm))}"))
    return out


def multi_node_calibrated(data_dir: str | os.PathLike[str] | None = None,
                          scale_gpus: int = 16, algorithm: str = "auto") -> tuple[list[ErrorStats], dict[str, Any]]:
    """Intra-node link fitted on the single-node 2/4/8-GPU rows, one NIC bandwidth scale fitted on
    the ``scale_gpus`` rows (1-D search minimising mean |error|), reported on the other GPU counts.

    ``fit_link_class`` fits one link class; there is no fit of "net" parameters in the API, so the
    network keeps NCCL's default net latencies and efficiencies and only its bandwidth is scaled.
    """
    rows = load_allreduce("echo_nccl_allreduce_a100.csv", data_dir)
    entry = fit_link_class(_samples([r for r in rows if r.nodes == 1], "nvlink"))
    table = ProtocolTable.from_dict(entry["protocol_table"])
    intra = {"type": "nvswitch", "bandwidth": entry["bandwidth_Bps"], "latency": entry["latency_s"]}
    multi = [r for r in rows if r.nodes > 1]
    fit_rows = [r for r in multi if r.gpus == scale_gpus]

    def mean_error(scale: float, group: Sequence[Measured]) -> float:
        model = CollectiveModel(build_topology(ndv4_cluster(group[0].gpus, intra, scale)), table)
        return sum(abs(model.allreduce_time_s(r.bytes, algorithm) / r.time_s - 1) for r in group) / len(group)

    grid = [0.2 * 1.05**k for k in range(60)]  # 0.2 .. 3.7: coarse on purpose, one scalar
    scale = min(grid, key=lambda s: mean_error(s, fit_rows))
    out = []
    for gpus, group in _group((r for r in multi if r.gpus != scale_gpus), lambda r: r.gpus).items():
        model = CollectiveModel(build_topology(ndv4_cluster(gpus, intra, scale)), table)
        out.append(_compare(f"A100 {gpus} GPUs ({gpus // 8} nodes, {algorithm})", group,
                            {r.bytes: model.allreduce_time_s(r.bytes, algorithm) for r in group},
                            f"NIC scale {scale:.2f} fit on {scale_gpus} GPUs"))
    info = {"nic_scale": scale, "intra_busbw_GBps": entry["bandwidth_Bps"] / 1e9,
            "fit_mean_error_16_pct": mean_error(scale, fit_rows) * 100}
    return out, info


# -- 3. H100 ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class H100Case:
    label: str
    file: str
    gpus: int
    cluster: Callable[[], ClusterSpec]
    caveat: str


def h100_cases() -> list[H100Case]:
    rail400 = {"type": "rail-fat-tree", "nic_bandwidth": "400Gbps"}
    nvsw = {"type": "nvswitch", "bandwidth": H100_NVLINK}
    return [
        H100Case("H100 8 GPUs (vpbench, NVLS)", "vpbench_h100_allreduce.csv", 8,
                 lambda: cluster_spec("H100", 1, 8, nvsw),
                 "NCCL used NVLS (peak busbw 480 > ring ceiling); nccl-tests -g 8 (one process)"),
        H100Case("H100 32 GPUs (vpbench, 4 nodes)", "vpbench_h100_allreduce.csv", 32,
                 lambda: cluster_spec("H100", 4, 8, nvsw, rail400),
                 "fabric unclear (IB 3 ports/node vs TCP); modelled 8x400G rails"),
        H100Case("H100 16 GPUs (GCP A3 Mega, 2 VMs)", "gcp_a3mega_h100_2node_allreduce.csv", 16,
                 lambda: cluster_spec("H100", 2, 8, nvsw, {"type": "rail-fat-tree", "nic_bandwidth": "200Gbps"}),
                 "GPUDirect-TCPXO 8x200G; NCCL env unknown"),
    ]


def h100_uncalibrated(data_dir: str | os.PathLike[str] | None = None, nvls: bool = True,
                      ) -> tuple[list[ErrorStats], list[tuple[str, int, float, float, str]]]:
    """Per case: error stats (sizes >= 1 MiB) and per-size (label, bytes, measured, predicted busbw, choice).

    ``nvls``: NVLink SHARP as the scenario's default (auto: on, as NCCL has it on these NVSwitch
    nodes); False is the diagnostic of NCCL_NVLS_ENABLE=0.
    """
    out, detail = [], []
    for case in h100_cases():
        rows = [r for r in load_allreduce(case.file, data_dir) if r.gpus == case.gpus]
        cluster = case.cluster()
        model = CollectiveModel(build_topology(cluster), nvls=nvls_of(cluster) if nvls else None)
        label = case.label if nvls else f"{case.label} nvls off"
        stats = ErrorStats(label, note=case.caveat)
        for r in rows:
            predicted = model.allreduce_time_s(r.bytes)
            stats.add(predicted, r.time_s)
            factor = 2 * (r.gpus - 1) / r.gpus
            detail.append((label, r.bytes, r.bytes / r.time_s * factor / 1e9,
                           r.bytes / predicted * factor / 1e9, "/".join(model.choose(r.bytes))))
        out.append(stats)
    if not nvls:
        return out, detail
    # ASTRA-sim's HGX-H100 plot forces NCCL Ring: the fair single-node H100 check (digitized, >= 16 MiB)
    astra = [r for r in read_rows("astra_sim_docs_allreduce_digitized.csv", data_dir) if "H100" in r["hardware"]]
    for gpus, group in _group(astra, lambda r: int(r["gpus"])).items():
        model = CollectiveModel(build_topology(cluster_spec("H100", 1, gpus, {"type": "nvswitch",
                                                                              "bandwidth": H100_NVLINK})))
        stats = ErrorStats(f"H100 {gpus} GPUs (ASTRA-sim plot, Ring)", note="digitized; ring forced in NCCL and here")
        for r in group:
            stats.add(model.allreduce_time_s(int(r["msg_bytes"]), "ring"), float(r["time_us_digitized"]) * 1e-6)
        out.append(stats)
    return out, detail


# -- 4. DDP step (PyTorch's DDP benchmark, DGX-1 V100) --------------------------------------------
def dgx1_ddp_scenario(gpus: int, compute_efficiency: float, bucket_cap_mb: float | None = None) -> dict[str, Any]:
    """ResNet-50, batch 32, fp32 on DGX-1V: GPUs 0..g-1 on their NVLink rings; 2 machines over
    4 x 100 Gb/s EDR InfiniBand each (fat tree, 4 NICs per node). broadcast_buffers=False as the
    benchmark sets it. For 5 or 7 GPUs-per-node there is no such config in the data."""
    per_node = min(gpus, 8)
    rings = dgx1_nvlink_rings(per_node) if per_node > 1 else 6
    return {
        "workload": {"model": "resnet50", "batch_size": 32, "precision": "fp32",
                     "compute_efficiency": compute_efficiency},
        "cluster": {"gpu": "V100", "nodes": max(1, gpus // 8), "gpus_per_node": per_node,
                    "intra_node": {"type": "nvlink-ring", "bandwidth": f"{rings * V100_NVLINK_PER_LINK_GBps}GB/s"},
                    "inter_node": {"type": "fat-tree", "nic_bandwidth": "100Gbps", "nics_per_node": 4}},
        "ddp": {"bucket_cap_mb": bucket_cap_mb, "broadcast_buffers": False},
    }


def ddp_step_s(gpus: int, compute_efficiency: float, bucket_cap_mb: float | None = None) -> float:
    from ddpsim.simulation import simulate

    return simulate(scenario_from_dict(dgx1_ddp_scenario(gpus, compute_efficiency, bucket_cap_mb))).step_time_s


def fit_compute_efficiency(target_s: float, lo: float = 0.05, hi: float = 1.0, steps: int = 40) -> float:
    """Bisection on workload.compute_efficiency so the 1-GPU (no communication) step equals ``target_s``.

    The step is monotone in the efficiency (only the FLOP-bound roofline terms change).
    """
    if ddp_step_s(1, hi) > target_s:
        raise ValueError(f"even compute_efficiency=1 is slower than {target_s} s")
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ddp_step_s(1, mid) > target_s else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class DDPComparison:
    gpus: int
    measured_s: float
    predicted_s: float

    @property
    def error_pct(self) -> float:
        return (self.predicted_s / self.measured_s - 1) * 100


@dataclass(frozen=True)
class BucketDiff:
    gpus: int
    percentile: int
    measured_diff_pct: float
    predicted_diff_pct: float

    @property
    def same_sign(self) -> bool:
        return (self.measured_diff_pct < 0) == (self.predicted_diff_pct < 0)


def ddp_benchmark(data_dir: str | os.PathLike[str] | None = None, gpu_counts: Sequence[int] = (2, 4, 8, 16),
                  model: str = "resnet50") -> tuple[float, list[DDPComparison], list[BucketDiff]]:
    """(fitted compute efficiency, p50 step comparisons at the default cap, 1 MB-cap diff signs)."""
    rows = [r for r in read_rows("pytorch_ddp_benchmark_v100.csv", data_dir) if r["model"] == model]
    main = [r for r in rows if r["table"].startswith("main")]
    one_gpu = next(r for r in main if r["gpus"] == "1" and r["ddp"] == "0" and r["percentile"] == "50")
    efficiency = fit_compute_efficiency(float(one_gpu["step_s"]))
    comparisons = []
    predicted25: dict[int, float] = {}
    for gpus in gpu_counts:
        measured = next(float(r["step_s"]) for r in main
                        if int(r["gpus"]) == gpus and r["ddp"] == "1" and r["percentile"] == "50")
        predicted25[gpus] = ddp_step_s(gpus, efficiency)
        comparisons.append(DDPComparison(gpus, measured, predicted25[gpus]))
    diffs = []
    for r in rows:
        gpus = int(r["gpus"])
        if r["table"].startswith("diff") and gpus in predicted25:
            predicted1 = ddp_step_s(gpus, efficiency, bucket_cap_mb=1)
            # the benchmark's sign: negative = the 1 MB cap is slower than 25 MB
            diffs.append(BucketDiff(gpus, int(r["percentile"]), float(r["diff_pct_vs_bucket25"]),
                                    (1 - predicted1 / predicted25[gpus]) * 100))
    return efficiency, comparisons, diffs
