"""Two measured backward-thread mechanisms: the thread's lead over the GPU, which hides a comm hook's
host work, and the backward into existing gradients, which accumulation's later micro-steps pay."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from ddpsim.ddp import hooks
from ddpsim.errors import ScenarioError
from ddpsim.loader import scenario_from_dict
from ddpsim.simulation import prepare, simulate
from ddpsim.workload.profile import load_profile
from tests.test_profile import PROFILE

HOOK_LABEL = "comm hook (backward thread)"


def _write(tmp_path, data):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    return str(path)


def _measured(**extra):
    data = copy.deepcopy(PROFILE)
    data.update(extra)
    return data


def test_the_profile_carries_both_measurements(tmp_path):
    rows = [{"bucket_cap_mb": 25, "variant": "none", "status": "ok", "step_s": 0.005, "backward_host_lead_s": 0.004},
            {"bucket_cap_mb": 25, "variant": "none", "status": "ok", "step_s": 0.005, "backward_host_lead_s": 0.002},
            {"bucket_cap_mb": 25, "variant": "gbv", "status": "ok", "step_s": 0.005}]
    # the top-level lead is the plain step's (no DDP): DDP's reducer can use it up, so it is not the one taken
    data = _measured(backward_accumulate_s=0.0036, ddp_world1=rows, backward_host_lead_s=0.009)
    w = load_profile(_write(tmp_path, data))
    assert w.backward_accumulate_s == 0.0036
    assert w.ddp_world1_lead_s == pytest.approx(0.003)  # the median of the plain DDP rows' leads


def test_a_profile_without_them_says_nothing_was_measured(tmp_path):
    w = load_profile(_write(tmp_path, _measured()))
    assert w.backward_accumulate_s is None and w.ddp_world1_lead_s is None


@pytest.mark.parametrize("extra, field", [
    ({"backward_accumulate_s": -0.001}, "backward_accumulate_s"),
    ({"ddp_world1": [{"bucket_cap_mb": 25, "variant": "none", "step_s": 0.005, "backward_host_lead_s": "1ms"}]},
     "ddp_world1[0].backward_host_lead_s"),
])
def test_bad_values_name_their_field(tmp_path, extra, field):
    path = _write(tmp_path, _measured(**extra))
    with pytest.raises(ScenarioError) as err:
        load_profile(path)
    assert err.value.field == field and err.value.file == path


def _hooked(tmp_path, hook="fp16", accumulation=1, world=4, **profile_extra):
    path = _write(tmp_path, _measured(**profile_extra))
    return prepare(scenario_from_dict({
        "workload": {"model": f"profile:{path}", "batch_size": 4},
        "cluster": {"gpu": "H100-SXM", "nodes": 1, "gpus_per_node": world, "intra_node": {"type": "nvswitch"}},
        "ddp": {"bucket_cap_mb": 0.001, "comm_hook": hook, "grad_accumulation_steps": accumulation},
        # no slowdown while an all-reduce runs: the hook time on the compute stream is then exact
        "overheads": {"hook_cpu": "100us", "compute_slowdown": 1.0},
        "simulation": {"iterations": 3},
    }))


def _hook_time_per_step_s(prep, lead_s):
    prep = dataclasses.replace(prep, workload=dataclasses.replace(prep.workload, ddp_world1_lead_s=lead_s))
    result = simulate(prep)
    charged = sum(b - a for a, b, label in result.rank_timelines[0] if label == HOOK_LABEL)
    return charged / prep.scenario.simulation.iterations, result.step_time_s


@pytest.mark.parametrize("lead_fraction", [0.0, 0.25, 0.5, 1.0, 3.0])
def test_the_lead_hides_the_hook_until_it_is_used_up(tmp_path, lead_fraction):
    prep = _hooked(tmp_path)
    n_buckets = len(prep.buckets)
    assert n_buckets >= 3  # a cap of 1 KB puts most tensors of the tiny profile in a bucket of their own
    per_bucket_s = 100e-6 + hooks.COMPRESS_HOOK_EXTRA_S
    total_s = n_buckets * per_bucket_s
    lead_s = lead_fraction * total_s
    charged_s, _ = _hook_time_per_step_s(prep, lead_s)
    assert charged_s == pytest.approx(max(0.0, total_s - lead_s), abs=1e-12)


def test_a_longer_lead_never_lengthens_the_step(tmp_path):
    prep = _hooked(tmp_path)
    steps = [_hook_time_per_step_s(prep, lead)[1] for lead in (0.0, 1e-4, 5e-4, 1e-3, 1.0)]
    assert all(b <= a + 1e-12 for a, b in zip(steps, steps[1:], strict=False))
    assert steps[0] > steps[-1]


def test_without_a_hook_the_lead_changes_nothing(tmp_path):
    prep = _hooked(tmp_path, hook="none")
    assert _hook_time_per_step_s(prep, 0.0) == _hook_time_per_step_s(prep, 1.0)


def test_the_run_says_where_the_lead_came_from(tmp_path):
    rows = [{"bucket_cap_mb": 25, "variant": "none", "status": "ok", "step_s": 0.005, "backward_host_lead_s": 0.004}]
    measured = simulate(_hooked(tmp_path, ddp_world1=rows)).value_sources["compress_hook"]
    assert "4.00 ms" in measured and "measured" in measured
    missing = simulate(_hooked(tmp_path)).value_sources["compress_hook"]
    assert "not measured" in missing and "charged in full" in missing


@pytest.mark.parametrize("world", [1, 4])
def test_later_micro_steps_take_the_measured_accumulating_backward(tmp_path, world):
    forward_s, backward_s, accumulate_s = PROFILE["forward_s"], PROFILE["backward_s"], 0.0039
    one = simulate(_hooked(tmp_path, hook="none", world=world, backward_accumulate_s=accumulate_s))
    four = simulate(_hooked(tmp_path, hook="none", world=world, accumulation=4, backward_accumulate_s=accumulate_s))
    # micro-step 1: forward + backward; 2 and 3: forward + the accumulating backward; the synced step
    # runs the accumulating backward in place of the plain one (its DDP costs as in the one-micro-step step)
    assert four.step_time_s - one.step_time_s == pytest.approx(
        3 * forward_s + backward_s + 2 * accumulate_s + (accumulate_s - backward_s), rel=1e-6)
    assert four.compute_only_s == pytest.approx(4 * forward_s + backward_s + 3 * accumulate_s + PROFILE["optimizer_s"])
    source = four.value_sources["accumulation_micro_steps"]
    assert "3.90 ms" in source and "1.300x" in source


def test_without_the_measurement_micro_steps_are_plain(tmp_path):
    one = simulate(_hooked(tmp_path, hook="none", world=1))
    four = simulate(_hooked(tmp_path, hook="none", world=1, accumulation=4))
    assert four.step_time_s - one.step_time_s == pytest.approx(3 * (PROFILE["forward_s"] + PROFILE["backward_s"]))
    assert "not measured" in four.value_sources["accumulation_micro_steps"]


def test_an_accumulating_backward_measured_faster_is_noise_not_a_gain(tmp_path):
    one = simulate(_hooked(tmp_path, hook="none", world=1))
    four = simulate(_hooked(tmp_path, hook="none", world=1, accumulation=4, backward_accumulate_s=0.002))
    assert four.step_time_s - one.step_time_s == pytest.approx(3 * (PROFILE["forward_s"] + PROFILE["backward_s"]))
    assert "noise, taken as 1x" in four.value_sources["accumulation_micro_steps"]
