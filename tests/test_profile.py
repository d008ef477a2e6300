"""Measured profiles (ddpsim.profile/1): parsing, one-line errors naming the field, resolve()."""

from __future__ import annotations

import copy
import json
import math
import re

import pytest

from ddpsim.errors import ScenarioError
from ddpsim.hardware.catalog import get_gpu
from ddpsim.hardware.compute import step_compute
from ddpsim.scenario.schema import WorkloadSpec
from ddpsim.workload.profile import load_profile
from ddpsim.workload.resolve import load_workload

PROFILE = {
    "schema": "ddpsim.profile/1", "model": "tiny-mlp", "batch_size": 4, "precision": "fp32", "seq_len": None,
    "fingerprint": {"gpu": "NVIDIA H200", "torch": "2.11.0"},
    "forward_s": 0.001, "backward_s": 0.003, "optimizer_s": 0.0005, "step_s": 0.0045, "iterations": 20,
    "params": [
        {"name": "0.weight", "numel": 512, "dtype": "float32", "grad_ready_s": 0.0025, "ready_order": 5},
        {"name": "0.bias", "numel": 32, "dtype": "float32", "grad_ready_s": 0.0024, "ready_order": 4},
        {"name": "2.weight", "numel": 1024, "dtype": "float32", "grad_ready_s": 0.0015, "ready_order": 3},
        {"name": "2.bias", "numel": 32, "dtype": "float32", "grad_ready_s": 0.0015, "ready_order": 2},
        {"name": "4.weight", "numel": 256, "dtype": "float32", "grad_ready_s": 0.0004, "ready_order": 1},
        {"name": "4.bias", "numel": 8, "dtype": "float32", "grad_ready_s": 0.0002, "ready_order": 0},
    ],
    "buffers_bytes": 0,
}


