"""A Scenario and its Calibration in, the calibrated Scenario, its protocol table and where every
value came from out; no file is read here (``file.py`` read and checked the calibration).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ddpsim.calibration.file import NO_EFFECT, NOT_CARRIED, OTHER_MODEL_NOTE, Calibration
from ddpsim.calibration.shipped import shipped_for_gpu
from ddpsim.collectives.protocols import ProtocolTable
from ddpsim.errors import ScenarioError
from ddpsim.hardware.catalog import get_gpu
from ddpsim.scenario.link_kinds import INTER_NODE_LINK_CLASS, link_class_of_type
from ddpsim.scenario.provenance import bandwidth_text, inter_node_source, intra_node_source, overheads_source
from ddpsim.scenario.schema import Scenario
from ddpsim.units import format_time


@dataclass(frozen=True)
class Calibrated:
    """A scenario with the calibration's values in place, its protocol table, and where each came from."""

    scenario: Scenario
    protocol_table: ProtocolTable | None
    sources: dict[str, str]


def apply_calibration(scenario: Scenario, model: str | None = None) -> Calibrated:
    """The scenario with calibrated link, network and overhead values (no file is read here).

    ``model``: the workload's name. The sources say when the fitted DDP overheads were fitted on other
    models; a calibration fitted with ``calibrate(comm_terms_fitted_models_only=True)`` then leaves the communication
    terms (``NOT_CARRIED``) at no effect.
    None: the overheads apply whatever the model (the caller cannot name it)."""
    cluster = scenario.cluster
    sources = {"intra_node_link": intra_node_source(scenario), "ddp_overheads": overheads_source(scenario),
               "protocol_table": "NCCL's defaults"}
    if cluster.nodes > 1:
        sources["inter_node_network"] = inter_node_source(scenario)
    calibration = scenario.calibration
    if calibration is None:
        return Calibrated(scenario, None, sources)
    link_class = link_class_of_type(cluster.intra_node.type)
    cite = f"calibration {calibration.source}"
    other_gpu = check_gpu(calibration, cluster.rank_gpus, "the scenario's cluster.gpu")
    if other_gpu:
        sources["calibration_gpu"] = other_gpu
    fitted, where = calibration.link_fit_at(link_class, cluster.world_size, cluster.nodes)
    if fitted is None and cluster.gpus_per_node == 1 and cluster.nodes > 1:
        # one GPU per node has no intra-node link: every hop is the network's
        intra, table = cluster.intra_node, None
        sources["intra_node_link"] = "none (one GPU per node)"
    elif fitted is None:
        known = ", ".join(calibration.link_class_names)
        raise ScenarioError(
            f"has no fit for link class '{link_class}' (it has: {known})", file=calibration.source, field="link_classes"
        )
    else:
        intra = replace(cluster.intra_node, bandwidth_Bps=fitted.bandwidth_Bps, latency_s=fitted.latency_s)
        sources["intra_node_link"] = f"{cite} {where}" + _replaced_written(scenario, {
            "cluster.intra_node.bandwidth": (cluster.intra_node.bandwidth_Bps, intra.bandwidth_Bps, bandwidth_text),
            "cluster.intra_node.latency": (cluster.intra_node.latency_s, intra.latency_s, format_time),
        })
        sources["protocol_table"] = f"{cite} {where}"
        table = fitted.protocol_table
    inter = cluster.inter_node
    overhead_class = link_class
    if cluster.nodes > 1:
        network, net_where = calibration.link_fit_at(INTER_NODE_LINK_CLASS, cluster.world_size, cluster.nodes)
        if network is None:
            sources["inter_node_network"] = f"{sources['inter_node_network']} ({cite} has no '{INTER_NODE_LINK_CLASS}' fit)"
        else:
            # a ring across nodes waits on the network's hop each step: the fitted bus bandwidth is
            # the bandwidth each GPU gets through the network
            inter = replace(inter, nic_bandwidth_Bps=network.bandwidth_Bps, latency_s=network.latency_s,
                            duplex_factor=network.duplex_factor)
            written = cluster.inter_node
            sources["network_endpoint_duplex"] = (
                f"{cite} {net_where}.duplex_factor {inter.duplex_factor:.2f}: "
                f"{network.duplex_source}"
                + _replaced_written(scenario, {"cluster.inter_node.duplex_factor":
                                               (written.duplex_factor, inter.duplex_factor, "{:g}".format)}))
            if not cluster.uniform and inter.duplex_factor >= 1.0:
                # measured: a lone GPU's endpoint both ways made uneven nodes 21 to 25% slower than predicted
                # with such a fit, and within 6% with a probed one (h200x4-uneven-2026-11-27, -27b)
                sources["network_endpoint_duplex"] += (
                    "; with uneven nodes a GPU may send and receive across nodes at once, which this fit (full duplex) "
                    "prices at its even shape's rate: steps 21 to 25% too fast measured so (docs/accuracy.md, "
                    "Uneven nodes); probe the network: ddpsim measure --shapes 2x2")
            table = _with_network(table, network.protocol_table)
            sources["inter_node_network"] = f"{cite} {net_where}" + _replaced_written(scenario, {
                "cluster.inter_node.nic_bandwidth": (written.nic_bandwidth_Bps, inter.nic_bandwidth_Bps, bandwidth_text),
                "cluster.inter_node.latency": (written.latency_s, inter.latency_s, format_time),
            })
            sources["protocol_table"] = f"{cite} {net_where} (base latencies), {where} (intra-node hops)"
            if calibration.has_overheads(INTER_NODE_LINK_CLASS):
                overhead_class = INTER_NODE_LINK_CLASS
    values = calibration.overhead_values(overhead_class, cluster.world_size)
    fitted_on = calibration.overhead_models(overhead_class, cluster.world_size)
    other_model = model is not None and fitted_on is not None and model not in fitted_on
    if values and other_model and calibration.comm_terms_fitted_models_only(overhead_class, cluster.world_size):
        values = {name: (NO_EFFECT[name] if name in NOT_CARRIED else value) for name, value in values.items()}
        sources["ddp_overheads"] = (f"{cite} overheads.{overhead_class} without {', '.join(NOT_CARRIED)} (no "
                                    f"effect: the calibration keeps them for the models they were fitted on, "
                                    f"{', '.join(fitted_on or [])}, not {model})")
    elif values and fitted_on is None:
        # a file written before the fitted models were recorded cannot say whether this model was among them
        sources["ddp_overheads"] = (f"{cite} overheads.{overhead_class} (the file does not record the models its "
                                    f"terms were fitted on, so whether they hold for {model or 'this model'} is "
                                    f"unknown; calibrate again to record them; {OTHER_MODEL_NOTE})")
    elif values:
        sources["ddp_overheads"] = f"{cite} overheads.{overhead_class}" + (
            f" (fitted on {', '.join(fitted_on or [])}, not on {model}: carried; {OTHER_MODEL_NOTE})"
            if other_model else "")
    overheads = replace(scenario.overheads, **values)
    collective = scenario.collective
    if collective.algorithm == "auto" and fitted is not None and fitted.algorithm and cluster.nodes == 1:
        # the algorithm NCCL ran when the link class was measured, on one node
        collective = replace(collective, algorithm=fitted.algorithm)
    if cluster.topology is not None:
        _custom_topology_sources(sources, intra, inter, cluster.nodes > 1)
        inter = replace(inter, duplex_factor=1.0)
    groups = cluster.node_groups
    if groups is not None:
        # the loader filled each group's links from the cluster's: those follow the calibration; a group whose
        # file wrote links of its own keeps them (the calibration measured one network and one node kind)
        groups = tuple(replace(
            group,
            nic_bandwidth_Bps=(inter.nic_bandwidth_Bps if group.nic_bandwidth_Bps == cluster.inter_node.nic_bandwidth_Bps
                               else group.nic_bandwidth_Bps),
            intra_bandwidth_Bps=(intra.bandwidth_Bps if group.intra_bandwidth_Bps == cluster.intra_node.bandwidth_Bps
                                 else group.intra_bandwidth_Bps)) for group in groups)
        if any(g.nic_bandwidth_Bps != inter.nic_bandwidth_Bps or g.intra_bandwidth_Bps != intra.bandwidth_Bps
               for g in groups):
            sources["node_groups"] = ("groups that wrote their own nic_bandwidth or intra_bandwidth keep them; "
                                      f"{cite} measured one network and one kind of node")
    calibrated = replace(
        scenario, cluster=replace(cluster, intra_node=intra, inter_node=inter, node_groups=groups), overheads=overheads,
        collective=collective
    )
    return Calibrated(calibrated, table, sources)


