"""Read a committed validation report (the ``validation.md`` that ``ddpsim validate --out`` writes and the
``validate`` stages write the same way) back into numbers, so each figure is computed from the stage's output
rather than copied from it by hand."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


class ReportError(ValueError):
    """A stage output that does not read as a validation report (names the file and what is missing)."""


@dataclass(frozen=True)
class LinkSummary:
    runs: int
    mean_abs_pct: float
    max_abs_pct: float
    mean_pct: float
    launch_spread_pct: float | None  # None where the data hold no repeat launch ("-")


@dataclass(frozen=True)
class RunRow:
    model: str
    option: str
    link: str
    gpus: int
    cap_mb: float
    launch: str  # "campaign/launch" over several campaigns, the launch id over one, the fold with --cross
    measured_ms: float
    predicted_ms: float
    error_pct: float

    @property
    def campaign(self) -> str:
        return self.launch.split("/")[0]

    @property
    def group(self) -> str:
        """The summary table's name for the run's class: a multi-node run's is its shape ("net 2x2")."""
        if m := re.fullmatch(r"\w+, (\d+) nodes", self.link):
            nodes = int(m[1])
            return f"net {nodes}x{self.gpus // nodes}"
        return self.link


@dataclass
class Report:
    path: str
    summary: dict[str, LinkSummary] = field(default_factory=dict)
    rows: list[RunRow] = field(default_factory=list)
    cap_advice: tuple[int, int] | None = None  # groups within 5% of the measured best, groups
    layouts: tuple[int, int] | None = None  # layouts equal to DDP's, layouts checked
    all_runs: tuple[float, float] | None = None  # mean, max absolute error over every held-out run


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _tables(lines: list[str]) -> list[tuple[list[str], list[list[str]]]]:
    """Every markdown table of the report: its header cells and its body rows' cells."""
    tables = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|-"):
            header = _cells(lines[i])
            body = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                body.append(_cells(lines[i]))
                i += 1
            tables.append((header, body))
        else:
            i += 1
    return tables


def _float_or_none(text: str) -> float | None:
    return None if text == "-" else float(text)


def read_report(path: str) -> Report:
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    report = Report(path)
    for header, body in _tables(lines):
        if header[:2] == ["model", "option"]:
            for c in body:
                report.rows.append(RunRow(c[0], c[1], c[2], int(c[3]), float(c[4]), c[5], float(c[6]), float(c[7]),
                                          float(c[8])))
        elif header[:2] == ["link class", "runs"]:
            for c in body:
                report.summary[c[0]] = LinkSummary(int(c[1]), float(c[2]), float(c[3]), float(c[4]),
                                                   _float_or_none(c[5]))
    for line in lines:
        if m := re.match(r"bucket-cap recommendation within 5% of the measured best: (\d+) of (\d+) groups", line):
            report.cap_advice = (int(m[1]), int(m[2]))
        elif m := re.match(r"bucket layouts: (\d+) of (\d+) equal", line):
            report.layouts = (int(m[1]), int(m[2]))
        elif m := re.match(r"all held-out runs: mean abs error ([\d.]+)%, max ([\d.]+)%", line):
            report.all_runs = (float(m[1]), float(m[2]))
    if not report.summary or not report.rows:
        raise ReportError(f"{path}: no run table or no per-link-class summary table")
    return report


def mean_max(rows: list[RunRow]) -> tuple[float, float]:
    """Mean and max absolute error over rows. The mean from the step times (printed to 0.01 ms), not from the
    printed errors (0.1%), whose rounding would move the mean's last digit; the max from the printed errors,
    which round the exact error the same way the figure does."""
    if not rows:
        raise ReportError("no runs to summarise")
    errors = [abs(r.predicted_ms / r.measured_ms - 1) * 100 for r in rows]
    return sum(errors) / len(errors), max(abs(r.error_pct) for r in rows)


def pct(value: float) -> str:
    return f"{value:.1f}%"
