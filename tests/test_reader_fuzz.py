"""A fuzzer over the files ddpsim reads (issue 45): every JSONL reader of the harness's records, the
measurement folder as calibrate and validate load it, fsdp_runs.jsonl up to the scenario each run
describes, profiles, calibrations and nccl-tests text. Each starts from a committed, valid file and gets a
mistake: a field deleted, a value replaced by a wrong one (text for a number, a negative, a huge number,
null, a list, an object, a boolean), a line cut short, or bytes that are not text. Every input either loads
or raises ScenarioError whose message is one line; never another exception (a traceback at the CLI).

Derandomized and small (max_examples per reader), so it is deterministic and runs in seconds.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddpsim.errors import ScenarioError
from ddpsim.jsonfile import open_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "validation", "data")
PROBE = os.path.join(DATA, "h200x2-probe-2026-11-28")
FSDP = os.path.join(DATA, "h200x2-fsdp-2026-11-28", "fsdp_runs.jsonl")
CALIBRATION = os.path.join(ROOT, "ddpsim", "calibration", "shipped", "x4-h200.json")
NCCL_TEXT = os.path.join(PROBE, "allreduce_shm_w2.txt")

WRONG_VALUES = (None, "", "two", "-1", -1, 0, -0.5, 1e308, 10**20, True, False, [], [1, "x"], {}, {"a": None}, 1.5)
WRONG = st.sampled_from(WRONG_VALUES)
FUZZ = settings(max_examples=int(os.environ.get("DDPSIM_FUZZ_EXAMPLES", "20")), deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path inside ``value`` (dicts and lists), the value's own included."""
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value[:3]):  # the first items stand for the rest
            out += _paths(item, prefix + (index,))
    return out