def check_gpu(calibration: Calibration, gpus: Sequence[str], what: str, option: str = "--set calibration=") -> str | None:
    """None when the calibration was measured on every GPU kind of ``gpus``; a line for a ``from:`` row when it
    does not record its own;
    with ``other_gpu_allowed``, the line a ``from:`` row shows; else refused naming ``option`` with the
    shipped calibration of the other kind: one calibration's link rates
    and overheads are its GPU kind's, and on another kind they answer wrongly without a word."""
    measured_on = calibration.measured_on
    if measured_on is None:
        # nccl-tests output alone, or a file written before calibrations recorded their GPU: applied, and said
        kinds = ", ".join(sorted({get_gpu(g).name for g in gpus})) or "this GPU"
        return (f"calibration {calibration.source} does not record the GPU it was measured on (no measured_on): "
                f"its link rates and overheads are applied to {kinds} unchecked")
    others = sorted({g for g in gpus if get_gpu(g).name != measured_on.gpu})
    probed = (f"; re-centred on a probe of {', '.join(calibration.probed_other_gpu)} (--allow-other-gpu when it "
              "was made): its link rates are that kind's") if calibration.probed_other_gpu else ""
    if not others:
        return f"calibration {calibration.source} measured on {measured_on.gpu}{probed}" if probed else None
    if calibration.other_gpu_allowed:
        return (f"calibration {calibration.source} measured on {measured_on.gpu}, used for {', '.join(others)} "
                f"(--allow-other-gpu): its link rates and overheads are the other kind's{probed}")
    shipped = shipped_for_gpu(others[0])
    instead = (f"{option}{shipped}, or " if shipped else "") + "a calibration of your own (ddpsim calibrate DIR)"
    raise ScenarioError(f"was measured on {measured_on.gpu} and {what} is {', '.join(others)}: use {instead}, "
                        "or pass --allow-other-gpu to use it anyway", file=calibration.source, field="measured_on.gpu")


