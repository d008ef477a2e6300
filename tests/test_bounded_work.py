"""Loaders bound their work, and long simulations say how far they are (issue 34's hangs).

- A YAML alias bomb (nine levels of nine aliases: 435 million values from a 700-byte file) is refused in
  one line without being walked: the duplicate-key check visits each node once, and the file's expanded
  size is counted per node, not per path.
- The documented maximum of ``simulation.iterations`` (100,000) runs for minutes: a progress line comes
  every ``PROGRESS_EVERY_S``.
"""

from __future__ import annotations

import io
import time

import pytest

from ddpsim.errors import ScenarioError
from ddpsim.loader import MAX_EXPANDED_VALUES, load_scenario

BASE = "workload: {model: mlp, batch_size: 4}\ncluster: {gpu: H100-SXM, nodes: 1, gpus_per_node: 2}\n"


def _bomb(levels: int, width: int = 9) -> str:
    items = ["&l0 [" + ",".join(["lol"] * width) + "]"]
    items += [f"&l{i} [" + ",".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]"


def _expanded(levels: int, width: int = 9) -> int:
    """Values the bomb stands for, counted independently: level i is one list of ``width`` copies of level
    i-1 (level 0: ``width`` scalars), and the outer list holds every level once."""
    sizes = [1 + width]
    for _ in range(1, levels):
        sizes.append(1 + width * sizes[-1])
    return 1 + sum(sizes)


@pytest.mark.parametrize("where, extra", [("description: {bomb}\n", 0),
                                          ("simulation: {{seed: {bomb}}}\n", 2)])  # the mapping, its key
def test_an_alias_bomb_is_refused_at_once(tmp_path, where, extra):
    path = tmp_path / "bomb.yaml"
    path.write_text(BASE + where.format(bomb=_bomb(9)))
    start = time.perf_counter()
    with pytest.raises(ScenarioError) as err:
        load_scenario(str(path))
    assert time.perf_counter() - start < 2.0  # about a millisecond; it ran past 60 s
    key = where.split(":")[0]
    assert f"{key}: its aliases (*name) expand it to {_expanded(9) + extra:,} values" in str(err.value)
    assert str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_an_alias_bomb_in_a_set_value_is_refused(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(BASE)
    with pytest.raises(ScenarioError, match="description: the --set value's aliases"):
        load_scenario(str(path), [f"description={_bomb(9)}"])


def test_aliases_used_on_purpose_still_load(tmp_path):
    """Anchors and merge keys are YAML a user writes; a small bomb stays under the bound."""
    assert _expanded(3) < MAX_EXPANDED_VALUES < _expanded(9)
    path = tmp_path / "s.yaml"
    path.write_text("workload: &w {model: mlp, batch_size: 4}\n"
                    "cluster:\n  gpu: H100-SXM\n  nodes: 1\n  gpus_per_node: 2\n"
                    "  intra_node: &link {type: nvswitch, bandwidth: 450GB/s, latency: 3us}\n"
                    "ddp: {<<: {bucket_cap_mb: 5}, static_graph: false}\n")
    scenario = load_scenario(str(path))
    assert scenario.workload.batch_size == 4 and scenario.ddp.bucket_cap_mb == 5


def test_a_duplicate_key_under_an_alias_is_still_found(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("workload: {model: mlp, batch_size: 4}\ncluster: &c {gpu: H100-SXM, nodes: 1, nodes: 2}\n")
    with pytest.raises(ScenarioError, match="cluster.nodes: written twice"):
        load_scenario(str(path))


def test_a_long_simulation_prints_progress(tmp_path, monkeypatch):
    import ddpsim.simulation as simulation

    path = tmp_path / "s.yaml"
    path.write_text(BASE + "simulation: {iterations: 4}\n")
    monkeypatch.setattr(simulation, "PROGRESS_EVERY_S", 0.0)  # every step, instead of every 5 s
    stream = io.StringIO()
    result = simulation.simulate(load_scenario(str(path)), progress=stream)
    lines = stream.getvalue().splitlines()
    # a line after each step but the last (the result follows it at once)
    assert [line.split(" steps")[0] for line in lines] == [f"ddpsim: simulated {k} of 4" for k in (1, 2, 3)]
    assert all("s left" in line for line in lines)
    assert len(result.step_times_s) == 4
    monkeypatch.setattr(simulation, "PROGRESS_EVERY_S", 3600.0)
    quiet = io.StringIO()
    simulation.simulate(load_scenario(str(path)), progress=quiet)
    assert quiet.getvalue() == ""


def test_the_timeline_draws_one_collection_per_row_and_colour(tmp_path):
    """quickstart's step has 4,400 intervals; one artist each took 30 s to draw. Now one collection per
    (row, colour), with spans less than half a pixel apart joined (the picture is the same)."""
    import os

    from ddpsim.report.plots import _merged, timeline_png, timeline_ranks
    from ddpsim.simulation import simulate

    scenario = load_scenario(os.path.join(os.path.dirname(os.path.dirname(__file__)), "scenarios", "quickstart.yaml"))
    result = simulate(scenario)
    fig = timeline_png(result, str(tmp_path / "t.png"))
    rows = 2 * len(timeline_ranks(result))
    assert len(fig.axes[0].collections) <= rows * 6  # 4 compute colours, other, all-reduce
    # back-to-back spans join, a gap of a pixel or more stays
    assert _merged([(0.0, 1.0), (1.0, 1.0), (2.4, 1.0)], pixel=0.5) == [(0.0, 2.0), (2.4, 1.0)]
    assert _merged([(2.0, 1.0), (0.0, 2.1)], pixel=0.5) == [(0.0, 3.0)]
