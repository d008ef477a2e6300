"""Each figure of docs/accuracy.md, computed from its stages' committed outputs. A renderer takes the
figure's manifest entry and returns the Markdown it stands for; every number in it is read from a stage output
(never typed in): a wrong or stale output changes the document, and the currency test sees it."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from validation.evidence.reports import Report, RunRow, mean_max, pct, read_report


class FigureError(ValueError):
    """A manifest entry a renderer cannot draw (names the figure and the field)."""


def _row(cells: list[str]) -> str:
    return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    return "\n".join([_row(headers), "|" + "|".join("---" for _ in headers) + "|"] + [_row(r) for r in rows])


class Stages:
    """The committed stage outputs a figure reads, by stage name (read once)."""

    def __init__(self, root: str, manifest: dict[str, Any]) -> None:
        self.root = root
        self.stages = manifest["stages"]
        self._reports: dict[str, Report] = {}

    def output_path(self, name: str) -> str:
        if name not in self.stages:
            raise FigureError(f"manifest: figure names stage {name!r}, which 'stages' does not define")
        return os.path.join(self.root, self.stages[name]["output"])

    def report(self, name: str) -> Report:
        if name not in self._reports:
            self._reports[name] = read_report(self.output_path(name))
        return self._reports[name]

    def text(self, name: str) -> str:
        with open(self.output_path(name), encoding="utf-8") as handle:
            return handle.read()


def _link(report: Report, link: str, figure: str) -> Any:
    if link not in report.summary:
        raise FigureError(f"{report.path}: no link class {link!r} (figure {figure})")
    return report.summary[link]


def cross_validated(fig: dict[str, Any], stages: Stages) -> str:
    rows = []
    for spec in fig["rows"]:
        report = stages.report(spec["stage"])
        for i, (label, link) in enumerate(spec["links"]):
            s = _link(report, link, fig["id"])
            spread = "-" if s.launch_spread_pct is None else pct(s.launch_spread_pct)
            rows.append([spec["split"] if i == 0 else "", label, str(s.runs), pct(s.mean_abs_pct), pct(s.max_abs_pct),
                         spread])
    return _table(["split", "link class", "runs", "mean abs. error", "max error", "launch spread (measured)"], rows)


def one_calibration(fig: dict[str, Any], stages: Stages) -> str:
    rows = []
    for spec in fig["rows"]:
        report = stages.report(spec["stage"])
        uncalibrated = stages.report(spec["uncalibrated_stage"])
        if report.all_runs is None or uncalibrated.all_runs is None:
            raise FigureError(f"{report.path}: no 'all held-out runs' line (figure {fig['id']})")
        runs = sum(s.runs for s in report.summary.values())
        cells = [spec["label"].format(runs=runs)]
        for link in ("nvlink", "shm", "socket"):
            s = _link(report, link, fig["id"])
            cells.append(f"{pct(s.mean_abs_pct)} / {pct(s.max_abs_pct)}")
        cells.append(f"{pct(report.all_runs[0])} / {pct(report.all_runs[1])}")
        cells.append(f"{pct(uncalibrated.all_runs[0])} / {pct(uncalibrated.all_runs[1])}")
        rows.append(cells)
    return _table(["data", "NVLink", "shared memory", "sockets", "all", "without calibration"], rows)


def _in_campaign(rows: list[RunRow], campaign: str | None) -> list[RunRow]:
    return rows if campaign is None else [r for r in rows if r.campaign == campaign]


def multinode_by_campaign(fig: dict[str, Any], stages: Stages) -> str:
    report = stages.report(fig["stage"])
    headers = ["shape"] + [c["label"] for c in fig["campaigns"]] + ["all three", "launch spread (measured)"]
    rows = []
    for label, link in fig["shapes"]:
        cells = [label]
        for campaign in fig["campaigns"]:
            picked = [r for r in _in_campaign(report.rows, campaign["campaign"]) if r.group == link]
            mean, worst = mean_max(picked)
            cells.append(f"{pct(mean)} / {pct(worst)} ({len(picked)})")
        s = _link(report, link, fig["id"])
        cells.append(f"{pct(s.mean_abs_pct)} / {pct(s.max_abs_pct)} ({s.runs})")
        cells.append("-" if s.launch_spread_pct is None else pct(s.launch_spread_pct))
        rows.append(cells)
    cells = ["all"]
    for campaign in fig["campaigns"]:
        mean, worst = mean_max(_in_campaign(report.rows, campaign["campaign"]))
        cells.append(f"{pct(mean)} / {pct(worst)}")
    if report.all_runs is None:
        raise FigureError(f"{report.path}: no 'all held-out runs' line (figure {fig['id']})")
    cells += [f"{pct(report.all_runs[0])} / {pct(report.all_runs[1])} ({len(report.rows)})", ""]
    rows.append(cells)
    return _table(headers, rows)


def heldout_by_model(fig: dict[str, Any], stages: Stages) -> str:
    models = fig["models"]
    rows = []
    for spec in fig["rows"]:
        picked = [r for r in _in_campaign(stages.report(spec["stage"]).rows, spec.get("campaign"))
                  if r.group == fig["link"]]
        mean, worst = mean_max(picked)
        cells = [spec["label"], f"{pct(mean)} / {pct(worst)}"]
        for model in models:
            plain = [r for r in picked if r.model == model and r.option == "none"]
            cells.append(pct(mean_max(plain)[0]) if plain else "-")
        rows.append(cells + [spec["profile"]])
    return _table(["data", "all runs"] + fig["model_labels"] + ["profile"], rows)


RENDERERS: dict[str, Callable[[dict[str, Any], Stages], str]] = {
    "cross_validated": cross_validated,
    "one_calibration": one_calibration,
    "multinode_by_campaign": multinode_by_campaign,
    "heldout_by_model": heldout_by_model,
}


# --- figures read from the text a function stage prints (its committed output.txt) ---------------------------

_SHIPPED = re.compile(r"^(?P<cal>\S.*?)\s{2,}(?P<pool>\S.*?)\s+(?P<shape>\dx\d)\s+(?P<runs>\d+)\s+(?P<mean>[\d.]+)\s+"
                      r"(?P<max>[\d.]+)\s+(?P<bias>[+-]?[\d.]+)$")


def shipped_multinode(fig: dict[str, Any], stages: Stages) -> str:
    cells: dict[tuple[str, str, str], str] = {}
    for line in stages.text(fig["stage"]).splitlines():
        if m := _SHIPPED.match(line):
            cells[(m["cal"], m["pool"], m["shape"])] = f"{m['mean']} / {m['max']} ({m['bias']})"
    if not cells:
        raise FigureError(f"{stages.output_path(fig['stage'])}: no per-shape rows (figure {fig['id']})")
    rows = [[row["label"], row["gpu_label"]] + [cells.get((row["calibration"], row["pool"], shape), "-")
                                                for shape in fig["shapes"]] for row in fig["rows"]]
    return _table(["calibration", "GPU of the predicted runs"] + fig["shape_labels"], rows)


_REPEAT = re.compile(r"^  (?P<option>\S+(?: but \S+)?)\s+(?P<cases>\d+) cases,\s+(?P<counted>\d+) counted: direction "
                     r"(?P<direction>\d+) of \d+, size (?P<size>\d+) of \d+$")


def option_repeat(fig: dict[str, Any], stages: Stages) -> str:
    found = {m["option"]: m for line in stages.text(fig["stage"]).splitlines() if (m := _REPEAT.match(line))}
    rows = []
    for label, option in fig["options"]:
        if option not in found:
            raise FigureError(f"{stages.output_path(fig['stage'])}: no tally for {option!r} (figure {fig['id']})")
        m = found[option]
        rows.append([label, m["cases"], m["counted"], m["direction"], m["size"]])
    return _table(["option", "cases in both launches", "both beyond 5% the same way", "direction right",
                   "size within 1.5x"], rows)


def concurrent_profile(fig: dict[str, Any], stages: Stages) -> str:
    """The 'all runs' line of each allocation's section: its first two mean / max pairs are the profile alone
    on GPU 0 and every GPU at once."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in stages.text(fig["stage"]).splitlines():
        if m := re.match(r"^(\S+): step ms", line):
            current = m[1]
        elif current and line.startswith("  all runs"):
            sections[current] = re.findall(r"([\d.]+) /\s+([\d.]+)", line)[:2]
    rows = []
    for row in fig["rows"]:
        pairs = sections.get(row["campaign"])
        if not pairs or len(pairs) < 2:
            raise FigureError(f"{stages.output_path(fig['stage'])}: no 'all runs' line for {row['campaign']}")
        rows.append([row["label"]] + [f"{a}% / {b}%" for a, b in pairs])
    return _table(fig["headers"], rows)


