"""A calibration re-centred on a fresh allocation's probe: its own all-reduce sweeps refit the link classes
they touched, the DDP overheads and noise stay the base's (``ddpsim calibrate DIR --recentre pooled:H200``).

The base is usually a pooled calibration (fitted on every allocation of a GPU kind at once, with the spread
of the allocations' offsets in ``allocation_spread``; how it is fitted and cross-validated is research, in
``validation/pool.py``); a probed class takes the spread measured after a probe.
"""

from __future__ import annotations

import copy
import os
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from ddpsim.calibration.file import SCHEMA
from ddpsim.calibration.shipped import shipped_for_gpu
from ddpsim.errors import ScenarioError
from ddpsim.fitting.calibrate import Measurements, calibrate, gpu_of_folder, load_measurements
from ddpsim.fitting.measurements import Profiles
from ddpsim.fitting.probe_overheads import levels_record, recentre_overheads
from ddpsim.hardware.catalog import get_gpu
from ddpsim.scenario.link_kinds import INTER_NODE_LINK_CLASS


def probe_links(probe: Measurements) -> dict[str, Any]:
    """The link classes fitted on an allocation's own sweeps (``calibrate --links-only``)."""
    if not probe.samples:
        return {}
    return dict(calibrate(probe.samples, [], Profiles(), None, links_only=True,
                          net_probes=probe.net_probes)["link_classes"])


def _per_part(entry: dict[str, Any], part_key: str, parts_key: str) -> dict[str, dict[str, Any]]:
    """A link entry as its parts (world sizes or shapes): its own sub-entries, or itself for its one part."""
    subs = entry.get(part_key)
    if subs:
        return dict(subs)
    parts = entry.get(parts_key) or []
    return {str(p): entry for p in parts}


def recentre(base: dict[str, Any], probed_links: dict[str, Any], keep_shape: bool = False
             ) -> tuple[dict[str, Any], set[tuple[str, str]]]:
    """``base`` with each (link class, GPUs per node) or (network, shape) the probe measured replaced by
    the probe's fit; the DDP overheads stay the pooled ones. Returns the probed parts.

    ``keep_shape``: only the probe's bandwidth replaces the pooled one, the pooled latencies and
    protocol curves stay. One sweep's small sizes fit a latency structure far off the pool's (4 x H100
    NVLink at caps 1 and 5 of a 64-layer model: 131 and 21 ms predicted against 30 and 40 measured on two
    allocations, the pool 25 and 78); the bandwidth, set by the large sizes, is the allocation's level."""
    out = copy.deepcopy(base)
    links = out["link_classes"]
    probed: set[tuple[str, str]] = set()
    for link_class, entry in probed_links.items():
        if link_class == INTER_NODE_LINK_CLASS:
            parts = _per_part(entry, "by_shape", "shapes")
            key = "by_shape"
        else:
            parts = _per_part(entry, "by_world_size", "world_sizes")
            key = "by_world_size"
        if link_class not in links:
            links[link_class] = copy.deepcopy(entry)
        target = links[link_class]
        target.setdefault(key, {})
        for part, sub in parts.items():
            own = {k: v for k, v in sub.items() if k not in ("by_shape", "by_world_size")}
            pooled = (base["link_classes"].get(link_class) or {})
            pooled = (pooled.get(key) or {}).get(part, pooled)
            if keep_shape and pooled and "bandwidth_Bps" in pooled:
                own = {**{k: v for k, v in pooled.items() if k not in ("by_shape", "by_world_size")},
                       "bandwidth_Bps": own["bandwidth_Bps"], "bandwidth_probed": True}
            target[key][part] = copy.deepcopy(own)
            probed.add((link_class, part))
        # the parts the entry now has a fit of its own for (gaps.transfer_gaps reads them)
        listed = "shapes" if link_class == INTER_NODE_LINK_CLASS else "world_sizes"
        names = {str(p) for p in target.get(listed) or []} | set(parts)
        target[listed] = sorted(names) if listed == "shapes" else sorted(int(p) for p in names)
    if "allocation_spread" in out:
        for link_class, spread in out["allocation_spread"].items():
            if any(c == link_class for c, _ in probed) and spread.get("sigma_after_probe") is not None:
                spread["sigma"] = spread["sigma_after_probe"]
                if spread.get("residual_sigma_after_probe") is not None:
                    spread["residual_sigma"] = spread["residual_sigma_after_probe"]
                spread["probed"] = True
    return out, probed


def probe_gpu_kinds(probe_dirs: Sequence[str]) -> set[str]:
    """The catalog GPU kinds (canonical names, as ``measured_on`` records them) the probe's folders name."""
    kinds = set()
    for folder in probe_dirs:
        gpu = gpu_of_folder(folder)
        if gpu:
            try:
                kinds.add(get_gpu(gpu).name)
            except ScenarioError:
                kinds.add(gpu)  # not in the catalog: still another kind than the base's
    return kinds


