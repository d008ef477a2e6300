"""Read measured data: harness all-reduce sweeps (JSONL), DDP runs (nccl-tests output: ``nccl_tests.py``).

Every reader returns plain records and raises ScenarioError naming the file and the field.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ddpsim.collectives.nccl_tuning import TUNED_ALGORITHMS, NcclTuning
from ddpsim.collectives.protocols import PROTOCOL_NAMES
from ddpsim.errors import ScenarioError
from ddpsim.jsonfile import BadJSONValue, data_name, has_data, open_data, strict_loads
from ddpsim.scenario.link_kinds import LINK_CLASSES

# the harness names a run's intra-node transport by its calibration link class
HARNESS_TRANSPORTS = tuple(c for c in LINK_CLASSES if c != "net")


@dataclass(frozen=True)
class AllReduceSample:
    """One measured all-reduce size: median seconds per call on ``world_size`` GPUs."""

    link_class: str
    world_size: int
    nodes: int
    bytes: int
    time_s: float
    source: str
    algorithm: str | None = None  # forced with NCCL_ALGO ("ring", "tree"); None: NCCL's own choice
    launch_id: str = ""
    nccl_protocol: str | None = None  # the protocol NCCL's log says it ran ("ll", "ll128", "simple")
    # NCCL's own cost table for the sweep's communicator, from the launch's NCCL log (None: no log)
    nccl_tuning: NcclTuning | None = field(default=None, compare=False)


def campaign_of(source: str) -> str:
    """The campaign folder of a measured file (the folder of its ``allreduce.jsonl`` or ``ddp_runs.jsonl``):
    each committed campaign is one machine allocation."""
    return os.path.dirname(os.path.abspath(source))


def host_of(record: dict[str, Any] | AllReduceSample) -> str:
    """The machine a record was measured on: a run's ``host`` if it names one, else its campaign folder."""
    if isinstance(record, dict):
        source = record.get("_source")  # a record built in memory has no file: one unnamed machine
        return str(record.get("host") or (os.path.basename(campaign_of(source)) if source else ""))
    return os.path.basename(campaign_of(record.source))


def launch_key(record: dict[str, Any] | AllReduceSample) -> str:
    """One launch: its machine and its id ("nvlink_w4_0" names a launch in every campaign)."""
    launch_id = record.get("launch_id", "") if isinstance(record, dict) else record.launch_id
    return f"{host_of(record)}/{launch_id}"


