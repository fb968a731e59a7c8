"""The kit every HTML report is built with: a self-contained page (one style for all), an HTML table, a
matplotlib figure and its PNG embedded in the page, the GAR-over-time axes, and writing the file.

Used by a run's and a comparison's report (:mod:`kant.metrics.report`), the what-if page
(:mod:`kant.twin.report`) and a study's report (:mod:`kant.sweep.report`). matplotlib is imported when
a figure is made (Agg backend, nothing drawn on a screen), never at import.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["gar_axes", "new_figure", "page", "png", "table", "write_page"]

#: the CSS of every report page
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1000px; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
img { max-width: 100%; display: block; margin: 0.5em 0 1.5em; }
.plot { margin: 0.5em 0 1.5em; min-height: 2em; }
.note { color: #666; font-size: 0.9em; }
"""


def page(title: str, body: list[str], style: str = "") -> str:
    """A whole HTML page titled ``title`` (escaped) around ``body`` (HTML); ``style`` is more CSS for its head."""
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{html.escape(title)}</title>",
            f"<style>{_STYLE}{style}</style></head><body>",
            f"<h1>{html.escape(title)}</h1>",
            *body,
            "</body></html>",
        ]
    )


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """An HTML table of text cells (escaped): the first column left-aligned, the others right."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    lines = ["<table>", f"<tr>{head}</tr>"]
    for row in rows:
        lines.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    lines.append("</table>")
    return "\n".join(lines)


def new_figure(width: float = 9.0, height: float = 3.2) -> Figure:
    """A matplotlib figure (inches) with a constrained layout, drawn off screen (Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def png(fig: Figure) -> str:
    """``fig`` as an ``<img>`` holding its PNG (96 dpi, base64): the page stays one file."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="plot" src="data:image/png;base64,{data}">'


def gar_axes(ax: Axes, title: str, xlabel: str, *, legend: bool) -> None:
    """Title, labels, a 0-1 y range and a grid for a GAR-over-time plot (the comparison's and the
    what-if's)."""
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("allocated / total")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(loc="best", fontsize="small")


def write_page(path: str | Path, text: str) -> Path:
    """Write a page (UTF-8), making its folder; returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p
