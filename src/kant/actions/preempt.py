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

Victims are chosen by :func:`choose_victims`, which minimises, in this order:

1. the highest rank among the victims (protect more important work, as Kubernetes does),
2. the number of victims,
3. the work they lose: GPU-seconds since their last checkpoint, estimated as
   ``total GPUs x (run time of the current run mod checkpoint_interval_s)`` (the whole current run
   when ``checkpoint_interval_s`` is null: nothing survives),

then lower job rows. For a one-worker preemptor this is exact (the best node is found with NumPy
from per-node cumulative capacities; ties on 1 and 2 are broken by enumerating the few subsets of
that size on the tied nodes). For a gang of several workers it is greedy: evict candidates in order
until the gang fits, then give back ("reprieve") every victim, most important first, whose eviction
turns out unnecessary, so no victim is redundant; this is done for two orders, (rank, work lost,
GPUs freed on useful nodes descending, row) and (rank, GPUs freed descending, work lost, row), and
the better plan by 1-3 wins. The gang's victim count is therefore not guaranteed minimal.

The plan is simulated on a private :class:`~kant.framework.statement.Statement` (victims evicted,
preemptor placed by the policy's own placement); if the preemptor still does not fit it is
discarded. Otherwise the victims are evicted with :func:`kant.actions.common.evict_job` (back in the
queue; the simulator charges the checkpoint/restart model: they keep the work up to their last
checkpoint and pay ``restart_cost_s`` when they start again) and the preemptor starts.

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

import itertools
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from kant.actions.allocate import Allocate
from kant.actions.common import evict_job, start_job
from kant.framework.action import Action
from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import Plugin, Rank
from kant.framework.registry import register_action
from kant.framework.runner import Framework
from kant.framework.statement import Statement
from kant.framework.status import Status
from kant.model.fit import is_share, worker_slots
from kant.model.state import Placement

__all__ = [
    "NAME",
    "Candidates",
    "EvictingAction",
    "Preempt",
    "PreemptArgs",
    "RankFn",
    "choose_victims",
    "execute_plan",
    "in_queue_order",
    "placement_entries",
    "running_jobs",
    "select",
    "Skip",
    "Walk",
    "work_lost",
]

NAME = "preempt"

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
RankFn = Callable[[SchedulerEnv, IntArray, float], FloatArray]

#: at most this many candidates on one node are enumerated exactly; above it the greedy plan is used
_MAX_ENUM = 16


class PreemptArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    rank_by: str = "priority"
    round_s: float | None = Field(default=None, gt=0.0)
    checkpoint_interval_s: float | None = Field(default=None, gt=0.0)
    min_run_s: float = Field(default=0.0, ge=0.0)
    max_preemptors_per_cycle: int | None = Field(default=None, ge=1)
    allocate_after: bool = True


@dataclass(frozen=True)
class Candidates:
    """Running jobs that may be evicted, with their rank (lower = evicted first) and work lost."""

    jobs: IntArray
    rank: FloatArray
    lost: FloatArray
    #: optional precomputed (candidate index, node, workers there) per candidate and node it uses;
    #: see :func:`placement_entries` and :func:`select`
    entries: tuple[IntArray, IntArray, IntArray] | None = None

    def __len__(self) -> int:
        return len(self.jobs)


def running_jobs(ctx: CycleContext) -> IntArray:
    """Jobs running since before this cycle (jobs started in this cycle are never victims)."""
    return np.fromiter(ctx.running, dtype=np.int64, count=len(ctx.running))


def placement_entries(ctx: CycleContext, jobs: IntArray) -> tuple[IntArray, IntArray, IntArray]:
    """(index into ``jobs``, node, workers on that node) for every node each running job uses."""
    e_idx: list[int] = []
    e_node: list[int] = []
    e_cnt: list[int] = []
    allocations = ctx.state.allocations
    for i, v in enumerate(jobs.tolist()):
        for where, count in allocations[v].per_node.items():
            e_idx.append(i)
            e_node.append(where)
            e_cnt.append(count)
    return (np.asarray(e_idx, dtype=np.int64), np.asarray(e_node, dtype=np.int64),
            np.asarray(e_cnt, dtype=np.int64))


def select(jobs: IntArray, rank: FloatArray, lost: FloatArray, entries: tuple[IntArray, IntArray, IntArray],
           sel: BoolArray) -> Candidates:
    """Candidates ``jobs[sel]`` with their entries taken from ``entries`` (computed for ``jobs``)."""
    e_idx, e_node, e_cnt = entries
    keep = sel[e_idx]
    new_index = np.cumsum(sel) - 1
    return Candidates(jobs[sel], rank[sel], lost[sel], (new_index[e_idx[keep]], e_node[keep], e_cnt[keep]))


def work_lost(ctx: CycleContext, jobs: IntArray, checkpoint_interval_s: float | None) -> FloatArray:
    """GPU-seconds each running job would lose if evicted now: total GPUs x time since its last
    checkpoint (estimated from the current run's length; the whole run without checkpoints)."""
    if len(jobs) == 0:
        return np.zeros(0, dtype=np.float64)
    running = ctx.running
    start = np.fromiter((running[int(j)].start for j in jobs), dtype=np.float64, count=len(jobs))
    run_s = np.maximum(ctx.now - start, 0.0)
    if checkpoint_interval_s is not None:
        run_s = np.mod(run_s, checkpoint_interval_s)
    return run_s * ctx.env.jobs.total_gpus[jobs]


# --- victim selection ----------------------------------------------------------------------------
def _static_ok(ctx: CycleContext, fw: Framework, job: int) -> BoolArray:
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
    ok = _static_ok(ctx, fw, job)
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
    simple = (w == 1 and int(jobs.gpus_per_worker[job]) > 0 and int(jobs.cpu_milli[job]) == 0
              and int(jobs.memory_mib[job]) == 0)
    if simple:
        plan = _single_worker_plan(ctx, job, cands, idx[useful_entry], node[useful_entry], gpus[useful_entry])
    if plan is not None:
        result = _simulate(ctx, fw, job, [int(cands.jobs[i]) for i in plan])
        if result is not None:
            return result
    useful_gpus = np.bincount(idx[useful_entry], weights=gpus[useful_entry], minlength=len(cands))
    useful = np.flatnonzero(useful_gpus > 0)
    rows, ug, lost, rank = cands.jobs[useful], -useful_gpus[useful], cands.lost[useful], cands.rank[useful]
    best: tuple[tuple[float, int, float, tuple[int, ...]], list[int], Placement] | None = None
    # two greedy orders within each rank: least work lost first, and most GPUs freed first (fewer victims)
    for order in (useful[np.lexsort((rows, ug, lost, rank))], useful[np.lexsort((rows, lost, ug, rank))]):
        result = _greedy_plan(ctx, fw, job, cands, order, ok)
        if result is None:
            continue
        members, placement = result
        key = _plan_key(cands, members)
        if best is None or key < best[0]:
            best = (key, members, placement)
    if best is None:
        return None
    return [int(cands.jobs[i]) for i in best[1]], best[2]


def _plan_key(cands: Candidates, members: list[int]) -> tuple[float, int, float, tuple[int, ...]]:
    """The objective, lexicographic: (highest rank, count, work lost, sorted job rows)."""
    if not members:  # the job fits without evicting anything
        return (-math.inf, 0, 0.0, ())
    sel = np.asarray(members, dtype=np.int64)
    return (float(cands.rank[sel].max()), len(members), float(cands.lost[sel].sum()),
            tuple(sorted(int(j) for j in cands.jobs[sel])))


def _single_worker_plan(ctx: CycleContext, job: int, cands: Candidates, idx: IntArray, node: IntArray,
                        gpus: IntArray) -> list[int] | None:
    """Exact lexicographic (max rank, count, work lost, rows) victim set for a one-worker job, GPUs
    only; returns indices into ``cands``."""
    state = ctx.state
    g = int(ctx.env.jobs.gpus_per_worker[job])
    need_all = g - state.free
    has_need = need_all[node] > 0
    idx, node, gpus = idx[has_need], node[has_need], gpus[has_need]
    if len(idx) == 0:
        return None
    rank = cands.rank[idx]
    # 1. per node, the lowest achievable highest rank P*: take entries by rank until enough is freed
    order = np.lexsort((rank, node))
    n_s, r_s = node[order], rank[order]
    start1 = _group_start(n_s)
    cum = _cumsum_from(gpus[order], start1)
    enough = cum >= need_all[n_s]
    at = _first_per_group(n_s, enough)
    if len(at) == 0:
        return None
    p_of_node = np.full(len(state.free), np.inf)
    p_of_node[n_s[at]] = r_s[at]
    # 2. with ranks <= P*, the fewest entries: largest first
    elig = rank <= p_of_node[node]
    n2, g2 = node[elig], gpus[elig]
    order2 = np.lexsort((-g2, n2))
    n2s = n2[order2]
    start2 = _group_start(n2s)
    cum2 = _cumsum_from(g2[order2], start2)
    at2 = _first_per_group(n2s, cum2 >= need_all[n2s])
    nodes2 = n2s[at2]
    count = at2 - start2[at2] + 1
    best = np.lexsort((count, p_of_node[nodes2]))[0]
    best_p, best_c = p_of_node[nodes2[best]], int(count[best])
    tied = np.zeros(len(state.free), dtype=bool)
    tied[nodes2[(p_of_node[nodes2] == best_p) & (count == best_c)]] = True
    # 3. least work lost among sets of that size and rank on the tied nodes
    e_sel = elig & tied[node]
    sel = np.flatnonzero(e_sel)
    lost_e = cands.lost[idx[sel]]
    rows_e = cands.jobs[idx[sel]]
    if best_c == 1:  # any single entry that frees enough; least lost, then lowest row
        one = sel[gpus[sel] >= need_all[node[sel]]]
        pick = np.lexsort((cands.jobs[idx[one]], cands.lost[idx[one]]))[0]
        return [int(idx[one[pick]])]
    # several victims: enumerate the subsets of each tied node, cheapest lower bound first (the sum
    # of its best_c smallest losses), and stop once no node can beat the best set found
    order3 = np.lexsort((lost_e, node[sel]))
    n3, s3, l3, r3 = node[sel][order3], sel[order3], lost_e[order3], rows_e[order3]
    starts3 = np.flatnonzero(np.concatenate(([True], n3[1:] != n3[:-1])))
    stops3 = np.concatenate((starts3[1:], [len(n3)]))
    bounds = np.array([l3[a:a + best_c].sum() for a in starts3.tolist()])
    best_key: tuple[float, tuple[int, ...]] | None = None
    best_set: list[int] | None = None
    for gi in np.argsort(bounds, kind="stable").tolist():
        if best_key is not None and bounds[gi] > best_key[0]:
            break
        a, b = int(starts3[gi]), int(stops3[gi])
        if b - a > _MAX_ENUM:
            return None
        combos = _combos(b - a, best_c)
        freed = gpus[s3[a:b]][combos].sum(axis=1)
        ok3 = freed >= need_all[int(n3[a])]
        if not ok3.any():
            continue
        lost_c = l3[a:b][combos].sum(axis=1)
        for c in np.flatnonzero(ok3 & (lost_c == lost_c[ok3].min())).tolist():
            members = combos[c]
            key = (float(lost_c[c]), tuple(sorted(int(x) for x in r3[a:b][members])))
            if best_key is None or key < best_key:
                best_key, best_set = key, [int(idx[s3[a + m]]) for m in members.tolist()]
    return best_set


_COMBOS: dict[tuple[int, int], IntArray] = {}


def _combos(n: int, k: int) -> IntArray:
    """All k-subsets of range(n) as rows of an array (cached)."""
    arr = _COMBOS.get((n, k))
    if arr is None:
        arr = _COMBOS[(n, k)] = np.array(list(itertools.combinations(range(n), k)), dtype=np.int64).reshape(-1, k)
    return arr


def _group_start(groups: IntArray) -> IntArray:
    """Index of the first element of each element's run of equal values (``groups`` sorted)."""
    if len(groups) == 0:
        return np.zeros(0, dtype=np.int64)
    new = np.ones(len(groups), dtype=bool)
    new[1:] = groups[1:] != groups[:-1]
    starts: IntArray = np.flatnonzero(new)
    out: IntArray = starts[np.cumsum(new) - 1]
    return out


def _cumsum_from(values: IntArray, start: IntArray) -> IntArray:
    """Cumulative sum of ``values`` restarting at each group (``start`` from :func:`_group_start`)."""
    cum = np.cumsum(values)
    out: IntArray = cum - (cum[start] - values[start])
    return out


def _first_per_group(groups: IntArray, mask: npt.NDArray[np.bool_]) -> IntArray:
    """Positions of the first True of ``mask`` in each run of equal values of the sorted ``groups``."""
    pos = np.flatnonzero(mask)
    if len(pos) == 0:
        return pos
    g = groups[pos]
    first = np.ones(len(pos), dtype=bool)
    first[1:] = g[1:] != g[:-1]
    out: IntArray = pos[first]
    return out


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


def _greedy_plan(ctx: CycleContext, fw: Framework, job: int, cands: Candidates, order: IntArray,
                 ok: BoolArray) -> tuple[list[int], Placement] | None:
    """Evict candidates (indices into ``cands``) in ``order`` until the job fits, then reprieve every
    victim, most important first (rank, work lost, row descending), that is not needed. Returns the
    victims (indices, ascending) and the placement; changes nothing."""
    state, jobs = ctx.state, ctx.env.jobs
    w = int(jobs.workers[job])
    trial = Statement(state)
    evicted: list[int] = []
    placed = False
    try:
        for i in order.tolist():
            evicted.append(i)
            trial.evict(int(cands.jobs[i]))
            if int(_slots(ctx, job, state.free, state.free_cpu, state.free_mem, ok).sum()) < w:
                continue
            if not isinstance(fw.place(ctx, job), Status):
                placed = True
                break
        if not placed:
            return None
        victims = set(evicted)
        for i in sorted(evicted, key=lambda k: (-cands.rank[k], -cands.lost[k], -int(cands.jobs[k]))):
            v = int(cands.jobs[i])
            trial.allocate(v, _evicted_placement(trial, v))
            if isinstance(fw.place(ctx, job), Status):
                trial.evict(v)
            else:
                victims.discard(i)
        final = fw.place(ctx, job)
        if isinstance(final, Status):  # pragma: no cover - the state equals the last successful trial
            return None
        return sorted(victims), final
    finally:
        trial.discard()


def _evicted_placement(trial: Statement, job: int) -> Placement:
    for op in reversed(trial.operations):
        if op.job == job:
            return op.placement
    raise KeyError(job)  # pragma: no cover


def execute_plan(ctx: CycleContext, fw: Framework, job: int, victims: list[int], placement: Placement) -> None:
    """Evict ``victims`` (back to the queue) and start ``job`` on ``placement``."""
    for v in victims:
        evict_job(ctx, fw, v)
    start_job(ctx, fw, job, placement)


def in_queue_order(ctx: CycleContext, fw: Framework, jobs: IntArray) -> list[int]:
    """Pending ``jobs`` in the policy's queue order at this cycle's time."""
    key = fw.dynamic_key(ctx.now)
    if key is not None:
        return list(key.order(jobs).tolist())
    return sorted(jobs.tolist(), key=fw.static_key)


# --- the skeleton of an evicting action ----------------------------------------------------------
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

    def __post_init__(self) -> None:
        self.alive = np.ones(len(self.running), dtype=bool)

    def candidates(self, ctx: CycleContext, sel: BoolArray) -> Candidates:
        """The pool jobs selected by ``sel``, with rank, work lost and placements."""
        if self.entries is None:
            self.entries = placement_entries(ctx, self.running)
        if self.lost is None:
            self.lost = work_lost(ctx, self.running, self.checkpoint_interval_s)
        return select(self.running, self.rank, self.lost, self.entries, sel)


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

    def begin(self, ctx: CycleContext, fw: Framework) -> W | None:
        raise NotImplementedError

    def victim_pool(self, ctx: CycleContext, fw: Framework, walk: W, job: int) -> BoolArray | Skip:
        """Which of ``walk.running`` may be evicted for ``job`` (a mask), or why not to try."""
        raise NotImplementedError

    def planned(self, ctx: CycleContext, walk: W, job: int, victims: list[int], cands: Candidates) -> None:
        """``job`` will start by evicting ``victims`` (chosen from ``cands``): count it."""

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
            cands = walk.candidates(ctx, sel)
            plan = choose_victims(ctx, fw, job, cands)
            if plan is None:
                failed.add(key)
                continue
            victims, placement = plan
            self.planned(ctx, walk, job, victims, cands)
            execute_plan(ctx, fw, job, victims, placement)
            walk.alive &= ~np.isin(walk.running, victims)
            started += 1
            if (limit is not None and started >= limit) or self.exhausted(walk):
                break
        return started


# --- the action ----------------------------------------------------------------------------------
def resolve_rank(fw: Framework, rank_by: str) -> RankFn:
    """``priority`` -> JobTable.priority; otherwise the ``rank`` of the policy's :class:`Rank` plugin
    of that name."""
    if rank_by == "priority":
        return lambda env, jobs, now: env.jobs.priority[jobs].astype(np.float64)
    plugin = fw.plugin(Rank, rank_by)
    if plugin is None:
        raise ValueError(_rank_by_error(rank_by, [type(p) for p in fw.plugins]))
    return plugin.rank


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
        self._round = -math.inf
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
        self._rank = resolve_rank(fw, args.rank_by)

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
            if boundary <= self._round:
                return None
            self._round = boundary
        if not ctx.running or not len(ctx.queue):
            return None
        env = ctx.env
        running = running_jobs(ctx)
        run_rank = rank_fn(env, running, now)
        pending = np.fromiter(ctx.queue, dtype=np.int64, count=len(ctx.queue))
        pend_rank = rank_fn(env, pending, now)
        low = float(run_rank.min())
        if float(pend_rank.max()) <= low:
            return None
        eligible = pend_rank > low
        rank_of = dict(zip(pending[eligible].tolist(), pend_rank[eligible].tolist(), strict=True))
        order = in_queue_order(ctx, fw, pending[eligible])
        shapes = ctx.queue.shapes[np.asarray(order, dtype=np.int64)].tolist()
        keys = [(s, rank_of[j]) for s, j in zip(shapes, order, strict=True)]
        walk = _PreemptWalk(order, keys, running, run_rank, set(), args.checkpoint_interval_s)
        walk.rank_of = rank_of
        if args.min_run_s > 0:
            starts = np.fromiter((ctx.running[int(j)].start for j in running), dtype=np.float64, count=len(running))
            walk.alive &= now - starts >= args.min_run_s
        return walk

    def victim_pool(self, ctx: CycleContext, fw: Framework, walk: _PreemptWalk, job: int) -> BoolArray | Skip:
        sel = walk.alive & (walk.rank < walk.rank_of[job])
        if not sel.any() or not fw.admit(ctx, job).ok:
            return Skip.FAILED
        return sel

    def planned(self, ctx: CycleContext, walk: _PreemptWalk, job: int, victims: list[int], cands: Candidates) -> None:
        self.preemptions += len(victims)
        self.preemptors += 1
