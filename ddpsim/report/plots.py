"""matplotlib figures, drawn on ``matplotlib.figure.Figure`` with the Agg canvas directly.

No pyplot and no ``matplotlib.use``: a plot made from a notebook must not switch the user's
backend (inline display would stop working), and figures need no global state to be closed.
matplotlib is imported inside each function so the CLI starts fast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ddpsim.results import Result

_COLOURS = {"forward": "#4c72b0", "backward": "#55a868", "copy": "#c44e52", "optimizer": "#8172b2"}
_COMM_COLOUR, _OTHER_COLOUR = "#dd8452", "#999999"


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)  # attaches itself to the figure: savefig renders with Agg, whatever the backend
    return fig


def _save(fig: Any, path: str) -> Any:
    fig.tight_layout()
    # zlib level 1: a third of the default's time to encode (a timeline: 0.17 s of its 0.5 s), a few % larger
    fig.savefig(path, dpi=110, pil_kwargs={"compress_level": 1})
    return fig  # for callers (and tests) that look at what was drawn


def timeline_ranks(result: Result, max_ranks: int = 8) -> list[int]:
    """The ranks a timeline shows: the first ``max_ranks`` and the critical-path rank (a straggler at
    rank 12 is the one to see), in rank order."""
    ranks = sorted(result.rank_timelines)[:max_ranks]
    if result.critical_rank in result.rank_timelines and result.critical_rank not in ranks:
        ranks.append(result.critical_rank)
    return sorted(ranks)


def ranks_drawn(ranks: Sequence[int], world_size: int) -> str:
    """What a timeline draws, for its title: ``ranks 0-7 and 12 of 16``, ``all 8 ranks``."""
    if list(ranks) == list(range(world_size)):
        return f"all {world_size} ranks" if world_size > 1 else "rank 0"
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    parts = [f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs]
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {listed} of {world_size}"


_TIMELINE_PX = 11 * 110  # the timeline's width in pixels (11 in at 110 dpi, ``_save``)


def _merged(spans: list[tuple[float, float]], pixel: float) -> list[tuple[float, float]]:
    """(start, width) spans with the ones less than half a pixel apart joined: the picture is the same, and
    a step's thousands of back-to-back layer kernels become a few bars to draw."""
    out: list[tuple[float, float]] = []
    for start, width in sorted(spans):
        if out and start - (out[-1][0] + out[-1][1]) < pixel / 2:
            out[-1] = (out[-1][0], max(out[-1][1], start + width - out[-1][0]))
        else:
            out.append((start, width))
    return out


def timeline_png(result: Result, path: str, max_ranks: int = 8) -> Any:
    """Per-rank compute and all-reduce intervals of the simulated step, with a legend."""
    from matplotlib.patches import Patch

    ranks = timeline_ranks(result, max_ranks)
    fig = _figure(11, 1.6 + 0.7 * len(ranks))
    ax = fig.add_subplot()
    # one collection per row and colour, not one per interval: a ResNet-50 step has thousands of
    # intervals, and as many artists took 30 s to lay out and draw (as many collections: well under 1 s)
    bars: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for row, rank in enumerate(ranks):
        for start, end, label in result.rank_timelines[rank]:
            is_comm = label.startswith(("all-reduce", "all-gather", "reduce-scatter"))
            colour = _COMM_COLOUR if is_comm else next(
                (c for k, c in _COLOURS.items() if label.startswith(k)), _OTHER_COLOUR)
            bars.setdefault((row * 2 + (1 if is_comm else 0), colour), []).append((start * 1e3, (end - start) * 1e3))
    end_ms = max((x + w for spans in bars.values() for x, w in spans), default=1.0)
    for (y, colour), spans in bars.items():
        ax.broken_barh(_merged(spans, end_ms / _TIMELINE_PX), (y, 0.8), facecolors=colour, edgecolor="none")
    critical = " (critical path)"
    ax.set_yticks([row * 2 + 0.4 for row in range(len(ranks))] + [row * 2 + 1.4 for row in range(len(ranks))])
    ax.set_yticklabels(
        [f"rank {r}{critical if r == result.critical_rank and len(result.rank_timelines) > 1 else ''} compute"
         for r in ranks] + [f"rank {r} nccl" for r in ranks],
        fontsize=7,
    )
    ax.set_xlabel("time (ms)")
    ax.set_title(f"{result.model} on {result.world_size} x {result.gpu}: step {result.step_time_s * 1e3:.2f} ms; "
                 f"{ranks_drawn(ranks, result.world_size)}")
    handles = [Patch(color=c, label=k) for k, c in _COLOURS.items()]
    handles += [Patch(color=_COMM_COLOUR, label="all-reduce"), Patch(color=_OTHER_COLOUR, label="other")]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


