"""The caching allocator's reserve: package data that matches the measured runs it cites, and a warning where
the allocated peak fits the GPU but the reserve measured on top of it may not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddpsim.cli.main import main
from ddpsim.hardware.allocator import allocator_reserve
from ddpsim.jsonfile import open_data

ROOT = Path(__file__).resolve().parent.parent


def test_the_shipped_reserve_is_the_range_of_the_runs_it_cites():
    ratios = []
    memory = json.loads((ROOT / "validation/data/memory-2026-11-28/memory.json").read_text())
    for run in memory["two_gpu"] + memory["one_gpu"]:
        ratios.append(run["peak_reserved_bytes"] / run["peak_allocated_bytes"])
    for line in open_data(ROOT / "validation/data/h200x4-fresh-2026-11-28/fsdp/fsdp_runs.jsonl").read().splitlines():
        run = json.loads(line)
        ratios.append(run["memory"]["peak_reserved_bytes"] / run["memory"]["peak_allocated_bytes"])
    shipped = allocator_reserve()
    assert shipped["runs"] == len(ratios) == 13
    assert shipped["min"] == pytest.approx(min(ratios), abs=1e-4)
    assert shipped["max"] == pytest.approx(max(ratios), abs=1e-4)
    assert 1.0 < shipped["min"] <= shipped["median"] <= shipped["max"]


@pytest.mark.parametrize("batch_size", [48, 80, 120])
def test_a_peak_that_fits_only_without_the_reserve_is_warned(tmp_path, capsys, batch_size):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"workload: {{model: gpt2-124m, batch_size: {batch_size}}}\n"
                        "cluster: {gpu: H100-SXM, gpus_per_node: 2, intra_node: {type: nvswitch}}\n")
    assert main(["run", str(scenario), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    allocated, capacity = result["memory_bytes"]["total"], result["gpu_memory_bytes"]
    warned = [w for w in result["warnings"] if "caching allocator" in w]
    reserve = allocator_reserve()
    expected = allocated <= capacity < allocated * reserve["max"]
    assert bool(warned) == expected
    assert result["fits_in_memory"] == (allocated <= capacity)  # the verdict stays the allocated peak's
    if warned:
        assert f"{allocated * reserve['max'] / 2**30:.1f} GiB" in warned[0]
