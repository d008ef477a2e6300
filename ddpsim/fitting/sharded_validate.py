"""Predicted against measured FSDP2 / DDP steps: ``fsdp_runs.jsonl`` from ``python -m ddpsim.measure.fsdp``.

Each successful run becomes the scenario that describes it (model, batch, precision, sequence, GPU, shape,
transport, strategy and mixed-precision policy), is simulated, and is compared on its step time (the median
of the run's steps) and its peak memory (``torch.cuda.max_memory_allocated``, the largest over the ranks).
Nothing here is fitted: a calibration given is used as it is, and the runs compared must be runs it never saw.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from typing import Any

from ddpsim.calibration.file import Calibration
from ddpsim.errors import ScenarioError
from ddpsim.fitting.device import DRY_RUN
from ddpsim.fitting.measured_scenarios import catalog_gpu, nvls_of_run
from ddpsim.fitting.measurements import read_jsonl
from ddpsim.fitting.validate import measured_peak_bytes
from ddpsim.jsonfile import has_data, read_json_object
from ddpsim.loader import scenario_from_dict
from ddpsim.scenario.link_kinds import intra_type_of_class
from ddpsim.scenario.schema import Scenario
from ddpsim.simulation import simulate
from ddpsim.workload.profile_memory import optimizer_name
from ddpsim.workload.zoo import ZOO_NAMES

SCHEMA = "ddpsim.fsdp_run/1"
ESTIMATED_COMPUTE = ("estimated from the model's FLOPs: no world-size-1 profile of this model, batch, sequence and "
                     "precision beside the records (ddpsim measure --plan sharded writes one)")
FILE_NAME = "fsdp_runs.jsonl"
# the harness's own built-ins, imported by ddpsim from the harness module (the same nn.Module, meta device)
HARNESS_FACTORIES = {"llama-1b": "ddpsim.measure.llama:llama_1b", "llama-tiny": "ddpsim.measure.llama:llama_tiny",
                     "gpt-tiny": "ddpsim.measure.models:gpt_tiny"}
_PRECISION_WORDS = {"bf16": "bf16-amp", "bf16-amp": "bf16-amp", "fp32": "fp32", "fp16-amp": "fp16-amp"}


@dataclass(frozen=True)
class FsdpComparison:
    label: str
    strategy: str
    measured_step_s: float
    predicted_step_s: float
    measured_peak_bytes: float | None
    predicted_peak_bytes: float
    compute_from: str  # the profile that timed the step, or how it was estimated

    @property
    def step_error(self) -> float:
        return self.predicted_step_s / self.measured_step_s - 1

    @property
    def peak_error(self) -> float | None:
        if not self.measured_peak_bytes:
            return None
        return self.predicted_peak_bytes / self.measured_peak_bytes - 1


def read_fsdp_runs(path: str) -> list[dict[str, Any]]:
    """The successful runs of a ``fsdp_runs.jsonl`` (or of the one in a folder), each tagged with its line."""
    file = os.path.join(path, FILE_NAME) if os.path.isdir(path) else path
    if not has_data(file):
        raise ScenarioError("file not found (expected the harness's fsdp_runs.jsonl)", file=file)
    runs = []
    for line, record in enumerate(read_jsonl(file), start=1):
        if record.get("schema") != SCHEMA:
            raise ScenarioError(f"expected schema {SCHEMA!r}, got {record.get('schema')!r}", file=file,
                                field=f"line {line}.schema")
        for key in ("model", "strategy", "world_size", "transport", "batch_size"):
            if key not in record:
                raise ScenarioError("missing field", file=file, field=f"line {line}.{key}")
        if record.get("status") == "ok":
            _check_run(record, file, f"line {line}")
            runs.append(dict(record, _source=file, _line=line))
    if not runs:
        raise ScenarioError("no run that ended ok (status \"ok\"): nothing to compare", file=file)
    return runs


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_run(record: dict[str, Any], file: str, where: str) -> None:
    """A successful run's fields as the harness writes them: a wrong type or a value no measurement can
    have is named here, before it becomes a scenario or an error percentage."""
    def bad(key: str, message: str) -> ScenarioError:
        return ScenarioError(f"{message}, got {record.get(key)!r}", file=file, field=f"{where}.{key}")

    for key in ("model", "strategy", "transport"):
        if not isinstance(record[key], str) or not record[key]:
            raise bad(key, "expected a non-empty string")
    for key in ("world_size", "batch_size"):
        if not isinstance(record[key], int) or isinstance(record[key], bool) or record[key] < 1:
            raise bad(key, "expected a positive integer")
    nodes = record.get("nodes")
    if nodes is not None and (not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1
                              or record["world_size"] % nodes):
        raise bad("nodes", f"expected a positive integer dividing world_size {record['world_size']}")
    seq_len = record.get("seq_len")
    if seq_len is not None and (not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 1):
        raise bad("seq_len", "expected a positive integer or null")
    if "step_s_median" not in record:
        raise ScenarioError("missing field", file=file, field=f"{where}.step_s_median")
    if not _is_number(record["step_s_median"]) or record["step_s_median"] <= 0:
        raise bad("step_s_median", "expected a positive number of seconds")
    if not isinstance(record.get("fingerprint", {}), dict):
        raise bad("fingerprint", "expected an object")
    if str((record.get("fingerprint") or {}).get("gpu_name", "")).strip().lower() == "cpu":
        raise ScenarioError(f"measured on {DRY_RUN}", file=file, field=f"{where}.fingerprint.gpu_name")
    # peaks: a measured allocation is a positive byte count; null (not measured) is left out of the comparison
    peaks: list[tuple[str, Any]] = [("peak_memory_bytes", record.get("peak_memory_bytes"))]
    per_rank = record.get("peak_memory_bytes_per_rank")
    if per_rank is not None and not isinstance(per_rank, list):
        raise bad("peak_memory_bytes_per_rank", "expected a list of byte counts")
    peaks += [(f"peak_memory_bytes_per_rank[{i}]", v) for i, v in enumerate(per_rank or [])]
    memory = record.get("memory")
    if memory is not None and not isinstance(memory, dict):
        raise bad("memory", "expected an object")
    if isinstance(memory, dict):
        peaks.append(("memory.peak_allocated_bytes", memory.get("peak_allocated_bytes")))
        ranks = memory.get("per_rank") or []
        if not isinstance(ranks, list) or not all(isinstance(r, dict) for r in ranks):
            raise ScenarioError("expected a list of objects", file=file, field=f"{where}.memory.per_rank")
        peaks += [(f"memory.per_rank[{i}].peak_allocated_bytes", r.get("peak_allocated_bytes"))
                  for i, r in enumerate(ranks)]
    for key, value in peaks:
        if value is not None and (not _is_number(value) or value <= 0):
            raise ScenarioError(f"expected a positive number of bytes or null, got {value!r}", file=file,
                                field=f"{where}.{key}")


def _model(run: dict[str, Any]) -> str:
    name = str(run["model"]).split("@")[0]
    if name in ZOO_NAMES:
        return name
    if name in HARNESS_FACTORIES:
        return f"torch:{HARNESS_FACTORIES[name]}"
    if ":" in name and not name.startswith("hf:"):
        return f"torch:{name}"
    raise ScenarioError(f"model {name!r} is neither in ddpsim's zoo nor a module:factory ddpsim can import",
                        file=run.get("_source"), field=f"line {run.get('_line', '?')}.model")


def measured_profile(run: dict[str, Any]) -> str | None:
    """The world-size-1 profile of the run's model, batch, sequence and precision beside its records (``profiles/``, written by
    ``ddpsim measure --plan sharded``), or None: compute is then estimated from the model's FLOPs."""
    folder = os.path.join(os.path.dirname(os.path.abspath(str(run.get("_source", FILE_NAME)))), "profiles")
    return _profiles_in(folder).get((run["model"], run["batch_size"], run.get("seq_len"), run.get("precision")))


