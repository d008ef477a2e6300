"""The DGX-1 hybrid cube mesh (ddpsim/topology/dgx1.py): its link counts against the V100 datasheet, and the
ring bandwidth it gives the first 2, 4, 8 GPUs against NCCL's measured bus bandwidth on V100 (vTrain)."""

import csv
import os

import pytest

from ddpsim.topology.dgx1 import DGX1_NVLINKS, NVLINK2_BPS, ring_bandwidth_Bps, ring_links

EXTERNAL = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "external", "vtrain_allreduce_lut.csv")


def test_every_v100_has_its_six_nvlinks_and_links_are_symmetric():
    # V100 SXM2 datasheet: 6 NVLink2 links, 300 GB/s total (25 GB/s per link per direction)
    assert all(sum(row) == 6 for row in DGX1_NVLINKS)
    assert all(DGX1_NVLINKS[i][j] == DGX1_NVLINKS[j][i] for i in range(8) for j in range(8))
    assert 6 * NVLINK2_BPS * 2 == 300e9
    # a cube mesh, not a switch: each GPU reaches 4 of the other 7 directly
    assert all(sum(1 for n in row if n) == 4 for row in DGX1_NVLINKS)


def test_ring_links_of_the_first_gpus():
    # read off nvidia-smi topo -m: GPU0-GPU1 NV1; GPU0 to 1, 2, 3 is NV1 + NV1 + NV2 (GPU1 to 0, 2, 3 is 1 + 2 + 1)
    assert [ring_links(k) for k in (1, 2, 4, 8)] == [0, 1, 4, 6]
    with pytest.raises(ValueError):
        ring_links(9)


@pytest.mark.skipif(not os.path.isfile(EXTERNAL), reason="../shared/external is absent")
@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_ring_bandwidth_against_measured_v100_bus_bandwidth(gpus):
    with open(EXTERNAL, encoding="utf-8", newline="") as handle:
        row = next(r for r in csv.DictReader(handle)
                   if r["hardware"] == "V100" and int(r["gpus"]) == gpus and int(r["msg_bytes"]) == 128 * 2**20)
    measured_Bps = float(row["ip_busbw_GBps"]) * 1e9
    # NCCL reaches 80-95% of the links' rate on large all-reduces; a switch model (150 GB/s at every size)
    # would be 6.7x off at 2 GPUs
    assert 0.80 <= measured_Bps / ring_bandwidth_Bps(gpus) <= 0.95
