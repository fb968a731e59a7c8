"""Choosing victims: which running jobs to evict so that a pending job can start.

:func:`choose_victims` is shared by every evicting action (``preempt``, ``reclaim``,
``inference-reclaim``); the action says which running jobs may go (the :class:`Candidates`, with
their rank: lower is evicted first) and this module picks the victims, minimising, in this order:

1. the highest rank among the victims (protect more important work, as Kubernetes does),
2. the number of victims,
3. the work they lose: GPU-seconds since their last checkpoint (:func:`work_lost`),

then lower job rows. For a one-worker job this is exact (the best node is found with NumPy from
per-node cumulative capacities; ties on 1 and 2 are broken by enumerating the few subsets of that
size on the tied nodes). For a gang of several workers it is greedy: evict candidates in order until
the gang fits, then give back ("reprieve") every victim, most important first, whose eviction turns
out unnecessary, so no victim is redundant; this is done for two orders, (rank, work lost, GPUs
freed on useful nodes descending, row) and (rank, GPUs freed descending, work lost, row), and the
better plan by 1-3 wins. The gang's victim count is therefore not guaranteed minimal.

Every plan is simulated on a private :class:`~kant.framework.statement.Statement` (victims evicted,
the job placed by the policy's own placement) and discarded: choosing changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from kant.actions.one_victim_plan import single_worker_plan as _single_worker_plan
from kant.actions.pool import (
    BoolArray,
    Candidates,
    FloatArray,
    IntArray,
    placement_entries,
    running_jobs,
    select,
    work_lost,
)
from kant.framework.context import CycleContext
from kant.framework.runner import Framework
from kant.framework.statement import Statement
from kant.framework.status import Status
from kant.model.fit import is_share, worker_slots
from kant.model.state import Placement
from kant.model.store import JobStore

__all__ = [
    "BoolArray",
    "Candidates",
    "FloatArray",
    "IntArray",
    "choose_victims",
    "one_victim",
    "PoolOrder",
    "placement_entries",
    "running_jobs",
    "select",
    "static_ok",
    "victims_in_order",
    "work_lost",
]

# --- victim selection ----------------------------------------------------------------------------
def static_ok(ctx: CycleContext, fw: Framework, job: int) -> BoolArray:
    """Nodes that could hold one worker of ``job`` if empty (up, GPU type, capacity)."""
    env, jobs, cluster = ctx.env, ctx.env.jobs, ctx.env.cluster
    g = int(jobs.gpus_per_worker[job])
    ok = ctx.state.up & (cluster.gpus >= g)
    t = int(jobs.gpu_type[job])
    if t >= 0:
        ok &= env.nodes_of_type(t)
    c = int(jobs.cpu_milli[job])
    if c > 0:
        ok &= env.cpu_unmodelled | (cluster.cpu_milli >= c)
    m = int(jobs.memory_mib[job])
    if m > 0:
        ok &= env.mem_unmodelled | (cluster.memory_mib >= m)
    return ok


def _slots(ctx: CycleContext, job: int, free: IntArray, free_cpu: IntArray, free_mem: IntArray,
           ok: BoolArray) -> IntArray:
    """Workers of ``job`` that fit per node given free resources (0 off ``ok``; the one rule,
    :func:`kant.model.fit.worker_slots`; a GPU share also counts the open GPU slots of the state)."""
    env, jobs = ctx.env, ctx.env.jobs
    g, milli = int(jobs.gpus_per_worker[job]), int(jobs.gpu_milli[job])
    share = ctx.state.shares.workers(milli) if is_share(g, milli) and ctx.state.shares.slots else None
    return worker_slots(g, milli, int(jobs.cpu_milli[job]), int(jobs.memory_mib[job]), free, free_cpu, free_mem,
                        env.cpu_unmodelled, env.mem_unmodelled, share_free=share, limit=int(jobs.workers[job]),
                        ok=ok)


def choose_victims(ctx: CycleContext, fw: Framework, job: int, cands: Candidates) -> tuple[list[int], Placement] | None:
    """The victims to evict so that ``job`` can start, and its placement once they are gone; None
    if no subset of ``cands`` makes it fit. Changes nothing (the plan is simulated and undone)."""
    if len(cands) == 0:
        return None
    state, jobs = ctx.state, ctx.env.jobs
    n_nodes = len(state.free)
    ok = static_ok(ctx, fw, job)
    # per (candidate, node) entries: what evicting the candidate frees on that node
    idx, node, cnt = cands.entries if cands.entries is not None else placement_entries(ctx, cands.jobs)
    v_rows = cands.jobs[idx]
    gpus = cnt * jobs.gpus_per_worker[v_rows]
    freeable = state.free + np.bincount(node, weights=gpus, minlength=n_nodes).astype(np.int64)
    freeable_cpu, freeable_mem = state.free_cpu, state.free_mem  # only read if the job asks for them
    if int(jobs.cpu_milli[job]) > 0:
        cpu = cnt * jobs.cpu_milli[v_rows]
        freeable_cpu = state.free_cpu + np.bincount(node, weights=cpu, minlength=n_nodes).astype(np.int64)
    if int(jobs.memory_mib[job]) > 0:
        mem = cnt * jobs.memory_mib[v_rows]
        freeable_mem = state.free_mem + np.bincount(node, weights=mem, minlength=n_nodes).astype(np.int64)
    slots = _slots(ctx, job, freeable, freeable_cpu, freeable_mem, ok)
    w = int(jobs.workers[job])
    if int(slots.sum()) < w:
        return None
    useful_node = slots > 0
    useful_entry = useful_node[node]
    if not useful_entry.any():
        return None
    plan: list[int] | None = None
    if _simple(jobs, job, int(jobs.gpus_per_worker[job])):
        plan = _single_worker_plan(ctx, job, cands, idx[useful_entry], node[useful_entry], gpus[useful_entry])
    if plan is not None:
        chosen = [int(cands.jobs[i]) for i in plan]
        trial = _simulate_one if fw.places_by_room(ctx, job) else _simulate
        result = trial(ctx, fw, job, chosen)
        if result is not None:
            return result
    useful_gpus = np.bincount(idx[useful_entry], weights=gpus[useful_entry], minlength=len(cands))
    useful = np.flatnonzero(useful_gpus > 0)
    rows, ug, lost, rank = cands.jobs[useful], -useful_gpus[useful], cands.lost[useful], cands.rank[useful]
    best: tuple[tuple[float, int, float, tuple[int, ...]], list[int], Placement | None] | None = None
    # two greedy orders within each rank: least work lost first, and most GPUs freed first (fewer victims)
    for order in (useful[np.lexsort((rows, ug, lost, rank))], useful[np.lexsort((rows, lost, ug, rank))]):
        greedy = _greedy_plan(ctx, fw, job, cands, order, ok)
        if greedy is None:
            continue
        members, placement = greedy
        key = _plan_key(cands, members)
        if best is None or key < best[0]:
            best = (key, members, placement)
    if best is None:
        return None
    chosen = [int(cands.jobs[i]) for i in best[1]]
    if best[2] is not None:
        return chosen, best[2]
    placed = _simulate(ctx, fw, job, chosen)  # a plan on a delta: placed once, the best plan only
    if placed is None:  # pragma: no cover - the slot test said it places
        raise AssertionError("a plan on a delta that does not place")
    return placed


class PoolOrder:
    """An evicting walk's pool (running jobs since before the cycle) for :func:`one_victim`: its jobs,
    their ranks and the indices of those not evicted since (:meth:`drop`) by rank, then work lost,
    then job row."""

    __slots__ = ("_usable", "jobs", "order", "rank")

    def __init__(self, jobs: IntArray, rank: FloatArray, lost: FloatArray) -> None:
        self.jobs: list[int] = jobs.tolist()
        self.rank: list[float] = rank.tolist()
        self.order: list[int] = np.lexsort((jobs, lost, rank)).tolist()
        self._usable: dict[tuple[int, int], BoolArray] = {}

    def usable(self, ctx: CycleContext, fw: Framework, job: int) -> BoolArray:
        """:func:`static_ok` of ``job``, a job asking no CPU or memory (:func:`one_victim`'s case), kept
        per (GPUs per worker, GPU type) for the walk's cycle (no node goes down or comes up within it)."""
        jobs = ctx.env.jobs
        key = (int(jobs.gpus_per_worker[job]), int(jobs.gpu_type[job]))
        ok = self._usable.get(key)
        if ok is None:
            ok = self._usable[key] = static_ok(ctx, fw, job)
        return ok

    def drop(self, index: int) -> None:
        """The pool job at ``index`` was evicted: no later scan passes over it (the scans' victims
        are of the lowest ranks, found near the front of the order)."""
        self.order.remove(index)


def one_victim(ctx: CycleContext, fw: Framework, job: int, pool: PoolOrder,
               sel: BoolArray) -> tuple[list[int], Placement] | None:
    """What :func:`choose_victims` returns for the candidates ``sel`` of ``pool`` (pool jobs still
    running: none of those dropped from ``pool.order``) when its one-victim plan's one-step case
    settles it, found by going down ``pool.order`` instead of over every candidate's entries; None
    when this scan does not settle it (ask :func:`choose_victims`).

    For a one-worker job of whole GPUs asking no CPU or memory, the one-step case
    (:func:`~kant.actions.one_victim_plan.single_worker_plan`) looks at the entries (candidate, node) on *useful*
    nodes (that could hold the worker, :func:`static_ok`, once every candidate there is gone) that lack GPUs for it.
    The lowest rank r0 of these entries is the lowest achievable highest rank; an entry of rank r0 that frees enough
    alone makes the plan one victim, the one of least work lost, then lowest row. Going down ``pool.order``, the
    first entry on a node that could hold the worker and lacks GPUs has a rank r <= r0 (its node may not be useful);
    the first entry that frees enough alone is useful, so if its rank is r, r0 = r and it is the plan; an entry of a
    rank above r ends the scan. The plan's placement is the same trial as :func:`choose_victims`'s; a failed trial
    is left to it too. Once r is known, a victim holding fewer GPUs in all than the worker lacks on the fullest
    node that could hold it and lacks GPUs frees enough alone nowhere: it is passed over without reading its
    nodes."""
    jobs = ctx.env.jobs
    g = int(jobs.gpus_per_worker[job])
    if not _simple(jobs, job, g) or is_share(g, int(jobs.gpu_milli[job])):
        return None
    state = ctx.state
    free, allocations, per_worker, held = state.free, state.allocations, jobs.gpus_per_worker, jobs.total_gpus
    ok = pool.usable(ctx, fw, job)
    rank, first, need = pool.rank, None, 0
    for i in pool.order:
        if not sel[i]:
            continue
        victim = pool.jobs[i]
        if first is not None:
            if rank[i] != first:
                return None
            if held.item(victim) < need:
                continue  # it frees enough alone on no node
        for node, count in allocations[victim].per_node.items():
            have = free.item(node)
            if have >= g or not ok[node]:
                continue
            if count * per_worker.item(victim) >= g - have:
                trial = _simulate_one if fw.places_by_room(ctx, job) else _simulate
                return trial(ctx, fw, job, [victim])
            if first is None:
                first = rank[i]
                # the fewest GPUs an entry must free from now on: what the worker lacks on the fullest
                # node that could hold it and lacks GPUs
                need = g - int(free[ok & (free < g)].max())
    return None


def _simple(jobs: JobStore, job: int, g: int) -> bool:
    """A one-worker job of GPUs asking no CPU or memory (the one-victim plan's case)."""
    return int(jobs.workers[job]) == 1 and g > 0 and int(jobs.cpu_milli[job]) == 0 and int(jobs.memory_mib[job]) == 0


def _plan_key(cands: Candidates, members: list[int]) -> tuple[float, int, float, tuple[int, ...]]:
    """The objective, lexicographic: (highest rank, count, work lost, sorted job rows)."""
    if not members:  # the job fits without evicting anything
        return (-math.inf, 0, 0.0, ())
    sel = np.asarray(members, dtype=np.int64)
    return (float(cands.rank[sel].max()), len(members), float(cands.lost[sel].sum()),
            tuple(sorted(int(j) for j in cands.jobs[sel])))


def _simulate(ctx: CycleContext, fw: Framework, job: int, victims: list[int]) -> tuple[list[int], Placement] | None:
    trial = Statement(ctx.state)
    try:
        for v in victims:
            trial.evict(v)
        result = fw.place(ctx, job)
    finally:
        trial.discard()
    if isinstance(result, Status):
        return None
    return sorted(victims), result


def _simulate_one(ctx: CycleContext, fw: Framework, job: int, victims: list[int]) -> tuple[list[int], Placement] | None:
    """:func:`_simulate` for a one-worker job that :meth:`~kant.framework.runner.Framework.places_by_room`:
    that placement reads only the node-class index (the best class's lowest node; the room test
    holds exactly when there is one), so the victims' nodes are moved to their classes with the
    victims gone, and back, instead of a trial eviction of each victim on the whole state. Victims
    of a GPU share or on a node in no class take :func:`_simulate`."""
    classes = ctx.state.classes
    assert classes is not None  # (places_by_room)
    allocations, node_class = ctx.state.allocations, classes.node_class
    freed: dict[int, int] = {}  # node -> GPUs the victims free there
    for v in victims:
        placement = allocations[v]
        if is_share(placement.gpus, placement.gpu_milli):
            return _simulate(ctx, fw, job, victims)
        for node, count in placement.per_node.items():
            if node_class[node] < 0:
                return _simulate(ctx, fw, job, victims)
            freed[node] = freed.get(node, 0) + placement.gpus * count
    back: list[tuple[int, int]] = []
    try:
        for node, gpus in freed.items():
            cls = node_class[node]
            back.append((node, cls))
            classes.move(node, cls + gpus)
        result = fw.place_workers(ctx, job)
    finally:
        for node, cls in reversed(back):
            classes.move(node, cls)
    if isinstance(result, Status):
        return None
    return sorted(victims), result


class _SlotBound:
    """The job's worker slots per node in plain Python (:func:`worker_slots` for one node), to tell,
    without touching the state, how many slots are left once a victim is given back: a job with
    fewer slots than workers cannot be placed, so the reprieve of such a victim fails without a
    trial. Only for a job of whole GPUs or no GPU (not a share) and victims of whole GPUs."""

    __slots__ = ("cpu", "cpu_off", "ctx", "d_cpu", "d_free", "d_mem", "g", "gpus_only", "mem", "mem_off", "ok",
                 "w")

    def __init__(self, ctx: CycleContext, g: int, cpu: int, mem: int, w: int, ok: list[bool]) -> None:
        """``ok``: the nodes that could hold a worker (:func:`static_ok`, so only nodes that are up)."""
        self.ctx, self.g, self.cpu, self.mem, self.w, self.ok = ctx, g, cpu, mem, w, ok
        self.cpu_off: list[bool] = ctx.env.cpu_unmodelled.tolist() if cpu > 0 else []
        self.mem_off: list[bool] = ctx.env.mem_unmodelled.tolist() if mem > 0 else []
        #: GPUs and nothing else asked: a node's slots are its free GPUs // g (what _at gives then)
        self.gpus_only = g > 0 and cpu <= 0 and mem <= 0
        # per node, what a plan on a delta (_greedy_on_delta) has freed (+) or taken (-) so far (CPU
        # and memory not booked for a job that asks GPUs only: never read)
        self.d_free: dict[int, int] = {}
        self.d_cpu: dict[int, int] = {}
        self.d_mem: dict[int, int] = {}

    @classmethod
    def of(cls, ctx: CycleContext, job: int, ok: BoolArray) -> _SlotBound | None:
        jobs = ctx.env.jobs
        g, milli = int(jobs.gpus_per_worker[job]), int(jobs.gpu_milli[job])
        if is_share(g, milli):
            return None
        # (a node that is down has no slot before or after: it keeps its free GPUs)
        return cls(ctx, g, int(jobs.cpu_milli[job]), int(jobs.memory_mib[job]), int(jobs.workers[job]),
                   (ok & ctx.state.up).tolist())

    def _at(self, node: int, free: int, free_cpu: int, free_mem: int) -> int:
        if not self.ok[node]:
            return 0
        s = free // self.g if self.g > 0 else self.w
        if self.cpu > 0 and not self.cpu_off[node]:
            s = min(s, free_cpu // self.cpu)
        if self.mem > 0 and not self.mem_off[node]:
            s = min(s, free_mem // self.mem)
        return max(s, 0)

    def after(self, total: int, placement: Placement, sign: int) -> int | None:
        """``total`` slots now; how many once ``placement`` is released (``sign`` +1) or allocated
        (-1); None: not known here (a GPU share, whose whole GPUs free or taken depend on the
        shares beside it)."""
        if is_share(placement.gpus, placement.gpu_milli):
            return None
        ok, free, d_free = self.ok, self.ctx.state.free, self.d_free
        if self.gpus_only:  # _at without CPU and memory: free // g on the nodes that could hold a worker
            g, step = self.g, placement.gpus * sign
            for node, count in placement.per_node.items():
                if ok[node]:
                    f = free.item(node) + d_free.get(node, 0)
                    total += (f + step * count) // g - f // g
            return total
        state = self.ctx.state
        free_cpu, free_mem = state.free_cpu, state.free_mem
        d_cpu, d_mem = self.d_cpu, self.d_mem
        for node, count in placement.per_node.items():
            if not ok[node]:
                continue  # no slot there before or after
            f, c, m = free.item(node), free_cpu.item(node), free_mem.item(node)
            if d_free:  # a plan on a delta: the state as the plan has it
                f += d_free.get(node, 0)
                c += d_cpu.get(node, 0)
                m += d_mem.get(node, 0)
            k = sign * count
            total += (self._at(node, f + placement.gpus * k, c + placement.cpu_milli * k,
                               m + placement.memory_mib * k) - self._at(node, f, c, m))
        return total

    def clear(self) -> None:
        """Forget the plan's delta (the bound reads the state as it is)."""
        self.d_free.clear()
        self.d_cpu.clear()
        self.d_mem.clear()

    def shift(self, placement: Placement, sign: int) -> None:
        """Book ``placement`` released (``sign`` +1) or allocated (-1) in the plan's delta."""
        d_free = self.d_free
        g = placement.gpus * sign
        if self.gpus_only:
            for node, count in placement.per_node.items():
                d_free[node] = d_free.get(node, 0) + g * count
            return
        d_cpu, d_mem = self.d_cpu, self.d_mem
        c, m = placement.cpu_milli * sign, placement.memory_mib * sign
        for node, count in placement.per_node.items():
            d_free[node] = d_free.get(node, 0) + g * count
            d_cpu[node] = d_cpu.get(node, 0) + c * count
            d_mem[node] = d_mem.get(node, 0) + m * count


def _greedy_plan(ctx: CycleContext, fw: Framework, job: int, cands: Candidates, order: IntArray,
                 ok: BoolArray) -> tuple[list[int], Placement | None] | None:
    """Evict candidates (indices into ``cands``) in ``order`` until the job fits, then reprieve every
    victim, most important first (rank, work lost, row descending), that is not needed. Returns the
    victims (indices, ascending) and the placement (None for a plan on a delta: the job places with
    these victims gone, :func:`_simulate` gives the placement); changes nothing."""
    state, jobs = ctx.state, ctx.env.jobs
    w = int(jobs.workers[job])
    bound = _SlotBound.of(ctx, job, ok)
    # the job's worker slots over all nodes in the trial state
    total = int(_slots(ctx, job, state.free, state.free_cpu, state.free_mem, ok).sum())
    if bound is not None and fw.places_by_room(ctx, job):
        members = _greedy_on_delta(ctx, cands, order, bound, total)
        if members is not _ON_STATE:
            if members is None:
                return None
            assert isinstance(members, list)
            return members, None
    trial = Statement(state)
    evicted: list[int] = []
    placed = False
    allocations = state.allocations
    try:
        for i in order.tolist():
            v = int(cands.jobs[i])
            after = None if bound is None else bound.after(total, allocations[v], +1)
            evicted.append(i)
            trial.evict(v)
            total = int(_slots(ctx, job, state.free, state.free_cpu, state.free_mem, ok).sum()) \
                if after is None else after
            if total < w:
                continue
            if not isinstance(fw.place(ctx, job), Status):
                placed = True
                break
        if not placed:
            return None
        victims = set(evicted)
        placements = {op.job: op.placement for op in trial.operations}
        for i in sorted(evicted, key=lambda k: (-cands.rank[k], -cands.lost[k], -int(cands.jobs[k]))):
            v = int(cands.jobs[i])
            back = placements[v]
            after = None if bound is None else bound.after(total, back, -1)
            if after is not None and after < w:
                continue  # with v back the job has fewer slots than workers: placing it fails
            trial.allocate(v, back)
            if isinstance(fw.place(ctx, job), Status):
                trial.evict(v)
            else:
                victims.discard(i)
                if after is not None:
                    total = after
                elif bound is not None:  # a victim holding a GPU share: count again
                    total = int(_slots(ctx, job, state.free, state.free_cpu, state.free_mem, ok).sum())
        final = fw.place(ctx, job)
        if isinstance(final, Status):  # pragma: no cover - the state equals the last successful trial
            return None
        return sorted(victims), final
    finally:
        trial.discard()


#: what :func:`_greedy_on_delta` returns when it cannot plan on a delta (a victim holds a GPU share)
_ON_STATE = object()


def _greedy_on_delta(ctx: CycleContext, cands: Candidates, order: IntArray, bound: _SlotBound,
                     total: int) -> list[int] | object | None:
    """:func:`_greedy_plan` without trial evictions, allocations and placements, for a job that
    :meth:`~kant.framework.runner.Framework.places_by_room` (its placement succeeds exactly when its
    worker slots, ``total`` now, reach its workers): the evictions and reprieves are booked on the
    bound's delta and each trial placement is the slot test. Returns the victims (indices into
    ``cands``, ascending), None (no plan) or ``_ON_STATE`` (a victim holds a GPU share: plan on the
    state instead)."""
    w = bound.w
    allocations = ctx.state.allocations
    rows = cands.jobs.tolist()
    bound.clear()
    try:
        evicted: list[int] = []
        for i in order.tolist():
            placement = allocations[rows[i]]
            after = bound.after(total, placement, +1)
            if after is None:
                return _ON_STATE
            bound.shift(placement, +1)
            evicted.append(i)
            total = after
            if total >= w:
                break
        else:
            return None
        victims = set(evicted)
        rank, lost = cands.rank, cands.lost
        for i in sorted(evicted, key=lambda k: (-rank[k], -lost[k], -rows[k])):
            placement = allocations[rows[i]]
            after = bound.after(total, placement, -1)
            if after is None:
                return _ON_STATE
            if after < w:
                continue  # with it back the job has fewer slots than workers: placing it fails
            bound.shift(placement, -1)
            victims.discard(i)
            total = after
        return sorted(victims)
    finally:
        bound.clear()


def victims_in_order(ctx: CycleContext, fw: Framework, job: int, order: Sequence[int],
                     admits: Callable[[list[int]], bool]) -> tuple[list[int], Placement] | None:
    """Kueue's victim search for a fixed candidate order (running jobs ``order``, first evicted
    first): evict them in order until ``job`` fits (placement by the policy) and ``admits(victims)``
    holds (its quota, with the victims gone); then give back, last evicted first, every victim the job
    does not need. Returns (victims in eviction order, placement), or None if evicting all of ``order``
    is not enough. Changes nothing (the plan is simulated and undone)."""
    state, jobs = ctx.state, ctx.env.jobs
    w = int(jobs.workers[job])
    ok = static_ok(ctx, fw, job)
    trial = Statement(state)
    evicted: list[int] = []
    try:
        placed = False
        for v in order:
            evicted.append(v)
            trial.evict(v)
            if not admits(evicted):
                continue
            if int(_slots(ctx, job, state.free, state.free_cpu, state.free_mem, ok).sum()) < w:
                continue
            if not isinstance(fw.place(ctx, job), Status):
                placed = True
                break
        if not placed:
            return None
        victims = list(evicted)
        for v in reversed(evicted[:-1]):  # (the last one was needed: without it the job did not fit)
            trial.allocate(v, _evicted_placement(trial, v))
            rest = [x for x in victims if x != v]
            if admits(rest) and not isinstance(fw.place(ctx, job), Status):
                victims = rest
            else:
                trial.evict(v)
        final = fw.place(ctx, job)
        if isinstance(final, Status):  # pragma: no cover - the state equals the last successful trial
            return None
        return victims, final
    finally:
        trial.discard()


def _evicted_placement(trial: Statement, job: int) -> Placement:
    for op in reversed(trial.operations):
        if op.job == job:
            return op.placement
    raise KeyError(job)  # pragma: no cover
