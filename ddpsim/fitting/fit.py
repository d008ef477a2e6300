"""Fit the links from measurements (``ddpsim calibrate``), without the simulator.

1. Link classes: NCCL-style latency/bandwidth per protocol, fitted to all-reduce sweeps (the
   harness's JSON or nccl-tests output), turned into a link bandwidth, latency and protocol table.
2. The inter-node network, from sweeps across nodes, apart from the intra-node classes.
3. The measured step-to-step and launch-to-launch spread (``fit_noise``).
The DDP overhead terms, fitted by simulating measured runs, are ``overheads.py``'s.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ddpsim.calibration.file import SCHEMA
from ddpsim.collectives import ProtocolTable
from ddpsim.collectives.curves import envelope_s
from ddpsim.collectives.nccl_tuning import NcclTuning
from ddpsim.collectives.schedules import build_schedule, tree_depth, tree_max_degree
from ddpsim.errors import ScenarioError
from ddpsim.fitting.curvefit import (
    PROTOCOL_NAMES,
    UNBOUNDED_BPS,
    fit_nonnegative,
    fit_protocol_rows,
    fit_protocols,
)
from ddpsim.fitting.measured_scenarios import run_class
from ddpsim.fitting.measurements import AllReduceSample, launch_key
from ddpsim.fitting.netprobe import duplex_factor
from ddpsim.outdir import atomic_write_text
from ddpsim.scenario.link_kinds import INTER_NODE_LINK_CLASS, LINK_CLASSES, nccl_transport_of_class
from ddpsim.spread import sigma_from_p10_p90

INTER_NODE_TRANSPORT = nccl_transport_of_class(INTER_NODE_LINK_CLASS)

MIN_FIT_BYTES = 4096

def fit_link_class(samples: Sequence[AllReduceSample]) -> dict[str, Any]:
    """One link class's entry of the calibration file, with the fit's own errors on its samples."""
    used = [s for s in samples if s.bytes >= MIN_FIT_BYTES]
    if len(used) < 3:
        raise ScenarioError("fewer than three all-reduce sizes to fit", file=samples[0].source if samples else None)
    _check_reaches_bandwidth(used)
    link_class = used[0].link_class
    fits = fit_protocols([s.bytes for s in used], [s.world_size for s in used], [s.time_s for s in used], with_floor=True)
    floor_s = fits.pop("floor").base_s
    fits = _named_by_nccl_log(fits, used)
    chosen = {envelope_s(fits, s.bytes, s.world_size)[1] for s in used}
    # One-node classes keep the envelope: on the 1x4 sweeps LL128 ran at two sizes only, and curves
    # fitted per logged protocol priced it 35x too slow at 4-8 MiB in the DDP check; the network across
    # nodes has its own per-protocol fit with NCCL's latency structure (_network_entry)
    reference_Bps = max(fits[p].busbw_Bps for p in chosen)
    if link_class not in LINK_CLASSES:
        raise ScenarioError(
            f"unknown link class {link_class!r} (known: {', '.join(LINK_CLASSES)})", file=used[0].source, field="link_class"
        )
    transport = nccl_transport_of_class(link_class)
    base, hops, efficiency = {}, {}, {}
    widest = max(chosen, key=lambda p: fits[p].busbw_Bps)
    for protocol in PROTOCOL_NAMES:
        # a protocol never the fastest on the measured sizes has no trustworthy fit of its own; NCCL's
        # tuning may still pick it (forced algorithms, other sizes), so it is priced as the measured
        # curve of the widest protocol rather than as an unconstrained extrapolation
        fit = fits[protocol if protocol in chosen else widest]
        base[protocol], hops[protocol] = fit.base_s, fit.hop_s
        efficiency[protocol] = min(1.0, fit.busbw_Bps / reference_Bps)
    # the protocols NCCL's own log showed it running (it enables LL128 only on some systems: never
    # across the sockets network of the multi-node campaigns); without a log, all of them
    ran = {s.nccl_protocol for s in used if s.nccl_protocol}
    table = ProtocolTable(
        base_latency_s={(family, p): base[p] for family in ("ring", "tree") for p in PROTOCOL_NAMES},
        hop_latency_s={(transport, family, p): hops[p] for family in ("ring", "tree") for p in PROTOCOL_NAMES},
        transport_efficiency={(transport, p): efficiency[p] for p in PROTOCOL_NAMES},
        hop_latency_mode="absolute",
        protocols=tuple(p for p in PROTOCOL_NAMES if p in ran) if ran else PROTOCOL_NAMES,
        nccl_tuning=_logged_tuning(used),
    )
    # the fit's own error is its envelope's: a curve is named after the protocol NCCL ran most where it
    # is the fastest and prices nothing else (a Simple curve fitted on 1 GiB rows says nothing of an
    # 8 KiB row NCCL ran on Simple)
    errors = [abs(envelope_s(fits, s.bytes, s.world_size, floor_s)[0] / s.time_s - 1) * 100 for s in used]
    return {
        "bandwidth_Bps": reference_Bps,
        "latency_s": min(hops[p] for p in chosen),
        # NCCL runs rings inside one node (its tree is slower there); the fit is of rings
        "algorithm": "ring",
        # a single call never completes faster than this (the launch path, timed from the host)
        "call_floor_s": floor_s,
        "protocol_table": table.to_dict(),
        "protocol_fits": {
            p: {"base_latency_s": f.base_s, "hop_latency_s": f.hop_s, "bus_bandwidth_Bps": f.busbw_Bps,
                "selected": p in chosen}
            for p, f in fits.items()
        },
        "samples": len(used),
        # where the names and the enabled protocols came from: the tool says when it did not know
        "curves_fitted": "lower envelope of three curves",
        "protocols_from": "NCCL's log in the sweeps" if ran else
                          "no NCCL log: curves named in bandwidth order, every protocol left enabled (NCCL's default)",
        "world_sizes": sorted({s.world_size for s in used}),
        "sources": sorted({os.path.basename(s.source) for s in used}),
        "fit_mean_error_pct": sum(errors) / len(errors),
        "fit_max_error_pct": max(errors),
    }


MIN_PROTOCOL_SIZES = 3  # distinct sizes a protocol's own rows need for a curve of its own


def _logged_tuning(samples: Sequence[AllReduceSample]) -> NcclTuning | None:
    """NCCL's logged cost table, where every sample's launch logged the same one for one shape.

    The table is NCCL's belief about one communicator (ranks, nodes, the NIC speed it assumed), so
    a fit pooled over shapes, or over launches whose tables differ, carries none: the model then
    plays NCCL's choice from its own prices."""
    tunings = [s.nccl_tuning for s in samples]
    first = tunings[0] if tunings else None
    if first is None or any(t is None for t in tunings):
        return None

    def numbers(t: NcclTuning) -> tuple[object, ...]:
        return (t.ranks, t.nodes, t.channels, sorted(t.latency_s.items()), sorted(t.algbw_Bps.items()))

    return first if all(numbers(t) == numbers(first) for t in tunings if t is not None) else None


