"""The eviction pool: the running jobs an evicting action may evict, and what each holds and would lose.

:mod:`kant.actions.victims` plans on it (:class:`Candidates`); the evicting actions
(:mod:`kant.actions.evicting`) build it once per walk (:func:`pool_of`, :func:`placement_entries`,
:func:`work_lost`) and narrow it per try (:func:`select`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kant.framework.context import CycleContext

__all__ = ["BoolArray", "Candidates", "FloatArray", "IntArray", "placement_entries", "pool_of", "running_jobs",
           "select", "work_lost"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

@dataclass(frozen=True)
class Candidates:
    """Running jobs that may be evicted, with their rank (lower = evicted first) and work lost."""

    jobs: IntArray
    rank: FloatArray
    lost: FloatArray
    #: optional precomputed (candidate index, node, workers there) per candidate and node it uses;
    #: see :func:`placement_entries` and :func:`select`
    entries: tuple[IntArray, IntArray, IntArray] | None = None

    def __len__(self) -> int:
        return len(self.jobs)


def running_jobs(ctx: CycleContext) -> IntArray:
    """Jobs running since before this cycle (jobs started in this cycle are never victims)."""
    return np.fromiter(ctx.running, dtype=np.int64, count=len(ctx.running))


def pool_of(ctx: CycleContext) -> tuple[IntArray, FloatArray]:
    """:func:`running_jobs` and the start of each one's current run, in one pass over ``ctx.running``
    (a walk's ``starts``, for its work lost: :func:`work_lost`'s ``start``)."""
    return running_jobs(ctx), np.array([r.start for r in ctx.running.values()], dtype=np.float64)


def placement_entries(ctx: CycleContext, jobs: IntArray,
                      alive: BoolArray | None = None) -> tuple[IntArray, IntArray, IntArray]:
    """(index into ``jobs``, node, workers on that node) for every node each running job uses (none
    for a job off ``alive``: evicted since, no longer running)."""
    allocations = ctx.state.allocations
    if alive is None:
        per_node = [allocations[v].per_node for v in jobs.tolist()]
    else:
        per_node = [allocations[v].per_node if a else {} for v, a in zip(jobs.tolist(), alive.tolist(), strict=True)]
    sizes = np.fromiter(map(len, per_node), dtype=np.int64, count=len(per_node))
    n = int(sizes.sum())
    return (np.repeat(np.arange(len(per_node), dtype=np.int64), sizes),
            np.fromiter(itertools.chain.from_iterable(per_node), dtype=np.int64, count=n),
            np.fromiter(itertools.chain.from_iterable(p.values() for p in per_node), dtype=np.int64, count=n))


def select(jobs: IntArray, rank: FloatArray, lost: FloatArray, entries: tuple[IntArray, IntArray, IntArray],
           sel: BoolArray) -> Candidates:
    """Candidates ``jobs[sel]`` with their entries taken from ``entries`` (computed for ``jobs``)."""
    e_idx, e_node, e_cnt = entries
    keep = sel[e_idx]
    new_index = np.cumsum(sel) - 1
    return Candidates(jobs[sel], rank[sel], lost[sel], (new_index[e_idx[keep]], e_node[keep], e_cnt[keep]))


def work_lost(ctx: CycleContext, jobs: IntArray, checkpoint_interval_s: float | None,
              start: FloatArray | None = None) -> FloatArray:
    """GPU-seconds each running job would lose if evicted now: total GPUs x time since its last
    checkpoint (estimated from the current run's length; the whole run without checkpoints).
    ``start``: the start of each job's current run where the caller has it (else read here)."""
    if len(jobs) == 0:
        return np.zeros(0, dtype=np.float64)
    if start is None:
        running = ctx.running
        start = np.array([running[j].start for j in jobs.tolist()], dtype=np.float64)
    run_s = np.maximum(ctx.now - start, 0.0)
    if checkpoint_interval_s is not None:
        run_s = np.mod(run_s, checkpoint_interval_s)
    return run_s * ctx.env.jobs.total_gpus[jobs]