@functools.lru_cache(maxsize=64)
def _profiles_in(folder: str) -> dict[tuple[Any, ...], str]:
    """(model, batch size, sequence length, precision) -> path of every readable profile in ``folder`` that
    ended ok: a profile of another sequence or precision times other compute."""
    found: dict[tuple[Any, ...], str] = {}
    if not os.path.isdir(folder):
        return found
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json"):
            continue
        path = os.path.join(folder, name)
        try:
            record = read_json_object(path, "profile")
        except ScenarioError:
            continue
        if record.get("status", "ok") == "ok":
            key = (record.get("model"), record.get("batch_size"), record.get("seq_len"), record.get("precision"))
            found.setdefault(key, path)
    return found


def fsdp_run_scenario(run: dict[str, Any], calibration: Calibration | None = None,
                      use_profile: bool = True) -> Scenario:
    """The scenario a harness FSDP run describes (emulated nodes count as nodes, as for DDP runs)."""
    fingerprint = run.get("fingerprint") or {}
    world = int(run["world_size"])
    nodes = int(run.get("nodes") or 1)
    where = f"line {run.get('_line', '?')}"
    try:
        intra = intra_type_of_class(str(run["transport"]))
    except KeyError:
        raise ScenarioError(f"unknown transport {run['transport']!r}", file=run.get("_source"),
                            field=f"{where}.transport") from None
    if not fingerprint.get("gpu_name"):
        # the GPU sets every estimate and the memory check: a record that does not name it is not guessed at
        raise ScenarioError("the record does not name its GPU", file=run.get("_source"),
                            field=f"{where}.fingerprint.gpu_name")
    cluster: dict[str, Any] = {"gpu": catalog_gpu(str(fingerprint["gpu_name"])), "nodes": nodes,
                               "gpus_per_node": world // nodes,
                               "intra_node": {"type": intra, "nvls": nvls_of_run(run)}}
    if nodes > 1:
        cluster["inter_node"] = {"type": "fat-tree", "nics_per_node": 1}
    strategy = str(run["strategy"])
    parallel: dict[str, Any] = {"strategy": strategy}
    if strategy != "ddp":
        parallel["param_dtype"] = run.get("param_dtype") or "fp32"
        parallel["reduce_dtype"] = run.get("reduce_dtype") or parallel["param_dtype"]
        parallel["shard_group"] = run.get("shard_group") or "world"
    profile = measured_profile(run) if use_profile else None
    workload: dict[str, Any] = {"model": f"profile:{profile}" if profile else _model(run), "batch_size": int(run["batch_size"]),
                                "precision": _PRECISION_WORDS.get(str(run.get("precision", "fp32")), "fp32")}
    if run.get("optimizer"):  # the harness's sgd trains with momentum 0.9
        workload["optimizer"] = optimizer_name(str(run["optimizer"]))
    if run.get("seq_len"):
        workload["seq_len"] = int(run["seq_len"])
    data = {"workload": workload, "cluster": cluster, "parallel": parallel, "simulation": {"mode": "fast"}}
    scenario = scenario_from_dict(data, file=f"<{run.get('_source', FILE_NAME)} {where}>")
    return replace(scenario, calibration=calibration)


