"""The scenario that describes a measured run: same model profile, GPUs, transport and DDP settings."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from ddpsim.calibration.file import Calibration
from ddpsim.scenario.load import scenario_from_dict
from ddpsim.scenario.schema import Scenario
from ddpsim.topology.link_kinds import intra_type_of_class

# nvidia-smi names -> catalog names
_GPU_NAMES = (("H200", "H200"), ("H100", "H100-SXM"), ("A100", "A100"), ("V100", "V100"), ("B200", "B200"))


def catalog_gpu(fingerprint_name: str) -> str:
    for needle, name in _GPU_NAMES:
        if needle in fingerprint_name.upper():
            return name
    return fingerprint_name


def run_scenario(
    run: dict[str, Any],
    profile: str,
    calibration: Calibration | None,
    bucket_cap_mb: float | None = None,
    overheads: dict[str, Any] | None = None,
) -> Scenario:
    """A scenario reproducing one harness DDP run (one node, the run's transport and world size)."""
    fingerprint = run.get("fingerprint", {})
    nodes = int(fingerprint.get("hostname_count", 1) or 1)
    world = int(run["world_size"])
    data: dict[str, Any] = {
        "workload": {
            "model": f"profile:{os.path.abspath(profile)}",
            "batch_size": int(run.get("batch_size", 1)),
            "precision": run.get("precision", "fp32"),
        },
        "cluster": {
            "gpu": catalog_gpu(str(fingerprint.get("gpu_name", "H100"))),
            "nodes": nodes,
            "gpus_per_node": world // nodes,
            "intra_node": {"type": intra_type_of_class(run["transport"])},
        },
        "ddp": {"bucket_cap_mb": run["bucket_cap_mb"] if bucket_cap_mb is None else bucket_cap_mb},
        "simulation": {"mode": "fast"},
    }
    if overheads:
        data["overheads"] = overheads
    scenario = scenario_from_dict(data, file=f"<measured run {run_label(run)}>")
    return replace(scenario, calibration=calibration)


def run_label(run: dict[str, Any]) -> str:
    return f"{run['model']}/{run['transport']}/w{run['world_size']}/cap{run['bucket_cap_mb']:g}"