def line_plot(
    path: str,
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    title: str,
    logx: bool = False,
    mark_x: float | None = None,
    y_from_zero: bool = False,
) -> Any:
    """A simple multi-series line plot (step time vs bucket cap, scaling efficiency vs GPUs, ...).

    On a log x axis the ticks are the x values themselves, written as numbers: a reader wants "64
    GPUs", not 10^2 and unlabelled minor ticks."""
    fig = _figure(7, 4.2)
    ax = fig.add_subplot()
    for label, ys in series.items():
        ax.plot(list(x), list(ys), marker="o", label=label)
    if mark_x is not None:
        ax.axvline(mark_x, color="grey", linestyle="--", linewidth=1)
    if logx:
        _plain_log_ticks(ax, x)
    if y_from_zero:  # a 0.8% spread drawn on a 47.5-47.9 axis looks like a steep V: the axis starts at 0
        ax.set_ylim(bottom=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


_MAX_VALUE_TICKS = 12  # beyond this many points, tick labels at every value would overlap


def _plain_log_ticks(ax: Any, x: Sequence[float]) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log")
    values = sorted({float(v) for v in x if v > 0})
    if len(values) <= _MAX_VALUE_TICKS:
        ax.xaxis.set_major_locator(FixedLocator(values))
        ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))


def scatter_plot(path: str, measured: Sequence[float], predicted: Sequence[float], labels: Sequence[str], title: str) -> None:
    """Predicted vs measured with the y = x line and a ±5% band."""
    fig = _figure(5.5, 5.5)
    ax = fig.add_subplot()
    groups = sorted(set(labels))
    for group in groups:
        xs = [m * 1e3 for m, g in zip(measured, labels, strict=True) if g == group]
        ys = [p * 1e3 for p, g in zip(predicted, labels, strict=True) if g == group]
        ax.scatter(xs, ys, s=14, label=group)
    # step times span two orders of magnitude (5 ms to 300 ms): log axes keep every point readable
    low = min(list(measured) + list(predicted)) * 1e3 / 1.2
    top = max(list(measured) + list(predicted)) * 1e3 * 1.2
    ax.plot([low, top], [low, top], color="black", linewidth=1)
    ax.fill_between([low, top], [low * 0.95, top * 0.95], [low * 1.05, top * 1.05], color="grey", alpha=0.2, label="±5%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured step time (ms)")
    ax.set_ylabel("predicted step time (ms)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    _save(fig, path)


def stacked_breakdown(path: str, labels: Sequence[str], parts: Mapping[str, Sequence[float]], title: str) -> Any:
    """Stacked bars of compute, exposed communication and optimizer per configuration. The legend sits
    right of the axes: inside them it covers the tallest bars, whichever corner it picks."""
    fig = _figure(max(6, 0.6 * len(labels)), 4.2)
    ax = fig.add_subplot()
    bottom = [0.0] * len(labels)
    for name, values in parts.items():
        ax.bar(list(labels), [v * 1e3 for v in values], bottom=bottom, label=name)
        bottom = [b + v * 1e3 for b, v in zip(bottom, values, strict=True)]
    ax.set_ylabel("time per step (ms)")
    ax.set_title(title)
    ax.tick_params(axis="x", rotation=45, labelsize=7)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


HISTOGRAM_PERCENTILES = (50, 95, 99)


def histogram(path: str, values: Sequence[float], title: str) -> Any:
    """Step times with a vertical line at each of p50, p95 and p99 (linear interpolation, as
    ``Result.percentile_s`` and the variability table compute them)."""
    import numpy as np

    fig = _figure(6, 4)
    ax = fig.add_subplot()
    values_ms = [v * 1e3 for v in values]
    spread = max(values_ms) - min(values_ms) if values_ms else 0.0
    # identical steps (no jitter) differ only by float noise: one bin, not 30 empty ones
    ax.hist(values_ms, bins=30 if spread > 1e-6 else 1)
    if values_ms:
        styles = ("-", "--", ":")
        for q, style in zip(HISTOGRAM_PERCENTILES, styles, strict=True):
            at = float(np.percentile(values_ms, q))
            ax.axvline(at, color="black", linestyle=style, linewidth=1, label=f"p{q} {at:.3g} ms")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # clear of the bars
    ax.set_xlabel("step time (ms)")
    ax.set_ylabel("steps")
    ax.set_title(title)
    return _save(fig, path)


def bucket_cap_png(
    path: str,
    caps_mb: Sequence[float],
    step_s: Sequence[float],
    exposed_s: Sequence[float],
    default_step_s: float,
    recommended_mb: float | None,
    title: str,
    tie_fraction: float,
) -> Any:
    """Step time relative to PyTorch's default (top) and exposed communication (bottom) vs cap.

    On one absolute axis a 35 ms step hides the 1 to 5% differences the recommendation is made on;
    relative to the default, with the band where caps count as tied, they are what the eye sees.
    """
    fig = _figure(7, 6)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    relative = [100.0 * (s / default_step_s - 1.0) for s in step_s]
    top.plot(list(caps_mb), relative, marker="o", label="simulated step time")
    top.axhline(0.0, color="black", linewidth=1, label=f"PyTorch default ({default_step_s * 1e3:.2f} ms)")
    top.axhspan(-100 * tie_fraction, 100 * tie_fraction, color="grey", alpha=0.15,
                label=f"within {100 * tie_fraction:g}%: tied")
    spread = max([abs(r) for r in relative] + [100 * tie_fraction])
    top.set_ylim(-1.15 * spread, 1.15 * spread)
    top.set_ylabel("step time vs default (%)")
    top.set_title(title)
    bottom.plot(list(caps_mb), [e * 1e3 for e in exposed_s], marker="o", color=_COMM_COLOUR,
                label="exposed communication")
    bottom.set_ylabel("exposed comm (ms)")
    bottom.set_xlabel("bucket_cap_mb (MiB)")
    bottom.set_ylim(bottom=0.0)
    for ax in (top, bottom):
        ax.set_xscale("log")
        ax.grid(True, alpha=0.3)
        if recommended_mb is not None:
            ax.axvline(recommended_mb, color="grey", linestyle="--", linewidth=1)
        ax.legend(fontsize=8)
    return _save(fig, path)


def cap_curves_png(path: str, panels: Sequence[Mapping[str, Any]]) -> Any:
    """One panel per (model, transport, GPUs): measured and predicted step time against bucket cap.

    Each panel holds ``title``, ``caps``, ``measured_s``, ``predicted_s`` (one launch's curve) and
    ``repeat_caps`` / ``repeat_measured_s`` (the same configurations measured in other launches).
    """
    cols = 3
    rows_n = max(1, (len(panels) + cols - 1) // cols)
    fig = _figure(4 * cols, 2.8 * rows_n)
    axes = fig.subplots(rows_n, cols, squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        caps = list(panel["caps"])
        ax.plot(caps, [t * 1e3 for t in panel["measured_s"]], "o-", label="measured")
        ax.plot(caps, [t * 1e3 for t in panel["predicted_s"]], "s--", label="predicted")
        if panel.get("repeat_caps"):
            ax.plot(list(panel["repeat_caps"]), [t * 1e3 for t in panel["repeat_measured_s"]], "x", color="C0",
                    label="measured, another launch")
        ax.set_xscale("log")
        ax.set_title(str(panel["title"]), fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.supxlabel("bucket_cap_mb")
    fig.supylabel("step time (ms)")
    return _save(fig, path)
