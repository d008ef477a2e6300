"""One self-contained HTML page for a sweep or a scaling study: its table and its plots inline.

The plots are the PNGs ``report.plots`` draws, embedded as base64 ``data:`` URIs, and the style is inline: the
file can be mailed, attached to a ticket or opened offline, and shows the same thing anywhere.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence

_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;font-size:0.9em;margin:1em 0}"
    "th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:left}th{background:#f3f3f3}"
    "img{max-width:100%;display:block;margin:0.5em 0 1.5em}figcaption{font-weight:600}"
    "p.meta{color:#666;font-size:0.85em}"
)


def png_data_uri(path: str) -> str:
    with open(path, "rb") as handle:
        return "data:image/png;base64," + base64.b64encode(handle.read()).decode("ascii")


def markdown_table_html(text: str) -> str:
    """The HTML of a table ``report.tables.table(..., markdown=True)`` wrote (its rows, the rule line dropped)."""
    rows = [line.strip().strip("|").split("|") for line in text.splitlines() if line.strip().startswith("|")]
    rows = [cells for cells in rows if not all(set(c.strip()) <= set("-:") for c in cells)]
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(c.strip())}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c.strip())}</td>" for c in cells) + "</tr>"
                   for cells in rows[1:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def report_html(title: str, paragraphs: Sequence[str], table_markdown: str,
                figures: Sequence[tuple[str, str]], meta: str = "") -> str:
    """The page: ``paragraphs`` (plain text), the table, then each figure (PNG path, caption) inline."""
    parts = [f"<h1>{html.escape(title)}</h1>"]
    parts += [f"<p>{html.escape(p)}</p>" for p in paragraphs]
    parts.append(markdown_table_html(table_markdown))
    for path, caption in figures:
        parts.append(f"<figure><figcaption>{html.escape(caption)}</figcaption>"
                     f"<img alt=\"{html.escape(caption)}\" src=\"{png_data_uri(path)}\"></figure>")
    if meta:
        parts.append(f"<p class=\"meta\">{html.escape(meta)}</p>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n<body>\n"
            + "\n".join(parts) + "\n</body></html>\n")