def open_text(path: str) -> str:
    """The text of a measured file, read through gzip where only its compressed copy is committed."""
    try:
        with open_data(path) as handle:
            return handle.read()
    except FileNotFoundError:
        raise ScenarioError("measurement file not found", file=path) from None
    except (UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        raise ScenarioError("not a text file", file=path) from None


def read_jsonl(path: str) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(open_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = strict_loads(line)
        except json.JSONDecodeError:
            raise ScenarioError(f"line {number} is not valid JSON", file=path) from None
        except BadJSONValue as err:
            raise ScenarioError(str(err), file=path, field=f"line {number}.{err.field}") from None
        if not isinstance(record, dict):
            raise ScenarioError(f"line {number} is not a JSON object", file=path)
        records.append(record)
    return records


def _field(record: dict, key: str, kind: type | tuple, path: str, where: str) -> Any:
    if key not in record:
        raise ScenarioError("missing field", file=path, field=f"{where}.{key}")
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ScenarioError(f"expected {getattr(kind, '__name__', 'a number')}, got {value!r}", file=path, field=f"{where}.{key}")
    return value


def read_harness_allreduce(path: str, skipped: list[tuple[str, str]] | None = None) -> list[AllReduceSample]:
    """The harness's ``allreduce.jsonl``: one object per (transport, shape, algorithm) sweep.

    Sweeps that did not finish (``status`` other than ok) have no rows to fit and are left out. A sweep
    over uneven nodes is refused, or with ``skipped`` listed there with why and left out.
    """
    samples = []
    for i, record in enumerate(read_jsonl(path)):
        where = f"line {i + 1}"
        if record.get("status", "ok") != "ok":
            continue
        transport = _field(record, "transport", str, path, where)
        world = _field(record, "world_size", int, path, where)
        nodes = record_nodes(record, path, where)
        node_gpus = record_node_gpus(record, path, where)
        if node_gpus is not None and len(set(node_gpus)) > 1:
            # the network's fit assumes nodes alike: a 3+1 sweep read as 2x2 would be fitted wrong
            why = (f"all-reduce sweep over uneven nodes ({'+'.join(map(str, node_gpus))}): not fitted, the network "
                   "is fitted on even shapes")
            if skipped is None:
                raise ScenarioError(why, file=path, field=f"{where}.node_gpus")
            skipped.append((f"{path}:{i + 1}", why))
            continue
        algorithm = record.get("algorithm_forced")
        if algorithm is not None and (not isinstance(algorithm, str) or algorithm.lower() not in ("ring", "tree")):
            raise ScenarioError(f"expected ring, tree or null, got {algorithm!r}", file=path, field=f"{where}.algorithm_forced")
        rows = _field(record, "rows", list, path, where)
        log = nccl_log_path(path, record)
        tuning = read_nccl_tuning(log) if log else None
        for j, row in enumerate(rows):
            size = _field(row, "bytes", int, path, f"{where}.rows[{j}]")
            time_us = _field(row, "time_us_median", (int, float), path, f"{where}.rows[{j}]")
            if size <= 0 or not math.isfinite(time_us) or time_us <= 0:
                raise ScenarioError(f"size and time must be positive, got {size} bytes, {time_us} us", file=path,
                                    field=f"{where}.rows[{j}]")
            proto = row.get("nccl_proto")
            samples.append(
                AllReduceSample(transport, world, nodes, size, time_us * 1e-6, path,
                                algorithm.lower() if algorithm else None, str(record.get("launch_id", "")),
                                proto.lower() if isinstance(proto, str) and proto.lower() in PROTOCOL_NAMES else None,
                                tuning)
            )
    return samples


def record_nodes(record: dict[str, Any], path: str, where: str) -> int:
    """The node count of a measured record: the harness's ``nodes`` (emulated nodes on one host
    count, since NCCL built its multi-node algorithms for them), else the hosts it ran on."""
    nodes = record.get("nodes")
    if nodes is None:
        nodes = (record.get("fingerprint") or {}).get("hostname_count", 1) or 1
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ScenarioError(f"expected a positive integer, got {nodes!r}", file=path, field=f"{where}.nodes")
    world = record.get("world_size")
    if record_node_gpus(record, path, where) is not None:
        return nodes
    if isinstance(world, int) and world % nodes:
        raise ScenarioError(f"{world} GPUs do not split into {nodes} nodes", file=path, field=f"{where}.nodes")
    return nodes


def record_node_gpus(record: dict[str, Any], path: str, where: str) -> tuple[int, ...] | None:
    """The GPUs of each node of a run on uneven (emulated) nodes, in rank order (the harness's
    ``--node-gpus``); None for even nodes."""
    counts = record.get("node_gpus")
    if counts is None:
        return None
    nodes, world = record.get("nodes"), record.get("world_size")
    if (not isinstance(counts, list) or not counts
            or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in counts)
            or len(counts) != nodes or sum(counts) != world):
        raise ScenarioError(f"expected one positive GPU count per node ({nodes} nodes) adding up to the world "
                            f"({world}), got {counts!r}", file=path, field=f"{where}.node_gpus")
    return tuple(counts)


def nccl_log_path(allreduce_path: str, record: dict[str, Any]) -> str | None:
    """The NCCL INFO log of the launch a sweep ran in, if the campaign kept it: the harness writes
    rank 0's log to ``NCCL_DEBUG_FILE`` (fingerprint.nccl_env) and the campaign commits it trimmed as
    ``logs/<that name without .log>.trimmed.txt`` beside ``allreduce.jsonl``; campaigns without the
    env entry are found by the harness's naming, ``logs/nccl_<launch_id>_r0``."""
    logs = os.path.join(campaign_of(allreduce_path), "logs")
    env = ((record.get("fingerprint") or {}).get("nccl_env") or {}).get("NCCL_DEBUG_FILE")
    stems = []
    if isinstance(env, str) and env:
        stems.append(os.path.splitext(os.path.basename(env))[0])
    launch = record.get("launch_id")
    if isinstance(launch, str) and launch:
        stems.append(f"nccl_{launch}_r0")
    for stem in stems:
        for name in (f"{stem}.trimmed.txt", f"{stem}.log"):
            candidate = os.path.join(logs, name)
            if has_data(candidate):
                return candidate
    return None


_NCCL_INFO = re.compile(r"NCCL INFO (.*)$")
_TABLE_CELL = re.compile(r"^\s*(-?[0-9.]+)\s*/\s*(-?[0-9.]+)\s*$")


def read_nccl_tuning(path: str) -> NcclTuning | None:
    """NCCL's all-reduce tuning table from one rank's INFO log (tuning.cc ``ncclTopoTuneModel``
    prints it at each communicator's init), None if the log has none (TUNING not logged).

    A log may hold several communicators: the harness's forced Ring/Tree sweeps run on split
    communicators whose tables zero the other algorithm. The one kept is the first in which Tree
    and Ring are both enabled (NCCL's default choice); forced sweeps restrict the choice to their
    algorithm, which is the same table with the others' bandwidth zeroed. With the table: the
    communicator's ranks and nodes (``nRanks 4 nNodes 2``), its channels (``2 coll channels``)
    and the NIC speed NCCL assumed (``NET[1.2]``)."""
    lines = [m.group(1) for line in open_text(path).splitlines() if (m := _NCCL_INFO.search(line))]
    tables: list[tuple[dict[tuple[str, str], tuple[float, float]], int, int, int]] = []
    ranks = nodes = None
    algorithms: list[str] = []
    protocols: list[str] = []
    current: dict[tuple[str, str], tuple[float, float]] = {}
    for line in lines:
        if (m := re.search(r"nRanks (\d+) nNodes (\d+)", line)):
            ranks, nodes = int(m.group(1)), int(m.group(2))
        cells = [c.strip() for c in line.split("|")]
        head = cells[0] if cells else ""
        if head == "Algorithm":
            algorithms = [c.lower() for c in cells[1:] if c]
            if "tree" in algorithms and "ring" in algorithms:
                current = {}  # the first block of a new table
        elif head == "Protocol":
            protocols = [c.lower() for c in cells[1:] if c]
        elif head == "AllReduce" and algorithms[:1] and ("tree" in algorithms or "ring" in algorithms):
            values = [c for c in cells[1:] if c]
            if len(values) < 3 * len(algorithms) or len(protocols) < 3 * len(algorithms):
                raise ScenarioError(f"NCCL tuning table row has {len(values)} cells for {len(algorithms)} algorithms",
                                    file=path, field="AllReduce")
            for index, algorithm in enumerate(algorithms):
                if algorithm not in TUNED_ALGORITHMS:
                    continue
                for k in range(3):
                    cell, protocol = values[3 * index + k], protocols[3 * index + k]
                    m = _TABLE_CELL.match(cell)
                    if not m or protocol not in PROTOCOL_NAMES or float(m.group(1)) < 0 or float(m.group(2)) < 0:
                        raise ScenarioError(f"expected 'latency/bandwidth' numbers for {algorithm}/{protocol}, "
                                            f"got {cell!r}", file=path, field="AllReduce")
                    current[(algorithm, protocol)] = (float(m.group(1)), float(m.group(2)))
        elif (m := re.match(r"(\d+) coll channels", line)) and current:
            if ranks is None or nodes is None:
                raise ScenarioError("a tuning table without the communicator's 'nRanks N nNodes M' line",
                                    file=path, field="nRanks")
            if len(current) != len(TUNED_ALGORITHMS) * len(PROTOCOL_NAMES):
                raise ScenarioError("the tuning table lacks Tree or Ring all-reduce entries", file=path, field="AllReduce")
            tables.append((current, ranks, nodes, int(m.group(1))))
            current = {}
    if current:
        raise ScenarioError("a tuning table without its 'N coll channels' line (a truncated log?)", file=path,
                            field="coll channels")
    if not tables:
        return None

    def enabled(table: dict[tuple[str, str], tuple[float, float]], algorithm: str) -> bool:
        return any(table[(algorithm, p)][1] > 0 for p in PROTOCOL_NAMES)

    chosen = next((t for t in tables if enabled(t[0], "tree") and enabled(t[0], "ring")), tables[0])
    table, ranks, nodes, channels = chosen
    net = next((float(m.group(1)) for line in lines if (m := re.search(r"\bNET\[([0-9.]+)\]", line))), None)
    version = next((m.group(1) for line in lines if (m := re.match(r"NCCL version (\S+)", line))), "")
    return NcclTuning(
        ranks=ranks, nodes=nodes, channels=channels,
        latency_s={k: lat * 1e-6 for k, (lat, _) in table.items()},
        algbw_Bps={k: bw * 1e9 for k, (_, bw) in table.items()},
        net_bandwidth_Bps=None if net is None or nodes == 1 else net * 1e9,
        nccl_version=version, source=os.path.basename(path),
    )


# Every field a run record may carry is either mapped onto the simulated scenario
# (measured_scenarios.run_scenario) or listed as a record of the measurement itself; a field in
# neither is refused by every reader (calibrate, validate, --noise-from alike), because nobody can
# say whether it changed the step.
MAPPED_FIELDS = frozenset({
    "model", "batch_size", "precision", "bucket_cap_mb", "world_size", "transport", "nodes", "gpus_per_node",
    "node_gpus", "gradient_as_bucket_view", "comm_hook", "grad_accumulation_steps", "find_unused_parameters", "static_graph",
    "fingerprint",
})
# fields that record the measurement, its provenance or NCCL's own report, not a setting of the run;
# seq_len and zero_grad_set_to_none are settings the world-size-1 profile was measured with as well
RECORD_FIELDS = frozenset({
    "schema", "launch_id", "variant", "timing_hook", "ddp_options_default", "model_source", "seq_len",
    "zero_grad_set_to_none", "nodes_emulated", "nccl_hostid", "inter_node_transport", "nccl_nranks_seen",
    "nccl_nnodes_seen", "nccl_local_ranks_seen", "nccl_nnodes_verified", "nccl_transports_seen",
    "nccl_inter_node_transport_seen", "nccl_trees_lines", "nccl_version_printed", "nccl_socket_interface",
    "status", "error", "step_s_median", "step_s_p10", "step_s_p90", "step_times_s", "step_s_median_max_over_ranks",
    "step_wall_s_median", "step_wall_s_p10", "step_wall_s_p90", "step_wall_times_s", "step_time_source", "rounds",
    "n_rounds", "round_medians_s", "nosync_step_s_median", "nosync_step_s_p10", "nosync_step_s_p90",
    "nosync_step_times_s", "nosync_forward_s_median", "nosync_backward_s_median", "nosync_optimizer_s_median",
    "forward_s_median", "backward_s_median", "optimizer_s_median", "iterations", "nosync_iterations", "warmup",
    "backward_host_lead_s", "per_rank_s",
    "bucket_sizes_bytes", "bucket_param_indices", "grad_ready_order", "bucket_layout_source", "ddp_logging",
    "per_bucket", "per_bucket_samples", "n_params", "param_bytes", "is_reference", "run_wall_s", "host",
    "_source", "_line",
})
# durations a run reports of its steps: each a time that passed, so positive where present (null: not measured)
RUN_POSITIVE_SECONDS = ("step_s_p10", "step_s_p90", "step_s_median_max_over_ranks", "step_wall_s_median",
                        "step_wall_s_p10", "step_wall_s_p90", "nosync_step_s_median", "nosync_step_s_p10",
                        "nosync_step_s_p90")
RUN_POSITIVE_SERIES = ("step_times_s", "step_wall_times_s", "nosync_step_times_s", "round_medians_s")


def check_run_fields(run: dict[str, Any], path: str | None = None, where: str | None = None) -> None:
    """Refuse a run record with a field ddpsim neither maps nor knows to be a measurement."""
    for key in run:
        if key not in MAPPED_FIELDS and key not in RECORD_FIELDS:
            raise ScenarioError(
                "unknown field: ddpsim cannot tell whether it changed the measured step",
                file=path or run.get("_source"), field=f"{where or 'line ' + str(run.get('_line', '?'))}.{key}",
            )


def _positive_seconds(value: Any, path: str, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ScenarioError(f"expected a positive time in seconds, got {value!r}", file=path, field=field)


def check_run_record(record: dict[str, Any], path: str, where: str) -> None:
    """The one set of rules for a successful run record, whoever reads it: known fields only, the
    configuration's types, and every step time a positive number (a NaN, zero or negative median
    would be fitted as a step that took no time)."""
    check_run_fields(record, path, where)
    for key in ("model", "transport"):
        _field(record, key, str, path, where)
    if record["transport"] not in HARNESS_TRANSPORTS:
        known = ", ".join(HARNESS_TRANSPORTS)
        raise ScenarioError(f"unknown transport {record['transport']!r} (known: {known})", file=path, field=f"{where}.transport")
    world = _field(record, "world_size", int, path, where)
    if world < 1:
        raise ScenarioError(f"expected a positive number of GPUs, got {world}", file=path, field=f"{where}.world_size")
    cap = _field(record, "bucket_cap_mb", (int, float), path, where)
    if not cap > 0:
        raise ScenarioError(f"expected a positive bucket cap in MB, got {cap!r}", file=path, field=f"{where}.bucket_cap_mb")
    _positive_seconds(_field(record, "step_s_median", (int, float), path, where), path, f"{where}.step_s_median")
    for key in RUN_POSITIVE_SECONDS:
        if record.get(key) is not None:
            _positive_seconds(record[key], path, f"{where}.{key}")
    if record.get("step_s_p10") is not None and record.get("step_s_p90") is not None \
            and record["step_s_p10"] > record["step_s_p90"]:
        raise ScenarioError(f"p10 {record['step_s_p10']} s is above p90 {record['step_s_p90']} s", file=path,
                            field=f"{where}.step_s_p10")
    for key in RUN_POSITIVE_SERIES:
        series = record.get(key)
        if series is None:
            continue
        if not isinstance(series, list):
            raise ScenarioError(f"expected a list of seconds, got {series!r}", file=path, field=f"{where}.{key}")
        for index, value in enumerate(series):
            if value is not None:  # a round that did not finish is written as null
                _positive_seconds(value, path, f"{where}.{key}[{index}]")
    record_nodes(record, path, where)


def read_ddp_runs(path: str, with_failed: bool = False) -> list[dict[str, Any]]:
    """The harness's ``ddp_runs.jsonl``: successful runs, and with ``with_failed`` the others too
    (status other than ok), so that a report can say what it left out."""
    runs = []
    for i, record in enumerate(read_jsonl(path)):
        where = f"line {i + 1}"
        # every harness record says how its run ended; one without (an empty object) is not a run
        status = _field(record, "status", str, path, where)
        if status != "ok":
            if with_failed:
                runs.append({**record, "_source": os.path.abspath(path), "_line": i + 1})
            continue
        check_run_record(record, path, where)
        runs.append({**record, "_source": os.path.abspath(path), "_line": i + 1})
    return runs


def read_compute_slowdowns(path: str) -> list[tuple[str, float]]:
    """The harness micro-benchmark's compute kernels (a GEMM, a convolution) timed alone and while
    all-reduces run beside them: (link class, kernel time with / alone) per record."""
    out = []
    for i, record in enumerate(read_jsonl(path)):
        if record.get("status") != "ok" or record.get("bench") != "allreduce_overlap":
            continue
        ratio = _field(record, "kernel_slowdown_ratio", (int, float), path, f"line {i + 1}")
        if not math.isfinite(ratio) or ratio <= 0:
            raise ScenarioError(f"expected a positive ratio, got {ratio}", file=path, field=f"line {i + 1}.kernel_slowdown_ratio")
        out.append((str(_field(record, "transport", str, path, f"line {i + 1}")), float(ratio)))
    return out


def find_data_files(data_dir: str) -> dict[str, list[str]]:
    """Campaign folders under ``data_dir`` (any depth): their allreduce, ddp_runs and profiles paths."""
    if not os.path.isdir(data_dir):
        raise ScenarioError("measurement folder not found", file=data_dir)
    found: dict[str, list[str]] = {"allreduce": [], "ddp_runs": [], "profiles": [], "microbench": [], "netprobe": []}
    for root, _dirs, files in sorted(os.walk(data_dir)):
        for name in sorted({data_name(name) for name in files}):
            path = os.path.join(root, name)
            if name == "allreduce.jsonl":
                found["allreduce"].append(path)
            elif name == "microbench.jsonl":
                found["microbench"].append(path)
            elif name == "netprobe.jsonl":
                found["netprobe"].append(path)
            elif name == "ddp_runs.jsonl":
                found["ddp_runs"].append(path)
            elif name.endswith(".json") and os.path.basename(root) == "profiles":
                found["profiles"].append(path)
    return found


@dataclass(frozen=True)
class Profiles:
    """Measured profiles by (campaign folder, model). A run is predicted from its own campaign's
    profile, measured on its machine: the same model profiled on another host or GPU (an H100 beside
    an H200, a slower host CPU for a launch-bound model) would carry that machine's compute."""

    paths: dict[tuple[str, str], str] = field(default_factory=dict)

    @classmethod
    def from_paths(cls, paths: Sequence[str]) -> Profiles:
        """The harness's ``<campaign>/profiles/<model>.json`` files, keyed by campaign and model."""
        from ddpsim.jsonfile import read_json_object

        found = {}
        for path in paths:
            model = read_json_object(path, "profile").get("model")
            if isinstance(model, str):
                found[(campaign_of(os.path.dirname(os.path.abspath(path))), model)] = path
        return cls(found)

    def for_run(self, run: dict[str, Any]) -> str | None:
        """The profile of the run's model from the run's own campaign (None if it has none)."""
        return self.paths.get((campaign_of(str(run.get("_source", ""))), str(run["model"])))