def option_directions(fig: dict[str, Any], stages: Stages) -> str:
    lines = stages.text(fig["stage"]).splitlines()
    header = lines[0].split()
    machines = [word for word in header if word not in ("option", "link", "model", "meas/pred", "counted", "direction",
                                                         "magnitude")]
    effects: dict[tuple[str, str], dict[str, str]] = {}
    for line in lines[1:]:
        words = re.sub(r"/\s+", "/", line).split()
        if len(words) == len(machines) + 6 and words[1] == fig["link"]:
            effects[(words[0], words[2])] = dict(zip(machines, words[3:3 + len(machines)], strict=True))
    rows = []
    for label, option in fig["options"]:
        cells = [label, fig["machines_label"]]
        for model in fig["models"]:
            per_machine = effects.get((option, model))
            if per_machine is None:
                raise FigureError(f"{stages.output_path(fig['stage'])}: no row {option} {model} (figure {fig['id']})")
            cells.append(", ".join(per_machine[m] for m in fig["machines"]))
        rows.append(cells)
    return _table(["option", "machine"] + fig["model_labels"], rows)


RENDERERS.update({
    "shipped_multinode": shipped_multinode,
    "option_repeat": option_repeat,
    "concurrent_profile": concurrent_profile,
    "option_directions": option_directions,
})


