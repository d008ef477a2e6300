"""The scenario that describes a measured run: same model profile, GPUs, shape, transport, DDP options.

Every field a run record may carry is either mapped onto the scenario here or listed as a record of
the measurement itself (``measurements.MAPPED_FIELDS``, ``RECORD_FIELDS``); a field in neither is
refused, by the reader and again here, because nobody can say whether it changed the step.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import replace
from typing import Any

from ddpsim.calibration.file import Calibration
from ddpsim.errors import ScenarioError
from ddpsim.fitting.measurements import check_run_fields
from ddpsim.loader import scenario_from_dict
from ddpsim.scenario.link_kinds import INTER_NODE_LINK_CLASS, intra_type_of_class
from ddpsim.scenario.schema import COMM_HOOKS, Scenario

# nvidia-smi names -> catalog names
_GPU_NAMES = (("H200", "H200"), ("H100", "H100-SXM"), ("A100", "A100"), ("V100", "V100"), ("B200", "B200"))

def catalog_gpu(fingerprint_name: str) -> str:
    for needle, name in _GPU_NAMES:
        if needle in fingerprint_name.upper():
            return name
    return fingerprint_name


def run_gpu(run: dict[str, Any]) -> str:
    """The catalog GPU a run was measured on. A run on another device is refused naming its record:
    predicted as some catalog GPU it would be compared with a machine it never ran on."""
    from ddpsim.hardware.catalog import get_gpu

    measured = str((run.get("fingerprint") or {}).get("gpu_name", "H100"))
    name = catalog_gpu(measured)
    where = {"file": run.get("_source"), "field": f"line {run.get('_line', '?')}.fingerprint.gpu_name"}
    if measured.strip().lower() == "cpu":
        raise ScenarioError("measured on CPU (ddpsim measure --cpu-slots: a dry run that checks the harness, not a "
                            "GPU): ddpsim predicts the GPUs of its catalog; measure on a GPU host to calibrate or "
                            "validate", **where)
    try:
        get_gpu(name)
    except ScenarioError as exc:
        raise ScenarioError(exc.detail, **where) from None
    return name


def _comm_hook(run: dict[str, Any]) -> str:
    hook = run.get("comm_hook") or "none"
    if hook not in COMM_HOOKS:
        raise ScenarioError(f"unknown comm_hook {hook!r} (known: {', '.join(COMM_HOOKS)})",
                            file=run.get("_source"), field=f"line {run.get('_line', '?')}.comm_hook")
    return str(hook)


def run_nodes(run: dict[str, Any]) -> int:
    return int(run.get("nodes") or (run.get("fingerprint") or {}).get("hostname_count", 1) or 1)


def run_class(run: dict[str, Any]) -> str:
    """The link class whose overheads and noise a run's step belongs to: the network's across nodes."""
    return INTER_NODE_LINK_CLASS if run_nodes(run) > 1 else str(run["transport"])


# simulated steps per run with jitter: 10 and 20 gave 7.9% and 7.7% mean error on 61 held-out runs
# (4 x H100 g, 2 x H100 o), 20 and 40 steps 6.9% both on g; each step costs one more simulation
JITTER_STEPS = 20


def run_scenario(
    run: dict[str, Any],
    profile: str,
    calibration: Calibration | None,
    bucket_cap_mb: float | None = None,
    overheads: dict[str, Any] | None = None,
    jitter_from_profile: bool = False,
) -> Scenario:
    """A scenario reproducing one harness DDP run: its shape (emulated nodes count as nodes: NCCL built
    its multi-node algorithms for them), transport, cap and every recorded DDP option; with
    ``jitter_from_profile`` every rank's compute varies step to step as the profile measured it (the
    median of ``JITTER_STEPS`` simulated steps, as the harness reports the median of its steps)."""
    check_run_fields(run)
    nodes = run_nodes(run)
    world = int(run["world_size"])
    cluster: dict[str, Any] = {
        "gpu": run_gpu(run),
        "intra_node": {"type": intra_type_of_class(run["transport"]), "nvls": nvls_of_run(run)},
    }
    node_gpus = uneven_node_gpus(run)
    if node_gpus:
        # uneven emulated nodes, in rank order as the harness filled them
        cluster["node_groups"] = [{"count": len(list(same)), "gpus_per_node": count}
                                  for count, same in itertools.groupby(node_gpus)]
    else:
        cluster.update({"nodes": nodes, "gpus_per_node": world // nodes})
    if nodes > 1:
        # the harness's nodes share one NIC path (NCCL's socket transport); the fitted network's bus
        # bandwidth is what each rank got through it
        cluster["inter_node"] = {"type": "fat-tree", "nics_per_node": 1}
    data: dict[str, Any] = {
        "workload": {
            "model": f"profile:{os.path.abspath(profile)}",
            "batch_size": int(run.get("batch_size", 1)),
            "precision": run.get("precision", "fp32"),
        },
        "cluster": cluster,
        "ddp": {
            "bucket_cap_mb": run["bucket_cap_mb"] if bucket_cap_mb is None else bucket_cap_mb,
            "gradient_as_bucket_view": bool(run.get("gradient_as_bucket_view", False)),
            "find_unused_parameters": bool(run.get("find_unused_parameters", False)),
            "static_graph": bool(run.get("static_graph", False)),
            "comm_hook": _comm_hook(run),
            "grad_accumulation_steps": int(run.get("grad_accumulation_steps") or 1),
        },
        "simulation": {"mode": "fast", **({"jitter_from_profile": True, "iterations": JITTER_STEPS}
                                          if jitter_from_profile else {})},
    }
    if overheads:
        data["overheads"] = overheads
    scenario = scenario_from_dict(data, file=f"<measured run {run_label(run)}>")
    return replace(scenario, calibration=calibration)


def uneven_node_gpus(run: dict[str, Any]) -> tuple[int, ...]:
    """The GPUs of each node of a run on nodes of different sizes (the harness's ``--node-gpus``), in rank
    order; empty for nodes alike."""
    counts = tuple(run.get("node_gpus") or ())
    return counts if len(set(counts)) > 1 else ()


def uneven_shape(run: dict[str, Any]) -> str:
    """The shape of a run on uneven nodes as the reports write it (3+1), empty for nodes alike."""
    return "+".join(map(str, uneven_node_gpus(run)))


def nvls_of_run(run: dict[str, Any]) -> str:
    """Whether NCCL could run NVLink SHARP in a measured run: off where the record's NCCL environment turned it
    off (the lent machines run NCCL_NVLS_ENABLE=0), else as the hardware has it (auto)."""
    env = (run.get("fingerprint") or {}).get("nccl_env") or {}
    return "off" if str(env.get("NCCL_NVLS_ENABLE", "")).strip() == "0" else "auto"


def run_label(run: dict[str, Any]) -> str:
    variant = run.get("variant")
    extra = f"/{variant}" if variant and variant != "none" else ""
    nodes = run_nodes(run)
    shape = f"/{nodes}x{int(run['world_size']) // nodes}" if nodes > 1 else ""
    if uneven_node_gpus(run):
        shape = "/" + uneven_shape(run)
    return f"{run['model']}/{run['transport']}/w{run['world_size']}{shape}/cap{float(run['bucket_cap_mb']):g}{extra}"
