"""Each figure of docs/accuracy.md, computed from its stages' committed outputs. A renderer takes the
figure's manifest entry and returns the Markdown it stands for; every number in it is read from a stage output
(never typed in): a wrong or stale output changes the document, and the currency test sees it."""

from __future__ import annotations

import os
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