_DDP_SPLIT = re.compile(r"^fit .*?\s{2,}(?P<group>net \dx\d)\s+(?P<runs>\d+)\s+(?P<fm>[\d.]+) /\s+(?P<fx>[\d.]+) /\s+"
                        r"(?P<fb>[+-]?[\d.]+)\s+(?P<mm>[\d.]+) /\s+(?P<mx>[\d.]+) /\s+(?P<mb>[+-]?[\d.]+)$")
_PAIR = re.compile(r"([\d.]+) /\s+([\d.]+)")


def network_duplex(fig: dict[str, Any], stages: Stages) -> str:
    """DDP rows: a campaign's 'DDP runs of' section, full duplex against the measured duplex factor; all-reduce
    rows: a campaign's sweep section, the from-1-MiB pair of each (second and fourth mean / max)."""
    ddp: dict[tuple[str, str], re.Match[str]] = {}
    sweeps: dict[tuple[str, str], list[tuple[str, str]]] = {}
    campaign = section = ""
    for line in stages.text(fig["stage"]).splitlines():
        if m := re.match(r"^DDP runs of (\S+), ", line):
            campaign, section = m[1], "ddp"
        elif m := re.match(r"^(\S+): (fit .*)$", line):
            campaign, section = m[1], m[2]
        elif section == "ddp" and (m := _DDP_SPLIT.match(line)):
            ddp[(campaign, m["group"])] = m
        elif section and line.startswith("  ") and len(pairs := _PAIR.findall(line)) == 4:
            sweeps[(campaign, f"{section}: {line.split('  ')[1].strip()}")] = pairs
    rows = []
    for row in fig["rows"]:
        if row["kind"] == "ddp":
            m = ddp.get((row["campaign"], row["group"]))
            if m is None:
                raise FigureError(f"{stages.output_path(fig['stage'])}: no DDP split {row['group']} of {row['campaign']}")
            full, measured = f"{m['fm']}% / {m['fx']}%", f"{m['mm']}% / {m['mx']}%"
            if row.get("bias"):
                full, measured = f"{full} (bias {m['fb']})", f"{measured} (bias {m['mb']})"
            rows.append([row["label"], row["fitted"], row["predicted"].format(runs=m["runs"]), full, measured])
        else:
            found = sweeps.get((row["campaign"], row["sweep"]))
            if found is None:
                raise FigureError(f"{stages.output_path(fig['stage'])}: no sweep {row['sweep']!r} of {row['campaign']}")
            rows.append([row["label"], row["fitted"], row["predicted"], "{}% / {}%".format(*found[1]),
                         "{}% / {}%".format(*found[3])])
    return _table(["allocation", "fitted sweeps", "predicted", "full duplex (before)", "measured duplex factor"], rows)


RENDERERS["network_duplex"] = network_duplex


# --- numbers inside prose: {{KIND:STAGE[:ARG...]}} ---------------------------------------------------------------

INLINE = re.compile(r"\{\{(\w+):([^{}\n]+)\}\}")


def _summary_value(stages: Stages, stage: str, link: str, field: str) -> str:
    s = _link(stages.report(stage), link, "inline")
    value = {"runs": s.runs, "mean": s.mean_abs_pct, "max": s.max_abs_pct, "bias": s.mean_pct,
             "spread": s.launch_spread_pct}[field]
    if value is None:
        return "-"
    return str(value) if field == "runs" else (f"{value:+.1f}" if field == "bias" else f"{value:.1f}")