def _replaced_written(scenario: Scenario, fields: dict[str, tuple[float, float, Any]]) -> str:
    """The values the scenario's file wrote that the calibration's fit replaces, as text to append to a
    source line: a user who wrote a number must see that it is not the one in force. ``fields`` maps a
    dotted field to (written value, value in force, formatter). A custom topology's own links decide, so
    there the calibration's values are reported as not applied instead."""
    if scenario.cluster.topology is not None:
        return ""
    replaced = [f"{name.rsplit('.', 1)[-1]} {fmt(written)}" for name, (written, used, fmt) in fields.items()
                if name not in scenario.defaulted_fields and not math.isclose(written, used, rel_tol=1e-9)]
    if not replaced:
        return ""
    return f"; replaces the scenario's {', '.join(replaced)} (the calibration's value is in force)"


def _custom_topology_sources(sources: dict[str, str], intra: Any, inter: Any, multi_node: bool) -> None:
    """A custom graph routes over its own links: say so where the calibration fitted rates it cannot use
    (its protocol table and overheads still apply)."""
    custom = "custom topology (cluster.topology): each link's own bandwidth and latency"
    sources["intra_node_link"] = (f"{custom}; not applied: {sources['intra_node_link']} "
                                  f"({intra.bandwidth_Bps / 1e9:.3g} GB/s)")
    if multi_node:
        sources["inter_node_network"] = (f"{custom}; not applied: {sources['inter_node_network']} "
                                         f"({inter.nic_bandwidth_Bps / 1e9:.3g} GB/s)")
    if "network_endpoint_duplex" in sources:
        sources["network_endpoint_duplex"] = f"not applied (custom topology): {sources['network_endpoint_duplex']}"


def _with_network(intra: ProtocolTable | None, network: ProtocolTable | None) -> ProtocolTable | None:
    """The network's table (its base latencies describe a collective across nodes) plus the intra-node
    class's hop latencies and efficiencies for the hops inside a node."""
    if network is None or intra is None:
        return network or intra
    # one protocol runs a collective end to end: what NCCL enables across the network holds for it
    return replace(
        network,
        hop_latency_s={**intra.hop_latency_s, **network.hop_latency_s},
        transport_efficiency={**intra.transport_efficiency, **network.transport_efficiency},
    )
