"""LAS repack: discretised 2D-LAS decided afresh at every event, as the Tiresias simulator does.

The ``tiresias`` policy (``tiresias-las`` plugin + ``preempt`` action) is kant's reading of
Tiresias: a waiting job preempts running jobs of lower queues at round boundaries, with the fewest
victims. This action is the other reading, the one the Tiresias simulator (SymbioticLab/Tiresias,
``run_sim.py``, ``dlas_sim_jobs``, ``--schedule=dlas-gpu[-K]``) implements, offered so that kant can
reproduce its published figures (docs/experiments.md, "Reproducing the Tiresias simulator"):

* **Cadence.** It runs at every instant where a job arrives or finishes, and at the next *jump*:
  the earliest time a running job crosses its queue's threshold or a waiting job is due for
  promotion. Nothing happens at any other cycle (a wake-up asked for earlier and no longer due).
* **Queues.** ``len(thresholds_gpu_s) + 1`` queues. A new job enters queue 0 at its end. At each
  event a running job's service (``executed x GPUs``, ``executed`` alone with ``gpu_time: false``)
  is compared with its queue's threshold and, if at or above it, the job moves *one* queue down
  (appended at that queue's end). Within a queue, order is the order of entry, except that after
  every pass the waiting jobs move behind the running ones (a running job keeps its place).
* **Repack.** Every event walks all jobs, queue by queue, in that order, counting GPUs: a job that
  fits in what is left of the cluster's GPUs should run (it starts if it was waiting), one that
  does not should wait (it is preempted if it was running). No minimum run, no victim choice: the
  walk decides. ``placement: count`` as in the simulator (GPUs counted over the whole cluster); a
  job the walk starts that the nodes cannot hold (fragmentation) waits for the next event.
* **Starvation** (``starvation_factor`` K, the simulator's ``dlas-gpu-K``): a waiting job in a lower
  queue that has run is promoted to the end of queue 0 when the time it has waited *since it last
  entered queue 0* (counted only once it has run) reaches K x the seconds it has run since then;
  its ``executed`` restarts from 0 (so it must earn the thresholds again). Null: never.
* **Jump times** (``wakeup``): ``exact`` wakes at the time the running job's service reaches the
  threshold; ``tiresias-sim`` uses the simulator's formula ``now + (threshold - executed) // GPUs``
  (seconds, not GPU-seconds, in the numerator; Python 2 integer division), which wakes later than
  the crossing for a job that has already run, or earlier (then nothing moves and the next jump is
  computed again). Demotion itself always happens at the first event at or after the crossing.

Preemption keeps the job's progress only as far as the simulator's execution model says
(``checkpoint_interval_s``; the Tiresias simulator keeps all of it, at no cost).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Container
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kant.actions.common import evict_job, start_job
from kant.framework.action import Action
from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.registry import register_action
from kant.framework.runner import Framework
from kant.framework.status import Status

__all__ = ["NAME", "LasRepack", "LasRepackArgs"]

NAME = "las-repack"


class LasRepackArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    thresholds_gpu_s: list[float] = Field(default_factory=lambda: [3250.0, 7200.0], min_length=1)
    starvation_factor: float | None = Field(default=8.0, gt=0.0)
    gpu_time: bool = True
    wakeup: Literal["exact", "tiresias-sim"] = "exact"
    placement: Literal["count"] = "count"

    @field_validator("thresholds_gpu_s")
    @classmethod
    def _increasing(cls, v: list[float]) -> list[float]:
        if any(x <= 0 for x in v) or any(b <= a for a, b in itertools.pairwise(v)):
            raise ValueError("thresholds must be positive and strictly increasing")
        return v


class _Job:
    __slots__ = ("executed", "gpus", "last_check", "last_pending", "q", "ran", "row")

    def __init__(self, row: int, gpus: int, now: float) -> None:
        self.row = row
        self.gpus = gpus
        self.q = 0
        self.executed = 0.0  # seconds run since the job last entered queue 0
        self.ran = 0.0  # seconds run in all
        self.last_pending = 0.0  # seconds waited (after a first run) since it last entered queue 0
        self.last_check = now


@register_action
class LasRepack(Action):
    NAME = NAME
    Args = LasRepackArgs
    EVICTS = True
    EVERY_EVENT = True

    def __init__(self, args: BaseModel | None = None) -> None:
        super().__init__(args)
        a = self.args
        assert isinstance(a, LasRepackArgs)
        self.limits = list(a.thresholds_gpu_s)
        self.factor = a.starvation_factor
        self.gpu_time = a.gpu_time
        self.sim_wakeup = a.wakeup == "tiresias-sim"
        self.queues: list[list[_Job]] = [[] for _ in range(len(self.limits) + 1)]
        self.jobs: dict[int, _Job] = {}
        self.jump = math.inf
        self.preemptions = 0
        self.promotions = 0
        self.demotions = 0
        self.unplaced = 0  # starts the count allowed that the nodes could not hold
        self._gpus = 0

    def setup(self, env: SchedulerEnv) -> None:
        self._gpus = int(env.cluster.gpus.sum())

    def execute(self, ctx: CycleContext, fw: Framework) -> None:
        now = ctx.now
        jobs, running, queue = self.jobs, ctx.running, ctx.queue
        changed = now >= self.jump
        # finished jobs leave their queue; new ones join queue 0 (row order: the submit order)
        gone = [j for j in jobs if j not in running and j not in queue]
        if gone:
            changed = True
            drop = set(gone)
            for j in gone:
                del jobs[j]
            self.queues = [[x for x in q if x.row not in drop] for q in self.queues]
        new = sorted(j for j in queue if j not in jobs)
        if new:
            changed = True
            total = ctx.env.jobs.total_gpus
            last_row = next(reversed(jobs), -1)
            for j in new:
                rec = _Job(j, int(total[j]), now)
                jobs[j] = rec
                self.queues[0].append(rec)
            if new[0] < last_row:  # keep the dict in row order (arrivals usually come in row order)
                self.jobs = jobs = dict(sorted(jobs.items()))
        if not changed:
            return  # a wake-up no longer due: the simulator has no event here
        self._account(now, running)
        self._next_jump(ctx, self._repack(ctx, fw))

    def _account(self, now: float, running: Container[int]) -> None:
        """Charge the time since the last event: service and demotion of running jobs, waiting
        time and promotion of waiting ones (in entry order, as the simulator does)."""
        last = len(self.queues) - 1
        for rec in list(self.jobs.values()):  # row order
            dt = now - rec.last_check
            rec.last_check = now
            if rec.row in running:
                rec.ran += dt
                rec.executed += dt
                served = rec.executed * rec.gpus if self.gpu_time else rec.executed
                q = rec.q
                if q < last and served >= self.limits[q]:
                    self.queues[q].remove(rec)
                    rec.q = q + 1
                    self.queues[q + 1].append(rec)
                    self.demotions += 1
            else:
                if rec.executed > 0:
                    rec.last_pending += dt
                if (
                    self.factor is not None
                    and rec.q > 0
                    and rec.ran > 0
                    and rec.executed > 0
                    and rec.last_pending >= rec.executed * self.factor
                ):
                    rec.executed = 0.0
                    rec.last_pending = 0.0
                    self.queues[rec.q].remove(rec)
                    rec.q = 0
                    self.queues[0].append(rec)
                    self.promotions += 1

    def _repack(self, ctx: CycleContext, fw: Framework) -> set[int]:
        """One walk of every queue; the jobs running after it."""
        free = self._gpus
        run: list[_Job] = []
        stop: list[_Job] = []
        running = ctx.running
        for q in self.queues:
            for rec in q:
                if free >= rec.gpus:
                    free -= rec.gpus
                    if rec.row not in running:
                        run.append(rec)
                elif rec.row in running:
                    stop.append(rec)
        on = set(running)
        for rec in stop:
            evict_job(ctx, fw, rec.row)
            on.discard(rec.row)
            self.preemptions += 1
        for rec in run:
            result = fw.place(ctx, rec.row)
            if isinstance(result, Status):
                self.unplaced += 1
                continue
            start_job(ctx, fw, rec.row, result)
            on.add(rec.row)
        for i, q in enumerate(self.queues):  # waiting jobs behind the running ones
            self.queues[i] = [r for r in q if r.row in on] + [r for r in q if r.row not in on]
        return on

    def _next_jump(self, ctx: CycleContext, running: set[int]) -> None:
        now, last, jump = ctx.now, len(self.queues) - 1, math.inf
        for rec in self.jobs.values():
            if rec.row in running:
                if rec.q < last:
                    limit = self.limits[rec.q]
                    if not self.gpu_time:
                        t = now + limit - rec.executed
                    elif self.sim_wakeup:
                        t = now + (limit - rec.executed) // rec.gpus
                    else:
                        t = now + max(math.ceil(limit / rec.gpus - rec.executed), 0)
                    jump = min(jump, t)
            elif self.factor is not None and rec.q > 0 and rec.ran > 0 and rec.executed > 0:
                wait = rec.executed * self.factor - rec.last_pending
                if self.sim_wakeup:
                    wait = float(int(wait))
                if wait > 0:
                    jump = min(jump, now + wait)
        self.jump = jump
        if jump < math.inf:
            ctx.wake_at(jump)
