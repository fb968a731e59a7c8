"""The what-if comparison as one self-contained HTML page, built like ``kant compare``'s (the
headline table per scenario, GAR over the horizon, the predicted starts of the jobs pending now)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kant.metrics.html import gar_axes, new_figure, page, png, table, write_page
from kant.metrics.summary import format_percent
from kant.metrics.timeline import Timeline
from kant.text import format_duration
from kant.twin.snapshot import TwinSnapshot
from kant.twin.whatif import ScenarioResult

__all__ = ["whatif_html", "write_whatif_html"]

#: pending jobs listed one by one (the rest are counted)
MAX_JOBS_LISTED = 200


def _when(t: float | None, now: float) -> str:
    return "not within the horizon" if t is None else f"+{format_duration(t - now)}"


def whatif_html(snap: TwinSnapshot, results: Sequence[ScenarioResult]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    now = snap.now
    names = [r.name for r in results]
    head = [
        ["policy", *(r.policy for r in results)],
        ["changes", *(", ".join(f"{k}={v}" for k, v in r.changes.items()) or "-" for r in results)],
        ["GAR over the horizon", *(format_percent(r.gar) for r in results)],
        ["GFR (nodes) over the horizon", *(format_percent(r.gfr_nodes) for r in results)],
        ["pending now", *(f"{r.waits['pending']:,}" for r in results)],
        ["start within the horizon", *(f"{r.waits['started']:,}" for r in results)],
        ["predicted wait P50", *(format_duration(r.waits["p50"]) for r in results)],
        ["predicted wait P90", *(format_duration(r.waits["p90"]) for r in results)],
        ["predicted wait max", *(format_duration(r.waits["max"]) for r in results)],
    ]
    fig = new_figure()
    ax = fig.add_subplot()
    for r in results:
        if not r.prediction.runs:
            continue
        res = r.prediction.runs[0]
        tl = Timeline(res, start=now)
        x = (tl.edges - now) / 3600.0
        y = tl.gar()
        if y.size:
            ax.step(x[:-1], y, where="post", label=r.name, linewidth=0.9)
    gar_axes(ax, "GAR over the horizon (first sampled run)", "hours from now", legend=bool(results))
    rows = []
    pending = list(snap.sched.pending)
    p50s = [r.prediction.p50 for r in results]
    for row in pending[:MAX_JOBS_LISTED]:
        cells = [str(snap.ids[row]), str(snap.jobs["name"][row]), str(snap.jobs["tenant"][row]),
                 f"{snap.jobs['workers'][row]} x {snap.jobs['gpus_per_worker'][row]}"]
        cells += [_when(None if np.isnan(p[row]) else float(p[row]), now) for p in p50s]
        rows.append(cells)
    more = len(pending) - len(rows)
    runs = results[0].prediction.starts.shape[0] if results else 0
    body = [
        f'<p class="note">Snapshot at {now:,.0f} s; {len(snap.nodes):,} nodes, {len(pending):,} pending and '
        f"{len(snap.sched.running):,} running jobs; {runs} sampled run(s) per scenario; jobs that arrive later "
        "are not simulated.</p>",
        "<h2>Headline</h2>",
        table(["", *names], head),
        "<h2>GAR over time</h2>",
        png(fig),
        "<h2>Predicted start of each pending job (P50, from now)</h2>",
        table(["job", "name", "tenant", "gang", *names], rows),
    ]
    if more > 0:
        body.append(f'<p class="note">and {more:,} more pending jobs (the JSON form lists every one).</p>')
    return page("kant what-if", body)


def write_whatif_html(path: str | Path, snap: TwinSnapshot, results: Sequence[ScenarioResult]) -> Path:
    return write_page(path, whatif_html(snap, results))