def _named_by_nccl_log(fits: dict[str, Any], samples: Sequence[AllReduceSample]) -> dict[str, Any]:
    """Name each fitted curve after the protocol NCCL's log says it ran at the sizes where that curve
    is the fastest (most such sizes win); curves the log does not name keep their bandwidth order.
    Two curves of nearly the same bandwidth cannot be told apart by bandwidth; the log can."""
    votes: dict[tuple[str, str], int] = defaultdict(int)
    for s in samples:
        if s.nccl_protocol:
            votes[(envelope_s(fits, s.bytes, s.world_size)[1], s.nccl_protocol)] += 1
    if not votes:
        return fits
    names: dict[str, str] = {}
    for (curve, protocol), _count in sorted(votes.items(), key=lambda kv: -kv[1]):
        if curve not in names and protocol not in names.values():
            names[curve] = protocol
    rest = [p for p in PROTOCOL_NAMES if p not in names.values()]
    for curve in PROTOCOL_NAMES:  # in bandwidth order (fit_protocols names them so)
        if curve not in names:
            names[curve] = rest.pop(0)
    return {names[curve]: fit for curve, fit in fits.items()}


MIN_BANDWIDTH_SPAN = 2.0  # the largest size's time over the smallest's, per sweep


def _check_reaches_bandwidth(samples: Sequence[AllReduceSample]) -> None:
    """A sweep whose largest size takes barely longer than its smallest never left the latency floor
    (a run cut short): its bandwidth would be an extrapolation, e.g. 54 GB/s for 350 GB/s NVLink."""
    by_sweep: dict[tuple[str, int, int], list[AllReduceSample]] = defaultdict(list)
    for s in samples:
        by_sweep[(s.source, s.world_size, s.nodes)].append(s)
    for (source, world, _nodes), group in by_sweep.items():
        smallest = min(group, key=lambda s: s.bytes)
        largest = max(group, key=lambda s: s.bytes)
        if largest.time_s < MIN_BANDWIDTH_SPAN * smallest.time_s:
            raise ScenarioError(
                f"the sweep on {world} GPUs stops at {largest.bytes} bytes, still on its latency floor "
                f"({largest.time_s * 1e6:.1f} us vs {smallest.time_s * 1e6:.1f} us at {smallest.bytes} bytes): "
                "no bandwidth can be fitted (a truncated run?)", file=source, field="bytes")


