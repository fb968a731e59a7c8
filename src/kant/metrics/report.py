"""Reports of a run's metrics: JSON, a self-contained HTML page with plots, and multi-policy comparisons.

A run's report (:func:`write_html`, written by every ``kant simulate``) carries its plot data as JSON
and draws the plots in the browser with uPlot (the dashboard's vendored copy, inlined so the report
stays one file): writing it costs no plotting, which was as much CPU as a short simulation
(docs/performance.md, "Whole process"). Comparisons (``kant compare``) are PNGs drawn with
matplotlib's Agg backend and embedded base64. Step series are downsampled for plotting to
time-weighted means over at most :data:`MAX_PLOT_POINTS` equal bins. Time axes are in days from the
first submit.
"""

from __future__ import annotations

import csv
import html
import json
import math
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kant.metrics.columns import COMPARED, flatten, lookup
from kant.metrics.html import gar_axes, new_figure, page, png, table, write_page
from kant.metrics.recorder import SimResult
from kant.metrics.summary import (
    BUCKETS,
    DAY,
    Dist,
    Metrics,
    json_safe,
    summary_rows,
)
from kant.metrics.timeline import Timeline
from kant.metrics.waits import job_waits
from kant.text import format_duration

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "MAX_PLOT_POINTS",
    "report_dict",
    "write_comparison_csv",
    "write_comparison_html",
    "write_html",
    "write_json",
]

FloatArray = npt.NDArray[np.float64]

#: most points drawn per time series
MAX_PLOT_POINTS = 5000
#: points of each wait CDF in a run's report (log-spaced waits from 1 s to the longest)
CDF_POINTS = 400

Comparison = Sequence[tuple[str, SimResult, Metrics]]


# --- JSON --------------------------------------------------------------------------------------
def report_dict(result: SimResult, metrics: Metrics) -> dict[str, Any]:
    """The JSON report as a dict: policy, run info, cluster and trace description, metrics."""
    return {
        "policy": result.policy,
        "run": metrics.run.to_dict(),
        "cluster": result.cluster.describe(),
        "trace": result.jobs.source,
        "info": json_safe(result.info),
        "metrics": metrics.to_dict(),
    }


