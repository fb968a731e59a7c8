"""The time-weighted cluster metrics of a run, over its measurement window: GAR (and daily GAR), SOR,
GFR, the queue; each a ``compute(run)`` and a ``rows(value)`` of :data:`kant.metrics.registry.METRICS`.

Means weight each timeline sample by the seconds it holds inside the window (definitions in
``docs/metrics.md``).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from kant.metrics.summary import (
    DAY,
    DailyGar,
    GarStats,
    GfrStats,
    QueueStats,
    Window,
    finite,
    format_number,
    format_percent,
)
from kant.metrics.timeline import Timeline
from kant.metrics.view import RunView

__all__ = ["gar", "gar_rows", "gfr", "gfr_rows", "queue", "queue_rows", "sor", "sor_rows", "weighted_max",
           "weighted_mean", "window"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
Rows = list[tuple[str, str]]


def weighted_mean(values: FloatArray, w: FloatArray, mask: BoolArray | None = None) -> float | None:
    """Mean of ``values`` weighted by ``w`` (over the samples in ``mask``); None when no weight."""
    if mask is not None:
        w = np.where(mask, w, 0.0)
    total = float(w.sum())
    if total <= 0:
        return None
    # NumPy's own pairwise sum, not np.dot: BLAS's dot sums in an order that depends on its thread count
    return finite(float((values * w).sum()) / total)


def weighted_max(values: FloatArray, w: FloatArray) -> int | None:
    """The largest value of the samples with weight; None when none has any."""
    held = w > 0
    if not held.any():
        return None
    return int(values[held].max())


# --- the window --------------------------------------------------------------------------------
def window(run: RunView) -> Window | None:
    """The measurement window and how much of it the run covers."""
    if run.bounds is None:
        return None
    lo, hi = run.bounds
    return Window(start=lo, end=hi, kind=run.window_kind, covered=float(run.weights.sum()))


# --- GAR ---------------------------------------------------------------------------------------
def _daily_gar(tl: Timeline, lo: float, hi: float) -> DailyGar:
    total = tl.result.cluster.total_gpus
    if hi <= lo or total == 0:
        return DailyGar()
    n_days = max(1, math.ceil((hi - lo) / DAY))
    bounds = np.minimum(lo + DAY * np.arange(n_days + 1), hi)
    alloc = np.diff(tl.cumulative(tl.series["allocated_gpus"], bounds))
    covered = np.diff(np.clip(bounds, tl.edges[0], tl.end))
    keep = covered > 0
    if not keep.any():
        return DailyGar()
    vals = alloc[keep] / (total * covered[keep])
    p10, p50, p90 = np.percentile(vals, [10, 50, 90])
    return DailyGar(
        values=tuple(float(v) for v in vals),
        p10=finite(p10),
        p50=finite(p50),
        p90=finite(p90),
        min=finite(vals.min()),
        max=finite(vals.max()),
    )


def gar(run: RunView) -> GarStats:
    """GPU Allocation Ratio over the window, while jobs wait, over the whole run, and by day."""
    tl = run.timeline
    gar_w = gar_busy = busy_share = None
    daily = DailyGar()
    if run.bounds is not None:
        lo, hi = run.bounds
        w = run.weights
        covered = float(w.sum())
        gar_w = weighted_mean(tl.gar(), w)
        waiting = tl.series["queue_len"] > 0
        gar_busy = weighted_mean(tl.gar(), w, waiting)
        if covered > 0:
            busy_share = finite(float(w[waiting].sum()) / covered)
        daily = _daily_gar(tl, lo, hi)
    gar_run = None
    if run.run_window is not None:
        gar_run = weighted_mean(tl.gar(), tl.weights(*run.run_window))
    return GarStats(window=gar_w, run=gar_run, run_window=run.run_window, daily=daily, busy=gar_busy,
                    busy_share=busy_share)


def gar_rows(g: GarStats) -> Rows:
    d = g.daily
    daily = "n/a" if d.p50 is None else f"{format_percent(d.p10)} / {format_percent(d.p50)} / {format_percent(d.p90)}"
    busy = format_percent(g.busy)
    if g.busy_share is not None:
        busy = f"{busy} ({format_percent(g.busy_share)} of window)"
    return [
        ("GAR (window)", format_percent(g.window)),
        ("GAR while jobs wait", busy),
        ("GAR (whole run)", format_percent(g.run)),
        ("GAR daily P10 / P50 / P90", daily),
    ]


# --- SOR and GFR -------------------------------------------------------------------------------
def sor(run: RunView) -> float | None:
    """Scheduling Occupancy Rate over the window."""
    if run.bounds is None:
        return None
    r, m = run.timeline.sor()
    return weighted_mean(r, run.weights, m)


def sor_rows(value: float | None) -> Rows:
    return [("SOR", format_percent(value))]


def gfr(run: RunView) -> GfrStats:
    """GPU Node Fragmentation Ratio over the window, node form and GPU-weighted form."""
    if run.bounds is None:
        return GfrStats(nodes=None, gpus=None)
    r, m = run.timeline.gfr_nodes()
    nodes = weighted_mean(r, run.weights, m)
    r, m = run.timeline.gfr_gpus()
    return GfrStats(nodes=nodes, gpus=weighted_mean(r, run.weights, m))


def gfr_rows(g: GfrStats) -> Rows:
    return [("GFR (nodes)", format_percent(g.nodes)), ("GFR (GPUs)", format_percent(g.gpus))]


# --- the queue ---------------------------------------------------------------------------------
def queue(run: RunView) -> QueueStats:
    """Waiting jobs and the GPUs they ask for over the window: time-weighted mean and max."""
    if run.bounds is None:
        return QueueStats(mean_len=None, max_len=None, mean_pending_gpus=None, max_pending_gpus=None)
    s, w = run.timeline.series, run.weights
    return QueueStats(mean_len=weighted_mean(s["queue_len"], w), max_len=weighted_max(s["queue_len"], w),
                      mean_pending_gpus=weighted_mean(s["pending_gpus"], w),
                      max_pending_gpus=weighted_max(s["pending_gpus"], w))


def queue_rows(q: QueueStats) -> Rows:
    queue_max = "n/a" if q.max_len is None else str(q.max_len)
    return [("Queue length mean / max", f"{format_number(q.mean_len)} / {queue_max}")]