def fit_links(samples: Iterable[AllReduceSample], net_probes: Sequence[dict[str, Any]] = ()) -> dict[str, dict[str, Any]]:
    """One entry per link class; sweeps across nodes (nodes > 1) fit the inter-node class ``net``,
    whose endpoint's duplex factor comes from ``net_probes`` (the harness's --net-probe records)."""
    by_class: dict[str, list[AllReduceSample]] = defaultdict(list)
    for sample in samples:
        if sample.nodes == 1 and sample.algorithm == "tree":
            continue  # the intra-node fit is of rings, what NCCL runs inside one node
        by_class[INTER_NODE_LINK_CLASS if sample.nodes > 1 else sample.link_class].append(sample)
    fitted: dict[str, dict[str, Any]] = {}
    # one-node classes first: a network fit takes its base and intra-node hop latencies from them
    for link_class, group in sorted(by_class.items(), key=lambda kv: (kv[0] == INTER_NODE_LINK_CLASS, kv[0])):
        if link_class == INTER_NODE_LINK_CLASS:
            one_node = {k: v for k, v in fitted.items() if k != INTER_NODE_LINK_CLASS}
            fitted[link_class] = fit_network(group, one_node, [s for k, g in by_class.items() if k in one_node for s in g],
                                             duplex=duplex_factor(net_probes))
            continue
        entry = fit_link_class(group)
        worlds = sorted({s.world_size for s in group})
        if len(worlds) > 1:
            # NCCL's bandwidth on one host does not always follow 2(n-1)/n (shared host memory,
            # sockets): a fit per measured world size is used where the scenario matches it
            entry["by_world_size"] = {
                str(w): fit_link_class([s for s in group if s.world_size == w]) for w in worlds
            }
        fitted[link_class] = entry
    return fitted


def shape_key(nodes: int, world_size: int) -> str:
    return f"{nodes}x{world_size // nodes}"


