"""Preempt: evict lower-priority running jobs so that a higher-priority pending job can start.

Rule. The action walks the pending jobs in the policy's queue order (only those ranked above the
lowest-ranked running job). For a pending job ``p`` of rank ``r_p`` (``rank_by: priority`` ->
``JobTable.priority``; ``rank_by: <plugin name>`` -> that :class:`~kant.framework.plugin.Rank`
plugin's ``rank(env, jobs, now)``, e.g. ``tiresias-las`` gives ``-LAS queue``), the *candidates* are
the jobs that were running when the cycle began with rank strictly below ``r_p`` (never the same or a higher
rank) and that have run at least ``min_run_s`` in their current run. ``p`` must pass admission. Only
candidates on nodes that could hold a worker of ``p`` once all candidates there are gone are
considered; if even evicting every candidate cannot make room (per-node freeable capacity, computed
with NumPy over all nodes), nothing is evicted.

Victims are chosen by :func:`~kant.actions.victims.choose_victims` (every evicting action's
choice; the rule is in :mod:`kant.actions.victims`), which minimises the highest rank among the
victims, then their number, then the work they lose: GPU-seconds since their last checkpoint,
estimated as ``total GPUs x (run time of the current run mod checkpoint_interval_s)`` (the whole
current run when ``checkpoint_interval_s`` is null: nothing survives). If no set of candidates makes
room, nothing is evicted. Otherwise the victims are evicted with
:func:`kant.actions.common.evict_job` (back in the queue; the simulator charges the
checkpoint/restart model: they keep the work up to their last checkpoint and pay
``restart_cost_s`` when they start again) and the preemptor starts
(:class:`~kant.actions.evicting.EvictingAction`, the skeleton shared with ``reclaim``).

Arguments:
    rank_by: ``priority`` or the name of a :class:`~kant.framework.plugin.Rank` plugin of the policy
        (checked when the policy is loaded).
    round_s: run only once per round of this many seconds (and ask the driver for a cycle at each
        round boundary while jobs wait); null = every cycle.
    checkpoint_interval_s: used to estimate work lost (set it to the simulator's execution model).
    min_run_s: a job that has run less than this in its current run is not preempted.
    max_preemptors_per_cycle: stop after starting this many preemptors in one cycle (null = no limit).
    allocate_after: after a cycle's preemptions, run one allocate pass (the ``allocate`` action's
        rule) so that capacity the victims left over, and the victims themselves, can start at once.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kant.actions.evicting import EvictingAction, Skip, Walk, in_queue_order
from kant.actions.pool import BoolArray, FloatArray, IntArray, pool_of
from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import Plugin, QueueSort, Rank
from kant.framework.registry import register_action
from kant.framework.runner import Framework

__all__ = ["NAME", "Preempt", "PreemptArgs", "RankFn", "resolve_rank"]

NAME = "preempt"

RankFn = Callable[[SchedulerEnv, IntArray, float], FloatArray]
SortKey = tuple[float, ...]


class PreemptArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    rank_by: str = "priority"
    round_s: float | None = Field(default=None, gt=0.0)
    checkpoint_interval_s: float | None = Field(default=None, gt=0.0)
    min_run_s: float = Field(default=0.0, ge=0.0)
    max_preemptors_per_cycle: int | None = Field(default=None, ge=1)
    allocate_after: bool = True


def resolve_rank(fw: Framework, rank_by: str) -> tuple[RankFn, float]:
    """``priority`` -> JobTable.priority; otherwise the ``rank`` of the policy's :class:`Rank` plugin
    of that name; with the rank no job has less than (:meth:`Rank.lowest`; -inf for priorities)."""
    if rank_by == "priority":
        return (lambda env, jobs, now: env.jobs.priority[jobs].astype(np.float64)), -math.inf
    plugin = fw.plugin(Rank, rank_by)
    if plugin is None:
        raise ValueError(_rank_by_error(rank_by, [type(p) for p in fw.plugins]))
    return plugin.rank, plugin.lowest()


def ranks_by_kept_order(fw: Framework, rank_by: str) -> bool:
    """Can the pending side of a round be read from the kept order? The ranking plugin ranks a pending
    job minus its queue key (:attr:`Rank.RANK_IS_MINUS_KEY`), it is the policy's first sorter (the
    queue order's first place), and the policy keeps its pending order (``Framework.kept``)."""
    plugin = None if rank_by == "priority" else fw.plugin(Rank, rank_by)
    return (isinstance(plugin, QueueSort) and plugin.RANK_IS_MINUS_KEY and fw.kept is not None
            and fw.sorters[0] is plugin)


def _kept_top(lists: Mapping[int, list[SortKey]]) -> float:
    """The highest rank of the pending jobs: minus the least first key (each shape's list is sorted)."""
    return -min(lst[0][0] for lst in lists.values())


def _kept_eligible(lists: Mapping[int, list[SortKey]], low: float) -> list[tuple[SortKey, int]]:
    """(full sort key, shape) of the pending jobs ranked above ``low`` (first key under ``-low``), in
    queue order: per shape, the prefix of its sorted list, merged."""
    bound = (-low,)  # a key (k, submit, row) is under it exactly when k < -low
    return sorted((entry, shape) for shape, lst in lists.items() for entry in lst[:bisect_left(lst, bound)])