def run_label(run: dict[str, Any]) -> str:
    dtype = f"/{run['param_dtype']}" if run.get("param_dtype") else ""
    return f"{run['model']}/{run['transport']}/w{run['world_size']}/{run['strategy']}{dtype}"


def compare_fsdp_runs(runs: list[dict[str, Any]], calibration: Calibration | None = None) -> list[FsdpComparison]:
    rows = []
    _profiles_in.cache_clear()  # each folder read once per comparison, and afresh for the next
    for run in runs:
        scenario = fsdp_run_scenario(run, calibration)
        result = simulate(scenario)
        # memory from the model's own structure where the profile has no memory record (it times the step
        # but then counts no activations); from the profile's measured memory where it has one
        profiled = scenario.workload.model.startswith("profile:")
        unknown = "activations NOT KNOWN" in result.value_sources.get("memory", "")
        structural = simulate(fsdp_run_scenario(run, calibration, use_profile=False)) if profiled and unknown \
            else result
        peak = measured_peak_bytes(run)
        if peak is None:  # the harness's first FSDP records: their own fields
            per_rank = run.get("peak_memory_bytes_per_rank") or []
            peak = max(per_rank) if per_rank else run.get("peak_memory_bytes")
        rows.append(FsdpComparison(run_label(run), str(run["strategy"]), float(run["step_s_median"]),
                                   result.step_time_s, float(peak) if peak else None,
                                   structural.memory_bytes["total"],
                                   scenario.workload.model if profiled else ESTIMATED_COMPUTE))
    return rows
