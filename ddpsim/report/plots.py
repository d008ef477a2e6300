"""matplotlib figures. matplotlib is imported inside each function so the CLI starts fast."""

from __future__ import annotations

from collections.abc import Sequence

from ddpsim.results import Result

_COLOURS = {"forward": "#4c72b0", "backward": "#55a868", "copy": "#c44e52", "optimizer": "#8172b2"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def timeline_png(result: Result, path: str, max_ranks: int = 8) -> None:
    """Per-rank compute and all-reduce intervals of the simulated step."""
    plt = _pyplot()
    ranks = sorted(result.rank_timelines)[:max_ranks]
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.7 * len(ranks)))
    for row, rank in enumerate(ranks):
        for start, end, label in result.rank_timelines[rank]:
            is_comm = label.startswith("all-reduce")
            colour = "#dd8452" if is_comm else next((c for k, c in _COLOURS.items() if label.startswith(k)), "#999999")
            y = row * 2 + (1 if is_comm else 0)
            ax.broken_barh([(start * 1e3, (end - start) * 1e3)], (y, 0.8), facecolors=colour, edgecolor="none")
    ax.set_yticks([row * 2 + 0.4 for row in range(len(ranks))] + [row * 2 + 1.4 for row in range(len(ranks))])
    ax.set_yticklabels([f"rank {r} compute" for r in ranks] + [f"rank {r} nccl" for r in ranks], fontsize=7)
    ax.set_xlabel("time (ms)")
    ax.set_title(f"{result.model} on {result.world_size} x {result.gpu}: step {result.step_time_s * 1e3:.2f} ms")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def line_plot(
    path: str,
    x: Sequence[float],
    series: dict[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    title: str,
    logx: bool = False,
    mark_x: float | None = None,
) -> None:
    """A simple multi-series line plot (step time vs bucket cap, scaling efficiency vs GPUs, ...)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, ys in series.items():
        ax.plot(list(x), list(ys), marker="o", label=label)
    if mark_x is not None:
        ax.axvline(mark_x, color="grey", linestyle="--", linewidth=1)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def scatter_plot(path: str, measured: Sequence[float], predicted: Sequence[float], labels: Sequence[str], title: str) -> None:
    """Predicted vs measured with the y = x line and a ±5% band."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 5.5))
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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def stacked_breakdown(path: str, labels: Sequence[str], parts: dict[str, Sequence[float]], title: str) -> None:
    """Stacked bars of compute, exposed communication and optimizer per configuration."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(labels)), 4.2))
    bottom = [0.0] * len(labels)
    for name, values in parts.items():
        ax.bar(list(labels), [v * 1e3 for v in values], bottom=bottom, label=name)
        bottom = [b + v * 1e3 for b, v in zip(bottom, values, strict=True)]
    ax.set_ylabel("time per step (ms)")
    ax.set_title(title)
    ax.tick_params(axis="x", rotation=45, labelsize=7)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def histogram(path: str, values: Sequence[float], title: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    values_ms = [v * 1e3 for v in values]
    spread = max(values_ms) - min(values_ms) if values_ms else 0.0
    # identical steps (no jitter) differ only by float noise: one bin, not 30 empty ones
    ax.hist(values_ms, bins=30 if spread > 1e-6 else 1)
    ax.set_xlabel("step time (ms)")
    ax.set_ylabel("steps")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
