"""Inference reclaim: a pending inference replica takes GPUs back from training by preempting it.

Rule. Pending ``JobKind.INFERENCE`` jobs are taken in order of higher ``priority``, then earlier
submit, then lower row. A replica that passes admission and now fits without evicting anything is
started as is (earlier reclaims in the cycle may have freed more than they needed). Otherwise the
*candidates* are the training jobs that were running when the cycle began and have not been evicted
in it (inference never evicts inference); the victims are chosen by
:func:`kant.actions.preempt.choose_victims` with rank = ``JobTable.priority``: lowest priority first,
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
from kant.actions.preempt import Candidates, choose_victims, execute_plan, running_jobs, work_lost
from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import Action
from kant.framework.registry import register_action
from kant.framework.runner import Framework
from kant.framework.status import Status
from kant.model.job import JobKind
from kant.plugins.co_schedule import CoSchedule

__all__ = ["NAME", "InferenceReclaim", "InferenceReclaimArgs"]

NAME = "inference-reclaim"

IntArray = npt.NDArray[np.int64]


class InferenceReclaimArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    checkpoint_interval_s: float | None = Field(default=None, gt=0.0)
    reclaim_delay_s: float = Field(default=30.0, ge=0.0, allow_inf_nan=False)
    max_reclaims_per_cycle: int | None = Field(default=None, ge=1)


@register_action
class InferenceReclaim(Action):
    NAME = NAME
    Args = InferenceReclaimArgs
    EVICTS = True

    def __init__(self, args: BaseModel | None = None) -> None:
        super().__init__(args)
        a = self.args
        assert isinstance(a, InferenceReclaimArgs)
        self.checkpoint_interval_s = a.checkpoint_interval_s
        self.reclaim_delay_s = a.reclaim_delay_s
        self._co: CoSchedule | None = None
        self._looked = False
        self._inf_shapes: IntArray | None = None
        self.victims = 0
        self.gpus_reclaimed = 0
        self.lost_gpu_seconds = 0.0
        self.reclaims = 0
        self.reclaim_starts: list[tuple[int, float]] = []

    def jobs_added(self, env: SchedulerEnv, start: int) -> None:
        if (env.jobs.kind[start:] == JobKind.INFERENCE).any():
            self._inf_shapes = None  # a new inference shape may have come

    def execute(self, ctx: CycleContext, fw: Framework) -> None:
        args = self.args
        assert isinstance(args, InferenceReclaimArgs)
        if not self._looked:
            self._co = CoSchedule.of(fw)
            self._looked = True
        if self._co is not None and self._co.mode == "separate":
            return
        queue = ctx.queue
        if not ctx.running or not len(queue):
            return
        jobs = ctx.env.jobs
        if self._inf_shapes is None:
            self._inf_shapes = np.unique(queue.shapes[jobs.kind == JobKind.INFERENCE])
        pending = [j for s in self._inf_shapes.tolist() for j in queue.shape_jobs(s)]
        if not pending:
            return
        pending.sort(key=lambda j: (-int(jobs.priority[j]), float(jobs.submit[j]), j))
        running = running_jobs(ctx)
        train = running[jobs.kind[running] == JobKind.TRAINING]
        alive = np.ones(len(train), dtype=bool)
        failed: set[int] = set()
        started = 0
        for job in pending:
            shape = int(queue.shapes[job])
            if shape in failed or job not in queue:
                continue
            if not fw.admit(ctx, job).ok:
                failed.add(shape)
                continue
            direct = fw.place(ctx, job)
            if not isinstance(direct, Status):
                start_job(ctx, fw, job, direct)
                continue
            sel = np.flatnonzero(alive)
            if not len(sel):
                failed.add(shape)
                continue
            cand_jobs = train[sel]
            cands = Candidates(cand_jobs, jobs.priority[cand_jobs].astype(np.float64),
                               work_lost(ctx, cand_jobs, self.checkpoint_interval_s))
            plan = choose_victims(ctx, fw, job, cands)
            if plan is None:
                failed.add(shape)
                continue
            victims, placement = plan
            lost = dict(zip(cands.jobs.tolist(), cands.lost.tolist(), strict=True))
            execute_plan(ctx, fw, job, victims, placement)
            alive &= ~np.isin(train, victims)
            self.victims += len(victims)
            self.gpus_reclaimed += int(jobs.total_gpus[victims].sum())
            self.lost_gpu_seconds += float(sum(lost[v] for v in victims))
            self.reclaims += 1
            self.reclaim_starts.append((job, ctx.now))
            started += 1
            if args.max_reclaims_per_cycle is not None and started >= args.max_reclaims_per_cycle:
                break
