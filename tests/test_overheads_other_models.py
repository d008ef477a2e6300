"""A calibration records the models its DDP overheads were fitted on and says when a scenario's model is
not among them; fitted with ``comm_terms_fitted_models_only=True``, it keeps its communication terms for
those models, and its compute-side and host terms apply to every model."""

import json
import os
from dataclasses import replace

import pytest

from ddpsim.calibration.file import SCHEMA, calibration_from_dict
from ddpsim.errors import ScenarioError
from ddpsim.fitting.fit import fit_links
from ddpsim.fitting.measured_scenarios import run_scenario
from ddpsim.fitting.measurements import Profiles, read_harness_allreduce
from ddpsim.fitting.overheads import fit_overheads
from ddpsim.simulation import prepare, simulate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "validation", "data", "h200x4-2026-11-26")
# mlp-heavy: the cheapest of the three to simulate, for the test that runs whole fits
PROFILES = {m: os.path.join(DATA, "profiles", f"{m}.json") for m in ("resnet50", "gpt2-124m", "mlp-heavy")}
# far from no effect, so that applying them or not changes the step by a lot
FITTED = {"bucket_launch_s": 300e-6, "compute_slowdown": 2.5, "comm_slowdown": 3.0, "allreduce_stretch": 2.0,
          "idle_start_wait_s": 0.0, "bucket_cpu_s": 50e-6, "buffer_sync_s": 1e-3, "max_inflight_buckets": None}


@pytest.fixture(scope="module")
def links():
    samples = [s for s in read_harness_allreduce(os.path.join(DATA, "allreduce.jsonl")) if s.link_class == "nvlink"]
    return fit_links(samples)


def _run(model, cap=25):
    with open(PROFILES[model]) as handle:
        profile = json.load(handle)
    return {"model": model, "batch_size": profile["batch_size"], "precision": profile["precision"],
            "bucket_cap_mb": cap, "world_size": 2, "transport": "nvlink",
            "fingerprint": {"gpu_name": "NVIDIA H200", "hostname_count": 1},
            "_source": os.path.join(DATA, "ddp_runs.jsonl")}


def _calibration(links, overheads):
    return calibration_from_dict({"schema": SCHEMA, "link_classes": links, "overheads": overheads}, "<test>")


def _step(run, calibration, params=None):
    """The step with the calibration as ddpsim applies it, or (params) with the given overheads set by hand
    on a scenario calibrated for its links only."""
    prep = prepare(run_scenario(run, PROFILES[run["model"]], calibration))
    if params is not None:
        prep = replace(prep, scenario=replace(prep.scenario, overheads=replace(prep.scenario.overheads, **params)))
    return simulate(prep).step_time_s, prep.sources


def _fitted_model_gets_the_fit(links, entry):
    """The calibration of ``entry`` (fitted on resnet50) applies in full to resnet50; returns it, the links-only
    calibration and a GPT-2 run to check the other model with."""
    calibration, links_only = _calibration(links, {"nvlink": entry}), _calibration(links, {})
    resnet = _run("resnet50")
    step, sources = _step(resnet, calibration)
    assert step == pytest.approx(_step(resnet, links_only, FITTED)[0], rel=1e-9)
    assert sources["ddp_overheads"] == "calibration <test> overheads.nvlink"
    return calibration, links_only, _run("gpt2-124m")


def test_by_default_the_overheads_carry_to_another_model_and_the_sources_say_so(links):
    calibration, links_only, gpt2 = _fitted_model_gets_the_fit(links, {**FITTED, "models": ["resnet50"]})
    step, sources = _step(gpt2, calibration)
    assert step == pytest.approx(_step(gpt2, links_only, FITTED)[0], rel=1e-9)
    assert "(fitted on resnet50, not on gpt2-124m: carried;" in sources["ddp_overheads"]


def test_fitted_models_only_keeps_the_communication_terms_for_the_fitted_model(links):
    entry = {**FITTED, "models": ["resnet50"], "comm_terms_fitted_models_only": True}
    calibration, links_only, gpt2 = _fitted_model_gets_the_fit(links, entry)
    step, sources = _step(gpt2, calibration)
    # written out by hand: the communication terms at no effect, the others as fitted
    other = {**FITTED, "allreduce_stretch": 1.0, "comm_slowdown": 1.0, "idle_start_wait_s": 0.0}
    assert step == pytest.approx(_step(gpt2, links_only, other)[0], rel=1e-9)
    assert step < 0.95 * _step(gpt2, links_only, FITTED)[0]  # the fitted stretch would have lengthened it
    assert step > 1.05 * _step(gpt2, links_only, {**other, "compute_slowdown": 1.0, "bucket_launch_s": 0.0,
                                                  "bucket_cpu_s": 0.0})[0]  # the host terms do apply
    assert "without allreduce_stretch, comm_slowdown, idle_start_wait_s" in sources["ddp_overheads"]
    assert "resnet50, not gpt2-124m" in sources["ddp_overheads"]