def fit_network(samples: Sequence[AllReduceSample], one_node: dict[str, dict[str, Any]] | None = None,
                one_node_samples: Sequence[AllReduceSample] = (), duplex: dict[str, Any] | None = None) -> dict[str, Any]:
    """The inter-node network, from all-reduce sweeps across nodes, apart from the intra-node classes.

    A ring across nodes waits on its slowest hop every step, the network's: so one per-hop latency
    and one bandwidth describe every shape, and the pooled fit is what transfers to a shape that was
    not measured. Each measured shape also keeps its own fit, used when a scenario has that shape.
    Where the sweeps say which algorithm ran, the ring's curves are fitted on the forced rings and
    the tree's own network hop and bandwidth on the forced trees (``_tree_network_fit``).
    ``one_node_samples``: the one-node sweeps, whose rows give the base and intra-node hop latency.
    ``duplex``: the endpoint's measured duplex factor (``netprobe.duplex_factor``). A GPU that sends
    and receives across nodes at once gets that fraction of its one-way rate (NCCL's socket proxy);
    the fitted bandwidth is the one-way rate: a ring with one GPU per node (every endpoint both ways)
    measures duplex x that rate, a ring with several (the node's last GPU sends, its first receives,
    NCCL's channels all in one order on one NIC) the rate itself, and a tree (each node's tree GPU
    both ways) duplex x the rate. So 4x1 and 2x2 rings, 3.4 and 6.6 GB/s per hop on one allocation,
    describe one endpoint. Without a measurement the endpoint is taken as full duplex, and the entry
    says so.
    """
    for s in samples:
        if s.world_size % s.nodes:
            raise ScenarioError(
                f"{s.world_size} GPUs do not split into {s.nodes} nodes", file=s.source, field="nodes"
            )
    rings = [s for s in samples if s.algorithm == "ring"]
    chosen = rings or samples
    intra_name = _one_node_class(chosen, one_node or {})
    intra = (one_node or {}).get(intra_name) if intra_name else None
    inside = [s for s in one_node_samples if s.link_class == intra_name]
    used = [replace(s, link_class=INTER_NODE_LINK_CLASS) for s in chosen]
    trees = [replace(s, link_class=INTER_NODE_LINK_CLASS) for s in samples if s.algorithm == "tree" and rings]
    factor = duplex["value"] if duplex else 1.0
    source = (f"measured: --net-probe, {len(duplex['per_launch'])} launches ("
              + ", ".join(f"{k} {v:.2f}" for k, v in duplex["per_launch"].items()) + f"); {duplex['how']}; "
              + _rounds_text(duplex["rounds"], duplex["round_outliers"])
              if duplex else "not measured (no netprobe.jsonl): full duplex assumed")
    entry = _with_duplex(_network_entry(used, intra_name, intra, inside, trees, factor), factor, source)
    shapes = sorted({shape_key(s.nodes, s.world_size) for s in used})
    entry["shapes"] = shapes
    entry["algorithm_fitted"] = "ring" if rings else "NCCL's default choice"
    if len(shapes) > 1:
        entry["by_shape"] = {
            key: _with_duplex(_network_entry([s for s in used if shape_key(s.nodes, s.world_size) == key], intra_name,
                                             intra, inside, [s for s in trees if shape_key(s.nodes, s.world_size) == key],
                                             factor), factor, source)
            for key in shapes
        }
    return entry


def _one_node_class(samples: Sequence[AllReduceSample], one_node: dict[str, dict[str, Any]]) -> str | None:
    """The one-node class whose fit gives a network fit its base and intra-node hop latencies: the
    class the multi-node sweeps ran inside their nodes, else the only one fitted (the base latency
    is the host's launch path and NCCL's kernel, not the link's)."""
    inside = {s.link_class for s in samples}
    matching = sorted(inside & set(one_node))
    if matching:
        return matching[0]
    return next(iter(one_node)) if len(one_node) == 1 else None


def _rounds_text(rounds: Sequence[float], outliers: dict[str, float]) -> str:
    """How far single probe rounds spread around the factor (a user's probe is one such round), naming
    any round far off the others."""
    if len(rounds) < 2:
        return "one probe round: its spread is not measured"
    text = f"{len(rounds)} probe rounds from {min(rounds):.2f} to {max(rounds):.2f} (median {statistics.median(rounds):.2f})"
    if outliers:
        text += "; far off the others: " + ", ".join(f"{name} {value:.2f}" for name, value in outliers.items())
    return text


def _with_duplex(entry: dict[str, Any], duplex_factor: float, source: str) -> dict[str, Any]:
    """The entry with the duplex factor its bandwidth was fitted under: the measured one where NCCL's
    structure was fitted, 1 for an envelope fit (its bandwidth is what each shape's ring got)."""
    if str(entry.get("latency_structure", "")).startswith("NCCL's"):
        return dict(entry, duplex_factor=duplex_factor, duplex_source=source)
    return dict(entry, duplex_factor=1.0, duplex_source=f"not applied (envelope fit of each shape's rings); {source}")


def ring_duplex_multiplier(gpus_per_node: int, duplex_factor: float) -> float:
    """The fraction of the endpoint's one-way rate a ring across nodes gets per network hop: with one
    GPU per node every endpoint sends and receives (``duplex_factor``), with several the node's last
    GPU only sends and its first only receives (1). That is NCCL's ring on one NIC per node (every
    channel in one order), what the harness's emulated nodes and ``measured_scenarios`` have; where
    a scenario gives a node several NICs, the model rotates each channel's order so that every GPU
    sends and receives, and a 2x2 ring pays the factor too."""
    return duplex_factor if gpus_per_node == 1 else 1.0


