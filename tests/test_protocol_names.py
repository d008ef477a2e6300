"""Which fitted curve is which NCCL protocol, and which protocols NCCL may pick.

An envelope fit of all-reduce times gives three curves but not their names. NCCL's protocols are
ordered by bandwidth (LL < LL128 < Simple), and where the harness kept NCCL's own log the log names the
protocol at each size. A forced algorithm then gets the curve of the protocol NCCL really runs.
"""

import json
import os

from ddpsim.collectives import CollectiveModel, ProtocolTable
from ddpsim.collectives.curves import ProtocolFit
from ddpsim.fitting.curvefit import fit_protocols
from ddpsim.fitting.fit import _named_by_nccl_log, fit_links
from ddpsim.fitting.measurements import AllReduceSample, read_harness_allreduce
from ddpsim.jsonfile import open_data
from ddpsim.loader import scenario_from_dict
from ddpsim.topology import build_topology

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MULTINODE = os.path.join(ROOT, "validation", "data", "h200x4-multinode-2026-11-26", "allreduce.jsonl")
SIZES = [4096 * 2**i for i in range(19)]


def test_curves_are_named_in_bandwidth_order():
    # times from three known curves (world 4): the fit's names must follow their bandwidths
    curves = [ProtocolFit(6e-6, 0.0, 20e9), ProtocolFit(15e-6, 0.0, 120e9), ProtocolFit(40e-6, 0.0, 350e9)]
    times = [min(c.time_s(size, 4) for c in curves) for size in SIZES]
    fits = fit_protocols(SIZES, [4] * len(SIZES), times)
    assert fits["ll"].busbw_Bps <= fits["ll128"].busbw_Bps <= fits["simple"].busbw_Bps


def test_nccl_log_names_the_curves():
    # two curves of almost the same bandwidth: the log, not the bandwidth, tells which one NCCL ran
    fits = {"ll": ProtocolFit(0.0, 0.0, 0.32e9), "ll128": ProtocolFit(50e-6, 0.0, 0.33e9),
            "simple": ProtocolFit(190e-6, 0.0, 5e9)}
    samples = []
    for size in SIZES:
        fastest = min(fits, key=lambda p: fits[p].time_s(size, 4))
        logged = {"ll": "ll128", "ll128": "ll", "simple": "simple"}[fastest]  # the log says otherwise
        samples.append(AllReduceSample("net", 4, 2, size, fits[fastest].time_s(size, 4), "x", "ring", "", logged))
    named = _named_by_nccl_log(fits, samples)
    assert named["ll"] is fits["ll128"] and named["ll128"] is fits["ll"] and named["simple"] is fits["simple"]
    assert _named_by_nccl_log(fits, [s.__class__(**{**s.__dict__, "nccl_protocol": None}) for s in samples]) is fits


def test_network_fit_keeps_the_protocols_nccl_ran():
    with open_data(MULTINODE) as handle:
        records = [json.loads(line) for line in handle]
    ran = {row["nccl_proto"].lower() for r in records if r["nodes"] > 1 for row in r["rows"] if row.get("nccl_proto")}
    assert "ll128" not in ran  # NCCL never enabled LL128 across the sockets network
    samples = [s for s in read_harness_allreduce(MULTINODE) if s.nodes > 1]
    table = ProtocolTable.from_dict(fit_links(samples)["net"]["protocol_table"])
    assert set(table.protocols) == ran


def test_choose_never_picks_a_protocol_nccl_does_not_enable():
    cluster = scenario_from_dict({"workload": {"model": "mlp", "batch_size": 1},
                                  "cluster": {"gpu": "H100-SXM", "nodes": 2, "gpus_per_node": 2}}).cluster
    topology = build_topology(cluster)
    every = CollectiveModel(topology)
    picked = {every.choose(size, "tree")[1] for size in SIZES}
    assert "ll128" in picked  # NCCL's defaults would run it somewhere
    table = ProtocolTable(protocols=("ll", "simple"))
    restricted = CollectiveModel(topology, table)
    assert all(restricted.choose(size, algorithm)[1] in ("ll", "simple") for size in SIZES for algorithm in ("auto", "tree"))
    assert ProtocolTable.from_dict(table.to_dict()).protocols == ("ll", "simple")
