"""Steps every action uses to change the cycle's outcome: start a job, evict a job, resize an elastic
job; and the queue order an action walks."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kant.framework.context import CycleContext
from kant.framework.runner import Framework
from kant.model.state import Placement

__all__ = ["start_job", "evict_job", "in_queue_order", "resize_job"]

IntArray = npt.NDArray[np.int64]


def start_job(ctx: CycleContext, fw: Framework, job: int, placement: Placement) -> None:
    """Commit a placement for ``job`` in this cycle: allocate, dequeue, tell listeners."""
    ctx.statement.allocate(job, placement)
    ctx.queue.remove(job)
    ctx.started.append((job, placement))
    if fw.listeners:
        fw.job_started(job, ctx.now, placement)


def evict_job(ctx: CycleContext, fw: Framework, job: int) -> Placement:
    """Preempt a running job: free its resources and put it back in the queue."""
    placement = ctx.statement.evict(job)
    if ctx.resized:  # a resize earlier in this cycle is moot: the job stops
        ctx.resized[:] = [r for r in ctx.resized if r[0] != job]
    ctx.running.pop(job, None)
    ctx.evicted.append((job, placement))
    fw.job_stopped(job, ctx.now, placement, False)
    ctx.queue.push(job)
    return placement


def resize_job(ctx: CycleContext, fw: Framework, job: int, placement: Placement) -> Placement:
    """Give running (or just started) elastic ``job`` a new placement (more or fewer workers); returns
    the old one. A job started in this cycle simply starts bigger or smaller (no resize: nothing ran
    yet); a job that was running is resized (``ctx.resized``: a restart from its checkpoint with the
    new world size). Listeners hear a stop (not finished) of the old placement and a start of the new."""
    before = ctx.statement.resize(job, placement)
    for k, (started, _) in enumerate(ctx.started):
        if started == job:
            ctx.started[k] = (job, placement)
            break
    else:
        for k, (resized, first, _) in enumerate(ctx.resized):
            if resized == job:
                ctx.resized[k] = (job, first, placement)
                break
        else:
            ctx.resized.append((job, before, placement))
    if fw.listeners:
        fw.job_stopped(job, ctx.now, before, False)
        fw.job_started(job, ctx.now, placement)
    return before


def in_queue_order(ctx: CycleContext, fw: Framework, jobs: IntArray) -> list[int]:
    """Pending ``jobs`` in the policy's queue order at this cycle's time."""
    key = fw.dynamic_key(ctx.now)
    if key is not None:
        return list(key.order(jobs).tolist())
    return sorted(jobs.tolist(), key=fw.static_key)