def test_a_calibration_that_does_not_name_its_models_applies_to_every_model_and_says_so(links):
    calibration = _calibration(links, {"nvlink": dict(FITTED)})  # as written before 2026-11-27
    gpt2 = _run("gpt2-124m")
    step, sources = _step(gpt2, calibration)
    assert step == pytest.approx(_step(gpt2, _calibration(links, {}), FITTED)[0], rel=1e-9)
    assert sources["ddp_overheads"].startswith("calibration <test> overheads.nvlink (the file does not record the "
                                               "models its terms were fitted on, so whether they hold for gpt2-124m "
                                               "is unknown")


def test_the_world_size_entry_names_its_own_models(links):
    overheads = {"nvlink": {**FITTED, "models": ["resnet50", "gpt2-124m"], "comm_terms_fitted_models_only": True,
                            "by_world_size": {"2": {**FITTED, "models": ["resnet50"],
                                                    "comm_terms_fitted_models_only": True}}}}
    gpt2 = _run("gpt2-124m")
    assert "resnet50, not gpt2-124m" in _step(gpt2, _calibration(links, overheads))[1]["ddp_overheads"]


@pytest.mark.parametrize("models", ["resnet50", [], [""], [3]])
def test_a_bad_models_field_is_refused_when_the_file_is_read(links, models):
    with pytest.raises(ScenarioError) as info:
        _calibration(links, {"nvlink": {**FITTED, "models": models}})
    assert "overheads.nvlink.models" in str(info.value)


@pytest.mark.parametrize("entry, field", [
    ({"comm_terms_fitted_models_only": "yes", "models": ["resnet50"]},
     "overheads.nvlink.comm_terms_fitted_models_only"),
    ({"comm_terms_fitted_models_only": True}, "overheads.nvlink.models"),  # the flag could never act
    ({"models": ["resnet50"], "by_world_size": {"2": {**FITTED, "models": "resnet50"}}},
     "overheads.nvlink.by_world_size.2.models"),
    ({"models": ["resnet50"], "by_world_size": {"2": {**FITTED, "models": ["resnet50"],
                                                      "comm_terms_fitted_models_only": 1}}},
     "overheads.nvlink.by_world_size.2.comm_terms_fitted_models_only"),
])
def test_a_bad_flag_or_models_entry_is_refused_when_the_file_is_read(links, entry, field):
    with pytest.raises(ScenarioError) as info:
        _calibration(links, {"nvlink": {**FITTED, **entry}})
    assert field in str(info.value)


def test_the_fit_records_the_models_of_its_runs(links):
    calibration = _calibration(links, {})
    runs = [_run(model, cap) for model in ("resnet50", "gpt2-124m") for cap in (5, 50)]
    for run in runs:
        run["step_s_median"] = _step(run, calibration, FITTED)[0]
    entry = fit_overheads(runs, Profiles.from_paths(list(PROFILES.values())), calibration, starts=[{}])
    assert entry.models == ["gpt2-124m", "resnet50"]  # each once, sorted


def test_calibrate_writes_the_flag_into_every_entry_it_fits(links):
    from ddpsim.fitting.calibrate import calibrate

    samples = [s for s in read_harness_allreduce(os.path.join(DATA, "allreduce.jsonl")) if s.link_class == "nvlink"]
    # mlp-heavy: the flag does not depend on the model, and its fits simulate 4x faster than ResNet-50's
    runs = [{**_run("mlp-heavy", cap), "world_size": world} for cap in (5, 50) for world in (2, 4)]
    for run in runs:
        run.update(step_s_median=_step(run, _calibration(links, {}), FITTED)[0], variant="none")
    profiles = Profiles.from_paths([PROFILES["mlp-heavy"]])
    # fitted on cap 50 only: one run per world size, and the class entry on both
    data = calibrate(samples, runs, profiles, [50.0], comm_terms_fitted_models_only=True)
    entry = data["overheads"]["nvlink"]
    assert set(entry["by_world_size"]) == {"2", "4"}
    for sub in [entry, *entry["by_world_size"].values()]:
        assert sub["comm_terms_fitted_models_only"] is True and sub["models"] == ["mlp-heavy"]
    plain = calibrate(samples, runs, profiles, [50.0])
    assert "comm_terms_fitted_models_only" not in plain["overheads"]["nvlink"]