def write_json(path: str | Path, result: SimResult, metrics: Metrics) -> Path:
    """Write the metrics of one run as JSON (sorted keys, floats as computed, no NaN); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report_dict(result, metrics), indent=2, sort_keys=True, allow_nan=False)
    p.write_text(text + "\n", encoding="utf-8")
    return p


# --- plotting helpers --------------------------------------------------------------------------
def _origin(result: SimResult) -> float:
    """Time zero of the plots: the first submit (or the first sample when there are no jobs)."""
    if len(result.jobs):
        return float(result.jobs.submit.min())
    if result.times.size:
        return float(result.times[0])
    return 0.0


#: a run's timeline from the plots' origin, the plotted span ``[lo, hi]`` and the origin
_Span = tuple[Timeline, float, float, float]


def _timeline(result: SimResult) -> _Span:
    """Timeline from the origin, the plotted span ``[lo, hi]`` and the origin."""
    origin = _origin(result)
    lo = origin
    if result.times.size:
        lo = min(lo, float(result.times[0]))
    tl = Timeline(result, lo)
    return tl, lo, max(tl.end, lo), origin


def _bins(tl: Timeline) -> int:
    return max(1, min(MAX_PLOT_POINTS, len(tl)))


def _series_plot(result: SimResult, which: str,
                 timeline: _Span | None = None) -> list[tuple[str, FloatArray, FloatArray]]:
    """Downsampled ``(label, days, values)`` lines for a plot: ``gar``, ``gfr`` or ``queue``
    (``timeline``: :func:`_timeline` of ``result``, when the caller has it already)."""
    tl, lo, hi, origin = timeline if timeline is not None else _timeline(result)
    if hi <= lo or len(tl) == 0:
        return []
    bins = _bins(tl)
    lines: list[tuple[str, FloatArray, FloatArray]] = []
    if which == "gar":
        x, y = tl.binned_mean(tl.gar(), lo, hi, bins)
        lines.append(("allocated / total GPUs", x, y))
    elif which == "gfr":
        r, m = tl.gfr_nodes()
        x, y = tl.binned_mean(r, lo, hi, bins, m)
        lines.append(("partial / up GPU nodes", x, y))
        r, m = tl.gfr_gpus()
        x, y = tl.binned_mean(r, lo, hi, bins, m)
        lines.append(("free GPUs on partial nodes / free GPUs", x, y))
    elif which == "queue":
        x, y = tl.binned_mean(tl.series["queue_len"], lo, hi, bins)
        lines.append(("jobs waiting", x, y))
    elif which == "pending":
        x, y = tl.binned_mean(tl.series["pending_gpus"], lo, hi, bins)
        lines.append(("GPUs asked by waiting jobs", x, y))
    else:
        raise ValueError(f"unknown series plot {which!r}")
    return [(label, (x - origin) / DAY, y) for label, x, y in lines]


def _no_data(ax: Axes) -> None:
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)


def _cdf(ax: Axes, values: FloatArray, label: str, **kw: Any) -> None:
    """Empirical CDF on a log-x axis; waits below 1 s are drawn at 1 s."""
    if values.size == 0:
        return
    x = np.sort(np.maximum(values, 1.0))
    y = np.arange(1, x.size + 1) / x.size
    if x.size > MAX_PLOT_POINTS:
        idx = np.unique(np.linspace(0, x.size - 1, MAX_PLOT_POINTS).astype(np.int64))
        x, y = x[idx], y[idx]
    ax.step(x, y, where="post", label=f"{label} (n={values.size:,})", **kw)


def _finish_cdf(ax: Axes, has_data: bool) -> None:
    ax.set_title("Job waiting time distribution (training jobs that started)")
    ax.set_xlabel("wait (s, log scale; waits under 1 s drawn at 1 s)")
    ax.set_ylabel("share of jobs")
    if has_data:
        ax.set_xscale("log")
        ax.legend(loc="lower right", fontsize="small")
    else:
        _no_data(ax)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)


# --- plots drawn in the browser (a run's report) ------------------------------------------------
#: (id, title, y label, y range top or None) of the time-series plots, in page order
_SERIES_PLOTS: tuple[tuple[str, str, str, float | None], ...] = (
    ("gar", "GAR over time", "allocated / total", 1.05),
    ("gfr", "GFR over time", "ratio", 1.05),
    ("queue", "Queue length over time", "jobs waiting", None),
    ("pending", "Pending GPUs over time", "GPUs", None),
)


def _rounded(values: FloatArray, digits: int) -> list[float | None]:
    """JSON-ready values: ``digits`` significant digits, NaN as null (a gap in the plot)."""
    fmt = f"%.{digits}g"
    return [None if v != v else float(fmt % v) for v in values.tolist()]


def _series_data(timeline: _Span, result: SimResult, which: str, title: str, ylabel: str,
                 ymax: float | None) -> dict[str, Any]:
    lines = _series_plot(result, which, timeline)
    x = lines[0][1] if lines else np.empty(0)
    series = [{"label": label, "y": _rounded(y, 4)} for label, _, y in lines]
    return {"id": which, "kind": "line", "title": title, "xlabel": "days from first submit", "ylabel": ylabel,
            "ymax": ymax, "x": _rounded(x, 7), "series": series}


def _daily_data(metrics: Metrics) -> dict[str, Any]:
    vals = np.asarray(metrics.gar.daily.values, dtype=np.float64)
    return {"id": "daily", "kind": "bars", "title": "GAR per day of the measurement window",
            "xlabel": "day of window", "ylabel": "GAR", "ymax": 1.05, "x": list(range(len(vals))),
            "series": [{"label": "GAR", "y": _rounded(vals, 4)}]}


def _jwtd_data(result: SimResult) -> dict[str, Any]:
    """Wait CDFs (all jobs and each gang-size bucket with jobs) on one log-spaced grid of waits: the
    share of jobs that waited at most ``x`` (waits under 1 s count as 1 s)."""
    waits, buckets = job_waits(result)
    groups = [("all", waits)] + [(f"{b} GPUs", waits[buckets == i]) for i, b in enumerate(BUCKETS)]
    groups = [(label, np.sort(np.maximum(w, 1.0))) for label, w in groups if w.size]
    top = max(float(waits.max()), 1.0) if waits.size else 1.0
    grid = np.unique(np.geomspace(1.0, top, CDF_POINTS)) if waits.size else np.empty(0)
    series = [{"label": f"{label} (n={w.size:,})", "y": _rounded(np.searchsorted(w, grid, side="right") / w.size, 4)}
              for label, w in groups]
    return {"id": "jwtd", "kind": "cdf", "title": "Job waiting time distribution (training jobs that started)",
            "xlabel": "wait (s, log scale; waits under 1 s counted at 1 s)", "ylabel": "share of jobs", "ymax": 1.02,
            "x": _rounded(grid, 6), "series": series}


def _plot_data(result: SimResult, metrics: Metrics) -> list[dict[str, Any]]:
    """Every plot of a run's report as data, in page order."""
    timeline = _timeline(result)  # one for the four series plots
    plots = [_series_data(timeline, result, *_SERIES_PLOTS[0])]
    plots.append(_daily_data(metrics))
    plots += [_series_data(timeline, result, *spec) for spec in _SERIES_PLOTS[1:]]
    plots.append(_jwtd_data(result))
    return plots


