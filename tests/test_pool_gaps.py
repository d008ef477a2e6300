"""Calibrate never guesses silently (``calibration/gaps.py``): a sweep measured but not fitted, DDP runs
without overheads fitted from them, a fit carried to a shape it never measured. Each case is a hand-cut
campaign folder (a slice of a committed one, edited), and the expected gap follows from what was cut."""

from __future__ import annotations

import json
import os
import shutil

from ddpsim.calibration.file import SCHEMA, calibration_from_dict
from ddpsim.fitting.calibrate import calibrate, load_measurements
from ddpsim.fitting.gaps import calibration_gaps, overhead_gaps, sweep_gaps, transfer_gaps
from ddpsim.jsonfile import open_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MULTINODE = os.path.join(ROOT, "validation", "data", "h100x2-multinode-2026-11-26e")


def _campaign(tmp_path, sweeps=lambda r: True, rows=lambda row: row, runs=lambda r: True, logs=True):
    dst = tmp_path / "camp"
    dst.mkdir()
    shutil.copytree(os.path.join(MULTINODE, "profiles"), dst / "profiles")
    if logs:
        shutil.copytree(os.path.join(MULTINODE, "logs"), dst / "logs")
    for name, keep, edit in (("allreduce.jsonl", sweeps, True), ("ddp_runs.jsonl", runs, False)):
        out = []
        with open_data(os.path.join(MULTINODE, name)) as handle:
            for line in handle:
                record = json.loads(line)
                if keep(record):
                    if edit:
                        record["rows"] = [rows(dict(row)) for row in record["rows"]]
                    out.append(json.dumps(record))
        (dst / name).write_text("\n".join(out) + "\n")
    return str(dst)


def _links(folder):
    m = load_measurements([folder])
    return m, calibrate(m.samples, [], m.profiles, None, links_only=True)["link_classes"]


def test_tree_sweeps_without_each_rows_protocol_are_said_to_be_dropped(tmp_path):
    def unnamed(row):
        row.pop("nccl_proto", None)
        return row

    folder = _campaign(tmp_path, rows=unnamed, runs=lambda r: False)
    m, links = _links(folder)
    gaps = sweep_gaps(m.samples, links)
    trees = [g for g in gaps if "forced-Tree" in g.what]
    assert len(trees) == 1 and "2x1" in trees[0].what and "NCCL log" in trees[0].what
    assert not trees[0].fatal


def test_tree_sweeps_fitted_from_named_rows_raise_no_tree_gap(tmp_path):
    m, links = _links(_campaign(tmp_path, runs=lambda r: False))
    assert not [g for g in sweep_gaps(m.samples, links) if "forced-Tree" in g.what]


def test_a_network_without_the_endpoint_probe_says_so(tmp_path):
    m, links = _links(_campaign(tmp_path, runs=lambda r: False))  # this campaign has no netprobe.jsonl
    probe = [g for g in sweep_gaps(m.samples, links) if "endpoint probe" in g.what]
    assert len(probe) == 1 and "network endpoint probe" in probe[0].how


def test_a_probe_an_envelope_fit_cannot_apply_is_named_as_that_not_as_no_probe():
    from ddpsim.fitting.fit import shape_key

    # campaign UN's even shapes: the probe ran (0.69 to 0.72), but no one-node sweep gave NCCL's structure
    m = load_measurements([os.path.join(ROOT, "validation", "data", "h200x4-uneven-2026-11-27", "even")])
    links = calibrate(m.samples, [], m.profiles, None, links_only=True, net_probes=m.net_probes)["link_classes"]
    assert links["net"]["duplex_factor"] == 1.0 and "measured:" in links["net"]["duplex_source"]
    gaps = [g for g in sweep_gaps(m.samples, links) if "duplex" in g.what or "endpoint probe" in g.what]
    assert len(gaps) == 1 and "envelope" in gaps[0].what and "without the endpoint probe" not in gaps[0].what
    world = {shape_key(s.nodes, s.world_size): s.world_size for s in m.samples}["2x2"]
    assert f"--shapes 1x{world}" in gaps[0].how


def test_runs_at_no_calibration_cap_are_a_fatal_gap_naming_their_caps(tmp_path):
    folder = _campaign(tmp_path, runs=lambda r: r["transport"] == "nvlink" and (r.get("nodes") or 1) == 1)
    m = load_measurements([folder])
    data = calibrate(m.samples, m.runs, m.profiles, [5, 50])  # the campaign ran caps 1, 25, 100
    assert "nvlink" not in data["overheads"]
    gaps = overhead_gaps(m.runs, data, [5, 50])
    assert len(gaps) == 1 and gaps[0].fatal
    assert "caps 5, 50" in gaps[0].what and "1, 25, 100" in gaps[0].what


def test_runs_whose_links_were_not_swept_are_a_fatal_gap_naming_the_sweep(tmp_path):
    # only the sweeps across nodes kept: the one-node NVLink runs have no link fit to sit on
    folder = _campaign(tmp_path, sweeps=lambda r: (r.get("nodes") or 1) > 1,
                       runs=lambda r: (r.get("nodes") or 1) == 1)
    m = load_measurements([folder])
    data = calibrate(m.samples, m.runs, m.profiles, None)
    gaps = calibration_gaps(m.samples, m.runs, data, None)
    fatal = [g for g in gaps if g.fatal]
    assert len(fatal) == 1 and "one-node nvlink sweep" in fatal[0].what and "--shapes 1x2" in fatal[0].how


def test_links_only_expects_no_overheads():
    assert overhead_gaps([{"model": "m", "transport": "nvlink", "world_size": 2, "bucket_cap_mb": 25}],
                         {"link_classes": {}, "overheads": {}}, None, links_only=True) == []


def test_a_shape_or_gpu_count_never_measured_is_named():
    cal = calibration_from_dict({"schema": SCHEMA, "link_classes": {
        "net": {"bandwidth_Bps": 3e9, "latency_s": 1e-5, "shapes": ["2x1"]},
        "nvlink": {"bandwidth_Bps": 1e11, "latency_s": 1e-5, "world_sizes": [2]}}}, "<c>")
    assert transfer_gaps(cal, "nvlink", 2, 1) == []
    assert transfer_gaps(cal, "net", 2, 2) == []
    gaps = transfer_gaps(cal, "nvlink", 8, 2)  # 2 nodes of 4: shape 2x4 and 4 GPUs per node, neither measured
    assert len(gaps) == 2
    assert "not 2x4" in gaps[0].what and "not 4" in gaps[1].what
