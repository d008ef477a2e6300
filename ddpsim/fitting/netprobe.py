"""The network endpoint's duplex factor, measured by the harness's ``--net-probe`` (netprobe.jsonl).

A pattern of flows between nodes is "both ways" when every endpoint in it sends and receives, "one
way" when every endpoint only sends or only receives (which pattern is which follows from its flows,
not from its name). Per launch, the duplex factor is the median per-flow rate of its both-ways
patterns over the median of its one-way patterns, taken on NCCL's collectives between two endpoints
(a two-rank all-reduce against a broadcast) where the launch measured them, else on its
point-to-point patterns; the campaign's is the median over its launches, reported with each launch's
value and the range of its single probe rounds (one round moves by a median 0.06 between the rounds of a
launch and between launches of one allocation, up to 0.26: validation/evidence/stages/multinode_noise.py).
"""

from __future__ import annotations

import os
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from ddpsim.errors import ScenarioError
from ddpsim.fitting.measurements import launch_key, read_jsonl

SCHEMA = "ddpsim.netprobe/1"
# how far one probe round may sit from the median of all before it is named: twice the largest spread
# between two launches of one shape on one allocation (0.137 on U, V and W; validation/evidence/stages/multinode_noise.py)
ROUND_OUTLIER = 0.2


def read_net_probes(path: str) -> list[dict[str, Any]]:
    """The ok records of one netprobe.jsonl, each checked for what the duplex factor reads."""
    records = []
    for line, record in enumerate(read_jsonl(path), start=1):
        if record.get("schema") != SCHEMA or record.get("status") != "ok":
            continue
        flows, rate = record.get("flows"), record.get("flow_GBps")
        if not (isinstance(flows, list) and flows and all(isinstance(f, list) and len(f) == 2 for f in flows)):
            raise ScenarioError("expected a list of [source, destination] rank pairs", file=f"{path}:{line}",
                                field="flows")
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0:
            raise ScenarioError(f"expected a positive rate, got {rate!r}", file=f"{path}:{line}", field="flow_GBps")
        _check_probe(record, f"{path}:{line}")
        probe_round = record.get("probe_round", 0)  # absent before --net-probe-rounds: one round per launch
        if isinstance(probe_round, bool) or not isinstance(probe_round, int) or probe_round < 0:
            raise ScenarioError(f"expected a round number (0, 1, ...), got {probe_round!r}", file=f"{path}:{line}",
                                field="probe_round")
        records.append(dict(record, _source=os.path.abspath(path), _line=line))
    return records


# what the harness's probe writes (ddpsim.measure.netprobe): a name outside these is a record nobody
# knows how to read, so it is refused rather than counted as one way or both ways by its flows alone
PROBE_BENCHES = ("net_p2p", "net_collective")
PROBE_PATTERNS = ("one_way", "two_way", "shift_all", "ring_net_hops", "one_way_pairs", "collective_one_way",
                  "collective_two_way")


def _check_probe(record: dict[str, Any], where: str) -> None:
    """Known bench and pattern, flows between distinct ranks of the launch, and positive times."""
    for key, known in (("bench", PROBE_BENCHES), ("pattern", PROBE_PATTERNS)):
        if record.get(key) not in known:
            raise ScenarioError(f"unknown {key} {record.get(key)!r} (known: {', '.join(known)})", file=where, field=key)
    world = record.get("world_size")
    for source, destination in record["flows"]:
        for rank in (source, destination):
            if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0 \
                    or (isinstance(world, int) and rank >= world):
                raise ScenarioError(f"expected ranks 0 to {world - 1 if isinstance(world, int) else 'N-1'}, got {rank!r}",
                                    file=where, field="flows")
        if source == destination:
            raise ScenarioError(f"a flow from rank {source} to itself", file=where, field="flows")
    for key in ("time_s_median", "time_s_p10", "time_s_p90"):
        value = record.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or not value > 0):
            raise ScenarioError(f"expected a positive time in seconds, got {value!r}", file=where, field=key)


def direction(flows: Sequence[Sequence[int]]) -> str | None:
    """'both' (every endpoint sends and receives), 'one' (each only sends or only receives), else None."""
    senders = {int(f[0]) for f in flows}
    receivers = {int(f[1]) for f in flows}
    if senders == receivers:
        return "both"
    if not senders & receivers:
        return "one"
    return None


def _ratios(records: Sequence[dict[str, Any]], key: Callable[[dict[str, Any]], Any] = launch_key) -> dict[Any, float]:
    """Per ``key`` (default: the launch): median both-ways per-flow rate over median one-way rate, where
    both were measured."""
    by_key: dict[Any, dict[str, list[float]]] = defaultdict(lambda: {"both": [], "one": []})
    for record in records:
        kind = direction(record["flows"])
        if kind is not None:
            # launch ids repeat in every campaign: a launch is its campaign folder and its id
            by_key[key(record)][kind].append(float(record["flow_GBps"]))
    return {
        k: statistics.median(rates["both"]) / statistics.median(rates["one"])
        for k, rates in sorted(by_key.items()) if rates["both"] and rates["one"]
    }


def round_ratios(records: Sequence[dict[str, Any]]) -> dict[tuple[str, int], float]:
    """(launch, probe round) -> the ratio of that round (a round: one pass over the patterns; older probes
    have one per launch), on the kind of pattern that decides its launch: NCCL's collectives where the
    launch has both of them, point to point elsewhere."""
    collective_launches = set(_ratios([r for r in records if r.get("bench") == "net_collective"]))
    return _ratios([r for r in records if (r.get("bench") == "net_collective") == (launch_key(r) in collective_launches)],
                   key=lambda r: (launch_key(r), int(r.get("probe_round", 0))))


def duplex_factor(records: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """{value, per_launch, how, point_to_point}, or None where no launch measured both kinds of pattern.

    Where a launch measured NCCL's collectives between the two endpoints (broadcast one way,
    all-reduce both ways: ``bench`` net_collective), their ratio is the launch's factor: DDP's
    all-reduces run on those channels and protocols. Point-to-point patterns decide where there are
    none (older probes), and are reported beside for comparison."""
    collective = _ratios([r for r in records if r.get("bench") == "net_collective"])
    p2p = _ratios([r for r in records if r.get("bench") != "net_collective"])
    per_launch = {**p2p, **collective}
    if not per_launch:
        return None
    # the model's budget (2 x factor x the one-way rate, shared by both directions) spans half duplex
    # (0.5) to full duplex (1); a probe outside says so in its per-launch values
    value = min(1.0, max(0.5, statistics.median(per_launch.values())))
    by_round = round_ratios(records)
    rounds = sorted(by_round.values())
    # a round this far from the others' median is named, not dropped: the median over launches decides
    outliers = {f"{launch} round {number}": v for (launch, number), v in by_round.items()
                if len(rounds) > 2 and abs(v - statistics.median(rounds)) > ROUND_OUTLIER}
    return {
        "value": value,
        "per_launch": per_launch,
        "rounds": rounds,
        "round_outliers": outliers,
        "point_to_point": p2p,
        "how": ("per launch: per-flow rate of a two-rank all-reduce across nodes over a broadcast's (NCCL's "
                "collectives); median over launches" if len(collective) == len(per_launch) else
                "per launch: the collectives' ratio (two-rank all-reduce over broadcast) where measured, else the "
                "median per-flow rate of the point-to-point patterns where every endpoint sends and receives over "
                "the median of those where each only sends or only receives; median over launches"),
    }