def _vendored(name: str) -> str:
    """A file of the uPlot copy the dashboard serves (kant/service/dashboard/static/vendor)."""
    return resources.files("kant").joinpath("service", "dashboard", "static", "vendor", name).read_text("utf-8")


# draws every plot of the #kant-plots JSON into its <div id="plot-ID">; "no data" when a plot has none
_DRAW_JS = """
(() => {
  const plots = JSON.parse(document.getElementById("kant-plots").textContent);
  const colors = ["#222222", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"];
  for (const p of plots) {
    const el = document.getElementById("plot-" + p.id);
    if (!p.x.length || !p.series.length) { el.textContent = p.title + ": no data"; continue; }
    const first = p.kind === "cdf" ? 0 : 1;  // the CDF's first colour is "all" (black)
    const series = [{ label: p.xlabel }, ...p.series.map((s, i) => {
      const color = colors[(i + first) % colors.length];
      const one = { label: s.label, stroke: color, width: p.kind === "cdf" && i === 0 ? 2 : 1 };
      if (p.kind === "bars") Object.assign(one, { fill: color, paths: uPlot.paths.bars({ size: [0.8] }) });
      if (p.kind === "cdf") one.paths = uPlot.paths.stepped({ align: 1 });
      return one;
    })];
    const opts = {
      title: p.title, width: Math.min(960, Math.max(400, el.clientWidth || 960)), height: p.kind === "cdf" ? 340 : 260,
      scales: { x: p.kind === "cdf" ? { time: false, distr: 3, log: 10 } : { time: false },
                y: p.ymax ? { range: [0, p.ymax] } : { range: (u, lo, hi) => [0, hi > 0 ? hi * 1.05 : 1] } },
      axes: [{ label: p.xlabel }, { label: p.ylabel, size: 70 }],
      series,
    };
    new uPlot(opts, [p.x, ...p.series.map((s) => s.y)], el);
  }
})();
"""


def _plots_html(plots: list[dict[str, Any]]) -> dict[str, str]:
    """Per plot id, the element it is drawn in."""
    return {p["id"]: f'<div class="plot" id="plot-{p["id"]}"></div>' for p in plots}