def _network_entry(used: Sequence[AllReduceSample], intra_name: str | None, intra: dict[str, Any] | None,
                   inside: Sequence[AllReduceSample] = (), trees: Sequence[AllReduceSample] = (),
                   duplex_factor: float = 1.0) -> dict[str, Any]:
    """The network's entry: the envelope fit of ``fit_link_class``, and where NCCL's log names every
    row's protocol and a one-node fit exists, NCCL's latency structure in its place (tuning.cc
    ``ncclTopoTuneModel``: ring latency = base + intra-node hops x intraLat + inter-node steps x
    interLat; tree = base + 2 (chain hops x intraLat + log2(nodes) x interLat)). One world size per
    shape cannot tell a per-hop latency from the base (the envelope fit then puts the whole ring's
    latency, six hops on 2x2, into the base, which the tree also pays: tree 64 KiB priced 678 us
    against 80 measured); the one-node rows (two world sizes) can: per protocol NCCL's log names,
    base + 2(n-1) hop fitted on those rows (``_one_node_latencies``), so only the network's hop
    latency and bandwidth are fitted here, per protocol on its own rows.
    The hops counted are the ring schedule's own (``schedules.build_schedule``), so the model prices
    the fitted structure exactly; the fitted latencies are measured, so NCCL's model terms that
    would add to them (ring plateau, net overhead floor, ring LL's quarter bandwidth) are off.
    ``trees``: forced-Tree rows of the same shapes; the tree's own network hop and bandwidth are
    fitted on them (``_tree_network_fit``), and the entry says when there were none."""
    entry = fit_link_class(used)
    if intra is None or not all(s.nccl_protocol for s in used):
        entry["latency_structure"] = "envelope fit (no NCCL log naming every row's protocol, or no one-node fit)"
        return entry
    assert intra_name is not None
    intra_table = ProtocolTable.from_dict(intra["protocol_table"])
    intra_transport = nccl_transport_of_class(intra_name)
    floor_s = float(intra.get("call_floor_s", 0.0))
    base_s, intra_hop_s = _one_node_latencies(inside, intra_table, intra_transport)
    counts = {key: _ring_hops(*key) for key in {(s.world_size, s.world_size // s.nodes) for s in used}}

    def fixed_s(s: AllReduceSample, protocol: str) -> float:
        intra_hops, _ = counts[(s.world_size, s.world_size // s.nodes)]
        return base_s[protocol] + intra_hops * intra_hop_s[protocol]

    # protocol -> (net hop s, bus bandwidth B/s)
    def volume(s: AllReduceSample) -> float:
        # bytes at the endpoint's one-way rate: a both-ways endpoint moves them at duplex x that rate
        return s.bytes * 2 * (s.world_size - 1) / s.world_size / ring_duplex_multiplier(s.world_size // s.nodes,
                                                                                         duplex_factor)

    fits = _hop_and_bandwidth_per_protocol(
        used, hops=lambda s: counts[(s.world_size, s.world_size // s.nodes)][1], volume=volume, fixed_s=fixed_s)
    if "simple" not in fits:
        entry["latency_structure"] = "envelope fit (no Simple rows to fit the network's bandwidth on)"
        return entry
    reference_Bps = fits["simple"][1]
    # a protocol NCCL never ran across the network here is priced as Simple (NCCL disables LL128 there)
    hop = {p: fits.get(p, fits["simple"])[0] for p in PROTOCOL_NAMES}
    bus = {p: fits.get(p, fits["simple"])[1] for p in PROTOCOL_NAMES}
    efficiency = {p: min(1.0, bus[p] / reference_Bps) for p in PROTOCOL_NAMES}
    tree = _tree_network_fit(trees, base_s, intra_hop_s, reference_Bps * duplex_factor, efficiency)
    tree_hop = {p: tree["hop_latency_s"][p] for p in PROTOCOL_NAMES} if tree else hop
    ran = {s.nccl_protocol for s in used if s.nccl_protocol}
    default = ProtocolTable()
    protocol_efficiency = {k: v for k, v in default.algorithm_protocol_efficiency.items()
                           if not (k[0] == "ring" and k[2] == "multi-node")}
    if tree:
        # the tree's measured bandwidth replaces NCCL's model terms for it across nodes
        protocol_efficiency = {k: v for k, v in protocol_efficiency.items() if not (k[0] == "tree" and k[2] == "multi-node")}
        protocol_efficiency.update({("tree", p, "multi-node"): tree["bandwidth_factor"][p] for p in PROTOCOL_NAMES})
    table = ProtocolTable(
        base_latency_s={(family, p): base_s[p] for family in ("ring", "tree") for p in PROTOCOL_NAMES},
        # the intra-node hops the base was fitted with travel with it (they override the one-node
        # class's own for a collective across nodes)
        hop_latency_s={**{(intra_transport, family, p): intra_hop_s[p] for family in ("ring", "tree") for p in PROTOCOL_NAMES},
                       **{(INTER_NODE_TRANSPORT, "ring", p): hop[p] for p in PROTOCOL_NAMES},
                       **{(INTER_NODE_TRANSPORT, "tree", p): tree_hop[p] for p in PROTOCOL_NAMES}},
        transport_efficiency={(INTER_NODE_TRANSPORT, p): efficiency[p] for p in PROTOCOL_NAMES},
        hop_latency_mode="absolute",
        protocols=tuple(p for p in PROTOCOL_NAMES if p in ran),
        nccl_tuning=_logged_tuning(used),
        ring_plateau_factor=1.0,
        net_overhead_s={},
        algorithm_protocol_efficiency=protocol_efficiency,
    )
    if tree:
        # a fitted tree's bandwidth is measured: NCCL's 0.92 and its size correction would add to it
        table = replace(table, algorithm_efficiency={}, tree_size_correction={})

    def time_s(s: AllReduceSample) -> float:
        protocol = s.nccl_protocol or "simple"
        _, inter_hops = counts[(s.world_size, s.world_size // s.nodes)]
        transfer_s = volume(s) / bus[protocol]
        return max(floor_s, fixed_s(s, protocol) + inter_hops * hop[protocol] + transfer_s)

    errors = [abs(time_s(s) / s.time_s - 1) * 100 for s in used]
    entry.update({
        "bandwidth_Bps": reference_Bps,
        "latency_s": min(hop[p] for p in ran if p in fits) if ran & set(fits) else hop["simple"],
        "call_floor_s": floor_s,
        "protocol_table": table.to_dict(),
        "protocol_fits": {
            p: {"base_latency_s": base_s[p], "hop_latency_s": hop[p],
                "bus_bandwidth_Bps": bus[p], "selected": p in ran, "fitted_rows": p in fits}
            for p in PROTOCOL_NAMES
        },
        "latency_structure": (f"NCCL's: base and intra-node hop per protocol on the one-node rows of {intra_name} "
                              "NCCL's log names, network hop and bandwidth fitted per protocol on the rows NCCL's "
                              f"log names; call floor from link_classes.{intra_name}"),
        "tree_fit": tree or {"fitted": False,
                             "note": "no forced-Tree sweeps across nodes: the tree is priced with the ring's network "
                                     "hop and NCCL's tree bandwidth terms, not measured"},
        "fit_mean_error_pct": sum(errors) / len(errors),
        "fit_max_error_pct": max(errors),
    })
    return entry


def _one_node_latencies(inside: Sequence[AllReduceSample], intra_table: ProtocolTable,
                        intra_transport: str) -> tuple[dict[str, float], dict[str, float]]:
    """(base s, intra-node hop s) per protocol, each fitted on the one-node rows NCCL's log says ran
    it (``fit_protocol_rows``; 1x2 and 1x4 tell the hop from the base). Not the one-node class's
    envelope curves: there Simple wins only from 2 MiB, where its base is not determined (815 us
    fitted on the H200 multi-node campaign against 31-44 us from its own rows), and every network
    row then started from that base. A protocol without rows of its own takes Simple's; without
    any rows (no log), the one-node class's table."""
    fitted: dict[str, tuple[float, float]] = {}
    for protocol in PROTOCOL_NAMES:
        rows = _fit_rows(inside, protocol)
        if len({s.bytes for s in rows}) >= MIN_PROTOCOL_SIZES:
            f = fit_protocol_rows([s.bytes for s in rows], [s.world_size for s in rows], [s.time_s for s in rows])
            fitted[protocol] = (f.base_s, f.hop_s)
    if "simple" not in fitted:
        return ({p: intra_table.base_latency("ring", p) for p in PROTOCOL_NAMES},
                {p: intra_table.hop_latency(intra_transport, "ring", p, 0.0) for p in PROTOCOL_NAMES})
    return ({p: fitted.get(p, fitted["simple"])[0] for p in PROTOCOL_NAMES},
            {p: fitted.get(p, fitted["simple"])[1] for p in PROTOCOL_NAMES})


def _tree_network_fit(trees: Sequence[AllReduceSample], base_s: dict[str, float], intra_hop_s: dict[str, float],
                      ring_bus_Bps: float, efficiency: dict[str, float]) -> dict[str, Any] | None:
    """The tree's own network hop latency and bandwidth per protocol, from forced-Tree rows; None
    where there are no Simple tree rows.

    Latency, NCCL's tree structure (tuning.cc): base + 2 (chain hops x intra hop + depth x tree net
    hop), depth = ``schedules.tree_depth`` (log2 of the nodes), base and intra hop as the ring's.
    The ring's network hop does not transfer: on the H200 campaign a tree's network hop costs
    ~15 us where the ring's Simple step costs ~53 us (tree 2x2 below 1 MiB was 70-80% too slow).
    Bandwidth: the model's tree moves degree x S/2 through the busiest node's NIC per direction
    (``schedules.tree_max_degree``: both trees' edges at that node, S/2 each) on the NIC the
    ring's fit sized. Measured on the H200 campaign (forced Tree vs forced Ring, 1 GiB), the tree
    gets less than that NIC: per direction 3.06 GB/s (2x2), 3.5 (2x1), 3.06 (4x1) against the
    ring's 5.1, 3.9, 3.5. Why 2x2 most: NCCL's log (``Trees [0] 1/2/-1->0->-1 [1]
    1/-1/-1->0->2``, ``Channel 00/02 : 0 1 2 3``) puts both directions of both tree channels'
    network traffic on one GPU's proxy and socket threads (rank 0), where the ring sends from rank
    1 and receives on rank 0: one process moves 2S through sockets for the tree against 1.5S for
    the ring. Where each GPU is its own node (2x1, 4x1) both algorithms send and receive on every
    GPU, and the tree is within 12% of the NIC model. The measured ratio is kept as one factor per
    protocol (``bandwidth_factor``, the model's ``algorithm_protocol_efficiency`` for the tree
    across nodes), fitted with the hop latency on the rows NCCL's log names, per shape where the
    entry is a shape's."""
    if not trees:
        return None

    def chain_s(s: AllReduceSample, protocol: str) -> float:
        return base_s[protocol] + 2 * (s.world_size // s.nodes - 1) * intra_hop_s[protocol]

    # protocol -> (tree net hop s, NIC bytes/s per direction)
    fits = _hop_and_bandwidth_per_protocol(
        trees, hops=lambda s: 2 * tree_depth(s.nodes), volume=lambda s: tree_max_degree(s.nodes) * s.bytes / 2,
        fixed_s=chain_s)
    rows_used = {p: len(_fit_rows(trees, p)) for p in fits}
    if "simple" not in fits:
        return None
    # the model's NIC for protocol p runs at ring_bus_Bps x efficiency[p]; the factor (in (0, 2],
    # ProtocolTable's range) brings the tree's flows to the measured rate. A protocol without tree
    # rows of its own (LL ran the tree at one size at most) keeps Simple's hop and tree/ring ratio
    # on its own ring efficiency: Simple's absolute rate would make a tree LL 3.6x its ring LL
    factor = {p: float(min(2.0, max(1e-3, nic_Bps / (ring_bus_Bps * efficiency[p]))))
              for p, (_, nic_Bps) in fits.items()}
    hop = {p: fits.get(p, fits["simple"])[0] for p in PROTOCOL_NAMES}
    factor = {p: factor.get(p, factor["simple"]) for p in PROTOCOL_NAMES}
    nic = {p: ring_bus_Bps * efficiency[p] * factor[p] for p in PROTOCOL_NAMES}
    return {
        "fitted": True,
        "hop_latency_s": hop,
        "nic_Bps_per_direction": nic,
        "bandwidth_factor": factor,
        "rows": rows_used,
        "note": "forced-Tree rows: tree network hop and bandwidth per protocol NCCL's log names "
                "(a protocol with fewer than three sizes takes Simple's)",
    }


def _fit_rows(samples: Sequence[AllReduceSample], protocol: str) -> list[AllReduceSample]:
    return [s for s in samples if s.nccl_protocol == protocol and s.bytes >= MIN_FIT_BYTES]


def _hop_and_bandwidth_per_protocol(
    samples: Sequence[AllReduceSample],
    hops: Callable[[AllReduceSample], float],
    volume: Callable[[AllReduceSample], float],
    fixed_s: Callable[[AllReduceSample, str], float],
) -> dict[str, tuple[float, float]]:
    """Per protocol NCCL's log names on at least ``MIN_PROTOCOL_SIZES`` sizes: (hop latency s,
    bandwidth B/s) of time = fixed + hops x hop + volume / bandwidth, fitted non-negative on that
    protocol's own rows (``fit_nonnegative``)."""
    fits = {}
    for protocol in PROTOCOL_NAMES:
        rows = _fit_rows(samples, protocol)
        if len({s.bytes for s in rows}) < MIN_PROTOCOL_SIZES:
            continue
        x = fit_nonnegative([np.array([hops(s) for s in rows], dtype=float), np.array([volume(s) for s in rows])],
                            np.array([fixed_s(s, protocol) for s in rows]), np.array([s.time_s for s in rows]))
        fits[protocol] = (float(x[0]), float(1.0 / x[1]) if x[1] > 0 else UNBOUNDED_BPS)
    return fits


def _ring_hops(world_size: int, gpus_per_node: int) -> tuple[int, int]:
    """(intra-node, inter-node) hops of the ring's latency path as the model's schedule runs it."""
    path = build_schedule("ring", world_size, gpus_per_node, 1.0, 1)[0].latency_path or ()
    inter = sum(1 for a, b in path if a // gpus_per_node != b // gpus_per_node)
    return len(path) - inter, inter


def write_calibration(path: str, link_classes: dict[str, Any], overheads: dict[str, Any],
                      meta: dict[str, Any]) -> dict[str, Any]:
    """Write the calibration file (ddpsim/schemas/calibration.schema.json) and return what was written."""
    from ddpsim.jsonfile import non_finite_field
    from ddpsim.schemas import document

    data = document("calibration", {"schema": SCHEMA, "link_classes": link_classes, "overheads": overheads, **meta})
    bad = non_finite_field(data)
    if bad:
        # json.dumps would write a bare NaN token, which no JSON reader (ddpsim's included) accepts
        raise ScenarioError("the fit gave a value that is not a finite number; nothing was written", file=path,
                            field=bad)
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return data


def fit_noise(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Step-to-step and launch-to-launch spread per link class, as lognormal sigmas.

    Step to step: each run's p10 and p90 over its steps, ln(p90/p10) / (2 z90), averaged over runs.
    Launch to launch: the same configuration measured in two launches differs by ln(m1/m2), whose
    variance is twice the launch sigma squared. Only classes with repeated configurations get a
    launch sigma; the others say so.
    """
    by_class: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        by_class[run_class(run)].append(run)
    noise: dict[str, dict[str, Any]] = {}
    for link_class, group in sorted(by_class.items()):
        step = [
            sigma_from_p10_p90(r["step_s_p10"], r["step_s_p90"])
            for r in group
            if r.get("step_s_p10") and r.get("step_s_p90") and r["step_s_p90"] >= r["step_s_p10"] > 0
        ]
        configs: dict[tuple[Any, ...], dict[str, float]] = defaultdict(dict)
        for r in group:
            key = (r["model"], r["world_size"], float(r["bucket_cap_mb"]), r.get("variant"), r.get("comm_hook"),
                   r.get("nodes", 1))
            # launches are named per campaign ("nvlink_w4_0" in every one): two campaigns' launches are two
            configs[key].setdefault(launch_key(r), float(r["step_s_median"]))
        diffs = [
            math.log(a / b)
            for by_launch in configs.values()
            for (la, a), (lb, b) in _pairs(sorted(by_launch.items()))
        ]
        entry: dict[str, Any] = {
            "step_sigma": sum(step) / len(step) if step else None,
            "step_runs": len(step),
            "launch_sigma": math.sqrt(sum(d * d for d in diffs) / (2 * len(diffs))) if diffs else None,
            "launch_pairs": len(diffs),
        }
        noise[link_class] = entry
    return noise


def _pairs(items: Sequence[Any]) -> list[tuple[Any, Any]]:
    return [(items[i], items[j]) for i in range(len(items)) for j in range(i + 1, len(items))]
