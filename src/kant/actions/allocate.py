"""Allocate: walk the queue in order; admit, place and start each job that fits now.

Arguments:
    blocking: stop at the first job that does not fit (strict FIFO, head-of-line blocking as in a
        batch scheduler without backfill). Default False: skip it and try later jobs.
"""

from __future__ import annotations

from collections.abc import Container

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from kant.framework.context import CycleContext
from kant.framework.plugin import Action
from kant.framework.registry import register_action
from kant.framework.runner import Framework
from kant.framework.queue import PendingQueue
from kant.framework.status import Status
from kant.actions.common import start_job

NAME = "allocate"

IntArray = npt.NDArray[np.int64]


class AllocateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    blocking: bool = False


@register_action
class Allocate(Action):
    NAME = NAME
    Args = AllocateArgs

    def __init__(self, args: BaseModel | None = None) -> None:
        super().__init__(args)
        # request id -> why it failed to place; valid while no capacity has come back
        self._failed: dict[int, Status] = {}
        self._release_count = -1

    def execute(self, ctx: CycleContext, fw: Framework) -> None:
        args = self.args
        assert isinstance(args, AllocateArgs)
        queue = ctx.queue
        shapes, requests = queue.shapes, queue.requests
        gpus = ctx.env.jobs.gpus_per_worker
        if ctx.state.release_count != self._release_count:
            self._failed = {}
        failed = self._failed
        # Non-blocking: requests that failed since capacity last came back still fail; skip them
        # without walking their jobs. Blocking mode must still stop at the first such job.
        skip = () if args.blocking else failed
        try:
            self._walk(ctx, fw, args, queue, shapes, requests, gpus, failed, skip)
        finally:
            self._release_count = ctx.state.release_count

    def _walk(self, ctx: CycleContext, fw: Framework, args: AllocateArgs, queue: PendingQueue, shapes: IntArray,
              requests: IntArray, gpus: IntArray, failed: dict[int, Status], skip: Container[int]) -> None:
        for job in queue.walk(fw.dynamic_key(ctx.now), skip):
            shape = int(shapes[job])
            request = int(requests[job])
            status = failed.get(request)
            if status is None:
                if ctx.state.free_gpus <= 0 and gpus[job] > 0:
                    status = failed[request] = _CLUSTER_FULL
                else:
                    status = fw.admit(ctx, job)
                    if status.ok:
                        result = fw.place(ctx, job)
                        if not isinstance(result, Status):
                            start_job(ctx, fw, job, result)
                            continue
                        status = failed[request] = result
            ctx.reasons[shape] = status
            if args.blocking or (len(failed) >= queue.n_requests() and queue.requests_within(failed)):
                return  # blocking, or no pending request can be placed any more this cycle
            queue.block(shape)


_CLUSTER_FULL = Status.unschedulable("no free GPU in the cluster", "allocate")

