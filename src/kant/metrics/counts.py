"""The totals of a run: job outcomes and conservation (:func:`counts`), how multi-node gangs spread
over the network (:func:`topology`) and the run's own figures (:func:`run_info`); each a
``compute(run)`` and a ``rows(value)`` of :data:`kant.metrics.registry.METRICS`."""

from __future__ import annotations

from collections import Counter

import numpy as np

from kant.metrics.recorder import JobStatus
from kant.metrics.summary import Counts, RunInfo, TopologyStats, finite, format_number, format_percent
from kant.metrics.view import RunView
from kant.model.job import JobKind

__all__ = ["counts", "counts_rows", "run_info", "run_rows", "topology", "topology_rows"]

Rows = list[tuple[str, str]]


def counts(run: RunView) -> Counts:
    """Job outcomes, unschedulable reasons (most frequent first), preemptions and GPU-seconds."""
    result, jobs = run.result, run.jobs
    n_jobs = len(jobs)
    status = result.status
    finished = run.finished
    unsched = status == JobStatus.UNSCHEDULABLE
    reasons = Counter(r for j, r in result.reasons.items() if 0 <= j < n_jobs and unsched[j])
    ends = result.end[np.isfinite(result.end)]
    makespan = float(ends.max() - jobs.submit.min()) if ends.size and n_jobs else None
    return Counts(
        jobs=n_jobs,
        training=int(run.training.sum()),
        inference=int((jobs.kind == JobKind.INFERENCE).sum()),
        finished=int(finished.sum()),
        unschedulable=int(unsched.sum()),
        unschedulable_reasons=dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        pending=int((status == JobStatus.PENDING).sum()),
        running_at_end=int((status == JobStatus.RUNNING).sum()),
        preemptions=int(result.preemptions.sum()),
        makespan=finite(makespan),
        gpu_seconds_executed=float(result.gpu_seconds.sum()),
        gpu_seconds_executed_finished=float(result.gpu_seconds[finished].sum()),
        gpu_seconds_demanded=float((jobs.duration[finished] * jobs.total_gpus[finished]).sum()),
    )


def counts_rows(c: Counts) -> Rows:
    work = "n/a" if not c.gpu_seconds_demanded else f"{c.gpu_seconds_executed_finished / c.gpu_seconds_demanded:.2f}x"
    return [
        ("Finished / unschedulable / jobs", f"{c.finished:,} / {c.unschedulable:,} / {c.jobs:,}"),
        ("Preemptions", f"{c.preemptions:,}"),
        ("Work executed / demanded", work),
    ]


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def topology(run: RunView) -> TopologyStats:
    """Gangs whose first placement spans several nodes, and how many of them cross leaves / spines."""
    result = run.result
    multi = result.span_nodes > 1
    n_multi = int(multi.sum())
    n_leaf = int((multi & (result.span_leaves > 1)).sum())
    n_spine = int((multi & (result.span_spines > 1)).sum())
    return TopologyStats(multi_node=n_multi, cross_leaf=n_leaf, cross_spine=n_spine,
                         cross_leaf_share=_share(n_leaf, n_multi), cross_spine_share=_share(n_spine, n_multi))


def topology_rows(t: TopologyStats) -> Rows:
    return [("Cross-leaf share of multi-node gangs", format_percent(t.cross_leaf_share))]


def run_info(run: RunView) -> RunInfo:
    """The run's policy, seed, wall time, events, cycles, samples, end and speed."""
    result = run.result
    wall = float(result.wall_seconds)
    return RunInfo(policy=result.policy, seed=int(result.seed), wall_seconds=wall, events=int(result.events),
                   cycles=int(result.cycles), samples=int(run.times.size), end_time=float(result.end_time),
                   jobs_per_second=len(run.jobs) / wall if wall > 0 else None)


def run_rows(r: RunInfo) -> Rows:
    return [("Jobs simulated per second", format_number(r.jobs_per_second, 0))]
