"""Hypothesis-generated scenarios, valid and not: each either runs with finite numbers whose parts add
up to the step time, or is rejected with exit code 2 and one line naming the file and the field."""

from __future__ import annotations

import json
import math

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddpsim.cli.main import main

# values a user might type: good ones, and the usual mistakes (NaN, infinity, zero, negative, typos)
NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 0.5, 1, 1.5, 2, 1e9, "fast", "", None, True]),
)
FACTORS = st.one_of(st.floats(min_value=1.0, max_value=4.0), NUMBERS)
TIMES = st.one_of(st.sampled_from(["0us", "3us", "40us", "1ms", "-1us", "3 parsecs", ".nan", 1e-6, float("nan")]),
                  st.floats(min_value=0, max_value=1e-3))
BANDWIDTHS = st.sampled_from(["450GB/s", "100Gbps", "10GB/s", "0GB/s", "1e400GB/s", "fast", 5e9, float("inf")])
INTS = st.one_of(st.integers(min_value=-2, max_value=4), st.sampled_from([10**9, 2.5, "3", None]))


@st.composite
def scenarios(draw) -> dict:
    def maybe(key: str, strategy) -> dict:
        return {key: draw(strategy)} if draw(st.booleans()) else {}

    return {
        "workload": {"model": draw(st.sampled_from(["mlp", "mlp", "mlp-heavy", "nosuch"])),
                     "batch_size": draw(st.one_of(st.integers(1, 16), INTS)),
                     **maybe("precision", st.sampled_from(["fp32", "bf16-amp", "fp8"]))},
        "cluster": {"gpu": "H100-SXM", "nodes": draw(st.one_of(st.integers(1, 3), INTS)),
                    "gpus_per_node": draw(st.one_of(st.integers(1, 4), INTS)),
                    "intra_node": {"type": draw(st.sampled_from(["nvswitch", "pcie", "shm", "socket"])),
                                   **maybe("bandwidth", BANDWIDTHS), **maybe("latency", TIMES)},
                    "inter_node": {**maybe("nic_bandwidth", BANDWIDTHS), **maybe("latency", TIMES)}},
        "ddp": {**maybe("bucket_cap_mb", st.one_of(st.sampled_from([1, 5, 25, "default", "nan", "inf", 0, "25MB"]),
                                                   NUMBERS)),
                **maybe("grad_accumulation_steps", INTS),
                **maybe("gradient_as_bucket_view", st.booleans()),
                **maybe("comm_hook", st.sampled_from(["none", "fp16", "bf16", "powersgd"]))},
        "overheads": {**maybe("bucket_launch", TIMES), **maybe("compute_slowdown", FACTORS),
                      **maybe("comm_slowdown", FACTORS), **maybe("allreduce_stretch", FACTORS),
                      **maybe("bucket_cpu", TIMES), **maybe("copy_bandwidth", BANDWIDTHS)},
        "simulation": {**maybe("mode", st.sampled_from(["auto", "fast", "detailed"]))},
    }


def _no_constants(name: str) -> float:
    raise AssertionError(f"{name} in the JSON result")  # NaN / Infinity are not JSON


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=scenarios())
def test_generated_scenario_runs_consistently_or_is_rejected(tmp_path_factory, capsys, data):
    path = tmp_path_factory.mktemp("gen") / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    code = main(["run", str(path), "--json"])
    captured = capsys.readouterr()
    if code == 2:
        assert captured.err.startswith(f"ddpsim: error: {path}: ") and captured.err.count("\n") == 1
        assert "Traceback" not in captured.err
        return
    assert code == 0, captured.err
    result = json.loads(captured.out, parse_constant=_no_constants)
    numbers = [v for k, v in result.items() if k.endswith("_s") and isinstance(v, float)]
    assert all(math.isfinite(v) and v >= 0 for v in numbers)
    parts = (result["accumulation_s"] + result["forward_s"] + result["backward_s"] + result["comm_wait_s"]
             + result["copy_out_s"] + result["step_optimizer_s"])
    # one iteration, no jitter or straggler: rank 0's parts are the whole step (within 0.1%)
    assert math.isclose(parts, result["step_time_s"], rel_tol=1e-3)
