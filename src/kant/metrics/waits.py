"""The per-job metrics of a run, as distributions over training jobs: JWTD (the wait before the first
start), total queueing time, JCT, and JTTED (the error of the run-time estimates); each a
``compute(run)`` and a ``rows(value)`` of :data:`kant.metrics.registry.METRICS`, with the per-job
arrays they come from (:func:`job_waits`, :func:`job_queued`, also drawn by the report).

Percentiles use NumPy's default (linear interpolation) method (definitions in ``docs/metrics.md``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kant.metrics.recorder import JobStatus, SimResult
from kant.metrics.summary import (
    BUCKETS,
    Dist,
    JctStats,
    JttedStats,
    JwtdStats,
    QueuedStats,
    finite,
    gang_bucket,
)
from kant.metrics.view import RunView
from kant.model.job import JobKind
from kant.text import format_duration

__all__ = ["jct", "jct_rows", "job_queued", "job_waits", "jtted", "jwtd", "jwtd_rows", "queued", "queued_rows"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
Rows = list[tuple[str, str]]


def job_waits(result: SimResult) -> tuple[FloatArray, IntArray]:
    """Waits (first start - submit) of training jobs that started, and their gang bucket indices."""
    jobs = result.jobs
    started = (jobs.kind == JobKind.TRAINING) & np.isfinite(result.first_start)
    waits = result.first_start[started] - jobs.submit[started]
    return waits, gang_bucket(jobs.total_gpus[started])


def job_queued(result: SimResult) -> tuple[FloatArray, IntArray, BoolArray]:
    """Total queueing time (end - submit - time run over all runs) of finished training jobs, their
    gang bucket indices, and whether each ran more than once (waited again after an interruption)."""
    jobs = result.jobs
    done = (jobs.kind == JobKind.TRAINING) & (result.status == JobStatus.FINISHED)
    if result.run_seconds is not None:
        ran = result.run_seconds[done]
    else:  # derived from GPU-seconds (exact for jobs with GPUs; a CPU-only job counts as never running)
        gpus = jobs.total_gpus[done].astype(np.float64)
        ran = np.where(gpus > 0, result.gpu_seconds[done] / np.where(gpus > 0, gpus, 1.0), 0.0)
    queued = np.maximum(result.end[done] - jobs.submit[done] - ran, 0.0)
    return queued, gang_bucket(jobs.total_gpus[done]), result.runs[done] > 1


def _by_bucket(values: FloatArray, buckets: IntArray) -> dict[str, Dist]:
    return {label: Dist.of(values[buckets == i]) for i, label in enumerate(BUCKETS)}


# --- JWTD --------------------------------------------------------------------------------------
def jwtd(run: RunView) -> JwtdStats:
    """Job Waiting Time Distribution of the training jobs that started, overall and by gang size."""
    result = run.result
    waits, buckets = job_waits(result)
    never_started = int((run.training & ~np.isfinite(result.first_start)).sum())
    return JwtdStats(overall=Dist.of(waits), buckets=_by_bucket(waits, buckets), never_started=never_started)


def _by_gang_size(stats: JwtdStats, which: str) -> str:
    """``1: 20.1 h, 2-4: 23.2 h, ...``: one percentile per gang-size bucket that has jobs ("n/a" if none)."""
    parts = [f"{b}: {format_duration(getattr(d, which))}" for b, d in stats.buckets.items() if d.count]
    return ", ".join(parts) if parts else "n/a"


def jwtd_rows(j: JwtdStats) -> Rows:
    return [
        ("JWTD P50", format_duration(j.overall.p50)),
        ("JWTD P90", format_duration(j.overall.p90)),
        ("JWTD P99", format_duration(j.overall.p99)),
        ("JWTD P90 by gang size (GPUs)", _by_gang_size(j, "p90")),
    ]


# --- total queueing time and JCT ---------------------------------------------------------------
def queued(run: RunView) -> QueuedStats:
    """Total queueing time of finished training jobs (every wait, after interruptions too)."""
    values, buckets, requeued = job_queued(run.result)
    return QueuedStats(overall=Dist.of(values), buckets=_by_bucket(values, buckets), requeued=int(requeued.sum()))


def queued_rows(q: QueuedStats | None) -> Rows:
    d = q.overall if q is not None else None
    text = "n/a" if d is None else f"{format_duration(d.p50)} / {format_duration(d.p99)}"
    return [("Queued in total P50 / P99", text)]


def jct(run: RunView) -> JctStats:
    """Job Completion Time (end - submit) of finished training jobs, overall and by gang size."""
    jobs, done = run.jobs, run.finished_training
    values = run.result.end[done] - jobs.submit[done]
    return JctStats(overall=Dist.of(values), buckets=_by_bucket(values, gang_bucket(jobs.total_gpus[done])))


def jct_rows(j: JctStats) -> Rows:
    return [("JCT mean", format_duration(j.overall.mean)), ("JCT P99", format_duration(j.overall.p99))]


# --- JTTED -------------------------------------------------------------------------------------
def jtted(run: RunView) -> JttedStats:
    """Relative error (estimate - actual) / actual of the finished training jobs' estimates."""
    estimates, finished_training = run.estimates, run.finished_training
    actual = run.jobs.duration
    has = finished_training & np.isfinite(estimates)
    usable = has & (actual > 0) & np.isfinite(actual)
    without = int((finished_training & ~has).sum())
    if not usable.any():
        return JttedStats(with_estimate=0, without_estimate=without)
    err = (estimates[usable] - actual[usable]) / actual[usable]
    p10, p50, p90 = np.percentile(err, [10, 50, 90])
    absolute = np.abs(err)
    return JttedStats(
        with_estimate=int(usable.sum()),
        without_estimate=without,
        p10=finite(p10),
        p50=finite(p50),
        p90=finite(p90),
        mean_abs=finite(absolute.mean()),
        within_10=finite((absolute <= 0.1).mean()),
        within_50=finite((absolute <= 0.5).mean()),
        underestimated=finite((err < 0).mean()),
    )
