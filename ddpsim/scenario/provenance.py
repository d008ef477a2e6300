"""Where a scenario's values came from: written in its file, or left to ddpsim's defaults.

``ddpsim run`` prints one line per group of inputs (intra-node link, network, DDP overheads,
compute). A default is a number nobody measured for this cluster, so the line names each one
with its value; a user planning a network should see "400 Gbps: ddpsim's default" rather than
a step time that silently assumed it.
"""

from __future__ import annotations

from ddpsim.scenario.schema import OverheadSpec, Scenario, field_specs
from ddpsim.units import format_time

# the overhead terms a user can write, by their scenario key
OVERHEAD_KEYS = tuple(fs.key for _name, fs in field_specs(OverheadSpec))


def bandwidth_text(bandwidth_Bps: float) -> str:
    """Bytes/s as both units people use: network in Gbps, GPU links in GB/s."""
    return f"{bandwidth_Bps * 8 / 1e9:g} Gbps ({bandwidth_Bps / 1e9:.3g} GB/s)"


def values_source(scenario: Scenario, values: dict[str, str], defaults_are: str) -> str:
    """One provenance line for a group of fields: ``values`` maps each dotted field name to its value
    as text; ``defaults_are`` says what the defaults are (e.g. "nothing measured them")."""
    defaulted = [f"{name.rsplit('.', 1)[-1]} {text}".rstrip() for name, text in values.items()
                 if name in scenario.defaulted_fields]
    if not defaulted:
        return f"scenario {scenario.source}"
    listed = ", ".join(defaulted)
    if len(defaulted) == len(values):
        return f"ddpsim's defaults ({defaults_are}), none in scenario {scenario.source}: {listed}"
    return f"scenario {scenario.source}, except ddpsim's defaults ({defaults_are}): {listed}"


def intra_node_source(scenario: Scenario) -> str:
    intra = scenario.cluster.intra_node
    return values_source(scenario, {
        "cluster.intra_node.bandwidth": bandwidth_text(intra.bandwidth_Bps),
        "cluster.intra_node.latency": format_time(intra.latency_s),
    }, f"typical of {intra.type}, not measured")


def inter_node_source(scenario: Scenario) -> str:
    inter = scenario.cluster.inter_node
    return values_source(scenario, {
        "cluster.inter_node.type": inter.type,
        "cluster.inter_node.nic_bandwidth": bandwidth_text(inter.nic_bandwidth_Bps),
        "cluster.inter_node.latency": format_time(inter.latency_s),
        "cluster.inter_node.oversubscription": f"{inter.oversubscription:g}",
        "cluster.inter_node.nics_per_node": "one per GPU" if inter.nics_per_node is None else str(inter.nics_per_node),
        "cluster.inter_node.duplex_factor": f"{inter.duplex_factor:g}",
        "cluster.inter_node.nodes_per_leaf": ("one leaf per rail" if inter.type == "rail-fat-tree" else "1")
        if inter.nodes_per_leaf is None else str(inter.nodes_per_leaf),
        "cluster.inter_node.leaves_per_spine": "one spine" if inter.leaves_per_spine is None
        else str(inter.leaves_per_spine),
        "cluster.inter_node.spine_oversubscription": f"{inter.spine_oversubscription:g}",
    }, "nothing measured them")


# where each overhead default comes from (OverheadSpec's docs say the same)
_OVERHEAD_DEFAULT_ORIGIN = {
    "bucket_launch": "fitted on 4 x H200 NVLink",
    "compute_slowdown": "fitted on 4 x H200 NVLink",
    "hook_cpu": "measured on 4 x H200",
    "copy_bandwidth": "70% of the GPU's memory bandwidth",
}


def _overhead_text(scenario: Scenario, key: str) -> str:
    name = next(n for n, fs in field_specs(OverheadSpec) if fs.key == key)
    value = getattr(scenario.overheads, name)
    if value is None:  # no number: the default is a rule (copy bandwidth) or "never" (in-flight limit)
        return _OVERHEAD_DEFAULT_ORIGIN.get(key, "never blocks")
    if name.endswith("_Bps"):
        text = bandwidth_text(value)
    elif name.endswith("_s"):
        text = format_time(value)
    else:
        text = f"{value:g}"
    return f"{text}, {_OVERHEAD_DEFAULT_ORIGIN.get(key, 'no effect')}"


def overheads_source(scenario: Scenario) -> str:
    values = {f"overheads.{key}": f"({_overhead_text(scenario, key)})" for key in OVERHEAD_KEYS}
    return values_source(scenario, values, "not fitted on this cluster")


def compute_source(scenario: Scenario, measured_in: str | None, model: str, gpu_name: str,
                   default_efficiency: float, measured_how: str = "", class_fit: str = "") -> str:
    """A measured profile (``measured_in``: its file; ``measured_how``: how, where it matters), or an
    estimate from the model's FLOPs and bytes at the GPU's datasheet peak (``class_fit``: the per-kernel-class
    fit that priced it, with its interval; empty: one efficiency)."""
    if measured_in is not None:
        return f"profile {measured_in} (measured{'; ' + measured_how if measured_how else ''})"
    efficiency = scenario.workload.compute_efficiency
    if efficiency is None and class_fit:
        return f"estimated: {model}'s FLOPs, bytes and kernels per layer at {gpu_name}'s datasheet peaks, {class_fit}"
    if efficiency is None:
        where = f"{default_efficiency:g}, the {gpu_name} catalog's default, not measured"
    else:
        where = f"{efficiency:g}, scenario {scenario.source}"
    return f"estimated: {model}'s FLOPs and bytes at {gpu_name}'s datasheet peak x compute_efficiency {where}"