def _plots_script(plots: list[dict[str, Any]]) -> str:
    """The plot data, uPlot and the drawing code, as the end of a page's body."""
    data = json.dumps(plots, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    return "\n".join([
        f'<script type="application/json" id="kant-plots">{data}</script>',
        f"<script>{_vendored('uPlot.iife.min.js')}</script>",
        f"<script>{_DRAW_JS}</script>",
    ])


# --- HTML --------------------------------------------------------------------------------------
def _dist_row(label: str, d: Dist) -> list[str]:
    return [
        label,
        f"{d.count:,}",
        format_duration(d.mean),
        format_duration(d.p50),
        format_duration(d.p90),
        format_duration(d.p99),
        format_duration(d.max),
    ]


def _jwtd_table(metrics: Metrics) -> str:
    rows = [_dist_row("all", metrics.jwtd.overall)]
    rows += [_dist_row(f"{b} GPUs", metrics.jwtd.buckets[b]) for b in BUCKETS]
    return table(["gang size", "jobs", "mean", "P50", "P90", "P99", "max"], rows)


def _queued_section(metrics: Metrics) -> list[str]:
    q = metrics.queued
    if q is None:
        return []
    rows = [_dist_row("all", q.overall)] + [_dist_row(f"{b} GPUs", q.buckets[b]) for b in BUCKETS]
    return [
        "<h2>Total queueing time (all waits)</h2>",
        table(["gang size", "jobs", "mean", "P50", "P90", "P99", "max"], rows),
        f'<p class="note">Finished training jobs: end - submit - time run, so the waits after each '
        f"interruption count too; {q.requeued:,} of them waited again after an interruption.</p>",
    ]


def _jct_table(metrics: Metrics) -> str:
    rows = [_dist_row("all", metrics.jct.overall)]
    rows += [_dist_row(f"{b} GPUs", metrics.jct.buckets[b]) for b in BUCKETS]
    return table(["gang size", "jobs", "mean", "P50", "P90", "P99", "max"], rows)


def _window_note(metrics: Metrics) -> str:
    w = metrics.window
    if w is None:
        return '<p class="note">No measurement window (no jobs and no samples).</p>'
    return (
        f'<p class="note">Measurement window ({html.escape(w.kind)}): {w.start:,.0f} s to {w.end:,.0f} s '
        f"({w.covered / DAY:,.2f} days covered by the run). Percentiles use linear interpolation.</p>"
    )


def write_html(path: str | Path, result: SimResult, metrics: Metrics) -> Path:
    """Write one self-contained HTML report of a run (headline table, plots, JWTD/JCT tables); the
    plots are data drawn by the browser (uPlot, inlined)."""
    c = metrics.counts
    plots = _plot_data(result, metrics)
    div = _plots_html(plots)
    body = [
        f"<p>Policy <b>{html.escape(result.policy)}</b> on {html.escape(result.cluster.describe())}; "
        f"{c.jobs:,} jobs from {html.escape(result.jobs.source or 'an unnamed trace')}.</p>",
        _window_note(metrics),
        "<h2>Headline</h2>",
        table(["metric", "value"], summary_rows(metrics)),
        "<h2>GPU allocation ratio (GAR)</h2>",
        div["gar"],
        div["daily"],
        "<h2>Fragmentation (GFR)</h2>",
        div["gfr"],
        "<h2>Queue</h2>",
        div["queue"],
        div["pending"],
        "<h2>Job waiting time (JWTD)</h2>",
        div["jwtd"],
        _jwtd_table(metrics),
        f'<p class="note">{metrics.jwtd.never_started:,} training job(s) never started and are not in '
        "the distribution.</p>",
        *_queued_section(metrics),
        "<h2>Job completion time (JCT)</h2>",
        _jct_table(metrics),
    ]
    if c.unschedulable_reasons:
        body += [
            "<h2>Unschedulable jobs</h2>",
            table(["reason", "jobs"], [(r, f"{n:,}") for r, n in c.unschedulable_reasons.items()]),
        ]
    body.append(_plots_script(plots))
    return write_page(path, page(f"kant report: {result.policy}", body, style=_vendored("uPlot.min.css")))


# --- comparison --------------------------------------------------------------------------------
def write_comparison_html(path: str | Path, results: Comparison) -> Path:
    """Write one HTML page comparing several runs (e.g. policies) on the same trace."""
    import matplotlib

    matplotlib.use("Agg")
    names = [name for name, _, _ in results]
    rows_by_run = [summary_rows(m) for _, _, m in results]
    labels = [label for label, _ in rows_by_run[0]] if rows_by_run else []
    table_rows = [[label, *(rows[i][1] for rows in rows_by_run)] for i, label in enumerate(labels)]

    gar_fig = new_figure()
    ax = gar_fig.add_subplot()
    for name, result, _ in results:
        for _, x, y in _series_plot(result, "gar"):
            ax.plot(x, y, label=name, linewidth=0.9)
    gar_axes(ax, "GAR over time", "days from first submit", legend=bool(results))

    cdf_fig = new_figure(9.0, 4.0)
    ax = cdf_fig.add_subplot()
    any_waits = False
    for name, result, _ in results:
        waits, _b = job_waits(result)
        any_waits = any_waits or waits.size > 0
        _cdf(ax, waits, name, linewidth=1.0)
    _finish_cdf(ax, any_waits)

    dicts = [m.to_dict() for _, _, m in results]
    ncols = 5
    nrows = math.ceil(len(COMPARED) / ncols)
    bar_fig = new_figure(12.0, 2.6 * nrows)
    axes = bar_fig.subplots(nrows, ncols, squeeze=False)
    for k, (label, key) in enumerate(COMPARED):
        ax = axes[k // ncols][k % ncols]
        vals = [lookup(d, key) for d in dicts]
        ax.bar(range(len(names)), [np.nan if v is None else v for v in vals], color="tab:blue")
        ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize="small")
        ax.set_title(label, fontsize="medium")
        ax.grid(alpha=0.3, axis="y")
    for k in range(len(COMPARED), nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)

    body = [
        "<h2>Headline</h2>",
        table(["metric", *names], table_rows),
        "<h2>GAR over time</h2>",
        png(gar_fig),
        "<h2>Job waiting time</h2>",
        png(cdf_fig),
        "<h2>Metrics</h2>",
        png(bar_fig),
    ]
    return write_page(path, page("kant comparison", body))


def write_comparison_csv(path: str | Path, results: Comparison) -> Path:
    """Write one CSV row per run: ``name`` then every scalar metric as a dotted column name."""
    flat = [{"name": name, **flatten(m.to_dict())} for name, _, m in results]
    columns: list[str] = []
    seen: set[str] = set()
    for row in flat:
        for key in row:
            if key not in seen:
                seen.add(key)
                columns.append(key)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns, restval="")
        writer.writeheader()
        for row in flat:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return p