def _check_probe(base: dict[str, Any], probe: Measurements, probe_dirs: Sequence[str], base_source: str,
                 allow_other_gpu: bool) -> None:
    """A probe re-centres a pool only with sweeps of the pool's GPU kind (another kind's link rates would
    replace the pool's silently), and only with sweeps of several message sizes per link class and shape:
    one size cannot tell a link's bandwidth from its latency."""
    where = ", ".join(probe_dirs)
    measured_on = base.get("measured_on") or {}
    probe_gpus = probe_gpu_kinds(probe_dirs)
    other = sorted(probe_gpus - {measured_on.get("gpu")}) if measured_on.get("gpu") else []
    if other and not allow_other_gpu:
        shipped = shipped_for_gpu(other[0])
        instead = f"ddpsim calibrate {where} --recentre {shipped} --out FILE" if shipped else (
            f"ddpsim calibrate {where} --out FILE (a calibration of its own: measure DDP runs too)")
        raise ScenarioError(f"the probe ran on {', '.join(other)} and {base_source} was measured on {measured_on['gpu']}: "
                            f"run {instead}, or pass --allow-other-gpu", file=where, field="fingerprint.gpu_name")
    sizes: dict[tuple[str, int, int], set[int]] = defaultdict(set)
    for sample in probe.samples:
        sizes[(sample.link_class, sample.world_size, sample.nodes)].add(sample.bytes)
    for (link_class, world, nodes), seen in sorted(sizes.items()):
        if len(seen) < 2:
            raise ScenarioError(f"{link_class} on {nodes}x{world // nodes} GPUs was swept at one message size "
                                f"({min(seen)} bytes), which cannot tell its bandwidth from its latency: probe the "
                                "allocation with sweeps of many sizes (ddpsim measure --plan probe --out DIR)",
                                file=where, field="allreduce.jsonl")


def probe_calibration(base: dict[str, Any], probe_dirs: Sequence[str], base_source: str = "<base>",
                      allow_other_gpu: bool = False) -> tuple[dict[str, Any], list[str]]:
    """A pooled calibration re-centred on an allocation's probe (the all-reduce sweeps under
    ``probe_dirs`` re-centre the links; its DDP steps, where it ran some, the level of the DDP overheads), with a line for every link class the probe did not touch,
    whose interval keeps the pooled allocation spread. Refused without a sweep: a probe that measured
    nothing would return the pooled file under another name; so is a probe of another GPU kind unless
    ``allow_other_gpu`` (recorded in ``probed_from.other_gpu``), and one of a single message size."""
    probe = load_measurements(probe_dirs)
    if not probe.samples:
        raise ScenarioError("no all-reduce sweep (allreduce.jsonl) to re-centre the calibration on: the probe is "
                            "the allocation's sweeps, one per link class it will use", file=", ".join(probe_dirs))
    _check_probe(base, probe, probe_dirs, base_source, allow_other_gpu)
    links = probe_links(probe)
    # one-node classes: the probe's bandwidth on the pool's curves; the network: the probe's own fit
    # (its bandwidth alone did not carry: 4 x H100 4x1, 26.0% mean held out against 8.7% refitted)
    out, probed = recentre(base, {c: e for c, e in links.items() if c != INTER_NODE_LINK_CLASS}, keep_shape=True)
    out, probed_net = recentre(out, {c: e for c, e in links.items() if c == INTER_NODE_LINK_CLASS})
    probed |= probed_net
    out["schema"] = SCHEMA  # a version-2 base is read as it is; what is written is this version's
    out["probed_from"] = {"folders": [os.path.basename(os.path.normpath(d)) for d in probe_dirs],
                          "base": base_source, "parts": sorted(f"{c} {p}" for c, p in probed)}
    probe_gpus = sorted(probe_gpu_kinds(probe_dirs))
    if probe_gpus and probe_gpus != [(base.get("measured_on") or {}).get("gpu")]:
        out["probed_from"]["other_gpu"] = probe_gpus  # allowed (--allow-other-gpu): the probe's kind, not the pool's
    # the probe's DDP steps (the probe plan runs a few at one cap): the overheads' level on this allocation
    out, levels = recentre_overheads(out, probe)
    if levels:
        out["probed_from"]["overheads"] = levels_record(levels)
    touched = {c for c, _ in probed}
    notes = [f"{c}: not in the probe (no sweep of it): the pooled fit and its allocation spread stand for this "
             f"allocation" for c in sorted(set(base.get("link_classes") or {}) - touched)]
    return out, notes
