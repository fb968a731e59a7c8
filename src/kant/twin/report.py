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


def _span(x: float | None) -> str:
    return "-" if x is None else format_duration(x)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def _wait(cell: dict[str, object], q: str) -> str:
    if not cell or not cell.get("jobs"):
        return "-"
    v = cell.get(q)
    return "> horizon" if v is None else format_duration(float(v))  # type: ignore[arg-type]


def whatif_html(snap: TwinSnapshot, results: Sequence[ScenarioResult]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    now = snap.now
    names = [r.name for r in results]
    head = [
        ["policy", *(r.policy for r in results)],
        ["changes", *(r.changes_text for r in results)],
        ["GAR over the horizon", *(format_percent(r.gar) for r in results)],
        ["GFR (nodes) over the horizon", *(format_percent(r.gfr_nodes) for r in results)],
        ["pending now", *(f"{r.waits['pending']:,}" for r in results)],
        ["start within the horizon", *(f"{r.waits['started']:,}" for r in results)],
        ["predicted start P50, from now", *(_span(r.waits.get("from_now_p50")) for r in results)],
        ["predicted start P90, from now", *(_span(r.waits.get("from_now_p90")) for r in results)],
        ["last predicted start, from now", *(_span(r.waits.get("from_now_max")) for r in results)],
    ]
    if any(r.capacity for r in results):
        head += [
            ["arrivals sampled (mean per run)", *(f"{r.capacity.get('arrivals_sampled', 0):,.0f}" for r in results)],
            ["their planned GPU-hours (mean per run)",
             *(f"{r.capacity.get('arrivals_gpu_hours', 0):,.0f}" for r in results)],
            ["queue length (mean)", *(_num(r.capacity.get("queue_mean")) for r in results)],
            ["wait P50 (every job in the horizon)", *(_wait(r.capacity.get("wait_all", {}), "p50") for r in results)],
            ["wait P90 (every job in the horizon)", *(_wait(r.capacity.get("wait_all", {}), "p90") for r in results)],
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
        f"{len(snap.sched.running):,} running jobs; {runs} sampled run(s) per scenario; the band covers "
        f"{results[0].prediction.covers if results else '-'}.</p>",
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
