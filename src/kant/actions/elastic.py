"""Elastic gangs: grow running elastic jobs into idle GPUs, shrink them when their GPUs are needed.

The rules of every resize are here, in one place (the bounds and the speed of a size are
:mod:`kant.model.elastic`; the cost of a resize in the simulator is
:attr:`kant.sim.execution.ExecutionModel.resize_cost_s`; live, a resize is a restart from the job's
checkpoint with the new world size). Two actions, for two places in a policy's list:

``elastic-shrink`` (after ``allocate``, before ``backfill`` and any evicting action) walks the pending
jobs in queue order and starts each that it can, in this order of means:

1. as it is, if it fits on the free GPUs (as ``allocate`` would);
2. an elastic job: with fewer workers than it asks for, the most that fit on the free GPUs, but never
   fewer than its ``min_workers`` (its workers then go on the nodes where one fits, the nodes with the
   fewest free GPUs first: packing; the policy's filters apply, its placement plugin does not);
3. by *shrinking* running elastic jobs toward their ``min_workers``: the workers an elastic job holds
   above its minimum are lent, not owned, so any pending job of the same or a higher priority may
   take them back. Lenders are taken lowest priority first, then the most surplus workers, then the
   most recently started, one worker at a time (from the lender's node with the most free GPUs, among
   nodes where a worker of the pending job could go), until the job places (by the policy's own
   placement); if even all of that surplus is not enough, nothing is shrunk.

With ``blocking`` (default, as the Kant policy's allocate) the walk stops at the first job that none of
these starts; else it skips it. A job that admission holds is passed over. Only the part of a job
above its minimum is ever taken this way: below it, an elastic job is a rigid gang, which only the
evicting actions (``preempt``, ``reclaim``, ``inference-reclaim``) may evict, whole; listed after
``elastic-shrink``, they evict only when shrinking could not make room.

``elastic-grow`` (last in the policy): what is still pending now could not start in this cycle, so
idle GPUs are lent to running elastic jobs below their ``max_workers``. One worker at a time goes to
the job whose throughput grows the most, relatively (``speed(k + 1) / speed(k)``: with the linear
default, the smallest job first), on the node the job already uses, else the fullest node where it
fits. A job that was running before this cycle keeps its growth only if it pays for its restart: the
time it saves on its planned remaining run (``(expected end - now) x (1 - speed(k) / speed(k'))``) must
exceed ``resize_cost_s``; a job started in this cycle grows for free (it has not run yet). The workers
lent this way are taken back by ``elastic-shrink`` as soon as a pending job can start with them.

A resize commits through :func:`kant.actions.common.resize_job`: the scheduler's driver hears it
(``CycleResult.resized``); the job's planned end is rescaled by the speed ratio plus ``resize_cost_s``.
Neither action does anything, at any cost, when no job of the store is elastic.

Arguments (both actions):
    resize_cost_s: what the scheduler expects a resize to cost (seconds of restart), for the grow test
        (set it to the simulator's ``ExecutionModel.resize_cost_s``; default 30 s).
elastic-shrink only:
    blocking: stop at the first pending job that cannot start (default True).
    max_starts_per_cycle: at most this many starts by this action in one cycle (null: no limit).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from kant.actions.common import in_queue_order, resize_job, start_job
from kant.actions.victims import static_ok
from kant.framework.action import Action
from kant.framework.context import CycleContext, RunningJob
from kant.framework.registry import register_action
from kant.framework.runner import Framework
from kant.framework.statement import Statement
from kant.framework.status import Status
from kant.model.elastic import ElasticBounds
from kant.model.fit import worker_slots
from kant.model.state import Placement

__all__ = ["ElasticGrow", "ElasticShrink", "ElasticArgs", "ShrinkArgs", "grow_placement", "resize_running",
           "shrink_placement", "shrink_plan", "shrink_to_start"]

IntArray = npt.NDArray[np.int64]

DEFAULT_RESIZE_COST_S = 30.0


class ElasticArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    resize_cost_s: float = Field(default=DEFAULT_RESIZE_COST_S, ge=0.0, allow_inf_nan=False)


class ShrinkArgs(ElasticArgs):
    blocking: bool = True
    max_starts_per_cycle: int | None = Field(default=None, ge=1)


# --- placements of another size ----------------------------------------------------------------
def _slots(ctx: CycleContext, fw: Framework, job: int, ok: npt.NDArray[np.bool_]) -> IntArray:
    """Workers of ``job`` that fit on each node now (0 off ``ok``): the one fit rule."""
    env, jobs, state = ctx.env, ctx.env.jobs, ctx.state
    return worker_slots(int(jobs.gpus_per_worker[job]), 1000, int(jobs.cpu_milli[job]), int(jobs.memory_mib[job]),
                        state.free, state.free_cpu, state.free_mem, env.cpu_unmodelled, env.mem_unmodelled,
                        limit=1 << 30, ok=ok)


def grow_placement(ctx: CycleContext, fw: Framework, job: int, placement: Placement | None,
                   add: int) -> Placement | None:
    """``placement`` (None: none yet) with up to ``add`` more workers of ``job`` on the free capacity:
    one at a time on a node the job already uses, else the node with the fewest free GPUs where one
    fits (then the lower index), within the policy's filters. None if not even one more fits. Changes
    nothing."""
    jobs = ctx.env.jobs
    g = int(jobs.gpus_per_worker[job])
    mask = fw.candidate_mask(ctx, job)
    slots = _slots(ctx, fw, job, mask)
    if not slots.any():
        return None
    nodes = list(placement.nodes) if placement is not None else []
    used = set(nodes)
    free = ctx.state.free
    cand = np.flatnonzero(slots)
    order = np.lexsort((cand, free[cand], ~np.isin(cand, list(used)) if used else np.zeros(len(cand), bool)))
    added = 0
    for n in cand[order].tolist():
        take = min(int(slots[n]), add - added)
        nodes.extend([n] * take)
        added += take
        if added >= add:
            break
    if added == 0:
        return None
    if placement is None:
        return Placement(tuple(sorted(nodes)), g, int(jobs.cpu_milli[job]), int(jobs.memory_mib[job]))
    return Placement(tuple(sorted(nodes)), placement.gpus, placement.cpu_milli, placement.memory_mib)


def shrink_placement(placement: Placement, node: int) -> Placement:
    """``placement`` with one worker fewer, taken from ``node``."""
    nodes = list(placement.nodes)
    nodes.remove(node)
    return Placement(tuple(nodes), placement.gpus, placement.cpu_milli, placement.memory_mib)


def _rescale(ctx: CycleContext, job: int, bounds: ElasticBounds, before: int, after: int, cost: float) -> None:
    """A running job was resized from ``before`` to ``after`` workers: its run restarts now and its
    planned end scales with the speed ratio, plus the restart."""
    run = ctx.running.get(job)
    if run is None:
        return
    left = run.expected_end - ctx.now
    if math.isfinite(left):
        left = max(left, 0.0) * bounds.speed(before) / bounds.speed(after) + cost
    ctx.running[job] = RunningJob(ctx.now, ctx.now + left)


def shrink_plan(ctx: CycleContext, fw: Framework, job: int, elastic: dict[int, ElasticBounds],
                candidates: Iterable[int]) -> tuple[dict[int, Placement], Placement] | None:
    """The rule of a shrink (see the module notes): which of ``candidates`` (running jobs; the elastic
    ones above their minimum lend) give up which workers so that ``job`` starts, as the lenders'
    smaller placements and ``job``'s placement once they are shrunk; None if shrinking every lender to
    its minimum is not enough. Changes nothing."""
    state, jobs = ctx.state, ctx.env.jobs
    allocations = state.allocations
    # (a job started earlier in this cycle lends too: it simply starts smaller)
    started = {j for j, _ in ctx.started}
    lenders = [j for j in candidates if j in elastic and j != job and (j in ctx.running or j in started)
               and j in allocations and len(allocations[j].nodes) > elastic[j].min_workers]
    if not lenders:
        return None
    own = elastic.get(job)
    # the size the job starts with: what it asks for, or, elastic, at least its minimum
    w = int(jobs.workers[job]) if own is None else own.min_workers
    surplus = sum((len(allocations[j].nodes) - elastic[j].min_workers) * allocations[j].gpus for j in lenders)
    if state.free_gpus + surplus < w * int(jobs.gpus_per_worker[job]):
        return None
    ok = static_ok(ctx, fw, job)  # nodes that could hold a worker of the job if empty
    trial = Statement(state)
    shrunk: dict[int, Placement] = {}
    alive = set(lenders)
    ref = int(jobs.workers[job])

    def share(j: int) -> float:
        return len(allocations[j].nodes) / int(jobs.workers[j])

    def since(j: int) -> float:  # the start of its current run (now: started in this cycle)
        run = ctx.running.get(j)
        return ctx.now if run is None else run.start

    try:
        slots = int(_slots(ctx, fw, job, ok).sum())
        while alive:
            # the lender with the largest share of what it asked for (size / requested workers),
            # lowest priority first, then the most recently started, then the lower row
            lender = min(alive, key=lambda j: (int(jobs.priority[j]), -share(j), -since(j), j))
            if own is not None and slots >= w:
                # an elastic job takes more than its minimum only while the lender keeps a larger
                # share than the job would have (max-min fairness of shares)
                k_l = len(allocations[lender].nodes)
                if slots >= ref or (k_l - 1) / int(jobs.workers[lender]) < (slots + 1) / ref:
                    break
            current = allocations[lender]
            useful = [n for n in current.per_node if ok[n]]
            if not useful:
                alive.discard(lender)
                continue
            node = max(useful, key=lambda n: (int(state.free[n]), -n))
            smaller = shrink_placement(current, node)
            trial.resize(lender, smaller)
            shrunk[lender] = smaller
            if len(smaller.nodes) <= elastic[lender].min_workers:
                alive.discard(lender)
            slots = int(_slots(ctx, fw, job, ok).sum())
            if slots < w or own is not None:
                continue
            placed = fw.place(ctx, job)
            if not isinstance(placed, Status):
                return shrunk, placed
        if own is not None and slots >= w:  # an elastic job starts with what fits, at least its minimum
            small = grow_placement(ctx, fw, job, None, ref)
            if small is not None and len(small.nodes) >= w:
                return shrunk, small
        return None
    finally:
        trial.discard()


def resize_running(ctx: CycleContext, fw: Framework, job: int, bounds: ElasticBounds, placement: Placement,
                   cost: float) -> Placement:
    """Commit ``job``'s new placement (:func:`kant.actions.common.resize_job`); a job that ran before
    this cycle restarts now, its planned end rescaled (speed ratio, plus ``cost``). Returns the old."""
    before = resize_job(ctx, fw, job, placement)
    if job in ctx.running:
        _rescale(ctx, job, bounds, len(before.nodes), len(placement.nodes), cost)
    return before


def shrink_to_start(ctx: CycleContext, fw: Framework, job: int, elastic: dict[int, ElasticBounds],
                    candidates: Iterable[int], cost: float = DEFAULT_RESIZE_COST_S) -> int:
    """Start ``job`` by shrinking lenders among ``candidates`` (:func:`shrink_plan`); returns how many
    were shrunk (0 when the job, elastic, started on what was free at its minimum), or -1 when the job
    did not start (nothing changed). Every evicting action tries this before it evicts
    (:class:`kant.actions.evicting.EvictingAction`), with its own candidates."""
    plan = shrink_plan(ctx, fw, job, elastic, candidates)
    if plan is None:
        return -1
    shrunk, placement = plan
    for lender, smaller in shrunk.items():
        resize_running(ctx, fw, lender, elastic[lender], smaller, cost)
    start_job(ctx, fw, job, placement)
    return len(shrunk)


class _Elastic(Action):
    Args = ElasticArgs

    def __init__(self, args: BaseModel | None = None) -> None:
        super().__init__(args)
        a = self.args
        assert isinstance(a, ElasticArgs)
        self.cost = a.resize_cost_s
        self.grows = 0  # resizes up
        self.shrinks = 0  # resizes down
        self.small_starts = 0  # elastic jobs started below their requested size

    def _resize(self, ctx: CycleContext, fw: Framework, job: int, bounds: ElasticBounds, placement: Placement) -> None:
        running = job in ctx.running  # (else: started in this cycle, it simply starts bigger)
        resize_running(ctx, fw, job, bounds, placement, self.cost)
        if running:
            self.grows += 1


@register_action
class ElasticShrink(_Elastic):
    NAME = "elastic-shrink"
    Args = ShrinkArgs

    def execute(self, ctx: CycleContext, fw: Framework) -> None:
        elastic = ctx.env.jobs.elastic
        if not elastic or not len(ctx.queue):
            return
        args = self.args
        assert isinstance(args, ShrinkArgs)
        pending = np.fromiter(ctx.queue, dtype=np.int64, count=len(ctx.queue))
        starts = 0
        for job in in_queue_order(ctx, fw, pending):
            if not fw.admit(ctx, job).ok:
                continue
            if self._try_start(ctx, fw, job, elastic):
                starts += 1
                if args.max_starts_per_cycle is not None and starts >= args.max_starts_per_cycle:
                    return
            elif args.blocking:
                return

    def _try_start(self, ctx: CycleContext, fw: Framework, job: int, elastic: dict[int, ElasticBounds]) -> bool:
        placement = fw.place(ctx, job)
        if not isinstance(placement, Status):
            start_job(ctx, fw, job, placement)
            return True
        jobs = ctx.env.jobs
        bounds = elastic.get(job)
        if bounds is not None and bounds.min_workers < int(jobs.workers[job]):
            small = grow_placement(ctx, fw, job, None, int(jobs.workers[job]) - 1)
            if small is not None and len(small.nodes) >= bounds.min_workers:
                start_job(ctx, fw, job, small)
                self.small_starts += 1
                return True
        prio = int(jobs.priority[job])
        lenders = [j for j in (*ctx.running, *(j for j, _ in ctx.started)) if int(jobs.priority[j]) <= prio]
        shrunk = shrink_to_start(ctx, fw, job, elastic, lenders, self.cost)
        if shrunk < 0:
            return False
        self.shrinks += shrunk
        return True


@register_action
class ElasticGrow(_Elastic):
    NAME = "elastic-grow"
    #: idle GPUs appear when a job ends, also with nothing waiting: a cycle at every changed instant
    EVERY_EVENT = True

    def execute(self, ctx: CycleContext, fw: Framework) -> None:
        elastic = ctx.env.jobs.elastic
        if not elastic:
            return
        state = ctx.state
        if state.free_gpus == 0:
            return
        allocations = state.allocations
        started = {j for j, _ in ctx.started}
        growable = [j for j in allocations if j in elastic and len(allocations[j].nodes) < elastic[j].max_workers
                    and (j in ctx.running or j in started)]
        if not growable:
            return
        # one worker at a time to the job with the smallest share of what it asked for, then the
        # largest relative throughput gain, on a trial; then keep what pays for its restart
        workers = ctx.env.jobs.workers

        def key(j: int, k: int) -> tuple[float, float, int]:
            b = elastic[j]
            return (k / int(workers[j]), -(b.throughput(k + 1) / b.throughput(k)), j)

        heap = [key(j, len(allocations[j].nodes)) for j in growable]
        heapq.heapify(heap)
        trial = Statement(state)
        target: dict[int, Placement] = {}
        try:
            while heap and state.free_gpus > 0:
                j = heapq.heappop(heap)[2]
                bigger = grow_placement(ctx, fw, j, allocations[j], 1)
                if bigger is None:
                    continue
                trial.resize(j, bigger)
                target[j] = bigger
                b, k = elastic[j], len(bigger.nodes)
                if k < b.max_workers:
                    heapq.heappush(heap, key(j, k))
        finally:
            trial.discard()
        before = {j: allocations[j] for j in target}
        for j in sorted(target):
            b = elastic[j]
            k0, k1 = len(before[j].nodes), len(target[j].nodes)
            run = ctx.running.get(j)
            if run is not None and j not in started:
                left = run.expected_end - ctx.now
                if math.isfinite(left) and left * (1.0 - b.speed(k0) / b.speed(k1)) <= self.cost:
                    continue
            self._resize(ctx, fw, j, b, target[j])
