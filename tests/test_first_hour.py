"""What a new user meets in the first hour: --version, a summary whose parts add up to the step time,
plots that leave a notebook's matplotlib backend alone, a timeline that shows the straggler, and a
bucket-cap plot whose y-range shows the differences the recommendation is made on."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import pytest

from ddpsim.cli.main import main
from ddpsim.loader import load_scenario
from ddpsim.report.plots import bucket_cap_png, timeline_png, timeline_ranks
from ddpsim.report.tables import step_parts, summary_table
from ddpsim.simulation import simulate

REPO = os.path.join(os.path.dirname(__file__), "..")
SMALL = textwrap.dedent(
    """
    workload: {model: mlp, batch_size: 8}
    cluster: {gpu: H100-SXM, nodes: 2, gpus_per_node: 8}
    """
)


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == "ddpsim 0.1.0\n"


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["ddp.grad_accumulation_steps=3"],
        ["ddp.gradient_as_bucket_view=true"],
        ["ddp.comm_hook=fp16", "ddp.bucket_cap_mb=1"],
        ["cluster.nodes=1", "cluster.gpus_per_node=1"],
        ["simulation.mode=fast", "cluster.nodes=16"],
    ],
)
def test_summary_parts_add_up_to_the_step(tmp_path, overrides):
    path = tmp_path / "s.yaml"
    path.write_text(SMALL)
    result = simulate(load_scenario(str(path), overrides))
    parts = step_parts(result)
    assert [name for name, _ in parts if name.startswith("other")] == []  # nothing left unexplained
    assert math.isclose(sum(value for _, value in parts), result.step_time_s, rel_tol=1e-3)
    if result.world_size > 1 and "ddp.gradient_as_bucket_view=true" not in overrides:
        assert result.copy_out_s > 0 and "copy out of buckets" in summary_table(result)


def test_quickstart_summary_rows_add_up():
    result = simulate(load_scenario(os.path.join(REPO, "scenarios", "quickstart.yaml")))
    names = [name for name, _ in step_parts(result)]
    assert names == ["forward", "backward (compute + copies)", "wait for the last all-reduces",
                     "copy out of buckets", "optimizer"]
    assert math.isclose(sum(v for _, v in step_parts(result)), result.step_time_s, rel_tol=1e-3)


def test_timeline_draws_the_straggler_and_has_a_legend(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SMALL)
    result = simulate(load_scenario(str(path), ["simulation.straggler_rank=12", "simulation.straggler_slowdown=1.5"]))
    assert result.critical_rank == 12
    assert timeline_ranks(result) == [0, 1, 2, 3, 4, 5, 6, 7, 12]
    fig = timeline_png(result, str(tmp_path / "timeline.png"))
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "all-reduce" in labels and "forward" in labels
    assert any("rank 12" in t.get_text() for t in fig.axes[0].get_yticklabels())


def test_bucket_cap_plot_shows_percent_differences(tmp_path):
    default = 0.035
    steps = [0.0350, 0.0343, 0.0346, 0.0349]  # 0 to -2%: invisible on an absolute axis from 0 to 35 ms
    fig = bucket_cap_png(str(tmp_path / "cap.png"), [5, 25, 100, 400], steps, [3e-3, 2e-3, 2.5e-3, 2.9e-3],
                         default, 25, "t", 0.02)
    low, high = fig.axes[0].get_ylim()
    assert -3.0 < low < -2.0 and 2.0 < high < 3.0  # the 2% tie band and the -2% point both fit, tightly


def test_plots_leave_the_matplotlib_backend_alone(tmp_path):
    # a notebook's backend (inline) must survive a ddpsim plot; pyplot is what switches it
    code = textwrap.dedent(
        f"""
        import sys, matplotlib
        matplotlib.rcParams["backend"] = "svg"
        from ddpsim.report.plots import line_plot, histogram
        line_plot({str(tmp_path / 'a.png')!r}, [1, 2], {{"s": [1.0, 2.0]}}, "x", "y", "t")
        histogram({str(tmp_path / 'b.png')!r}, [0.1, 0.2, 0.3], "t")
        assert matplotlib.rcParams["backend"] == "svg", matplotlib.rcParams["backend"]
        assert "matplotlib.pyplot" not in sys.modules
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    assert os.path.getsize(tmp_path / "a.png") > 0 and os.path.getsize(tmp_path / "b.png") > 0
