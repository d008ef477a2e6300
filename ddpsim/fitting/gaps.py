"""What a calibration could not fit from the data it was given, said rather than guessed.

Each gap names what is missing and how to measure it. ``fatal`` gaps mean the calibration would
answer from a default where the user gave data that should have set it (DDP runs and no overhead fitted
from them); the others are warnings (a sweep that was measured but not used, a network transferred
to a shape it was not measured on).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ddpsim.calibration.file import Calibration
from ddpsim.fitting.calibrate import is_plain
from ddpsim.fitting.measured_scenarios import run_class, run_label, run_nodes
from ddpsim.fitting.measurements import AllReduceSample
from ddpsim.scenario.link_kinds import INTER_NODE_LINK_CLASS

HOW_TO_SWEEP = "ddpsim measure --plan probe --shapes {shape} --link-classes {transport} (all-reduce sweeps)"
HOW_TO_LOG = ("keep the campaign's logs/ folder (the harness writes NCCL's INFO log per launch, "
              "logs/nccl_<launch>_r0.trimmed.txt), which names the protocol of every row")
HOW_TO_PROBE = "ddpsim measure --plan probe --shapes {shape} (multi-node shapes run the network endpoint probe)"


@dataclass(frozen=True)
class Gap:
    what: str  # what is missing, and what the calibration does instead
    how: str  # how to measure it
    fatal: bool = False

    def __str__(self) -> str:
        return f"{self.what}; to measure it: {self.how}"


def _shape(sample_or_run: AllReduceSample | dict[str, Any]) -> str:
    if isinstance(sample_or_run, AllReduceSample):
        nodes, world = sample_or_run.nodes, sample_or_run.world_size
    else:
        nodes, world = run_nodes(sample_or_run), int(sample_or_run["world_size"])
    return f"{nodes}x{world // nodes}"


def sweep_gaps(samples: Sequence[AllReduceSample], link_classes: dict[str, Any]) -> list[Gap]:
    """Sweeps measured but not fitted: forced-Tree sweeps across nodes whose shape's network entry has no
    tree fit (no NCCL log naming each row's protocol, no forced-Ring sweep beside them, or no one-node
    sweep to take the base latency from), and a network fitted without the endpoint probe."""
    gaps: list[Gap] = []
    trees = [s for s in samples if s.nodes > 1 and s.algorithm == "tree"]
    network = link_classes.get(INTER_NODE_LINK_CLASS) or {}
    for shape in sorted({_shape(s) for s in trees}):
        entry = (network.get("by_shape") or {}).get(shape, network)
        if (entry.get("tree_fit") or {}).get("fitted"):
            continue
        its = [s for s in trees if _shape(s) == shape]
        if not any(s.nodes > 1 and s.algorithm == "ring" and _shape(s) == shape for s in samples):
            why = "no forced-Ring sweep of that shape beside them (the tree's hop is fitted on top of the ring's)"
            how = HOW_TO_SWEEP.format(shape=shape, transport="nvlink") + " --algos ring,tree"
        elif not all(s.nccl_protocol for s in samples if s.nodes > 1 and _shape(s) == shape):
            why = "no NCCL log naming every row's protocol"
            how = HOW_TO_LOG
        else:
            why = "no one-node sweep to take the base and intra-node hop latencies from"
            # the base latency comes from one node holding as many GPUs as the shape has
            how = HOW_TO_SWEEP.format(shape=f"1x{its[0].world_size}", transport="nvlink")
        gaps.append(Gap(f"{len({s.source for s in its})} file(s) of forced-Tree sweeps across nodes ({shape}, "
                        f"{len(its)} sizes) were not fitted: {why}; the tree is priced with the ring's network hop "
                        "and NCCL's tree terms", how))
    duplex_source = str(network.get("duplex_source", "")) if network else ""
    if network and not duplex_source.startswith("measured"):
        shapes = ", ".join(network.get("shapes") or [])
        first = (network.get("shapes") or ["2x1"])[0]
        if "measured:" in duplex_source:
            # the probe ran, but an envelope fit (no one-node sweep for NCCL's structure) cannot apply its factor
            gaps.append(Gap(f"the network ({shapes}) was fitted as each shape's envelope (no one-node sweep to give "
                            "NCCL's structure), so the probe's measured duplex factor is not applied: a shape other "
                            "than those swept, uneven nodes included, may be off by tens of percent",
                            # the base latency comes from one node holding as many GPUs as the shape has
                            HOW_TO_SWEEP.format(shape=f"1x{int(first.split('x')[0]) * int(first.split('x')[1])}",
                                                transport="nvlink")))
        else:
            gaps.append(Gap(f"the network ({shapes}) was fitted without the endpoint probe: full duplex is assumed, "
                            "and a shape other than those swept may be off by tens of percent",
                            HOW_TO_PROBE.format(shape=first)))
    return gaps


def overhead_gaps(runs: Sequence[dict[str, Any]], calibration: dict[str, Any],
                  calibration_caps: Sequence[float] | None, links_only: bool = False) -> list[Gap]:
    """Link classes with plain DDP runs but no fitted DDP overheads, with why: no plain run at the
    calibration's caps, or the run's links not swept (an intra-node class for a multi-node shape)."""
    if links_only:
        return []
    gaps: list[Gap] = []
    links = calibration.get("link_classes") or {}
    overheads = calibration.get("overheads") or {}
    plain = [r for r in runs if is_plain(r)]
    for link_class in sorted({run_class(r) for r in plain} - set(overheads)):
        group = [r for r in plain if run_class(r) == link_class]
        caps = sorted({float(r["bucket_cap_mb"]) for r in group})
        at_caps = [r for r in group if calibration_caps is None or float(r["bucket_cap_mb"]) in
                   {float(c) for c in calibration_caps}]
        if not at_caps:
            what = (f"{len(group)} plain {link_class} runs, none at the calibration caps "
                    f"{', '.join(f'{c:g}' for c in calibration_caps or [])} (their caps: "
                    f"{', '.join(f'{c:g}' for c in caps)}): no DDP overheads fitted for {link_class}")
            gaps.append(Gap(what, f"--calibration-caps {','.join(f'{c:g}' for c in caps[:2])} (or 'all')", fatal=True))
            continue
        missing = sorted({_missing_link(r, links) for r in at_caps} - {""})
        example = run_label(at_caps[0])
        what = (f"{len(at_caps)} plain {link_class} runs (e.g. {example}) but no DDP overheads fitted for "
                f"{link_class}: " + ("; ".join(missing) if missing else "no run left to fit"))
        shape = _shape(at_caps[0])
        gpus = f"1x{int(at_caps[0]['world_size']) // run_nodes(at_caps[0])}"
        gaps.append(Gap(what, HOW_TO_SWEEP.format(shape=gpus if run_nodes(at_caps[0]) > 1 else shape,
                                                  transport=at_caps[0]["transport"]), fatal=True))
    return gaps


def _missing_link(run: dict[str, Any], links: dict[str, Any]) -> str:
    nodes, world = run_nodes(run), int(run["world_size"])
    if nodes > 1 and INTER_NODE_LINK_CLASS not in links:
        return "no sweep across nodes to fit the network on"
    if nodes < world and str(run["transport"]) not in links:
        return f"no one-node {run['transport']} sweep (the links inside each node were not measured)"
    return ""


def transfer_gaps(calibration: Calibration, link_class: str, world_size: int, nodes: int) -> list[Gap]:
    """A prediction that takes a fit to a shape or GPU count it was not measured on (``calibration``:
    a ``file.Calibration``)."""
    gaps: list[Gap] = []
    if nodes > 1:
        shape = f"{nodes}x{world_size // nodes}"
        measured = calibration.measured_shapes(INTER_NODE_LINK_CLASS)
        if INTER_NODE_LINK_CLASS in calibration.link_class_names and shape not in measured:
            gaps.append(Gap(f"the network was measured on {', '.join(measured) or 'no shape'}, not {shape}: its fit "
                            "is carried to this shape (on one allocation a fit on one shape predicted another "
                            "36-54% off without the endpoint probe)", HOW_TO_SWEEP.format(shape=shape, transport="nvlink")
                            + "; or " + HOW_TO_PROBE.format(shape=shape)))
    per_node = world_size // nodes
    worlds = calibration.measured_world_sizes(link_class)
    if per_node > 1 and worlds and per_node not in worlds:
        gaps.append(Gap(f"{link_class} was swept on {', '.join(map(str, worlds))} GPUs, not {per_node}: its fit is "
                        "carried to this GPU count", HOW_TO_SWEEP.format(shape=f"1x{per_node}", transport=link_class)))
    return gaps


def calibration_gaps(samples: Sequence[AllReduceSample], runs: Sequence[dict[str, Any]], calibration: dict[str, Any],
                     calibration_caps: Sequence[float] | None, links_only: bool = False) -> list[Gap]:
    """Every gap of a calibration just fitted (``calibrate.calibrate``'s output) from these data."""
    return (sweep_gaps(samples, calibration.get("link_classes") or {})
            + overhead_gaps(runs, calibration, calibration_caps, links_only))
