"""Inference reclaim: a pending inference replica takes GPUs back from training by preempting it.

Rule. Pending ``JobKind.INFERENCE`` jobs are taken in order of higher ``priority``, then earlier
submit, then lower row. A replica that passes admission and now fits without evicting anything is
started as is (earlier reclaims in the cycle may have freed more than they needed). Otherwise the
*candidates* are the training jobs that were running when the cycle began and have not been evicted
in it (inference never evicts inference); the victims are chosen by
:func:`kant.actions.victims.choose_victims` with rank = ``JobTable.priority``: lowest priority first,
then the fewest victims, then the least work lost (GPU-seconds since the last checkpoint:
``GPUs x (run time mod checkpoint_interval_s)``, the whole run without checkpoints), then lower rows;
for a one-worker replica this choice is exact. If no set of candidates makes room, nothing is evicted
and later replicas of the same shape are skipped this cycle. Victims go back to the queue and the
simulator applies the checkpoint/restart model to them.

In ``mode: separate`` of the ``co-schedule`` plugin the action does nothing (separate clusters do
not lend GPUs).

Counters for reports: ``victims`` (training jobs evicted), ``gpus_reclaimed`` (GPUs they held),
``lost_gpu_seconds`` (work they lost, as estimated above), ``reclaims`` (replicas started by
reclaiming) and ``reclaim_starts`` (``(job, time)`` of each; a replica started this way becomes ready
``reclaim_delay_s`` later than its start-up delay alone, the time the victims need to checkpoint and
let go of the GPUs, like Kubernetes' termination grace period).

Arguments:
    checkpoint_interval_s: for the work-lost estimate (null: the simulator's execution model when run
        by kant's inference driver, else no checkpoints).
    reclaim_delay_s: extra seconds before a replica started by reclaim is ready.
    max_reclaims_per_cycle: stop after this many replicas started by reclaiming in one cycle.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from kant.actions.common import start_job
from kant.actions.evicting import EvictingAction, Skip, Walk
from kant.actions.pool import BoolArray, running_jobs
from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import CoScheduling
from kant.framework.registry import register_action
from kant.framework.runner import Framework
from kant.framework.status import Status
from kant.model.job import JobKind

__all__ = ["NAME", "InferenceReclaim", "InferenceReclaimArgs"]

NAME = "inference-reclaim"

IntArray = npt.NDArray[np.int64]


class InferenceReclaimArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    checkpoint_interval_s: float | None = Field(default=None, gt=0.0)
    reclaim_delay_s: float = Field(default=30.0, ge=0.0, allow_inf_nan=False)
    max_reclaims_per_cycle: int | None = Field(default=None, ge=1)


@register_action
class InferenceReclaim(EvictingAction[Walk]):
    NAME = NAME
    Args = InferenceReclaimArgs

    def __init__(self, args: BaseModel | None = None) -> None:
        super().__init__(args)
        a = self.args
        assert isinstance(a, InferenceReclaimArgs)
        self.limit = a.max_reclaims_per_cycle
        self.checkpoint_interval_s = a.checkpoint_interval_s
        self.reclaim_delay_s = a.reclaim_delay_s
        self._co: CoScheduling | None = None
        self._attached = False
        self._inf_shapes: IntArray | None = None
        self.victims = 0
        self.gpus_reclaimed = 0
        self.lost_gpu_seconds = 0.0
        self.reclaims = 0
        self.reclaim_starts: list[tuple[int, float]] = []

    def attach(self, fw: Framework) -> None:
        self._co = fw.plugin(CoScheduling)
        self._attached = True

    def jobs_added(self, env: SchedulerEnv, start: int) -> None:
        if (env.jobs.kind[start:] == JobKind.INFERENCE).any():
            self._inf_shapes = None  # a new inference shape may have come

    def begin(self, ctx: CycleContext, fw: Framework) -> Walk | None:
        if not self._attached:
            self.attach(fw)
        if self._co is not None and not self._co.shares_gpus():
            return None
        queue = ctx.queue
        if not ctx.running or not len(queue):
            return None
        jobs = ctx.env.jobs
        if self._inf_shapes is None:
            self._inf_shapes = np.unique(queue.shapes[jobs.kind == JobKind.INFERENCE])
        pending = [j for s in self._inf_shapes.tolist() for j in queue.shape_jobs(s)]
        if not pending:
            return None
        pending.sort(key=lambda j: (-int(jobs.priority[j]), float(jobs.submit[j]), j))
        running = running_jobs(ctx)
        train = running[jobs.kind[running] == JobKind.TRAINING]
        keys = queue.shapes[np.asarray(pending, dtype=np.int64)].tolist()
        return Walk(pending, keys, train, jobs.priority[train].astype(np.float64), set(), self.checkpoint_interval_s)

    def victim_pool(self, ctx: CycleContext, fw: Framework, walk: Walk, job: int) -> BoolArray | Skip:
        if job not in ctx.queue:
            return Skip.DONE
        if not fw.admit(ctx, job).ok:
            return Skip.FAILED
        direct = fw.place(ctx, job)
        if not isinstance(direct, Status):
            start_job(ctx, fw, job, direct)
            return Skip.DONE
        if not walk.alive.any():
            return Skip.FAILED
        return walk.alive.copy()

    def planned(self, ctx: CycleContext, walk: Walk, job: int, victims: list[int]) -> None:
        self.victims += len(victims)
        self.gpus_reclaimed += int(ctx.env.jobs.total_gpus[victims].sum())
        self.lost_gpu_seconds += float(sum(walk.lost_of(ctx, victims)))
        self.reclaims += 1
        self.reclaim_starts.append((job, ctx.now))
