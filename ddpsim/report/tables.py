"""Plain-text tables for the terminal and Markdown reports."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from ddpsim.results import Result
from ddpsim.units import format_bytes, format_time


def table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], markdown: bool = False, numbers_right: bool = True
) -> str:
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    if markdown:
        lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"]
        lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells]
        return "\n".join(lines)
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(_justify(c, w, i if numbers_right else 0) for i, (c, w) in enumerate(zip(r, widths, strict=True))) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def _justify(cell: str, width: int, column: int) -> str:
    # numbers line up on the right, words on the left
    numeric = column > 0 and cell[:1].isdigit() or cell[:1] in "+-" and cell[1:2].isdigit()
    return cell.rjust(width) if numeric else cell.ljust(width)


def step_parts(result: Result) -> list[tuple[str, float]]:
    """Where rank 0's last step went, in order, adding up to the step time: with the difference to
    ``step_time_s`` (a slower rank, jitter, the median of several steps) as a last part if there is one."""
    parts = [
        ("no_sync micro-steps", result.accumulation_s),
        ("forward", result.forward_s),
        ("backward (compute + copies)", result.backward_s),
        ("wait for the last all-reduces" if result.strategy in ("ddp", "zero1") else "wait for the last collectives",
         result.comm_wait_s),
        ("copy out of buckets", result.copy_out_s),
        ("optimizer", result.step_optimizer_s),
    ]
    parts = [(name, value) for name, value in parts if value > 0 or name in ("forward", "optimizer")]
    rest = result.step_time_s - sum(value for _name, value in parts)
    # below 1e-6 of the step the difference is float rounding, not a slower rank
    if abs(rest) > 1e-6 * max(result.step_time_s, 1e-30):
        parts.append(("other ranks, jitter, median of steps", rest))
    return parts


def _sharded(result: Result) -> bool:
    """FSDP2's ZeRO-2/3 step: no DDP buckets, no all-reduce; its collectives are all-gathers and
    reduce-scatters (``result.collectives``)."""
    return result.strategy in ("zero2", "zero3")


def _communication_rows(result: Result, cap: str) -> list[tuple[str, str]]:
    """DDP's all-reduce and buckets, or a sharded step's strategy and collectives (a ZeRO-3 run printed
    "buckets 0" and "all-reduce ring": rows that do not apply to it)."""
    if not _sharded(result):
        return [("all-reduce", f"{result.algorithm} / {result.protocol}" if result.world_size > 1 else "none (1 GPU)"),
                ("bucket_cap_mb", cap), ("buckets", str(len(result.buckets)))]
    kinds = sorted({c.kind for c in result.collectives})
    calls = f", {len(result.collectives)} calls on rank 0" if result.collectives else ""
    return [("strategy", f"{result.strategy} (FSDP2 fully_shard)"),
            ("collectives", f"{' + '.join(kinds) or 'none'} ({result.algorithm} / {result.protocol}){calls}"
             if result.world_size > 1 else "none (1 GPU)")]


def summary_rows(result: Result) -> list[tuple[str, str]]:
    cap = "default (25 MiB, first 1 MiB)" if result.bucket_cap_mb is None else f"{result.bucket_cap_mb:g} MiB"
    rows = [
        ("model", result.model),
        # nodes of different sizes (cluster.node_groups) have no one GPU count to multiply
        ("cluster", f"{result.nodes} x {result.gpus_per_node} {result.gpu} ({result.world_size} GPUs)"
         if result.nodes * result.gpus_per_node == result.world_size
         else f"{result.nodes} nodes of uneven size, {result.gpu} ({result.world_size} GPUs)"),
        *_communication_rows(result, cap),
        ("step time", format_time(result.step_time_s)),
        *((f"  {name}", format_time(value)) for name, value in step_parts(result)),
        ("communication (all buckets)" if not _sharded(result) else "communication (all collectives)",
         format_time(result.comm_time_s)),
        ("  exposed (not hidden by compute)", format_time(result.exposed_comm_s)),
        ("  overlap", f"{100 * result.overlap_fraction:.0f}%"),
        ("compute-only step", format_time(result.compute_only_s)),
        ("throughput", f"{result.samples_per_s:,.0f} samples/s"),
    ]
    if result.tokens_per_s:
        rows.append(("", f"{result.tokens_per_s:,.0f} tokens/s"))
    if len(result.step_times_s) > 1:
        rows.append(
            (
                "step p50 / p95 / p99",
                " / ".join(format_time(result.percentile_s(q)) for q in (50, 95, 99)),
            )
        )
        rows.append(("critical-path rank", str(result.critical_rank)))
    rows.append(
        (
            "memory per GPU",
            f"{result.memory_bytes.get('total', 0) / 2**30:.1f} GiB of {result.gpu_memory_bytes / 2**30:.0f} GiB"
            + ("" if result.fits_in_memory else "  DOES NOT FIT"),
        )
    )
    rows.append(("simulation", f"{result.mode} mode, {result.wall_s:.2f} s wall"))
    if result.mode_reason:
        rows.append(("mode reason", result.mode_reason))
    if result.step_time_p10_s is not None and result.step_time_p90_s is not None:
        rows.insert(1 + [r[0] for r in rows].index("step time"), (
            "  p10 / p90 as measured", f"{format_time(result.step_time_p10_s)} / {format_time(result.step_time_p90_s)}"))
    # the JSON keys are identifiers (the run-result schema's); a reader of the table gets words
    rows += [(f"from: {name.replace('_', ' ')}", source) for name, source in result.value_sources.items()]
    return rows


def summary_table(result: Result, markdown: bool = False, width: int = 100) -> str:
    rows = summary_rows(result)
    if not markdown:
        # a provenance line names every default it used: wrap it under its own row, not off the terminal
        rows = [(name if i == 0 else "", line) for name, value in rows
                for i, line in enumerate(textwrap.wrap(value, width, break_on_hyphens=False, break_long_words=False) or [""])]
    return table(("quantity", "value"), rows, markdown, numbers_right=False)


def bucket_table(result: Result, markdown: bool = False, limit: int = 40) -> str:
    rows = [
        (
            b.index,
            format_bytes(b.bytes),
            b.n_params,
            format_time(b.ready_s),
            format_time(b.start_s),
            format_time(b.end_s),
            format_time(b.end_s - b.start_s),
        )
        for b in result.buckets[:limit]
    ]
    text = table(("bucket", "bytes", "params", "ready", "start", "end", "all-reduce"), rows, markdown)
    if len(result.buckets) > limit:
        text += f"\n... {len(result.buckets) - limit} more buckets in result.json"
    return text
