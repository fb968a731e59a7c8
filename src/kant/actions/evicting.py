"""The skeleton shared by the evicting actions (``preempt``, ``reclaim``, ``inference-reclaim``):
:class:`EvictingAction` walks the jobs that may start by evicting, asks the action's rule which
running jobs may go for each, picks the victims with :func:`~kant.actions.victims.choose_victims`,
evicts them and starts the job. Each action is its rule in the skeleton's hooks.

Elastic gangs (:mod:`kant.actions.elastic`): before evicting anything for a job, the skeleton tries to
start it by shrinking the elastic jobs among the action's own candidates toward their minimum
(:func:`~kant.actions.elastic.shrink_to_start`), if admission admits the job as things are (a queue
tree's reclaim that admits it only once borrowers are gone evicts as before); only if their lent workers
are not enough does it pick victims, who are evicted whole. With no elastic job in the store this costs
nothing.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Generic, TypeVar

import numpy as np
from pydantic import BaseModel

from kant.actions.allocate import Allocate
from kant.actions.common import evict_job, in_queue_order, start_job
from kant.actions.elastic import shrink_to_start
from kant.actions.pool import BoolArray, Candidates, FloatArray, IntArray, placement_entries, select, work_lost
from kant.actions.victims import PoolOrder, choose_victims, one_victim
from kant.framework.action import Action
from kant.framework.context import CycleContext
from kant.framework.runner import Framework
from kant.model.state import Placement

__all__ = ["EvictingAction", "Skip", "Walk", "execute_plan", "in_queue_order"]


def execute_plan(ctx: CycleContext, fw: Framework, job: int, victims: list[int], placement: Placement) -> None:
    """Evict ``victims`` (back to the queue) and start ``job`` on ``placement``."""
    for v in victims:
        evict_job(ctx, fw, v)
    start_job(ctx, fw, job, placement)


class Skip(Enum):
    """What :meth:`EvictingAction.victim_pool` says instead of a candidate mask."""

    FAILED = "failed"  # the job cannot start by evicting now: remember its failure key this cycle
    DONE = "done"  # the job was dealt with without evicting (e.g. it fits as is): go on


@dataclass(eq=False)
class Walk:
    """One cycle's walk of an evicting action: the jobs to try in order with their failure keys
    (jobs with equal keys succeed or fail alike in this cycle; computed for all of them at once, as
    the walk visits many jobs per cycle), the pool of possible victims (running since before the
    cycle) with their rank (lower = evicted first), and the failure keys known to fail (shared
    across cycles if the action keeps them)."""

    pending: Sequence[int]
    keys: Sequence[Hashable]
    running: IntArray
    rank: FloatArray
    failed: set[Hashable]
    checkpoint_interval_s: float | None
    #: (pool index, node, workers there) of every node each pool job uses; computed on first need
    entries: tuple[IntArray, IntArray, IntArray] | None = None
    alive: BoolArray = field(init=False)  # pool jobs not evicted in this cycle
    lost: FloatArray | None = None  # work each pool job would lose; computed on first need
    index: dict[int, int] | None = None  # pool job -> its index in ``running``; made on first need
    #: the pool in (rank, work lost, job row) order, for one_victim; made on first need
    by_rank: PoolOrder | None = None
    #: the start of each pool job's current run, as read with the pool (:func:`pool_of`), or None
    #: (read from ``ctx.running`` when the work lost is computed)
    starts: FloatArray | None = None

    def __post_init__(self) -> None:
        self.alive = np.ones(len(self.running), dtype=bool)

    def _index(self) -> dict[int, int]:
        index = self.index
        if index is None:
            index = self.index = {job: i for i, job in enumerate(self.running.tolist())}
        return index

    def evicted(self, victims: list[int]) -> None:
        """``victims`` (pool jobs) were evicted: they are no longer candidates in this cycle."""
        index, alive, by_rank = self._index(), self.alive, self.by_rank
        for v in victims:
            i = index[v]
            alive[i] = False
            if by_rank is not None:
                by_rank.drop(i)

    def _lost(self, ctx: CycleContext) -> FloatArray:
        if self.lost is None:
            self.lost = work_lost(ctx, self.running, self.checkpoint_interval_s, self.starts)
        return self.lost

    def lost_of(self, ctx: CycleContext, jobs: list[int]) -> list[float]:
        """The work each of ``jobs`` (pool jobs) loses if evicted now (:func:`work_lost`)."""
        lost, index = self._lost(ctx), self._index()
        return [float(lost[index[j]]) for j in jobs]

    def placements_changed(self) -> None:
        """Pool jobs' placements changed (elastic lenders shrank): forget what was read from them."""
        self.entries = self.lost = self.by_rank = self.starts = None

    def candidates(self, ctx: CycleContext, sel: BoolArray) -> Candidates:
        """The pool jobs selected by ``sel``, with rank, work lost and placements."""
        if self.entries is None:  # (after one_victim's plans, some of the pool may be evicted)
            self.entries = placement_entries(ctx, self.running, self.alive)
        return select(self.running, self.rank, self._lost(ctx), self.entries, sel)

    def one_victim(self, ctx: CycleContext, fw: Framework, job: int,
                   sel: BoolArray) -> tuple[list[int], Placement] | None:
        """:func:`~kant.actions.victims.one_victim` over this pool (what :func:`choose_victims` would
        return for ``walk.candidates(ctx, sel)`` when it is one victim found in one step; else None)."""
        if self.by_rank is None:
            self.by_rank = PoolOrder(self.running, self.rank, self._lost(ctx))
        return one_victim(ctx, fw, job, self.by_rank, sel)


