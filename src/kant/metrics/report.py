"""Reports of a run's metrics: JSON, a self-contained HTML page with plots, and multi-policy comparisons.

A run's report (:func:`write_html`, written by every ``kant simulate``) carries its plot data as JSON
and draws the plots in the browser with uPlot (the dashboard's vendored copy, inlined so the report
stays one file): writing it costs no plotting, which was as much CPU as a short simulation
(docs/performance.md, "Whole process"). A comparison (``kant compare``, :func:`write_comparison_html`)
is the same kind of page: the trace and cluster named, a table with the best value of each row marked,
GAR over time and the wait CDF of every policy, in :data:`POLICY_COLORS` (the dashboard's colours).
Step series are downsampled for plotting to time-weighted means over at most :data:`MAX_PLOT_POINTS`
equal bins. Time axes are in days from the first submit; waits in the CLI's durations (``3d04h``,
the dashboard's ``format.js``, inlined). No report names a path of the machine it was made on: a
trace read from a file is named by the file's name (:func:`trace_label`).
"""

from __future__ import annotations

import csv
import html
import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kant.metrics.columns import flatten, lookup
from kant.metrics.html import page, table, write_page
from kant.metrics.palette import PALETTE
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

__all__ = [
    "MAX_PLOT_POINTS",
    "POLICY_COLORS",
    "trace_label",
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

#: each policy's colour in a comparison, in order (the dashboard's palette: static/format.js, the same list)
POLICY_COLORS = PALETTE

#: a bin of a GFR plot is a gap when GFR is undefined (no free GPU, no node up) for more of its time than this
GFR_MIN_DEFINED = 0.5


def trace_label(source: str | None) -> str:
    """A trace as a report names it: a registry name as given, a file by its name only (no path of the
    machine the report was made on)."""
    if not source:
        return "an unnamed trace"
    return Path(source).name if ("/" in source or "\\" in source) else source


# --- JSON --------------------------------------------------------------------------------------
def report_dict(result: SimResult, metrics: Metrics) -> dict[str, Any]:
    """The JSON report as a dict: policy, run info, cluster and trace description, metrics."""
    return {
        "policy": result.policy,
        "run": metrics.run.to_dict(),
        "cluster": result.cluster.describe(),
        "trace": trace_label(result.jobs.source),
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
        for label, (r, m) in (("partial / up GPU nodes", tl.gfr_nodes()),
                              ("free GPUs on partial nodes / free GPUs", tl.gfr_gpus())):
            x, y = tl.binned_mean(r, lo, hi, bins, m)
            _, defined = tl.binned_mean(m.astype(np.float64), lo, hi, bins)
            # (undefined for most of the bin, as when no GPU is free: a gap, not the few instants' 100 %)
            lines.append((label, x, np.where(defined >= GFR_MIN_DEFINED, y, np.nan)))
    elif which == "queue":
        x, y = tl.binned_mean(tl.series["queue_len"], lo, hi, bins)
        lines.append(("jobs waiting", x, y))
    elif which == "pending":
        x, y = tl.binned_mean(tl.series["pending_gpus"], lo, hi, bins)
        lines.append(("GPUs asked by waiting jobs", x, y))
    else:
        raise ValueError(f"unknown series plot {which!r}")
    return [(label, (x - origin) / DAY, y) for label, x, y in lines]


# --- plots drawn in the browser (a run's report) ------------------------------------------------
#: (id, title, y label, y range top or None) of the time-series plots, in page order (a y range of 1.05:
#: a ratio, drawn in %)
_SERIES_PLOTS: tuple[tuple[str, str, str, float | None], ...] = (
    ("gar", "GAR over time", "allocated / total", 1.05),
    ("gfr", "GFR over time (a gap: undefined)", "GFR", 1.05),
    ("queue", "Queue length over time", "jobs waiting", None),
    ("pending", "Pending GPUs over time", "GPUs", None),
)


def _rounded(values: FloatArray, digits: int) -> list[float | None]:
    """JSON-ready values: ``digits`` significant digits, NaN as null (a gap in the plot)."""
    fmt = f"%.{digits}g"
    return [None if v != v else float(fmt % v) for v in values.tolist()]


def _series_data(timeline: _Span, result: SimResult, which: str, title: str, ylabel: str,
                 ymax: float | None, xs: dict[bytes, list[float | None]] | None = None) -> dict[str, Any]:
    """One time-series plot's data; ``xs``: the x values already rounded, by their bytes (the plots of
    one timeline share their bins: their x is rounded once)."""
    lines = _series_plot(result, which, timeline)
    x = lines[0][1] if lines else np.empty(0)
    series = [{"label": label, "y": _rounded(y, 4)} for label, _, y in lines]
    known = None if xs is None else xs.get(x.tobytes())
    rounded_x = _rounded(x, 7) if known is None else known
    if xs is not None:
        xs[x.tobytes()] = rounded_x
    return {"id": which, "kind": "line", "title": title, "xlabel": "days from first submit", "ylabel": ylabel,
            "ymax": ymax, "yfmt": "pct" if ymax == 1.05 else "num", "x": rounded_x, "series": series}


def _daily_data(metrics: Metrics) -> dict[str, Any]:
    vals = np.asarray(metrics.gar.daily.values, dtype=np.float64)
    return {"id": "daily", "kind": "bars", "title": "GAR per day of the measurement window",
            "xlabel": "day of window", "ylabel": "GAR", "ymax": 1.05, "yfmt": "pct", "x": list(range(len(vals))),
            "series": [{"label": "GAR", "y": _rounded(vals, 4)}]}


def _cdf_data(groups: list[tuple[str, npt.NDArray[Any]]], title: str) -> dict[str, Any]:
    """Wait CDFs of ``groups`` (label, waits) on one log-spaced grid of waits: the share of jobs that
    waited at most ``x`` (waits under 1 s count as 1 s); groups without jobs are left out."""
    groups = [(label, np.sort(np.maximum(w, 1.0))) for label, w in groups if w.size]
    top = max((float(w[-1]) for _, w in groups), default=1.0)
    grid = np.unique(np.geomspace(1.0, top, CDF_POINTS)) if groups else np.empty(0)
    series = [{"label": f"{label} (n={w.size:,})", "y": _rounded(np.searchsorted(w, grid, side="right") / w.size, 4)}
              for label, w in groups]
    return {"id": "jwtd", "kind": "cdf", "title": title, "xlabel": "wait (log scale; under 1 s counted at 1 s)",
            "ylabel": "share of jobs", "ymax": 1.02, "yfmt": "pct", "xfmt": "dur", "x": _rounded(grid, 6),
            "series": series}


def _jwtd_data(result: SimResult) -> dict[str, Any]:
    """Wait CDFs of all jobs and of each gang-size bucket with jobs."""
    waits, buckets = job_waits(result)
    groups = [("all", waits)] + [(f"{b} GPUs", waits[buckets == i]) for i, b in enumerate(BUCKETS)]
    return _cdf_data(groups, "Job waiting time distribution (training jobs that started)")


def _plot_data(result: SimResult, metrics: Metrics) -> list[dict[str, Any]]:
    """Every plot of a run's report as data, in page order."""
    timeline = _timeline(result)  # one for the four series plots
    xs: dict[bytes, list[float | None]] = {}  # (their x, rounded once: see _series_data)
    plots = [_series_data(timeline, result, *_SERIES_PLOTS[0], xs)]
    plots.append(_daily_data(metrics))
    plots += [_series_data(timeline, result, *spec, xs) for spec in _SERIES_PLOTS[1:]]
    plots.append(_jwtd_data(result))
    return plots


def _vendored(name: str) -> str:
    """A file of the dashboard's static folder (kant/service/dashboard/static: ``vendor/`` holds uPlot)."""
    return resources.files("kant").joinpath("service", "dashboard", "static", *name.split("/")).read_text("utf-8")


# draws every plot of the #kant-plots JSON into its <div id="plot-ID">; "no data" when a plot has none.
# Colours: a plot's own (a comparison's policies) or the palette; the CDF's "all" is black. Ratios in %,
# waits as the CLI writes durations (format.js); the legend shows the last values until hovered.
_DRAW_JS = """
(() => {
  const { dur, pct, PALETTE, TIME_INCRS } = window.kantFormat;
  const plots = JSON.parse(document.getElementById("kant-plots").textContent);
  const ROUND_WAITS = [1, 10, 60, 600, 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400, 365 * 86400];  // 1s ... 1 year
  const fmt = { pct: (v) => pct(v), dur: (v) => dur(v), num: (v) => (v == null ? "n/a" : String(+v.toFixed(3))) };
  for (const p of plots) {
    const el = document.getElementById("plot-" + p.id);
    if (!p.x.length || !p.series.length) { el.textContent = p.title + ": no data"; continue; }
    const yf = fmt[p.yfmt || "num"], xf = p.xfmt ? fmt[p.xfmt] : (v) => (v == null ? "" : String(+v.toFixed(2)));
    const own = p.kind === "cdf" && !p.colors;  // (a run's CDF: "all" in black, then the buckets)
    const series = [{ label: p.xlabel, value: (u, v) => xf(v) }, ...p.series.map((s, i) => {
      const color = p.colors ? p.colors[i] : own && i === 0 ? "#222222" : PALETTE[(i - (own ? 1 : 0)) % PALETTE.length];
      const one = { label: s.label, stroke: color, width: own && i === 0 ? 2 : 1.5, value: (u, v) => yf(v) };
      if (p.kind === "bars") Object.assign(one, { fill: color, paths: uPlot.paths.bars({ size: [0.8] }) });
      if (p.kind === "cdf") one.paths = uPlot.paths.stepped({ align: 1 });
      return one;
    })];
    const width = () => Math.max(320, Math.min(960, el.clientWidth || 960));
    const opts = {
      title: p.title, width: width(), height: p.kind === "cdf" ? 340 : 260,
      // (bars: one per whole day, centred on it)
      scales: { x: p.kind === "cdf" ? { time: false, distr: 3, log: 10 }
                 : p.kind === "bars" ? { time: false, range: [-0.5, p.x.length - 0.5] } : { time: false },
                y: p.ymax ? { range: [0, p.ymax] } : { range: (u, lo, hi) => [0, hi > 0 ? hi * 1.05 : 1] } },
      // (a log axis's minor ticks come as null: no label)
      axes: [{ label: p.xlabel, values: (u, vals) => vals.map((v) => (v == null ? "" : xf(v))), space: 60,
               ...(p.xfmt === "dur" ? { splits: (u, i, lo, hi) => ROUND_WAITS.filter((v) => v >= lo && v <= hi),
                                        filter: (u, splits) => splits } : {}),
               ...(p.kind === "bars" ? { incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500] } : {}) },
             { label: p.ylabel, size: 80, values: (u, vals) => vals.map((v) => (v == null ? "" : yf(v))) }],
      series,
      hooks: { setCursor: [(u) => { if (u.cursor.idx == null) u.setLegend({ idx: last }); }] },
    };
    // the legend's values out of the pointer: the last point where every series has one
    let last = p.x.length - 1;
    while (last > 0 && p.series.some((s) => s.y[last] == null)) last -= 1;
    if (p.series.some((s) => s.y[last] == null)) last = p.x.length - 1;
    const u = new uPlot(opts, [p.x, ...p.series.map((s) => s.y)], el);
    u.setLegend({ idx: last });
    const fit = () => { if (Math.abs(width() - u.width) > 2) u.setSize({ width: width(), height: u.height }); };
    new ResizeObserver(fit).observe(el);
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
        f"<script>{_vendored('vendor/uPlot.iife.min.js')}</script>",
        f"<script>{_vendored('format.js')}</script>",
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
        f"{c.jobs:,} jobs from {html.escape(trace_label(result.jobs.source))}.</p>",
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
    return write_page(path, page(f"kant report: {result.policy}", body, style=_vendored("vendor/uPlot.min.css")))


# --- comparison --------------------------------------------------------------------------------
#: the metric rows of a comparison, one source for kant compare's page and the dashboard's results
#: page (which reads them as JSON in its page: :func:`metric_rows_json`): (label, dotted key in a
#: result's metrics, format: pct, dur, int or num, +1 when more is better / -1 when less is / 0 when
#: neither)
METRIC_ROWS: tuple[tuple[str, str, str, int], ...] = (
    ("GAR (window)", "gar.window", "pct", 1), ("GAR while jobs wait", "gar.busy", "pct", 1),
    ("GAR (whole run)", "gar.run", "pct", 1), ("SOR", "sor", "pct", 1),
    ("GFR (nodes)", "gfr.nodes", "pct", -1), ("GFR (GPUs)", "gfr.gpus", "pct", -1),
    ("JWTD P50", "jwtd.overall.p50", "dur", -1), ("JWTD P90", "jwtd.overall.p90", "dur", -1),
    ("JWTD P99", "jwtd.overall.p99", "dur", -1), ("Queued in total P99", "queued.overall.p99", "dur", -1),
    ("JCT mean", "jct.overall.mean", "dur", -1), ("JCT P99", "jct.overall.p99", "dur", -1),
    ("Queue length mean", "queue.mean_len", "num", -1), ("Queue length max", "queue.max_len", "int", -1),
    ("Finished", "counts.finished", "int", 1), ("Unschedulable", "counts.unschedulable", "int", -1),
    ("Jobs", "counts.jobs", "int", 0), ("Preemptions", "counts.preemptions", "int", -1),
    ("Cross-leaf share of multi-node gangs", "topology.cross_leaf_share", "pct", -1),
)


def metric_rows_json() -> str:
    """:data:`METRIC_ROWS` as JSON objects (label, key, format, better), safe inside an HTML ``<script>``."""
    rows = [{"label": label, "key": key, "format": kind, "better": better} for label, key, kind, better in METRIC_ROWS]
    return json.dumps(rows).replace("<", "\\u003c")


def _cell(value: Any, kind: str) -> str:
    if value is None:
        return "n/a"
    if kind == "pct":
        return f"{100 * value:.1f} %"
    if kind == "dur":
        return format_duration(value)
    if kind == "int":
        return f"{int(value):,}"
    return f"{value:,.2f}"


def _best_table(names: list[str], dicts: list[dict[str, Any]]) -> str:
    """The comparison's table: one row per metric, one column per run, the best value of a row in bold
    (where the runs differ)."""
    head = "".join(f'<th><span class="swatch" style="background:{POLICY_COLORS[i % len(POLICY_COLORS)]}"></span>'
                   f"{html.escape(n)}</th>" for i, n in enumerate(names))
    lines = ['<table class="best">', f"<tr><th>metric</th>{head}</tr>"]
    for label, key, kind, better in METRIC_ROWS:
        vals = [lookup(d, key) for d in dicts]
        known = [v for v in vals if v is not None]
        best = (max(known) if better > 0 else min(known)) if better and len(set(known)) > 1 else None
        cells = "".join(f'<td class="best" title="best">{_cell(v, kind)}</td>' if best is not None and v == best
                        else f"<td>{_cell(v, kind)}</td>" for v in vals)
        lines.append(f'<tr data-key="{key}"><td>{html.escape(label)}</td>{cells}</tr>')
    lines.append("</table>")
    return "\n".join(lines)


def _compare_gar(results: Comparison) -> dict[str, Any]:
    """GAR over time of every run on one grid (the span of them all)."""
    spans = [_timeline(r) for _, r, _ in results]
    lo = min((sp[1] for sp in spans), default=0.0)
    hi = max((sp[2] for sp in spans), default=0.0)
    origin = min((sp[3] for sp in spans), default=0.0)
    bins = max((_bins(sp[0]) for sp in spans), default=1)
    x = np.empty(0)
    series = []
    if hi > lo:
        for (name, _, _), (tl, *_rest) in zip(results, spans, strict=True):
            if len(tl) == 0:
                continue
            x, y = tl.binned_mean(tl.gar(), lo, hi, bins)
            series.append({"label": name, "y": _rounded(y, 4)})
        x = (x - origin) / DAY
    return {"id": "gar", "kind": "line", "title": "GAR over time", "xlabel": "days from first submit",
            "ylabel": "allocated / total", "ymax": 1.05, "yfmt": "pct", "x": _rounded(x, 7), "series": series,
            "colors": list(POLICY_COLORS[:len(series)])}


def write_comparison_html(path: str | Path, results: Comparison) -> Path:
    """Write one self-contained HTML page comparing several runs (e.g. policies) on the same trace, the
    same kind of page as a run's report: the trace and cluster named, a table with each row's best value
    marked, GAR over time and the wait CDF of every run (uPlot, inlined), the whole headline of each."""
    names = [name for name, _, _ in results]
    rows_by_run = [summary_rows(m) for _, _, m in results]
    labels = [label for label, _ in rows_by_run[0]] if rows_by_run else []
    table_rows = [[label, *(rows[i][1] for rows in rows_by_run)] for i, label in enumerate(labels)]
    dicts = [m.to_dict() for _, _, m in results]
    cdf = _cdf_data([(name, job_waits(r)[0]) for name, r, _ in results],
                    "Job waiting time distribution (training jobs that started)")
    cdf["colors"] = [POLICY_COLORS[i % len(POLICY_COLORS)] for i, (name, r, _) in enumerate(results)
                     if job_waits(r)[0].size]
    plots = [_compare_gar(results), cdf]
    div = _plots_html(plots)
    body = []
    if results:
        metrics = results[0][2]
        traces = sorted({trace_label(r.jobs.source) for _, r, _ in results})
        clusters = sorted({r.cluster.describe() for _, r, _ in results})
        body += [f"<p>{len(results)} policies ({html.escape(', '.join(names))}) on {html.escape('; '.join(clusters))}; "
                 f"{metrics.counts.jobs:,} jobs from {html.escape(', '.join(traces))}.</p>", _window_note(metrics)]
    body += [
        "<h2>Side by side</h2>",
        _best_table(names, dicts),
        '<p class="note">In bold: the best value of a row where the runs differ (more is better for GAR, SOR '
        "and finished jobs; less for the rest).</p>",
        "<h2>GPU allocation ratio (GAR)</h2>",
        div["gar"],
        "<h2>Job waiting time (JWTD)</h2>",
        div["jwtd"],
        "<h2>Headline of each run</h2>",
        table(["metric", *names], table_rows),
        _plots_script(plots),
    ]
    style = _vendored("vendor/uPlot.min.css") + (
        "td.best { font-weight: 700; color: #0b6b2f; } "
        ".swatch { display: inline-block; width: .8em; height: .8em; margin-right: .4em; border-radius: 2px; }")
    return write_page(path, page("kant comparison", body, style=style))


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