def write(tmp_path, data, name="p.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(path)


def test_profile_becomes_a_measured_workload(tmp_path):
    w = load_profile(write(tmp_path, PROFILE))
    assert [(p.name, p.numel) for p in w.params] == [(p["name"], p["numel"]) for p in PROFILE["params"]]
    assert [la.name for la in w.layers] == ["0", "2", "4"]
    assert w.batch_size == 4 and w.precision == "fp32" and w.seq_len is None
    m = w.measured
    assert m is not None and m.forward_s == 0.001 and m.backward_s == 0.003 and m.optimizer_s == 0.0005
    assert m.ready_order == ("4.bias", "4.weight", "2.bias", "2.weight", "0.bias", "0.weight")
    sc = step_compute(w, get_gpu("H200"))
    assert [r for _, r in sc.backward_segments] == [(5,), (4,), (3, 2), (1,), (0,), ()]
    assert [d for d, _ in sc.backward_segments] == pytest.approx([0.0002, 0.0002, 0.0011, 0.0009, 0.0001, 0.0005])


@pytest.mark.parametrize("mutate, field, message", [
    (lambda d: d.pop("forward_s"), "forward_s", "missing"),
    (lambda d: d.__setitem__("schema", "other/2"), "schema", "ddpsim.profile/1"),
    (lambda d: d.__setitem__("batch_size", "4"), "batch_size", "integer"),
    (lambda d: d.__setitem__("precision", "fp8"), "precision", "fp32"),
    (lambda d: d["params"][3].__setitem__("numel", "32"), "params[3].numel", "integer"),
    (lambda d: d["params"][3].__setitem__("numel", True), "params[3].numel", "integer"),
    (lambda d: d["params"][1].pop("name"), "params[1].name", "missing"),
    (lambda d: d["params"][2].__setitem__("dtype", "int8"), "params[2].dtype", "float32"),
    (lambda d: d["params"][0].__setitem__("grad_ready_s", -1), "params[0].grad_ready_s", ">= 0"),
    # a gradient ready 10 s after a backward of milliseconds would run a 10 s step without a word
    (lambda d: d["params"][0].__setitem__("grad_ready_s", 10.0), "params[0].grad_ready_s", "after the backward ends"),
    (lambda d: d["params"][0].__setitem__("ready_order", 1), "params[4].ready_order", "also the ready_order of params[0]"),
    (lambda d: d.__setitem__("params", []), "params", "at least one"),
    (lambda d: d["params"].__setitem__(2, 7), "params[2]", "object"),
])
def test_bad_fields_are_named(tmp_path, mutate, field, message):
    data = copy.deepcopy(PROFILE)
    mutate(data)
    path = write(tmp_path, data)
    with pytest.raises(ScenarioError, match=re.escape(message)) as err:
        load_profile(path)
    assert err.value.file == path and err.value.field == field
    assert "\n" not in str(err.value)


def test_missing_file_and_bad_json(tmp_path):
    with pytest.raises(ScenarioError, match="not found") as err:
        load_profile(str(tmp_path / "nope.json"))
    assert err.value.file.endswith("nope.json")
    with pytest.raises(ScenarioError, match="not valid JSON"):
        load_profile(write(tmp_path, "{oops"))


def test_unfired_parameters_are_allowed(tmp_path):
    data = copy.deepcopy(PROFILE)
    data["params"][0].update(grad_ready_s=None, ready_order=None)
    w = load_profile(write(tmp_path, data))
    sc = step_compute(w, get_gpu("H100"))
    assert sc.backward_segments[-1][1] == (0,)


def test_resolve_dispatches_relative_to_the_scenario_folder(tmp_path):
    write(tmp_path, PROFILE, "measured.json")
    w = load_workload(WorkloadSpec(model="profile:measured.json", batch_size=4), str(tmp_path))
    assert w.measured is not None and w.name == "tiny-mlp"
    with pytest.raises(ScenarioError) as err:
        load_workload(WorkloadSpec(model="profile:measured.json", batch_size=8), str(tmp_path))
    assert err.value.field == "workload.batch_size"
    with pytest.raises(ScenarioError, match="not found") as err:
        load_workload(WorkloadSpec(model="profile:other.json", batch_size=4), str(tmp_path))
    assert err.value.field == "workload.model"


def test_resolve_zoo_and_unknown_names():
    w = load_workload(WorkloadSpec(model="gpt2-124m", batch_size=2, precision="bf16-amp", seq_len=128), ".")
    assert w.seq_len == 128 and w.n_params == 124_439_808
    with pytest.raises(ScenarioError, match="did you mean 'bert-large'") as err:
        load_workload(WorkloadSpec(model="bert-larg", batch_size=2), ".")
    assert err.value.field == "workload.model"


def test_world1_ddp_rows_give_the_reducers_measured_cost_per_variant(tmp_path):
    data = copy.deepcopy(PROFILE)
    data["ddp_world1"] = [
        {"bucket_cap_mb": 25, "variant": "none", "step_s": 0.0065},
        {"bucket_cap_mb": 5, "variant": "none", "step_s": 0.0075},
        {"bucket_cap_mb": 25, "variant": "gbv", "step_s": 0.0040},  # faster than the plain step: noise, not a gain
    ]
    workload = load_profile(write(tmp_path, data))
    # the median over caps of (DDP step - the profile's step_s = 4.5 ms), never below 0
    assert workload.ddp_world1_extra_s == pytest.approx({"none": 0.0025, "gbv": 0.0})
    assert load_profile(write(tmp_path, PROFILE, "plain.json")).ddp_world1_extra_s == {}


def test_a_bad_world1_row_is_named(tmp_path):
    data = copy.deepcopy(PROFILE)
    data["ddp_world1"] = [{"bucket_cap_mb": 25, "variant": "powersgd", "step_s": 0.005}]
    with pytest.raises(ScenarioError) as err:
        load_profile(write(tmp_path, data))
    assert err.value.field == "ddp_world1[0].variant"


def test_world1_ddp_cost_lengthens_a_gradient_as_bucket_view_step_by_at_most_itself(tmp_path):
    # with gradient_as_bucket_view ddpsim models no copies, so the measured world-size-1 cost lands on
    # the gradients' hooks whole: the step grows by that much, less whatever communication it now hides
    import os

    from ddpsim.loader import scenario_from_dict
    from ddpsim.simulation import prepare, simulate

    source = os.path.join(os.path.dirname(__file__), "..", "validation", "data", "h200x4-2026-11-26", "profiles",
                          "gpt2-124m.json")
    data = json.load(open(source))
    extra_s = 0.004
    data["ddp_world1"] = [{"bucket_cap_mb": 25, "variant": "gbv", "step_s": data["step_s"] + extra_s}]
    plain, with_cost = write(tmp_path, json.load(open(source)), "plain.json"), write(tmp_path, data, "w1.json")

    def step_s(path):
        scenario = scenario_from_dict({
            "workload": {"model": f"profile:{path}", "batch_size": data["batch_size"], "precision": data["precision"]},
            "cluster": {"gpu": "H200", "nodes": 1, "gpus_per_node": 4, "intra_node": {"type": "nvswitch"}},
            "ddp": {"bucket_cap_mb": 25, "gradient_as_bucket_view": True},
        })
        prep = prepare(scenario)
        return simulate(prep).step_time_s, prep.sources

    before, _ = step_s(plain)
    after, sources = step_s(with_cost)
    assert 0.9 * extra_s <= after - before <= extra_s + 1e-9
    assert "4.00 ms" in sources["ddp_per_rank_work"]


def test_a_profile_taken_on_every_gpu_at_once_says_whose_times_it_holds(tmp_path):
    from ddpsim.loader import scenario_from_dict
    from ddpsim.simulation import prepare, simulate

    data = dict(PROFILE, concurrent={"ranks": 2, "profiled_rank": 1, "per_rank": []})
    path = write(tmp_path, data)
    assert load_profile(path).measured.how == "rank 1 of 2 GPUs profiled at once, the slowest"
    assert load_profile(write(tmp_path, PROFILE, "alone.json")).measured.how == ""
    scenario = scenario_from_dict({"cluster": {"gpu": "H100-SXM", "nodes": 1, "gpus_per_node": 2},
                                   "workload": {"model": f"profile:{path}", "batch_size": 4},
                                   "simulation": {"iterations": 2}})
    sources = simulate(prepare(scenario)).value_sources
    assert sources["compute"] == f"profile {path} (measured; rank 1 of 2 GPUs profiled at once, the slowest)"


@pytest.mark.parametrize("block, field", [({"ranks": 2, "profiled_rank": 2}, "concurrent.profiled_rank"),
                                          ({"ranks": "2", "profiled_rank": 0}, "concurrent.ranks"),
                                          ([1], "concurrent")])
def test_a_bad_concurrent_block_is_named(tmp_path, block, field):
    with pytest.raises(ScenarioError) as err:
        load_profile(write(tmp_path, dict(PROFILE, concurrent=block)))
    assert err.value.field == field


def test_paired_world1_rows_charge_their_own_pairs_difference(tmp_path):
    data = copy.deepcopy(PROFILE)  # the profile's own step: 4.5 ms
    data["ddp_world1"] = [
        # DDP and plain steps taken in turn: 9.0 ms against 8.0 ms at the same moments, a 1.0 ms charge,
        # where the profile's earlier step (4.5 ms) would give 4.5 ms
        {"bucket_cap_mb": 25, "variant": "none", "step_s": 0.0090, "plain_step_s": 0.0080, "ddp_minus_plain_s": 0.0010},
        # a pair median below zero is noise: charged as 0, and not refused
        {"bucket_cap_mb": 25, "variant": "gbv", "step_s": 0.0079, "plain_step_s": 0.0080, "ddp_minus_plain_s": -0.0001},
    ]
    assert load_profile(write(tmp_path, data)).ddp_world1_extra_s == pytest.approx({"none": 0.0010, "gbv": 0.0})
    data["ddp_world1"][0]["ddp_minus_plain_s"] = float("nan")
    with pytest.raises(ScenarioError) as err:
        load_profile(write(tmp_path, data))
    assert err.value.field == "ddp_world1[0].ddp_minus_plain_s"


def _jitter_scenario(path, **simulation):
    from ddpsim.loader import scenario_from_dict

    return scenario_from_dict({"cluster": {"gpu": "H100-SXM", "nodes": 1, "gpus_per_node": 4},
                               "workload": {"model": f"profile:{path}", "batch_size": 4},
                               "ddp": {"bucket_cap_mb": 0.001},
                               "simulation": {"iterations": 9, "seed": 3, **simulation}})


def test_jitter_from_the_profile_is_the_lognormal_of_its_step_p10_p90(tmp_path):
    from ddpsim.simulation import prepare, simulate

    path = write(tmp_path, dict(PROFILE, step_s_p10=0.0040, step_s_p90=0.0052))
    # by hand: sigma = ln(5.2 / 4.0) / (2 x 1.2815515655446004) = 0.26236426 / 2.56310313 = 0.1023620,
    # cv = sqrt(exp(sigma^2) - 1)
    cv = math.sqrt(math.exp(0.1023620 ** 2) - 1)
    assert load_profile(path).step_jitter_cv == pytest.approx(cv, rel=1e-6)
    from_profile = simulate(prepare(_jitter_scenario(path, jitter_from_profile=True)))
    by_hand = simulate(prepare(_jitter_scenario(path, jitter_cv=cv)))
    plain = simulate(prepare(_jitter_scenario(path)))
    assert from_profile.step_time_s == pytest.approx(by_hand.step_time_s, rel=1e-6)
    assert from_profile.step_time_s != pytest.approx(plain.step_time_s, rel=1e-6)  # the jitter did something
    assert "from the step's p10..p90" in from_profile.value_sources["compute_jitter"]
    assert load_profile(write(tmp_path, PROFILE, "none.json")).step_jitter_cv is None


def test_jitter_from_the_profile_refuses_what_it_cannot_use(tmp_path):
    from ddpsim.simulation import prepare

    with pytest.raises(ScenarioError) as err:  # no step spread in the profile
        prepare(_jitter_scenario(write(tmp_path, PROFILE), jitter_from_profile=True))
    assert err.value.field == "simulation.jitter_from_profile"
    path = write(tmp_path, dict(PROFILE, step_s_p10=0.0040, step_s_p90=0.0052), "spread.json")
    with pytest.raises(ScenarioError) as err:  # two sources of jitter
        _jitter_scenario(path, jitter_from_profile=True, jitter_cv=0.1)
    assert err.value.field == "simulation.jitter_from_profile"
    with pytest.raises(ScenarioError) as err:  # p10 above p90
        load_profile(write(tmp_path, dict(PROFILE, step_s_p10=0.006, step_s_p90=0.005), "bad.json"))
    assert err.value.field == "step_s_p90"
