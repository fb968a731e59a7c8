"""The ``backfill`` action: the state it keeps between cycles, and one cycle's dispatch to
:class:`~kant.actions.backfill.easy.EasyCycle` or :class:`~kant.actions.backfill.conservative.Conservative`
(its arguments are :class:`~kant.actions.backfill.host.BackfillArgs`)."""

from __future__ import annotations

import numpy as np

from kant.actions.backfill.conservative import Conservative
from kant.actions.backfill.easy import EasyCycle
from kant.actions.backfill.fit import BoolArray, Capacity, FloatArray
from kant.actions.backfill.host import MAX_JOBS_DEFAULT, BackfillArgs
from kant.actions.backfill.leftover import LongBlocked
from kant.actions.backfill.releases import Releases
from kant.actions.backfill.reservation import ReservationKeeper
from kant.actions.common import start_job
from kant.framework.action import Action
from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.memo import FailedRequests
from kant.framework.registry import register_action
from kant.framework.runner import Framework
from kant.model.state import ClusterState, Placement
from kant.model.store import grow

__all__ = ["Backfill"]

NAME = "backfill"


@register_action
class Backfill(Action):
    """See :mod:`kant.actions.backfill`. State kept between cycles, one owner each:

    * ``releases`` (:class:`Releases`): the running jobs' release profile;
    * ``kept`` (:class:`ReservationKeeper`): the EASY head's reservation;
    * ``failed`` (:class:`FailedRequests`): requests that do not fit the free capacity;
    * ``long_blocked`` (:class:`LongBlocked`): requests whose long jobs do not fit what the reservation leaves;
    * ``conservative`` (:class:`Conservative`): the conservative plan.
    """

    NAME = NAME
    Args = BackfillArgs

    #: jobs started by this action
    backfilled: int
    #: reservations computed from scratch (EASY) / profiles built (conservative)
    computed: int
    #: reservations made later than the earliest possible: the search ran out of max_place_tries
    approximated: int

    def setup(self, env: SchedulerEnv) -> None:
        args = self.args
        assert isinstance(args, BackfillArgs)
        jobs = env.jobs
        self.args: BackfillArgs = args
        self.max_jobs = args.max_jobs if args.max_jobs is not None else MAX_JOBS_DEFAULT[args.mode]
        self.capacity = Capacity(env)
        self._jobs = jobs
        # per-job columns as lists: the framework's (bound on the first cycle, see execute)
        self.job_gpus: list[int] = []
        self.job_workers: list[int] = []
        self.job_type: list[int] = []
        self.job_milli: list[int] = []
        self._cpu_jobs = bool((jobs.gpus_per_worker == 0).any())
        self.releases = Releases(self.capacity.modelled, self.capacity.fields)
        self.kept = ReservationKeeper()
        self.conservative = Conservative()
        self.failed = FailedRequests()
        self.long_blocked = LongBlocked()
        self._easy_cycle: EasyCycle | None = None
        self._head_shadow = np.full(len(jobs), np.nan)
        self._first_planned = np.full(len(jobs), np.nan)
        self.backfilled = 0
        self.computed = 0
        self.approximated = 0

    def jobs_added(self, env: SchedulerEnv, start: int) -> None:
        n = len(env.jobs)
        self._head_shadow = grow(self._head_shadow, n, np.nan)
        self._first_planned = grow(self._first_planned, n, np.nan)
        self._cpu_jobs = self._cpu_jobs or bool((env.jobs.gpus_per_worker[start:] == 0).any())

    @property
    def head_shadow(self) -> FloatArray:
        """Per job: the shadow time of its first reservation as the head (NaN: never reserved as head)."""
        return self._head_shadow[: len(self._jobs)]

    @property
    def first_planned(self) -> FloatArray:
        """Per job: the start time of its first reservation in any position (conservative reserves many)."""
        return self._first_planned[: len(self._jobs)]

    def notes(self) -> list[str]:
        if not self.approximated:
            return []
        return [f"backfill: {self.approximated:,} reservation(s) approximated: the placement search ran out of "
                f"max_place_tries ({self.args.max_place_tries}) before it proved the earliest start, so those "
                "jobs were reserved later than they could be and more jobs backfilled around them"]

    # --- helpers for the passes --------------------------------------------------------------------
    def exhausted(self, state: ClusterState) -> bool:
        """No GPU is free, none holds shares with room and no queued job asks for none: nothing more
        can start this cycle."""
        # Capacity.free_gpus written out (a call less per start: the EASY walk asks after each)
        return (self.capacity.total_gpus - state.allocated_gpus - state.down_gpus <= 0 and not self._cpu_jobs
                and not state.shares.open)

    def type_mask(self, env: SchedulerEnv, job: int) -> BoolArray | None:
        t = self.job_type[job]
        return env.nodes_of_type(t) if t >= 0 else None

    def record(self, job: int, when: float, head: bool) -> None:
        """``job`` got a reservation at ``when`` (as the head or not): keep the first of each kind."""
        if head and self._head_shadow[job] != self._head_shadow[job]:
            self._head_shadow[job] = when
        if self._first_planned[job] != self._first_planned[job]:
            self._first_planned[job] = when

    def start(self, ctx: CycleContext, fw: Framework, job: int, placement: Placement) -> None:
        start_job(ctx, fw, job, placement)
        self.backfilled += 1

    def sync(self, ctx: CycleContext) -> None:
        """Bring the release mirror up to date and tell the kept reservation and plan what changed."""
        env = ctx.env
        estimate = None if env.estimator is not None else env.estimate
        early, added = self.releases.sync(ctx.now, ctx.running, ctx.state, estimate)
        self.kept.after_sync(early, added, ctx.state.release_count)
        if self.conservative.plan is not None:  # (none in EASY mode)
            self.conservative.after_sync(early, added)

    # --- the cycle -----------------------------------------------------------------------------
    def idle(self, ctx: CycleContext) -> bool:
        """With the state unchanged since the last cycle and nothing started in this one (see
        :meth:`Action.idle`), :meth:`execute` starts nothing when the queue is empty or the cluster
        is exhausted: it would only hand the last cycle's starts to the release mirror, which the
        next full cycle does."""
        state = ctx.state
        return not len(ctx.queue.queued) or (
            self.capacity.total_gpus - state.allocated_gpus - state.down_gpus <= 0 and not self._cpu_jobs
            and not state.shares.open
        )

    def execute(self, ctx: CycleContext, fw: Framework) -> None:
        if self.job_gpus is not fw.job_gpus:
            self.job_gpus, self.job_workers, self.job_type = fw.job_gpus, fw.job_workers, fw.job_type
            self.job_milli = fw.job_milli
        # jobs enter ctx.running only through a cycle's ctx.started (filled by every action)
        self.releases.hand_over(ctx.now, ctx.started, ctx.resized if ctx.env.jobs.elastic else None)
        if len(self.releases.unsynced) > 256:  # keep the hand-over lists short when backfill is idle
            self.sync(ctx)
        state = ctx.state
        if not len(ctx.queue.queued) or (
            self.capacity.total_gpus - state.allocated_gpus - state.down_gpus <= 0 and not self._cpu_jobs
            and not state.shares.open  # exhausted
        ):
            return
        if self.args.mode == "easy":
            cycle = self._easy_cycle
            if cycle is None:
                cycle = self._easy_cycle = EasyCycle(self, ctx, fw)
            else:
                cycle.reset(self, ctx, fw)
            dynamic = fw.dynamic_key(ctx.now) if fw.dynamic else None  # (dynamic_key's own first test)
            if dynamic is None:
                cycle.run_static()
            else:
                cycle.run_dynamic(dynamic)
        else:
            self.conservative.run(self, ctx, fw)
