"""The figures answer at a glance: the histogram marks p50/p95/p99, the breakdown's legend sits clear of
the bars, and a scaling plot's x ticks are GPU counts. Each test reads the matplotlib objects back."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

import ddpsim.report.plots as plots
from ddpsim.planning.scaling import plot_scaling


def test_histogram_marks_p50_p95_p99_where_numpy_puts_them(tmp_path):
    rng = np.random.default_rng(3)
    step_s = list(rng.lognormal(np.log(0.035), 0.2, size=400))
    fig = plots.histogram(str(tmp_path / "h.png"), step_s, "t")
    ax = fig.axes[0]
    marked = sorted(float(line.get_xdata()[0]) for line in ax.lines)
    expected = [float(np.percentile(np.array(step_s) * 1e3, q)) for q in (50, 95, 99)]
    assert len(ax.lines) == 3
    assert np.allclose(marked, expected, rtol=1e-12)
    for line in ax.lines:  # vertical lines: one x from the bottom of the axes to the top
        assert len(set(line.get_xdata())) == 1
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert [label.split()[0] for label in labels] == ["p50", "p95", "p99"]


def test_breakdown_legend_does_not_cover_any_bar(tmp_path):
    # bars that fill the axes to the top, in every corner: a legend inside the axes has nowhere to go
    labels = [f"nodes={n}" for n in range(1, 9)]
    parts = {"compute": [0.030] * 8, "exposed communication": [0.002 * n for n in range(1, 9)],
             "optimizer": [0.004] * 8, "other": [0.001] * 8}
    fig = plots.stacked_breakdown(str(tmp_path / "b.png"), labels, parts, "t")
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    legend_box = ax.get_legend().get_window_extent(renderer)
    bars = [p for p in ax.patches if p.get_height() > 0]
    assert len(bars) == 8 * 4
    covered = [p for p in bars if legend_box.overlaps(p.get_window_extent(renderer))]
    assert not covered, f"the legend covers {len(covered)} bars"
    # and it is still inside the saved figure (tight_layout kept room for it)
    assert fig.bbox.contains(legend_box.x1 - 1, legend_box.y1 - 1)


def test_scaling_ticks_are_gpu_counts(tmp_path, monkeypatch):
    drawn = []
    real = plots.line_plot
    monkeypatch.setattr(plots, "line_plot", lambda *a, **k: drawn.append(real(*a, **k)))
    counts = [8, 16, 32, 64, 128, 256, 512]
    study = SimpleNamespace(points=[SimpleNamespace(gpus=g, efficiency=1.0 - 0.02 * i) for i, g in enumerate(counts)],
                            no_jitter=[], jitter_cv=0.0)
    plot_scaling(study, str(tmp_path / "s.png"))  # type: ignore[arg-type]
    ax = drawn[0].axes[0]
    assert ax.get_xscale() == "log"  # a 64x range: the points stay evenly spaced
    assert list(ax.get_xticks()) == counts
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(g) for g in counts]
    assert not ax.xaxis.get_minorticklocs().size  # no unlabelled ticks between the counts


def test_many_log_points_still_get_plain_numbers(tmp_path):
    xs = [2.0 ** i for i in range(20)]
    fig = plots.line_plot(str(tmp_path / "l.png"), xs, {"s": list(range(20))}, "x", "y", "t", logx=True)
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert texts and all("^" not in t and "$" not in t for t in texts)
    assert all(float(t) in xs or float(t) == 10 ** round(np.log10(float(t))) for t in texts)