def _rank_by_error(rank_by: str, plugins: Sequence[type[Plugin]]) -> str | None:
    if rank_by == "priority" or any(issubclass(p, Rank) and rank_by == p.NAME for p in plugins):
        return None
    ranking = ", ".join(p.NAME for p in plugins if issubclass(p, Rank))
    choices = f"'priority' or a ranking plugin of this policy ({ranking})" if ranking else \
        "'priority' (this policy has no plugin that ranks jobs)"
    if any(rank_by == p.NAME for p in plugins):
        return f"preempt: rank_by {rank_by!r} names a plugin that does not rank jobs; use {choices}"
    return f"preempt: rank_by {rank_by!r} is not {choices}"


@dataclass(eq=False)
class _PreemptWalk(Walk):
    rank_of: dict[int, float] = field(default_factory=dict)


@register_action
class Preempt(EvictingAction[_PreemptWalk]):
    NAME = NAME
    Args = PreemptArgs

    def __init__(self, args: BaseModel | None = None) -> None:
        super().__init__(args)
        a = self.args
        assert isinstance(a, PreemptArgs)
        self.limit = a.max_preemptors_per_cycle
        self.allocate_after = a.allocate_after
        self._rank: RankFn | None = None
        self._lowest = -math.inf  # no job's rank is under it (Rank.lowest)
        self._by_kept = False  # the pending jobs' ranks and order read from the kept order
        self._round = -math.inf
        self._asked = -math.inf  # the round whose boundary wake-up was last asked for
        self.preemptions = 0  # victims evicted
        self.preemptors = 0  # jobs started by preempting

    @classmethod
    def check_plugins(cls, args: BaseModel, plugins: Sequence[type[Plugin]]) -> tuple[str, str] | None:
        assert isinstance(args, PreemptArgs)
        why = _rank_by_error(args.rank_by, plugins)
        return None if why is None else ("args.rank_by", why)

    def attach(self, fw: Framework) -> None:
        args = self.args
        assert isinstance(args, PreemptArgs)
        self._rank, self._lowest = resolve_rank(fw, args.rank_by)
        self._by_kept = ranks_by_kept_order(fw, args.rank_by)

    def begin(self, ctx: CycleContext, fw: Framework) -> _PreemptWalk | None:
        args = self.args
        assert isinstance(args, PreemptArgs)
        if self._rank is None:
            self.attach(fw)
            assert self._rank is not None
        rank_fn = self._rank
        now = ctx.now
        if args.round_s is not None:
            boundary = math.floor(now / args.round_s) * args.round_s
            if len(ctx.queue):
                ctx.wake_at(boundary + args.round_s)
                self._asked = boundary
            if boundary <= self._round:
                return None
            self._round = boundary
        if not ctx.running or not len(ctx.queue):
            return None
        env = ctx.env
        # the pending side: from the kept order where it gives the ranks, else ranked and sorted here
        key = fw.dynamic_key(now) if self._by_kept else None
        lists = key.kept_by_shape(ctx.queue) if key is not None else None
        if lists is not None:
            top = _kept_top(lists)
        else:
            pending = np.fromiter(ctx.queue, dtype=np.int64, count=len(ctx.queue))
            pend_rank = rank_fn(env, pending, now)
            top = float(pend_rank.max())
        if top <= self._lowest:  # no running job can rank under every pending job
            return None
        running, starts = pool_of(ctx)
        run_rank = rank_fn(env, running, now)
        low = float(run_rank.min())
        if top <= low:
            return None
        if lists is not None:
            eligible = _kept_eligible(lists, low)
            order = [int(entry[-1]) for entry, _ in eligible]
            keys = [(shape, -entry[0]) for entry, shape in eligible]
            rank_of = {job: rank for job, (_, rank) in zip(order, keys, strict=True)}
        else:
            chosen = pend_rank > low
            rank_of = dict(zip(pending[chosen].tolist(), pend_rank[chosen].tolist(), strict=True))
            order = in_queue_order(ctx, fw, pending[chosen])
            shapes = ctx.queue.shapes[np.asarray(order, dtype=np.int64)].tolist()
            keys = [(s, rank_of[j]) for s, j in zip(shapes, order, strict=True)]
        walk = _PreemptWalk(order, keys, running, run_rank, set(), args.checkpoint_interval_s)
        walk.rank_of = rank_of
        walk.starts = starts
        if args.min_run_s > 0:
            walk.alive &= now - starts >= args.min_run_s
        return walk

    def idle(self, ctx: CycleContext) -> bool:
        """With ``round_s``, inside a round that has had its preemption pass and its next boundary's
        wake-up asked for: :meth:`execute` would only ask for that wake-up again (kept once, or
        dropped by the driver again: nothing has started or ended since) and do nothing else."""
        args = self.args
        assert isinstance(args, PreemptArgs)
        if args.round_s is None:
            return False
        boundary = math.floor(ctx.now / args.round_s) * args.round_s
        return boundary <= self._round and self._asked == boundary

    def victim_pool(self, ctx: CycleContext, fw: Framework, walk: _PreemptWalk, job: int) -> BoolArray | Skip:
        sel = walk.alive & (walk.rank < walk.rank_of[job])
        if not sel.any() or not fw.admit(ctx, job).ok:
            return Skip.FAILED
        return sel

    def planned(self, ctx: CycleContext, walk: _PreemptWalk, job: int, victims: list[int]) -> None:
        self.preemptions += len(victims)
        self.preemptors += 1
