"""Allocate: walk the queue in order; admit, place and start each job that fits now.

Arguments:
    blocking: stop at the first job that does not fit (strict FIFO, head-of-line blocking as in a
        batch scheduler without backfill). Default False: skip it and try later jobs.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from kant.framework.context import CycleContext
from kant.framework.plugin import Action
from kant.framework.registry import register_action
from kant.framework.runner import Framework
from kant.framework.status import Status
from kant.actions.common import start_job

NAME = "allocate"


class AllocateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    blocking: bool = False


@register_action
class Allocate(Action):
    NAME = NAME
    Args = AllocateArgs

    def execute(self, ctx: CycleContext, fw: Framework) -> None:
        args = self.args
        assert isinstance(args, AllocateArgs)
        queue = ctx.queue
        shapes = queue.shapes
        for job in queue.walk(fw.dynamic_key(ctx.now)):
            shape = int(shapes[job])
            if ctx.state.free_gpus <= 0 and ctx.env.jobs.gpus_per_worker[job] > 0:
                ctx.reasons[shape] = Status.unschedulable("no free GPU in the cluster", "allocate")
                if args.blocking:
                    return
                queue.block(shape)
                continue
            status = fw.admit(ctx, job)
            if status.ok:
                result = fw.place(ctx, job)
                if not isinstance(result, Status):
                    start_job(ctx, fw, job, result)
                    continue
                status = result
            ctx.reasons[shape] = status
            if args.blocking:
                return
            queue.block(shape)

