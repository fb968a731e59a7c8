"""Steps every action uses to change the cycle's outcome: start a job, evict a job."""

from __future__ import annotations

from kant.framework.context import CycleContext
from kant.framework.runner import Framework
from kant.model.state import Placement

__all__ = ["start_job", "evict_job"]


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
    ctx.running.pop(job, None)
    ctx.evicted.append((job, placement))
    fw.job_stopped(job, ctx.now, placement, False)
    ctx.queue.push(job)
    return placement