def _mutated(record: Any, choice: int, wrong: Any, delete: bool) -> Any:
    """``record`` with one value replaced by ``wrong`` (or deleted): a top-level field two times in three,
    where the readers' checks are, else one anywhere inside."""
    record = json.loads(json.dumps(record))
    paths = [p for p in _paths(record) if p]
    if not paths:
        return wrong
    top = [p for p in paths if len(p) == 1]
    pool = top if choice % 3 and top else paths
    path = pool[(choice // 3) % len(pool)]
    parent = record
    for key in path[:-1]:
        parent = parent[key]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = wrong
    return record


# the choice is drawn uniformly (not shrunk towards 0): every field gets its turn
MUTATION = st.tuples(st.randoms(use_true_random=False).map(lambda r: r.randrange(1 << 30)), WRONG, st.booleans())
DAMAGE = st.sampled_from(["none", "cut", "bytes", "not-an-object", "blank"])


def _text(records: list[dict], mutation: tuple, damage: str) -> bytes:
    choice, wrong, delete = mutation
    lines = [json.dumps(r) for r in records]
    target = choice % len(lines)
    lines[target] = json.dumps(_mutated(records[target], choice // len(lines), wrong, delete))
    if damage == "cut":
        lines[target] = lines[target][: max(1, len(lines[target]) // 2)]
    elif damage == "not-an-object":
        lines[target] = json.dumps([1, 2])
    elif damage == "blank":
        lines[target] = ""
    data = ("\n".join(lines) + "\n").encode()
    return b"\xff\xfe\x81" + data if damage == "bytes" else data


def _one_line(error: ScenarioError) -> None:
    assert "\n" not in str(error), str(error)


def _records(path: str, limit: int = 4) -> list[dict]:
    with open_data(path) as handle:
        return [json.loads(line) for line in handle.read().splitlines()[:limit] if line.strip()]


def _loads_or_refuses(call, *args) -> None:
    try:
        call(*args)
    except ScenarioError as error:
        _one_line(error)


@given(mutation=MUTATION, damage=DAMAGE)
@FUZZ
def test_fuzzed_harness_records_load_or_are_refused_in_one_line(tmp_path_factory, mutation, damage):
    from ddpsim.fitting.calibrate import load_measurements

    name = ("allreduce.jsonl", "ddp_runs.jsonl", "netprobe.jsonl", "launches.jsonl")[mutation[0] % 4]
    folder = tmp_path_factory.mktemp("probe") / "probe"
    shutil.copytree(PROBE, folder, ignore=shutil.ignore_patterns("logs", "*.txt", "*.md"))
    (folder / name).write_bytes(_text(_records(os.path.join(PROBE, name)), mutation, damage))
    _loads_or_refuses(load_measurements, [str(folder)])


@given(mutation=MUTATION, damage=DAMAGE)
@FUZZ
def test_fuzzed_fsdp_runs_load_and_become_scenarios_or_are_refused(tmp_path_factory, mutation, damage):
    from ddpsim.fitting.sharded_validate import fsdp_run_scenario, read_fsdp_runs

    path = tmp_path_factory.mktemp("fsdp") / "fsdp_runs.jsonl"
    path.write_bytes(_text(_records(FSDP, 2), mutation, damage))

    def read_and_describe() -> None:
        for run in read_fsdp_runs(str(path)):
            fsdp_run_scenario(run, use_profile=False)

    _loads_or_refuses(read_and_describe)


@given(mutation=MUTATION)
@FUZZ
def test_fuzzed_profiles_load_or_are_refused(tmp_path_factory, mutation):
    from ddpsim.workload.profile import load_profile

    with open(os.path.join(PROBE, "profiles", "resnet50.json"), encoding="utf-8") as handle:
        data = json.load(handle)
    choice, wrong, delete = mutation
    path = tmp_path_factory.mktemp("profile") / "p.json"
    path.write_text(json.dumps(_mutated(data, choice, wrong, delete)))
    _loads_or_refuses(load_profile, str(path))


@given(mutation=MUTATION)
@FUZZ
def test_fuzzed_calibrations_load_or_are_refused(tmp_path_factory, mutation):
    from ddpsim.calibration.file import read_calibration

    with open(CALIBRATION, encoding="utf-8") as handle:
        data = json.load(handle)
    choice, wrong, delete = mutation
    path = tmp_path_factory.mktemp("cal") / "c.json"
    path.write_text(json.dumps(_mutated(data, choice, wrong, delete)))

    def read_and_use() -> None:
        calibration = read_calibration(str(path))
        for link_class in calibration.link_class_names:
            calibration.link_fit(link_class, 2, 1)
            calibration.overhead_values(link_class, 2)

    _loads_or_refuses(read_and_use)


@given(line=st.integers(0, 60), text=st.sampled_from(["", "x", "-1", "nan", "1e999", "  4096 1024 float sum -1",
                                                       "# Rank  9 Group  0 Pid 0 on other device 0"]))
@FUZZ
def test_fuzzed_nccl_tests_text_loads_or_is_refused(tmp_path_factory, line, text):
    from ddpsim.fitting.nccl_tests import read_nccl_tests_sweep

    with open(NCCL_TEXT, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    lines[line % len(lines)] = text
    path = tmp_path_factory.mktemp("nccl") / "t.txt"
    path.write_text("\n".join(lines) + "\n")
    _loads_or_refuses(read_nccl_tests_sweep, str(path), "shm", 2)


def test_every_top_level_fsdp_field_with_every_mistake(tmp_path):
    """Exhaustive where the fuzzer samples: each field of a run record, each wrong value or deleted."""
    from ddpsim.fitting.sharded_validate import fsdp_run_scenario, read_fsdp_runs

    (record,) = _records(FSDP, 1)
    path = tmp_path / "fsdp_runs.jsonl"
    for key in record:
        for wrong in ("two", None, -1, True, [], "<deleted>"):  # a kind of each mistake: text, null, sign, type
            changed = {k: v for k, v in record.items() if k != key or wrong != "<deleted>"}
            if wrong != "<deleted>":
                changed[key] = wrong
            path.write_text(json.dumps(changed) + "\n")
            try:
                for run in read_fsdp_runs(str(path)):
                    fsdp_run_scenario(run, use_profile=False)
            except ScenarioError as error:
                _one_line(error)


GPU_FIELDS = {"name": "FuzzGPU", "peak_tflops": {"bf16": 989, "fp32": 67}, "memory_bandwidth": "3TB/s",
              "memory": "80GB", "nvlink_bandwidth": "450GB/s", "sm_count": 132, "kernel_launch": "4us"}


@given(mutation=MUTATION, link=st.sampled_from([None, ("g0", "g1"), ("g1", "sw9"), ("sw", "sw")]))
@FUZZ
def test_fuzzed_custom_gpus_and_topologies_load_or_are_refused(tmp_path_factory, mutation, link):
    """The scenario fields the schema fuzzer leaves out (tests/test_schema_fuzz.py): a GPU of one's own and a
    custom topology."""
    from ddpsim.loader import scenario_from_dict
    from ddpsim.topology.build import build_topology

    choice, wrong, delete = mutation
    gpu = _mutated(dict(GPU_FIELDS, name=f"FuzzGPU{choice % 997}"), choice, wrong, delete)
    links = [{"a": "g0", "b": "sw", "bandwidth": "450GB/s", "latency": "1us"},
             {"a": "g1", "b": "sw", "bandwidth": "450GB/s", "latency": "1us"}]
    if link is not None:
        links.append({"a": link[0], "b": link[1], "bandwidth": "100GB/s", "latency": "2us"})
    data = {"workload": {"model": "mlp", "batch_size": 4},
            "cluster": {"gpu": gpu, "topology": {"gpus": ["g0", "g1"], "gpus_per_node": 2, "links": links}}}

    def load_and_build() -> None:
        build_topology(scenario_from_dict(data, file="fuzz.yaml").cluster)

    _loads_or_refuses(load_and_build)
