"""Allocate: walk the queue in order; admit, place and start each job that fits now.

Arguments:
    blocking: stop at the first job that does not fit (strict FIFO, head-of-line blocking as in a
        batch scheduler without backfill). Default False: skip it and try later jobs. A job that
        admission holds (its tenant's quota) never blocks: it is passed over in either mode.
"""

from __future__ import annotations

from collections.abc import Callable, Container

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from kant.actions.common import start_job
from kant.framework.action import Action
from kant.framework.context import CycleContext
from kant.framework.memo import FailedRequests
from kant.framework.queue import PendingQueue
from kant.framework.registry import register_action
from kant.framework.runner import Framework
from kant.framework.status import SUCCESS, Status

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
        self._failed = FailedRequests()  # kept across cycles; see kant.framework.memo
        # "is every pending request failed?", last answered for (failure changes, request changes)
        self._within: tuple[int, int, bool] = (-1, -1, False)
        # (failure changes, shape changes) when every shape's reason was last set from the memo;
        # None once a walk (or anything else) may have set some other way
        self._filled: tuple[int, int] | None = None
        self._static = False  # the queue order is static (set by attach; the blocking idle test needs it)
        self.head_first = True  # off: a blocking walk is always the general one (for the tests)
        assert isinstance(self.args, AllocateArgs)
        self._blocking = self.args.blocking

    def attach(self, fw: Framework) -> None:
        self._static = not fw.dynamic

    def execute(self, ctx: CycleContext, fw: Framework) -> None:
        args = self.args
        assert isinstance(args, AllocateArgs)
        queue = ctx.queue
        failed = self._failed
        if failed.seen != ctx.state.release_count:  # else refresh has nothing to replay (its first test)
            failed.refresh(ctx.state)
        self._filled = None
        if args.blocking:  # must still stop at the first job known to fail
            if self._static and self.head_first and not fw.admitters:
                self._head_first(ctx, fw, queue, failed)
            else:
                self._walk(ctx, fw, args, queue, failed, (), None)
            return
        # Non-blocking: requests known to fail are skipped without walking their jobs, and the walk
        # ends once every pending request is known to fail.
        unfailed = self._unfailed(queue, failed)
        if not unfailed:
            # nothing can start: keep each shape's reason fresh
            failed.fill_reasons(queue.shape_requests(), ctx.reasons, _CLUSTER_FULL)
            self._filled = (failed.changes, queue.shape_changes)
            return
        self._walk(ctx, fw, args, queue, failed, failed.request_keys(), unfailed)

    def _unfailed(self, queue: PendingQueue, failed: FailedRequests) -> set[int]:
        """The pending requests not known to fail (empty: remembered while nothing changes)."""
        f, q, within = self._within
        if f == failed.changes and q == queue.request_changes and within:
            return set()
        unfailed = queue.requests_outside(failed.request_keys())
        self._within = (failed.changes, queue.request_changes, not unfailed)
        return unfailed

    def idle(self, ctx: CycleContext) -> bool:
        """Nothing starts while no capacity came back since the memo's last refresh and: blocking
        (with a static queue order), the queue's first job is of a request known to fail (its
        shape's reason is then that failure, as :meth:`execute` would set it); non-blocking, every
        pending request is known to fail, whatever the order (each shape's reason is then its
        request's failure, rewritten only when the memo or the set of shapes changed since this
        action last wrote them all)."""
        failed, queue = self._failed, ctx.queue
        if failed.seen != ctx.state.release_count:
            return False
        if self._blocking:
            if not self._static:
                return False
            head = queue.head()
            if head is None:
                return False
            status = failed.get(queue.request_of[head])
            if status is None:
                return False
            ctx.reasons[queue.shape_of[head]] = status
            self._filled = None
            return True
        if self._unfailed(queue, failed):
            return False
        mark = (failed.changes, queue.shape_changes)
        if mark != self._filled:
            failed.fill_reasons(queue.shape_requests(), ctx.reasons, _CLUSTER_FULL)
            self._filled = mark
        return True

    def _head_first(self, ctx: CycleContext, fw: Framework, queue: PendingQueue, failed: FailedRequests) -> None:
        """The blocking walk in a static order without admission: start the queue's first job while
        it fits, stop at the first that does not (its shape's reason set). Nothing is passed over,
        so the walk is the queue's head again and again (:meth:`PendingQueue.head`, the least of the
        shapes' first keys): the same jobs as :meth:`_walk`, without a merge of the shapes' lists."""
        requests = queue.request_of
        while (job := queue.head()) is not None:
            request = requests[job]
            status = failed.get(request)
            if status is None:
                status = self._try(ctx, fw, failed, request, job, None)
                if status is None:
                    continue  # started
            ctx.reasons[queue.shape_of[job]] = status
            return

    def _walk(self, ctx: CycleContext, fw: Framework, args: AllocateArgs, queue: PendingQueue,
              failed: FailedRequests, skip: Container[int], unfailed: set[int] | None) -> None:
        """``unfailed``: the pending requests not known to fail (None when blocking), kept up to date
        as jobs start and requests fail; the walk ends when it is empty."""
        shapes, requests = queue.shape_of, queue.request_of
        admit = fw.admit if fw.admitters else None
        failed_keys = failed.request_keys()
        for job in queue.walk(fw.dynamic_key(ctx.now), skip):
            shape = shapes[job]
            request = requests[job]
            status = failed.get(request)
            if status is None:
                status = self._try(ctx, fw, failed, request, job, admit)
                if status is None:  # started
                    if unfailed is not None and not queue.has_request(request):
                        unfailed.discard(request)  # its last pending job started
                    continue
                if unfailed is None and request not in failed_keys:
                    # blocking: a job its quota holds (admission, not placement, said no) waits aside
                    # and blocks no one (as a Kueue workload not admitted); the walk goes on behind it
                    ctx.reasons[shape] = status
                    queue.block(shape)
                    continue
            ctx.reasons[shape] = status
            if unfailed is None:
                return  # blocking
            if request in failed_keys:
                unfailed.discard(request)
                if not unfailed:
                    return  # no pending request can be placed any more this cycle
            queue.block(shape)

    @staticmethod
    def _try(ctx: CycleContext, fw: Framework, failed: FailedRequests, request: int, job: int,
             admit: Callable[[CycleContext, int], Status] | None) -> Status | None:
        """Start ``job`` (of ``request``) if it is admitted and fits: None when it started, else why
        not. A full cluster or a failed placement is recorded in ``failed``; a refusal of admission
        is not (the quota holds the job, not its request)."""
        state = ctx.state
        if state.free_gpus <= 0 and fw.job_gpus[job] > 0 and not (state.shares.open and fw.is_share(job)):
            failed.add(ctx.env, request, job, _CLUSTER_FULL, 0)
            return _CLUSTER_FULL
        if admit is not None:
            status = admit(ctx, job)
            if not (status is SUCCESS or status.ok):
                return status
        result = fw.place(ctx, job)
        if isinstance(result, Status):
            failed.add(ctx.env, request, job, result, fw.room_for(ctx, job))
            return result
        start_job(ctx, fw, job, result)
        return None


_CLUSTER_FULL = Status.unschedulable("no free GPU in the cluster", "allocate")

