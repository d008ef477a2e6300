"""Measured spread becomes a prediction interval: sigmas from hand-made records with known spread."""

from __future__ import annotations

import math

import pytest

from ddpsim.calibration.file import SCHEMA, calibration_from_dict
from ddpsim.calibration.fit import fit_noise

Z90 = 1.2815515655446004


def _run(launch, median, sigma_step, cap=25.0, transport="nvlink"):
    return {
        "model": "m", "world_size": 2, "bucket_cap_mb": cap, "transport": transport, "launch_id": launch,
        "step_s_median": median, "step_s_p10": median * math.exp(-Z90 * sigma_step),
        "step_s_p90": median * math.exp(Z90 * sigma_step),
    }


def test_step_and_launch_sigmas_from_known_spreads():
    # two caps, each measured in launches a and b; launch b is 10% and 5% slower
    runs = [_run("a", 1.0, 0.02), _run("b", 1.1, 0.04), _run("a", 2.0, 0.02, cap=5), _run("b", 2.1, 0.02, cap=5)]
    noise = fit_noise(runs)["nvlink"]
    assert noise["step_sigma"] == pytest.approx((0.02 + 0.04 + 0.02 + 0.02) / 4)
    expected = math.sqrt((math.log(1.1) ** 2 + math.log(2.1 / 2.0) ** 2) / (2 * 2))
    assert noise["launch_sigma"] == pytest.approx(expected)
    assert noise["launch_pairs"] == 2


def test_a_class_measured_once_has_no_launch_sigma():
    noise = fit_noise([_run("a", 1.0, 0.03, transport="socket")])["socket"]
    assert noise["launch_sigma"] is None and noise["step_sigma"] == pytest.approx(0.03)


def test_interval_adds_the_sigmas_in_quadrature():
    cal = calibration_from_dict(
        {"schema": SCHEMA, "link_classes": {}, "noise": {"nvlink": {"step_sigma": 0.03, "launch_sigma": 0.04}}}, "x"
    )
    p10, p50, p90 = cal.step_interval("nvlink", 0.1)
    assert p50 == 0.1
    assert p90 / p50 == pytest.approx(math.exp(Z90 * 0.05))
    assert p10 * p90 == pytest.approx(p50 * p50)
    assert cal.step_interval("shm", 0.1) is None