def inline_value(kind: str, args: list[str], stages: Stages) -> str:
    """One number of the prose, read from a stage's report: summary fields of a link class (runs, mean, max,
    bias, spread: ``{{mean:cross-model:nvlink}}``), the report's totals (cap_advice, layouts, all_mean,
    all_max: ``{{cap_advice:cross-host}}``), or a campaign's runs within a report (campaign_mean,
    campaign_max, campaign_runs: ``{{campaign_mean:heldout-options-xy:h200x4-options-2026-11-27}}``, optionally
    one link class as a third argument)."""
    stage = args[0]
    if kind in ("runs", "mean", "max", "bias", "spread") and len(args) == 2:
        return _summary_value(stages, stage, args[1], kind)
    report = stages.report(stage)
    if kind in ("cap_advice", "layouts"):
        pair = report.cap_advice if kind == "cap_advice" else report.layouts
        if pair is None:
            raise FigureError(f"{report.path}: no {kind} line")
        return f"{pair[0]} of {pair[1]}"
    if kind in ("all_mean", "all_max"):
        if report.all_runs is None:
            raise FigureError(f"{report.path}: no 'all held-out runs' line")
        return f"{report.all_runs[0 if kind == 'all_mean' else 1]:.1f}"
    if kind in ("campaign_mean", "campaign_max", "campaign_runs") and len(args) in (2, 3):
        rows = [r for r in _in_campaign(report.rows, args[1]) if len(args) == 2 or r.group == args[2]]
        if kind == "campaign_runs":
            return str(len(rows))
        mean, worst = mean_max(rows)
        return f"{mean if kind == 'campaign_mean' else worst:.1f}"
    raise FigureError(f"template: unknown inline value {{{{{kind}:{':'.join(args)}}}}}")


_SWEEP = re.compile(r"^  (?P<sweep>\dx\d \(\S+\))\s+(?P<algorithm>\w+)\s+(?P<sm>[\d.]+) /\s+(?P<sx>[\d.]+)\s+"
                    r"(?P<lm>[\d.]+) /\s+(?P<lx>[\d.]+)")


def multinode_allreduce(fig: dict[str, Any], stages: Stages) -> str:
    """Per split of the stage's first part: one held-out sweep's mean / max below and from 1 MiB ('one'),
    the means of several ('means'), or the range of the means over every sweep of the split ('range')."""
    sections: dict[str, list[re.Match[str]]] = {}
    title = None
    for line in stages.text(fig["stage"]).splitlines():
        if not line.strip():
            title = None
        elif not line.startswith(" ") and not line.startswith(("split /", "data:")):
            title = line
            sections[title] = []
        elif title is not None and (m := _SWEEP.match(line)):
            sections[title].append(m)
    rows = []
    for row in fig["rows"]:
        if row["section"] not in sections:
            raise FigureError(f"{stages.output_path(fig['stage'])}: no split {row['section']!r} (figure {fig['id']})")
        picked = sections[row["section"]]
        if "lines" in row:
            by_sweep = {(m["sweep"], m["algorithm"]): m for m in picked}
            missing = [want for want in row["lines"] if tuple(want) not in by_sweep]
            if missing:
                raise FigureError(f"{stages.output_path(fig['stage'])}: split {row['section']!r} lacks {missing}")
            picked = [by_sweep[(want[0], want[1])] for want in row["lines"]]
        if row["mode"] == "one":
            small, large = f"{picked[0]['sm']}% / {picked[0]['sx']}%", f"{picked[0]['lm']}% / {picked[0]['lx']}%"
        elif row["mode"] == "means":
            small = " / ".join(f"{m['sm']}%" for m in picked) + " mean"
            large = " / ".join(f"{m['lm']}%" for m in picked) + " mean"
        else:
            smalls, larges = [float(m["sm"]) for m in picked], [float(m["lm"]) for m in picked]
            small = f"{min(smalls):.1f}% to {max(smalls):.1f}% mean"
            large = f"{min(larges):.1f}% to {max(larges):.1f}% mean"
        rows.append([row["fitted"], row["predicted"], small, large])
    return _table(["fitted on", "predicted", "below 1 MiB, mean / max", "from 1 MiB, mean / max"], rows)


RENDERERS["multinode_allreduce"] = multinode_allreduce


def stage_text(fig: dict[str, Any], stages: Stages) -> str:
    """A stage whose output is already Markdown, as it is."""
    return stages.text(fig["stage"]).rstrip("\n")


RENDERERS["stage_text"] = stage_text