W = TypeVar("W", bound=Walk)


class EvictingAction(Action, Generic[W]):
    """The skeleton shared by ``preempt``, ``reclaim`` and ``inference-reclaim``.

    Each cycle: :meth:`begin` decides whether there is anything to do and returns the :class:`Walk`
    (or None). For each job of the walk whose failure key is not known to fail this cycle,
    :meth:`victim_pool` checks admission and cheap bounds and says which pool jobs may be evicted for
    it; :func:`choose_victims` picks the victims and the job's placement (nothing is evicted if none
    makes it fit); :meth:`planned` counts; the victims are evicted (back to the queue) and the job
    starts. The walk stops after ``limit`` such starts or when :meth:`exhausted` says so; then, if
    something started and ``allocate_after`` is set, one allocate pass runs, and :meth:`end` is called
    (also on an error). Subclasses set ``limit`` and ``allocate_after`` in ``__init__``.
    """

    EVICTS = True

    def __init__(self, args: BaseModel | None = None) -> None:
        super().__init__(args)
        self.limit: int | None = None
        self.allocate_after = False
        self._allocate: Allocate | None = None
        self.shrink_starts = 0  # jobs started by shrinking elastic candidates instead of evicting

    def begin(self, ctx: CycleContext, fw: Framework) -> W | None:
        raise NotImplementedError

    def victim_pool(self, ctx: CycleContext, fw: Framework, walk: W, job: int) -> BoolArray | Skip:
        """Which of ``walk.running`` may be evicted for ``job`` (a mask), or why not to try."""
        raise NotImplementedError

    def planned(self, ctx: CycleContext, walk: W, job: int, victims: list[int]) -> None:
        """``job`` will start by evicting ``victims`` (pool jobs of ``walk``): count it."""

    def plan(self, ctx: CycleContext, fw: Framework, walk: W, job: int,
             cands: Candidates) -> tuple[list[int], Placement] | None:
        """The victims among ``cands`` and the job's placement once they are gone (None: no plan).
        Default: :func:`~kant.actions.victims.choose_victims` (lowest rank, fewest, least work lost).
        An action that keeps the default is first asked :meth:`Walk.one_victim` (the same plan when
        it is one victim found in one step, without the candidates' arrays)."""
        return choose_victims(ctx, fw, job, cands)

    def exhausted(self, walk: W) -> bool:
        """True when no later job of the walk can evict anything (ends the walk early)."""
        return False

    def end(self, ctx: CycleContext, walk: W) -> None:
        """After the walk (and the allocate pass), also on an error."""

    def execute(self, ctx: CycleContext, fw: Framework) -> None:
        walk = self.begin(ctx, fw)
        if walk is None:
            return
        try:
            started = self._walk(ctx, fw, walk)
            if started and self.allocate_after:
                if self._allocate is None:
                    self._allocate = Allocate()
                self._allocate.execute(ctx, fw)
        finally:
            self.end(ctx, walk)

    def _walk(self, ctx: CycleContext, fw: Framework, walk: W) -> int:
        failed, limit, victim_pool = walk.failed, self.limit, self.victim_pool
        elastic = ctx.env.jobs.elastic
        # the one-step plan first where the action plans by choose_victims and no elastic job may lend
        quick = type(self).plan is EvictingAction.plan and not elastic
        started = 0
        for job, key in zip(walk.pending, walk.keys, strict=True):
            if key in failed:
                continue
            sel = victim_pool(ctx, fw, walk, job)
            if sel is Skip.DONE:
                continue
            if sel is Skip.FAILED:
                failed.add(key)
                continue
            plan = walk.one_victim(ctx, fw, job, sel) if quick else None
            if plan is None:
                cands = walk.candidates(ctx, sel)
                if elastic and fw.admit(ctx, job).ok and shrink_to_start(ctx, fw, job, elastic,
                                                                        cands.jobs.tolist()) >= 0:
                    # lent workers of elastic candidates were enough: nobody is evicted (kant.actions.elastic)
                    walk.placements_changed()
                    self.shrink_starts += 1
                    started += 1
                    if (limit is not None and started >= limit) or self.exhausted(walk):
                        break
                    continue
                plan = self.plan(ctx, fw, walk, job, cands)
                if plan is None:
                    failed.add(key)
                    continue
            victims, placement = plan
            self.planned(ctx, walk, job, victims)
            execute_plan(ctx, fw, job, victims, placement)
            walk.evicted(victims)
            started += 1
            if (limit is not None and started >= limit) or self.exhausted(walk):
                break
        return started
