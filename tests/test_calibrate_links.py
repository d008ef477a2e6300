"""A link calibration, applied through the topology and collective model, reproduces the fitted curve."""

import pytest

from ddpsim.collectives import CollectiveModel, ProtocolTable
from ddpsim.collectives.curves import ProtocolFit, envelope_s
from ddpsim.fitting.fit import fit_link_class
from ddpsim.fitting.measurements import AllReduceSample
from ddpsim.loader import scenario_from_dict
from ddpsim.topology import build_topology

TRUE = {
    "ll": ProtocolFit(10e-6, 0.6e-6, 90e9),
    "ll128": ProtocolFit(14e-6, 1.9e-6, 220e9),
    "simple": ProtocolFit(25e-6, 3.4e-6, 350e9),
}


@pytest.mark.parametrize("intra_type, link_class", [("nvswitch", "nvlink"), ("shm", "shm"), ("socket", "socket")])
def test_calibrated_model_reproduces_measured_envelope(intra_type, link_class):
    samples = [
        AllReduceSample(link_class, w, 1, 2**k, envelope_s(TRUE, 2**k, w)[0], "synthetic")
        for w in (2, 4)
        for k in range(12, 31)
    ]
    entry = fit_link_class(samples)
    for world in (2, 3, 4, 8):
        scenario = scenario_from_dict(
            {
                "workload": {"model": "mlp", "batch_size": 1},
                "cluster": {
                    "gpu": "H100-SXM",
                    "nodes": 1,
                    "gpus_per_node": world,
                    "intra_node": {"type": intra_type, "bandwidth": entry["bandwidth_Bps"], "latency": entry["latency_s"]},
                },
            }
        )
        model = CollectiveModel(build_topology(scenario.cluster), ProtocolTable.from_dict(entry["protocol_table"]))
        for k in (12, 16, 20, 24, 27, 30):
            expected = envelope_s(TRUE, 2**k, world)[0]
            assert model.allreduce_time_s(2**k, "ring", "auto") == pytest.approx(expected, rel=1e-6)
