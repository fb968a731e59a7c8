"""Backfill: start queued jobs out of order when that does not delay reserved jobs (Slurm's backfill).

Run it after a blocking allocate, which starts jobs in queue order until the first one that does not
fit::

    actions:
      - {name: allocate, args: {blocking: true}}
      - {name: backfill, args: {mode: easy}}

The action walks the queue again in the same order. The first job that passes admission and cannot
start now is the *head*. Jobs that fail admission (a quota) are passed over and get no reservation.

**Release profile.** Every running job gives back its per-node GPUs (and CPU and memory, on nodes
that model them) at its estimated end ``ctx.running[job].expected_end``; a job started earlier in
the same cycle at ``now + env.estimate(job)``. A job already past its estimated end is assumed to
end *right after now* (``now + epsilon``): its capacity counts for reservations but never as free
now. kant never kills a job that overruns its estimate (Slurm kills it at its time limit): the
reservation slides and the reserved job may start later than promised; :func:`backfill_stats`
counts such delays.

**EASY** (``mode: easy``: Lifka's EASY, Slurm with one reservation). The head gets a reservation at
its *shadow time* ``S``: the earliest release time at which the capacity free by then holds all its
workers (``sum over nodes of its GPU type of free_S // gpus_per_worker >= workers``) *and* the
policy's own placement (``fw.place``: filters, scores and any ``Place`` plugin) succeeds on the
cluster as it will be at ``S``. Free capacity only grows with time up to ``S`` (releases add to it),
so a placement that succeeds at one release time succeeds at every later one for any Place plugin
whose success is monotone in capacity (every bundled one: plain, binpack, topology, E-Binpack soft
and hard); the release times are searched by galloping then bisection, not one by one.
That placement's per-node capacity ``R`` is reserved. A later job
``j`` (queue order) starts now if it fits the free capacity and

* its estimated end ``now + estimate(j) <= S`` (it is gone before the head needs anything); or
* the policy places it within the capacity the reservation does not need,
  ``X = min(free_now, free_S - R)`` per node and resource; ``free_S`` then drops by what ``j`` holds.

The reservation is kept across cycles while recomputing it would give the same one (same head, no
job left before its estimated end, no job that ends after ``S`` started other than those backfilled
against it, no node failure, ``now <= S``) and recomputed otherwise (property-tested).

**Conservative** (``mode: conservative``). Every job looked at that cannot start now gets a
reservation, in queue order, on a per-node availability profile (free capacity between consecutive
release and reservation times). A job starts now only if it fits, for its whole estimated run, in
what the profile leaves: per node the minimum free capacity over ``[now, now + estimate)``. A job's
earliest start is the first profile time ``t`` at which the per-node minimum over
``[t, t + estimate)`` holds its workers. Starts and the head's reservation use the policy's
placement on that capacity; other reservations take worker slots best-fit (nodes with the fewest
slots first). Reservations of jobs after the last job that could start now are never needed and are
not computed, and the plan is kept for the next pass while re-planning would give the same one
(see :class:`_ConsPlan`; property-tested).

With exact estimates (Philly's default: there is no estimate column, so the true duration) neither
mode starts the head later than the shadow time computed when it was first reserved (this is
property-tested in ``tests/test_backfill.py``).

Arguments:
    mode: ``easy`` (one reservation, for the head) or ``conservative`` (one per job looked at).
    max_jobs: queued jobs looked at per cycle, head included (Slurm's ``bf_max_job_test``; default
        :data:`MAX_JOBS_DEFAULT`: 300 for EASY, 100 for conservative); a job
        skipped because it is too long for the capacity the reservation leaves counts too.
    window_s: planning horizon: a job whose earliest start is later than ``now + window_s`` gets no
        reservation and does not hold back later jobs (Slurm's ``bf_window``). Default: unlimited.
    max_place_tries: placements tried for one reservation. EASY searches the release times for the
        earliest at which the placement succeeds (:func:`earliest`: galloping then bisection, about
        ``2 log2`` of the release times; exact within 32 tries for up to 65,536 distinct ones).
        Conservative tries candidate times in order, the last try at the end of the profile (every
        running job ended). A reservation the tries could not prove earliest is counted in
        ``approximated`` (:func:`backfill_stats`; the simulator's result notes it).

No wake-ups are needed: every reservation time is an estimated end of a running or planned job,
where a cycle runs when estimates are exact; a job that ends early or overruns triggers a cycle when
it really ends, and the plan is then recomputed.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Literal, TypeVar

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from kant.actions.common import start_job
from kant.framework.context import CycleContext, RunningJob, SchedulerEnv
from kant.framework.memo import FailedRequests
from kant.framework.plugin import Action
from kant.framework.queue import PendingQueue
from kant.framework.registry import register_action
from kant.framework.runner import Framework
from kant.framework.status import Status
from kant.model.state import ClusterState, Placement
from kant.model.store import grow

__all__ = ["Backfill", "BackfillArgs", "BackfillStats", "backfill_action", "backfill_stats"]

NAME = "backfill"

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

# what one look at a job decided
_SKIP = 0  # not now, look at the next job of the shape
_STARTED = 1
_BLOCK = 2  # no job of this shape can start this cycle
_LONG = 3  # no job of this request that ends after the shadow time can start this cycle

_first_item = itemgetter(0)
_T = TypeVar("_T")

_NO_ROOM = Status.unschedulable("no room for its workers in the free capacity", NAME)


#: queued jobs looked at per cycle when ``max_jobs`` is not set, per mode. EASY: 300, chosen from the
#: full Philly trace (docs/policy-backfill.md, "Backfill depth"): against 100 it cuts the median wait
#: of both bundled EASY policies by about a quarter, leaves the big gangs' waits near where they were,
#: and costs a few per cent more CPU. Conservative: 100 (each job looked at may get a reservation).
MAX_JOBS_DEFAULT = {"easy": 300, "conservative": 100}


class BackfillArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    mode: Literal["easy", "conservative"] = "easy"
    max_jobs: int | None = Field(default=None, ge=1)  # None: MAX_JOBS_DEFAULT[mode]
    window_s: float = Field(default=math.inf, gt=0)
    max_place_tries: int = Field(default=32, ge=1)


def earliest(n: int, probe: Callable[[int], _T | None], budget: int) -> tuple[int, _T | None, bool]:
    """The smallest ``i`` in ``[0, n)`` at which ``probe(i)`` gives a value (not None), with at most
    ``budget`` (>= 1) probes, for a probe that is *monotone*: once it gives a value it gives one at
    every later index. Galloping (``0, 2, 6, 14, ...`` past the last miss) brackets the first hit,
    then bisection narrows the bracket: about ``2 log2 n`` probes. The last probe left, while nothing
    has been hit, goes to ``n - 1``.

    Returns ``(i, value, exact)``: ``exact`` is whether ``i`` is proven the smallest (by monotonicity);
    when the budget ran out first, ``i`` is the smallest index hit so far (later than the true one) or
    ``n`` with None when none was hit. With nothing hit at ``n - 1``, no index hits (``exact``)."""
    bad, good = -1, n  # largest index known to miss, smallest known to hit
    value: _T | None = None
    step, calls = 1, 0
    while bad + 1 < good and calls < budget:
        if good == n:  # nothing hit yet: gallop, the last probe goes to the end
            i = n - 1 if calls == budget - 1 else min(bad + step, n - 1)
            step *= 2
        else:
            i = (bad + good) // 2
        got = probe(i)
        calls += 1
        if got is None:
            bad = i
        else:
            good, value = i, got
    return good, value, bad + 1 == good


# --- the release profile of running jobs ----------------------------------------------------------
def _usage_on(placement: Placement, node: int, count: int, modelled: IntArray) -> list[int]:
    req = (placement.gpus, placement.cpu_milli, placement.memory_mib)
    return [int(req[r] * count * modelled[r, node]) for r in range(modelled.shape[0])]


class _Releases:
    """A mirror of ``ctx.running`` (job -> (RunningJob, placement)) kept in O(changes log n): jobs
    enter ``running`` only as some cycle's ``ctx.started`` (the action hands those lists over);
    jobs that left are found through a heap of expected ends (those due by now), falling back to a
    set difference when some left early. The per-node release arrays, sorted by time, are brought up
    to date when a reservation is computed: rows of jobs that left are masked out and rows of jobs
    that entered are merged in (O(rows) in NumPy, not a sort of every running job's rows in Python:
    on a cluster with 10,000 jobs running, most cycles change a few)."""

    def __init__(self, modelled: IntArray) -> None:
        self.modelled = modelled  # resources x nodes: 1 where the resource is modelled
        self.by_job: dict[int, tuple[RunningJob, Placement]] = {}
        self._ends: list[tuple[float, int, int, RunningJob]] = []  # (expected end, seq, job, run)
        # entries of the heap that came due while their job still ran (overrunning its estimate):
        # looked at each sync that misses a job, not pushed back (re-pushing them all cost log n each)
        self._overdue: list[tuple[float, int, int, RunningJob]] = []
        self._seq = 0
        # (times, nodes, amounts, jobs) of the mirror as of the last build; None: build from scratch
        self._sorted: tuple[FloatArray, IntArray, IntArray, IntArray] | None = None
        self._gone: set[int] = set()  # jobs whose rows in _sorted are stale (left, or run again)
        self._new: list[int] = []  # jobs that entered by_job since, in order (re-entries repeat)
        self._modelled_rows: list[list[int]] = modelled.tolist()

    def _put(self, job: int, run: RunningJob, placement: Placement) -> None:
        self.by_job[job] = (run, placement)
        heapq.heappush(self._ends, (run.expected_end, self._seq, job, run))
        self._seq += 1

    def sync(
        self, now: float, running: dict[int, RunningJob], state: ClusterState,
        started: list[tuple[float, list[tuple[int, Placement]]]], estimate: Callable[[int], float] | None,
    ) -> tuple[bool, list[tuple[int, float]]]:
        """Catch up with ``running``; ``started`` holds the hand-over lists with the time of their
        cycle. Returns whether some job left before its expected end (or something changed unseen and
        the mirror was rebuilt) and the (job, expected end) of jobs added.

        A job of a hand-over list whose run has already ended (it is not running, or runs again from
        a later start) never entered the mirror: it left early if its expected end, its cycle's time
        plus ``estimate(job)``, is after now. ``estimate`` is None when estimates may have changed
        since (a runtime estimator learns as jobs finish): then such a job counts as early."""
        by_job = self.by_job
        early = False
        gone_early = False  # a run that never entered the mirror ended early (the mirror is unchanged)
        added: list[tuple[int, float]] = []
        ends, seq, allocations, heappush = self._ends, self._seq, state.allocations, heapq.heappush
        for when, lst in started:
            for job, _ in lst:
                run = running.get(job)
                if run is None or run.start != when:  # this run is over (a later one is in a later list)
                    if not gone_early and (estimate is None or when + estimate(job) > now):
                        gone_early = True
                    continue
                old = by_job.get(job)
                if old is not None:
                    if old[0] is run:
                        continue
                    if old[0].expected_end > now:
                        early = True
                end = run.expected_end
                if old is not None:  # runs again: its old rows go, it re-enters at the end
                    del by_job[job]
                    self._gone.add(job)
                by_job[job] = (run, allocations[job])
                self._new.append(job)
                heappush(ends, (end, seq, job, run))
                seq += 1
                added.append((job, end))
        self._seq = seq
        missing = len(by_job) - len(running)  # jobs that have left running since the last sync
        if missing > 0:
            if self._overdue:  # overrunning jobs first: have some of them ended?
                still = []
                for entry in self._overdue:
                    job, run = entry[2], entry[3]
                    mine = by_job.get(job)
                    if mine is None or mine[0] is not run:
                        continue  # stale entry
                    if missing and running.get(job) is not run:
                        del by_job[job]
                        self._gone.add(job)
                        missing -= 1
                    else:
                        still.append(entry)
                self._overdue = still
            while missing and ends and ends[0][0] <= now:  # those due by now next (never early)
                entry = heapq.heappop(ends)
                job, run = entry[2], entry[3]
                mine = by_job.get(job)
                if mine is None or mine[0] is not run:
                    continue  # stale entry
                if running.get(job) is run:
                    self._overdue.append(entry)  # still running past its estimate
                    continue
                del by_job[job]
                self._gone.add(job)
                missing -= 1
            if missing:  # some left before their expected end
                for job in by_job.keys() - running.keys():
                    self._gone.add(job)
                    if by_job.pop(job)[0].expected_end > now:
                        early = True
        if len(by_job) != len(running):  # pragma: no cover - a driver changed running outside cycles
            early = True
            by_job.clear()
            self._ends = []
            self._overdue = []
            self._sorted = None
            for job, run in running.items():
                self._put(job, run, state.allocations[job])
        if len(self._ends) > 4 * len(by_job) + 64:  # drop stale heap entries now and then
            self._ends = [e for e in self._ends if by_job.get(e[2], (None,))[0] is e[3]]
            heapq.heapify(self._ends)
        return early or gone_early, added

    def _rows_of(self, jobs: list[int]) -> tuple[FloatArray, IntArray, IntArray, IntArray]:
        """The rows of ``jobs`` (one per job and node), in the order given."""
        modelled = self._modelled_rows
        n_res = len(modelled)
        t: list[float] = []
        nodes: list[int] = []
        amounts: list[int] = []
        owner: list[int] = []
        by_job = self.by_job
        for job in jobs:
            run, placement = by_job[job]
            end = run.expected_end
            req = (placement.gpus, placement.cpu_milli, placement.memory_mib)
            for node, count in placement.per_node.items():
                t.append(end)
                nodes.append(node)
                owner.append(job)
                amounts.extend([req[r] * count * m[node] for r, m in enumerate(modelled)])
        return (np.asarray(t, dtype=np.float64), np.asarray(nodes, dtype=np.int64),
                np.asarray(amounts, dtype=np.int64).reshape(-1, n_res), np.asarray(owner, dtype=np.int64))

    def sorted(self) -> tuple[FloatArray, IntArray, IntArray]:
        """(times, nodes, amounts): one entry per (running job, node), by time, ties in the order the
        jobs entered the mirror (as a stable sort of every job's rows in ``by_job`` order gives)."""
        by_job = self.by_job
        if self._sorted is None:
            t, nodes, amt, owner = self._rows_of(list(by_job))
            order = np.argsort(t, kind="stable")
            self._sorted = (t[order], nodes[order], amt[order], owner[order])
        elif self._gone or self._new:
            t, nodes, amt, owner = self._sorted
            if self._gone:
                keep = ~np.isin(owner, np.fromiter(self._gone, dtype=np.int64, count=len(self._gone)))
                t, nodes, amt, owner = t[keep], nodes[keep], amt[keep], owner[keep]
            # each job's last entry is its place in by_job; jobs that left since are not there
            fresh = [job for job in dict.fromkeys(reversed(self._new)) if job in by_job][::-1]
            if fresh:
                nt, nn, na, no = self._rows_of(fresh)
                order = np.argsort(nt, kind="stable")
                nt, nn, na, no = nt[order], nn[order], na[order], no[order]
                at = np.searchsorted(t, nt, side="right")  # after the rows already there at equal times
                t, nodes = np.insert(t, at, nt), np.insert(nodes, at, nn)
                amt, owner = np.insert(amt, at, na, axis=0), np.insert(owner, at, no)
            self._sorted = (t, nodes, amt, owner)
        self._gone.clear()
        self._new.clear()
        return self._sorted[0], self._sorted[1], self._sorted[2]


# --- statistics ------------------------------------------------------------------------------
@dataclass(frozen=True)
class BackfillStats:
    """What the backfill action did in one run (see :func:`backfill_stats`)."""

    backfilled: int  # jobs this action started
    reserved_jobs: int  # jobs that got a reservation as the head at least once
    delayed: int  # of those, jobs that started later than their first head shadow time
    max_delay_s: float  # largest such delay
    mean_delay_s: float  # mean over the delayed jobs (0 if none)
    reservations_computed: int  # shadow-time computations (EASY) or profiles built (conservative)
    #: reservations whose time had to be approximated: the placement search ran out of
    #: ``max_place_tries`` before it proved the earliest time (the reservation is later than it could be)
    approximated: int = 0


def backfill_action(obj: object) -> Backfill:
    """The :class:`Backfill` action of a Simulator or Scheduler (``obj.scheduler`` or ``obj``)."""
    sched = getattr(obj, "scheduler", obj)
    for action in getattr(sched, "actions", ()):
        if isinstance(action, Backfill):
            return action
    raise ValueError("the policy has no backfill action")


def backfill_stats(obj: object, first_start: npt.ArrayLike) -> BackfillStats:
    """Reservations kept and broken in a finished run; ``first_start`` is ``SimResult.first_start``."""
    action = backfill_action(obj)
    start = np.asarray(first_start, dtype=np.float64)
    shadow = action.head_shadow
    reserved = np.isfinite(shadow)
    late = reserved & np.isfinite(start) & (start > shadow)
    delay = start[late] - shadow[late]
    return BackfillStats(
        backfilled=action.backfilled,
        reserved_jobs=int(reserved.sum()),
        delayed=int(late.sum()),
        max_delay_s=float(delay.max()) if delay.size else 0.0,
        mean_delay_s=float(delay.mean()) if delay.size else 0.0,
        reservations_computed=action.computed,
        approximated=action.approximated,
    )


@dataclass
class _EasyReservation:
    head: int
    shadow: float
    free_at_shadow: IntArray  # resources x nodes free at the shadow time, less long backfilled jobs
    reserved: IntArray  # resources x nodes the head holds from the shadow time
    down_gpus: int
    release_count: int  # state.release_count when it was last checked
    accounted: set[int] = field(default_factory=set)  # long jobs already taken off free_at_shadow
    serial: int = 0  # tells reservations apart (a new one gets a new number)
    spare: IntArray = field(init=False)  # free_at_shadow - reserved: what the reservation leaves

    def __post_init__(self) -> None:
        self.spare = self.free_at_shadow - self.reserved

    def take(self, placement: Placement, modelled: list[list[int]]) -> None:
        """A long job was backfilled on ``placement``: it still holds that capacity at the shadow time."""
        fas, spare = self.free_at_shadow, self.spare
        req = (placement.gpus, placement.cpu_milli, placement.memory_mib)
        for node, count in placement.per_node.items():
            for r, m in enumerate(modelled):
                use = req[r] * count * m[node]
                if use:
                    fas[r, node] -= use
                    spare[r, node] -= use


# --- the action --------------------------------------------------------------------------------
@register_action
class Backfill(Action):
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
        cluster, jobs = env.cluster, env.jobs
        self._args = args
        self._max_jobs = args.max_jobs if args.max_jobs is not None else MAX_JOBS_DEFAULT[args.mode]
        self._attrs: tuple[str, ...] = ("free",)
        modelled = [np.ones(cluster.n_nodes, dtype=np.int64)]
        if (cluster.cpu_milli > 0).any():
            self._attrs += ("free_cpu",)
            modelled.append((cluster.cpu_milli > 0).astype(np.int64))
        if (cluster.memory_mib > 0).any():
            self._attrs += ("free_mem",)
            modelled.append((cluster.memory_mib > 0).astype(np.int64))
        self._modelled = np.stack(modelled)
        self._total_gpus = cluster.total_gpus
        self._jobs = jobs
        # per-job columns as lists: the framework's (bound on the first cycle, see execute)
        self._g: list[int] = []
        self._w: list[int] = []
        self._type: list[int] = []
        self._cpu_jobs = bool((jobs.gpus_per_worker == 0).any())
        self._releases = _Releases(self._modelled)
        # the cycles' ctx.started lists not yet in the mirror, each with its cycle's time
        self._unsynced: list[tuple[float, list[tuple[int, Placement]]]] = []
        self._checked = 0  # hand-over lists already checked against the EASY reservation
        self._current: tuple[float, list[tuple[int, Placement]]] | None = None
        self._res: _EasyReservation | None = None
        self._cplan: _ConsPlan | None = None
        self._easy_cycle: _EasyCycle | None = None
        self._failed = FailedRequests()
        self._long_key: tuple[int, int] = (-1, 0)
        self._serial = 0  # reservations computed so far (their serial numbers)
        self._modelled_rows: list[list[int]] = self._modelled.tolist()
        self._long_blocked: set[int] = set()
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
                f"max_place_tries ({self._args.max_place_tries}) before it proved the earliest start, so those "
                "jobs were reserved later than they could be and more jobs backfilled around them"]

    # --- small helpers ---------------------------------------------------------------------------
    def _free_gpus(self, state: ClusterState) -> int:
        return self._total_gpus - state.allocated_gpus - state.down_gpus

    def _exhausted(self, state: ClusterState) -> bool:
        return self._free_gpus(state) <= 0 and not self._cpu_jobs

    def _free_now(self, state: ClusterState) -> IntArray:
        if len(self._attrs) == 1:
            return state.free[None, :]
        return np.stack([getattr(state, a) for a in self._attrs])

    def _usage(self, placement: Placement, n_nodes: int) -> IntArray:
        use = np.zeros((len(self._attrs), n_nodes), dtype=np.int64)
        for node, count in placement.per_node.items():
            use[:, node] = _usage_on(placement, node, count, self._modelled)
        return use

    def _type_mask(self, env: SchedulerEnv, job: int) -> BoolArray | None:
        t = self._type[job]
        return env.nodes_of_type(t) if t >= 0 else None

    def _slots(self, env: SchedulerEnv, gpu_free: IntArray, job: int) -> int:
        g = self._g[job]
        tmask = self._type_mask(env, job)
        v = gpu_free if tmask is None else gpu_free[tmask]
        return int((v // g).sum())

    def _view(self, ctx: CycleContext, free: IntArray) -> CycleContext:
        """The cycle as if the free capacity were ``free`` (resources x nodes): for placing a job at
        a future time or in the capacity a reservation leaves. Any Place plugin works on it."""
        kw = {attr: free[r] for r, attr in enumerate(self._attrs)}
        return dataclasses.replace(ctx, state=ctx.state.what_if(**kw))

    def _record(self, job: int, when: float, head: bool) -> None:
        if head and self._head_shadow[job] != self._head_shadow[job]:
            self._head_shadow[job] = when
        if self._first_planned[job] != self._first_planned[job]:
            self._first_planned[job] = when

    def _start(self, ctx: CycleContext, fw: Framework, job: int, placement: Placement) -> None:
        start_job(ctx, fw, job, placement)
        self.backfilled += 1

    def _sync(self, ctx: CycleContext) -> None:
        """Bring the running-job mirror up to date; drop the EASY reservation if what changed since
        it was last checked could change it (a job left before its estimated end, or a job that
        ends after the shadow time started without being accounted for)."""
        env = ctx.env
        estimate = None if env.estimator is not None else env.estimate
        early, added = self._releases.sync(ctx.now, ctx.running, ctx.state, self._unsynced, estimate)
        self._unsynced = []
        self._checked = 0
        res = self._res
        if res is not None:
            if early:
                self._res = None
            else:
                s, accounted = res.shadow, res.accounted
                for job, end in added:
                    if end > s and job not in accounted:
                        self._res = None
                        break
                else:
                    res.release_count = ctx.state.release_count
        plan = self._cplan
        if plan is not None and (early or any(job not in plan.accounted for job, _ in added)):
            self._cplan = None  # a job left early or one the plan did not start is running

    def _events(self, ctx: CycleContext) -> tuple[FloatArray, IntArray, IntArray]:
        """Releases of running jobs and of jobs started earlier in this cycle, by time; ends already
        past are clamped to now (an overrunning job ends "right after now")."""
        t, node, amt = self._releases.sorted()
        extra_t: list[float] = []
        extra_node: list[int] = []
        extra_amt: list[list[int]] = []
        for job, placement in ctx.started:
            if job not in ctx.state.allocations:  # started, then evicted in this cycle
                continue
            end = ctx.now + ctx.env.estimate(job)
            for n, count in placement.per_node.items():
                extra_t.append(end)
                extra_node.append(n)
                extra_amt.append(_usage_on(placement, n, count, self._modelled))
        if extra_t:
            t = np.concatenate((t, np.asarray(extra_t)))
            node = np.concatenate((node, np.asarray(extra_node, dtype=np.int64)))
            amt = np.concatenate((amt, np.asarray(extra_amt, dtype=np.int64)))
            order = np.argsort(t, kind="stable")
            t, node, amt = t[order], node[order], amt[order]
        if len(t) and t[0] < ctx.now:
            t = np.maximum(t, ctx.now)
        return t, node, amt

    # --- the cycle -----------------------------------------------------------------------------
    def execute(self, ctx: CycleContext, fw: Framework) -> None:
        if self._g is not fw.job_gpus:
            self._g, self._w, self._type = fw.job_gpus, fw.job_workers, fw.job_type
        # jobs enter ctx.running only through a cycle's ctx.started (filled by every action)
        if self._current is not None:
            self._unsynced.append(self._current)
        self._current = (ctx.now, ctx.started)
        if len(self._unsynced) > 256:  # keep the hand-over lists short when backfill is idle
            self._sync(ctx)
        state = ctx.state
        if not len(ctx.queue) or (
            self._total_gpus - state.allocated_gpus - state.down_gpus <= 0 and not self._cpu_jobs  # _exhausted
        ):
            return
        if self._args.mode == "easy":
            cycle = self._easy_cycle
            if cycle is None:
                cycle = self._easy_cycle = _EasyCycle(self, ctx, fw)
            else:
                cycle.reset(self, ctx, fw)
            dynamic = fw.dynamic_key(ctx.now)
            if dynamic is None:
                cycle.run_static()
            else:
                cycle.run_dynamic(dynamic)
        else:
            self._conservative(ctx, fw)

    # --- EASY: the head's reservation ------------------------------------------------------------
    def _reservation(self, ctx: CycleContext, fw: Framework, head: int) -> _EasyReservation | None:
        """The head's reservation: the one kept from earlier cycles while recomputing it would give
        the same, else a new one."""
        state, now = ctx.state, ctx.now
        res = self._res
        if res is not None and (res.head != head or now > res.shadow or state.down_gpus != res.down_gpus):
            res = self._res = None
        if res is not None and state.release_count == res.release_count:
            # nothing has left since the last check: only the jobs started since need a look
            s, running, accounted = res.shadow, ctx.running, res.accounted
            fresh = True
            for _, lst in self._unsynced[self._checked :]:
                for job, _ in lst:
                    run = running.get(job)
                    if run is not None and run.expected_end > s and job not in accounted:
                        fresh = False
            if fresh:
                self._checked = len(self._unsynced)
        else:
            fresh = False
        if not fresh:
            self._sync(ctx)
            res = self._res
        if res is not None and (not ctx.started or all(
            job in res.accounted or now + ctx.env.estimate(job) <= res.shadow for job, _ in ctx.started
        )):
            return res
        if self._unsynced:
            self._sync(ctx)  # the mirror must be complete to compute a new one
        self._res = res = self._compute_reservation(ctx, fw, head)
        return res

    def _compute_reservation(self, ctx: CycleContext, fw: Framework, job: int) -> _EasyReservation | None:
        """The head's shadow time and reserved capacity, or None when it cannot have one."""
        self.computed += 1
        env, now = ctx.env, ctx.now
        t, node, amt = self._events(ctx)
        free_now = self._free_now(ctx.state)
        g, w = self._g[job], self._w[job]
        tmask = self._type_mask(env, job)
        n_nodes = ctx.state.cluster.n_nodes
        if g > 0:
            sel = slice(None) if tmask is None else tmask[node]
            e_t = t[sel]
            first = _first_enough(free_now[0], node[sel], amt[sel, 0], g, w, tmask)
            if first < 0:
                return None
            pool = e_t[first:] if len(e_t) else t
        else:
            pool = t
        pool = pool[np.isfinite(pool)]
        if len(pool) == 0:
            return None
        cand = pool[np.concatenate(([True], pool[1:] != pool[:-1]))]
        cand = cand[cand <= now + self._args.window_s]
        times = cand.tolist()

        def place_at(i: int) -> tuple[IntArray, Placement] | None:
            upto = int(np.searchsorted(t, times[i], side="right"))
            free_s = np.array(free_now, dtype=np.int64)
            for r in range(free_s.shape[0]):
                free_s[r] += np.bincount(node[:upto], weights=amt[:upto, r], minlength=n_nodes).astype(np.int64)
            result = fw.place(self._view(ctx, free_s), job)
            return (free_s, result) if isinstance(result, Placement) else None

        i, found, exact = earliest(len(times), place_at, self._args.max_place_tries)
        if not exact:
            self.approximated += 1
        if found is None:
            return None
        shadow = times[i]
        free_s, placement = found
        self._record(job, shadow, head=True)
        self._serial += 1
        res = _EasyReservation(job, shadow, free_s, self._usage(placement, n_nodes), ctx.state.down_gpus,
                               ctx.state.release_count, serial=self._serial)
        res.accounted.update(j for j, _ in ctx.started)  # already in the release profile
        return res

    # --- conservative ------------------------------------------------------------------------------
    def _conservative(self, ctx: CycleContext, fw: Framework) -> None:
        env, queue, now = ctx.env, ctx.queue, ctx.now
        shapes, requests = queue.shapes, queue.requests
        dynamic = fw.dynamic_key(now)
        self._sync(ctx)  # drops the kept plan if a job left early or an unplanned one started
        cached, self._cplan = self._cplan, None
        # the plan of the last pass still holds when the future went as planned (see _ConsPlan)
        cacheable = (
            dynamic is None and not fw.admitters and env.estimator is None and math.isinf(self._args.window_s)
        )
        prof: _Profile | None = None
        reserved: list[int] = []
        blocked: set[int] = set()
        looked = 0
        walk: Iterator[int] | None = None
        if cached is not None and cacheable and cached.still_valid(self, ctx):
            start = _queue_prefix(queue, cached.reserved)
            if start is not None:  # the queue still begins with the reserved jobs: go on behind them
                prof, reserved, looked = cached.prof, cached.reserved, len(cached.reserved)
                walk = _merge_walk(queue, start, blocked)
        if walk is None:
            walk = _merge_walk(queue, {}, blocked) if dynamic is None else queue.walk(dynamic)
        accounted = set() if prof is None else cached.accounted  # type: ignore[union-attr]
        min_start = math.inf if prof is None else cached.min_start  # type: ignore[union-attr]
        pending: list[tuple[int, float]] = []  # jobs that cannot start now, not yet reserved
        no_room: set[int] = set()  # requests that do not fit the free capacity now
        shortest_fail: dict[int, float] = {}  # request -> shortest estimate that could not start now
        head_done = bool(reserved)
        try:
            for job in walk:
                looked += 1
                if looked > self._max_jobs:
                    return
                shape, request = int(shapes[job]), int(requests[job])
                status = fw.admit(ctx, job)
                if not status.ok:
                    ctx.reasons[shape] = status
                    queue.block(shape)
                    blocked.add(shape)
                    continue
                d = env.estimate(job)
                if request in no_room or d >= shortest_fail.get(request, math.inf):
                    pending.append((job, d))
                    continue
                if self._g[job] > 0 and fw.room_for(ctx, job) < self._w[job]:
                    no_room.add(request)
                    pending.append((job, d))
                    continue
                if prof is None:
                    self.computed += 1
                    t, node, amt = self._events(ctx)
                    prof = _Profile(now, self._free_now(ctx.state), t, node, amt, self._modelled)
                    accounted.update(j for j, _ in ctx.started)
                req = self._request_vector(job)
                if not prof.fits_now(req, self._type[job], self._type_mask(env, job), self._w[job], d):
                    # not even without the reservations still to make: no need to make them yet
                    shortest_fail[request] = min(shortest_fail.get(request, math.inf), d)
                    pending.append((job, d))
                    continue
                for pjob, pd in pending:
                    when = self._plan(ctx, fw, prof, pjob, pd, head=not head_done, can_start=False)
                    head_done = True
                    reserved.append(pjob)
                    min_start = min(min_start, when)
                pending.clear()
                when = self._plan(ctx, fw, prof, job, d, head=not head_done, can_start=True)
                if when == -math.inf:  # started now
                    accounted.add(job)
                    if self._exhausted(ctx.state):
                        return
                else:
                    head_done = True
                    reserved.append(job)
                    min_start = min(min_start, when)
                    shortest_fail[request] = min(shortest_fail.get(request, math.inf), d)
        finally:
            if prof is not None and cacheable:
                self._cplan = _ConsPlan(prof, reserved, accounted, min_start, ctx.state.down_gpus,
                                        ctx.state.up.copy())

    def _plan(
        self, ctx: CycleContext, fw: Framework, prof: _Profile, job: int, d: float, *, head: bool, can_start: bool
    ) -> float:
        """Start ``job`` now if the profile allows, else reserve its earliest start. Returns -inf if
        it started, else the reserved start time (inf: no reservation).

        Starting now and the head's reservation use the policy's placement on the window's capacity;
        other reservations take worker slots best-fit (nodes with the fewest slots first)."""
        env = ctx.env
        w = self._w[job]
        req = self._request_vector(job)
        tmask = self._type_mask(env, job)
        n_nodes = ctx.state.cluster.n_nodes
        horizon = ctx.now + self._args.window_s
        last = prof.last_finite()
        tries = 0
        misses = 0
        jumped = False  # the tries ran out and the last one went to the end of the profile
        first_row = 0 if can_start else 1
        cands = prof.candidates(req, self._type[job], tmask, w, d, first_row, horizon, exact=False)
        i = 0
        while i < len(cands):
            k, end_row = cands[i]
            i += 1
            if tries == self._args.max_place_tries - 1 and k < last and prof.times[last] <= horizon:
                k, end_row = last, last + 1  # the final try: the end of the profile
                jumped = True
            avail = prof.window_min(k, end_row)
            slots = _worker_slots(avail, req, tmask, self._modelled)
            if int(slots.sum()) < w:
                if k == last:
                    break
                misses += 1
                if misses == 3 and w == 1:  # capacity moves between nodes: find exact windows at once
                    cands = prof.candidates(req, self._type[job], tmask, w, d, k + 1, horizon, exact=True)
                    i = 0
                continue
            tries += 1
            if k == 0 or head:
                view = ctx if (k == 0 and np.array_equal(avail, self._free_now(ctx.state))) else self._view(ctx, avail)
                result = fw.place(view, job)
                usage = self._usage(result, n_nodes) if isinstance(result, Placement) else None
            else:
                result = None
                usage = _best_fit(slots, w, req, self._modelled)
            if usage is not None:
                if k == 0:
                    assert isinstance(result, Placement)
                    self._start(ctx, fw, job, result)
                    prof.hold(0, ctx.now + d, usage)
                    return -math.inf
                when = float(prof.times[k])
                self.approximated += jumped
                self._record(job, when, head)
                prof.hold(k, when + d, usage)
                return when
            if k == last:
                break
            if tries >= self._args.max_place_tries:
                self.approximated += 1  # out of tries before the end of the profile: no reservation
                break
        return math.inf

    def _request_vector(self, job: int) -> tuple[int, ...]:
        """Per-worker request for each modelled resource (GPUs first)."""
        jobs = self._jobs
        req = [self._g[job]]
        if "free_cpu" in self._attrs:
            req.append(int(jobs.cpu_milli[job]))
        if "free_mem" in self._attrs:
            req.append(int(jobs.memory_mib[job]))
        return tuple(req)


_MANY = 1 << 40  # "unlimited" worker slots (a request for none of a resource)


def _worker_slots(avail: IntArray, req: tuple[int, ...], tmask: BoolArray | None, modelled: IntArray) -> IntArray:
    """Workers of ``req`` that each node's capacity holds; ``avail`` is resources x nodes (or
    resources x rows x nodes, giving rows x nodes)."""
    if len(req) == 1 and req[0] > 0:  # GPUs only: the common case
        slots: IntArray = avail[0] // req[0]
    else:
        slots = np.full(avail.shape[1:], _MANY, dtype=np.int64)
        for r, need in enumerate(req):
            if need > 0:
                per = avail[r] // need
                slots = np.minimum(slots, per if r == 0 else np.where(modelled[r] > 0, per, _MANY))
    if tmask is not None:
        slots = np.where(tmask, slots, 0)
    return slots


def _best_fit(slots: IntArray, w: int, req: tuple[int, ...], modelled: IntArray) -> IntArray:
    """Usage (resources x nodes) of ``w`` workers put on the nodes with the fewest slots first
    (ties: lower node index). The caller has checked that the slots hold ``w`` workers."""
    if w == 1:  # the node with the fewest slots (lowest index among equals)
        node = int(np.argmin(np.where(slots > 0, slots, _MANY)))
        usage1 = np.zeros((len(req), len(slots)), dtype=np.int64)
        for r, need in enumerate(req):
            usage1[r, node] = need * modelled[r, node]
        return usage1
    nz = np.flatnonzero(slots > 0)
    order = nz[np.argsort(slots[nz], kind="stable")]
    cum = np.cumsum(np.minimum(slots[order], w))
    m = int(np.searchsorted(cum, w))
    chosen = order[: m + 1]
    take = np.minimum(slots[chosen], w)
    take[-1] -= int(cum[m]) - w
    usage = np.zeros((len(req), len(slots)), dtype=np.int64)
    for r, need in enumerate(req):
        usage[r, chosen] = take * need * modelled[r, chosen]
    return usage


def _queue_prefix(queue: PendingQueue, jobs: list[int]) -> dict[int, int] | None:
    """Per shape, how many of its queued jobs come no later than the last of ``jobs`` (static keys),
    if the queue's first ``len(jobs)`` jobs are exactly ``jobs``; else None."""
    if not jobs:
        return {}
    if not all(job in queue for job in jobs):
        return None
    last = queue.key(jobs[-1])
    start = {shape: bisect_right(queue.shape_jobs(shape), last, key=queue.key) for shape in queue.pending_shapes()}
    return start if sum(start.values()) == len(jobs) else None


def _merge_walk(queue: PendingQueue, start: dict[int, int], blocked: set[int]) -> Iterator[int]:
    """Queued jobs in static-key order, each shape from position ``start[shape]`` on, merging the
    per-shape lists (as ``PendingQueue.walk``); skips shapes in ``blocked`` and copes with the
    caller starting (dequeuing) the job just yielded."""
    key, shape_jobs = queue.key, queue.shape_jobs
    heap = []
    for shape in queue.pending_shapes():
        lst = shape_jobs(shape)
        i = start.get(shape, 0)
        if i < len(lst):
            heap.append((key(lst[i]), shape))
    heapq.heapify(heap)
    pos = dict(start)
    while heap:
        _, shape = heapq.heappop(heap)
        lst = shape_jobs(shape)
        i = pos.get(shape, 0)
        if i >= len(lst):
            continue
        job = lst[i]
        yield job
        if shape in blocked:
            continue
        lst = shape_jobs(shape)
        if i < len(lst) and lst[i] == job:  # still queued: move past it
            i += 1
        pos[shape] = i
        if i < len(lst):
            heapq.heappush(heap, (key(lst[i]), shape))


def _first_enough(free0: IntArray, e_node: IntArray, e_g: IntArray, g: int, w: int, tmask: BoolArray | None) -> int:
    """Index of the first release (in time order) after which the free GPUs hold ``w`` workers of
    ``g`` GPUs, 0 if they already do, -1 if never. Vectorised: per-node running totals by a
    cumulative sum grouped by node."""
    slots0 = int(((free0 if tmask is None else free0[tmask]) // g).sum())
    if slots0 >= w:
        return 0
    n = len(e_node)
    if n == 0:
        return -1
    # the same stable order either way; node numbers that fit 16 bits take NumPy's radix sort, O(n)
    # instead of a merge sort (a tenth of the time for 20,000 rows)
    by_node = np.argsort(e_node.astype(np.uint16) if len(free0) <= 1 << 16 else e_node, kind="stable")
    gn, gd = e_node[by_node], e_g[by_node]
    cs = np.cumsum(gd)
    new_group = np.empty(n, dtype=bool)
    new_group[0] = True
    np.not_equal(gn[1:], gn[:-1], out=new_group[1:])
    before_group = np.maximum.accumulate(np.where(new_group, cs - gd, 0))
    after = free0[gn] + cs - before_group
    gain = np.empty_like(gd)
    gain[by_node] = after // g - (after - gd) // g
    slots = slots0 + np.cumsum(gain)
    if slots[-1] < w:
        return -1
    return int(np.argmax(slots >= w))


class _EasyCycle:
    """One EASY pass: look at queued jobs in order, find the head, then backfill behind it.

    What cannot fit is remembered across cycles while it provably still cannot: requests that do not
    fit the free capacity in the action's :class:`FailedRequests` memo (forgotten when capacity that
    could help them returns), requests that do not fit the capacity the reservation leaves until any
    capacity returns or the reservation changes."""

    def __init__(self, bf: Backfill, ctx: CycleContext, fw: Framework) -> None:
        self.room_ok: set[int] = set()
        self.reset(bf, ctx, fw)

    def reset(self, bf: Backfill, ctx: CycleContext, fw: Framework) -> None:
        """Start a new pass (the object is reused from cycle to cycle)."""
        self.bf, self.ctx, self.fw = bf, ctx, fw
        self.check_admit = bool(fw.admitters)
        self.env = ctx.env
        self.now = ctx.now
        self.head = -1
        self.planned = False
        self.res: _EasyReservation | None = None
        self.shadow = math.inf  # jobs ending after it are "long"
        bf._failed.refresh(ctx.state)
        self.failed = bf._failed
        # the failed request ids as a live view of the memo (a membership test without a Python call)
        self.failed_keys = bf._failed.request_keys()
        self.room_ok.clear()  # requests with room now (until the next start)
        self.x_free: IntArray | None = None
        self.x_whole = False
        self.requests: list[int] = ctx.queue.request_of
        self.estimate = ctx.env.estimate if ctx.env.estimator is not None else ctx.env.default_estimates().__getitem__

    def is_long(self, job: int) -> bool:
        return self.now + self.estimate(job) > self.shadow

    def _plan(self) -> None:
        bf, ctx = self.bf, self.ctx
        self.planned = True
        self.res = res = bf._reservation(ctx, self.fw, self.head)
        self.shadow = math.inf if res is None else res.shadow
        key = (ctx.state.release_count, 0 if res is None else res.serial)
        if bf._long_key != key:
            bf._long_key = key
            bf._long_blocked = set()

    def _cannot_fit(self, job: int, request: int, status: Status, room: int) -> int:
        self.failed.add(self.env, request, job, status, room)
        if self.head < 0:
            self.head = job
        return _BLOCK

    def consider(self, job: int, shape: int) -> int:
        bf, ctx, fw = self.bf, self.ctx, self.fw
        request = self.requests[job]
        long = self.now + self.estimate(job) > self.shadow
        if long and request in bf._long_blocked:
            return _SKIP
        if request in self.failed_keys:  # cannot fit; admission only decides whether it is the head
            if self.head < 0 and (not self.check_admit or fw.admit(ctx, job).ok):
                self.head = job
            return _BLOCK
        if self.check_admit:
            status = fw.admit(ctx, job)
            if not status.ok:
                ctx.reasons[shape] = status
                return _BLOCK
        if request not in self.room_ok:
            if bf._g[job] > 0:
                room = fw.room_for(ctx, job)
                if room < bf._w[job]:
                    return self._cannot_fit(job, request, _NO_ROOM, room)
            self.room_ok.add(request)
        if self.head >= 0 and not self.planned:
            self._plan()
            long = self.is_long(job)
        if not long:
            result = fw.place(ctx, job)
            if isinstance(result, Placement):
                bf._start(ctx, fw, job, result)
                self.x_free = None
                self.room_ok.clear()
                return _STARTED
            if self.head < 0:
                ctx.reasons[shape] = result
            return self._cannot_fit(job, request, result, fw.room_for(ctx, job))
        if request in bf._long_blocked:
            return _SKIP
        res = self.res
        assert res is not None
        x_free = self.x_free
        if x_free is None:
            free_now = bf._free_now(ctx.state)
            # the reservation needs nothing free now: the capacity it leaves is all that is free
            self.x_whole = bool((free_now <= res.spare).all())
            x_free = self.x_free = free_now if self.x_whole else np.minimum(free_now, res.spare)
        if self.x_whole:  # the room for its workers was checked on this capacity
            result = fw.place(ctx, job)
        elif bf._g[job] > 0 and bf._slots(self.env, x_free[0], job) < bf._w[job]:
            bf._long_blocked.add(request)
            return _LONG
        else:
            result = fw.place(bf._view(ctx, x_free), job)
        if not isinstance(result, Placement):
            bf._long_blocked.add(request)
            return _LONG
        bf._start(ctx, fw, job, result)
        res.take(result, bf._modelled_rows)
        res.accounted.add(job)
        self.x_free = None
        self.room_ok.clear()
        return _STARTED

    def run_static(self) -> None:
        """Queue order by merging the per-shape lists (as ``PendingQueue.walk``); a shape whose long
        jobs cannot start skips them without the full look (each still counts as looked at)."""
        bf, queue, state = self.bf, self.ctx.queue, self.ctx.state
        max_jobs = bf._max_jobs
        key, shape_jobs, consider, is_long = queue.key, queue.shape_jobs, self.consider, self.is_long
        now, estimate, requests, failed = self.now, self.estimate, self.requests, self.failed_keys
        heappop, heappush = heapq.heappop, heapq.heappush
        shapes = queue.pending_shapes()
        job0s = [shape_jobs(shape)[0] for shape in shapes]  # each shape's first job
        keys = [key(job0) for job0 in job0s]
        left_out: list[tuple[float, ...]] = []  # first keys of shapes not merged (looked at in passing)
        heap: list[tuple[tuple[float, ...], int]]
        if shapes:
            first = job0s[keys.index(min(keys))]  # the queue's first job (keys are unique)
            if requests[first] in failed and (not self.check_admit or self.fw.admit(self.ctx, first).ok):
                # the queue's first job cannot start: it is the head, and a shape whose first job is
                # known not to fit would only be looked at once and dropped; leave it out of the merge
                self.head = first
                fails = [requests[job0] in failed for job0 in job0s]
                heap = [(k, shape) for k, shape, f in zip(keys, shapes, fails, strict=True) if not f]
                left_out = [k for k, f in zip(keys, fails, strict=True) if f]
            else:
                heap = list(zip(keys, shapes, strict=True))
            heapq.heapify(heap)
        else:
            heap = []
        n_left = len(left_out)
        pos: dict[int, int] = {}
        short_only: set[int] = set()
        # ``looked`` counts a left-out shape once the walk passes its first key. That count matters
        # only near max_jobs: until ``looked`` (without them) reaches max_jobs - n_left, no limit test
        # can change, so they are sorted and counted only then (``exact``), by bisection.
        exact = not n_left
        limit = max_jobs - n_left
        looked = 0
        passed = 0  # left-out shapes passed so far (once exact)
        top_key: tuple[float, ...] | None = None
        while heap:
            if looked >= limit:
                if not exact:
                    exact, limit = True, max_jobs
                    left_out.sort()
                    passed = 0 if top_key is None else bisect_left(left_out, top_key)
                    looked += passed
                if looked >= max_jobs:
                    break
            top_key, shape = heappop(heap)
            if exact:
                while passed < n_left and left_out[passed] < top_key:
                    passed += 1
                    looked += 1
                if looked >= max_jobs:
                    break
            lst = shape_jobs(shape)
            i = pos.get(shape, 0)
            if i >= len(lst):
                continue
            job = lst[i]
            looked += 1
            if self.head >= 0 and requests[job] in failed:
                continue  # known not to fit the free capacity; the head is already found
            verdict = consider(job, shape)
            if verdict == _BLOCK:
                continue
            shadow = self.shadow  # known once the head is planned
            if verdict == _STARTED:
                if bf._exhausted(state):
                    return
                lst = shape_jobs(shape)  # the started job left the list
            else:
                i += 1
                if verdict == _LONG or (verdict == _SKIP and is_long(job)):
                    short_only.add(shape)
            if shape in short_only:  # skip long jobs, but only those ahead of every other shape's
                top = heap[0][0] if heap else None
                n = len(lst)
                while i < n:
                    if looked >= limit:
                        if not exact:
                            exact, limit = True, max_jobs
                            left_out.sort()
                            passed = bisect_left(left_out, top_key)
                            looked += passed
                        if looked >= max_jobs:
                            break
                    j = lst[i]
                    if now + estimate(j) <= shadow or (top is not None and key(j) > top):
                        break
                    i += 1
                    looked += 1
            pos[shape] = i
            if i < len(lst):
                heappush(heap, (key(lst[i]), shape))

    def run_dynamic(self, dynamic: Callable[[int], tuple[float, ...]]) -> None:
        bf, queue, state = self.bf, self.ctx.queue, self.ctx.state
        shapes = queue.shapes
        for looked, job in enumerate(queue.walk(dynamic), start=1):
            if looked > bf._max_jobs:
                return
            shape = int(shapes[job])
            verdict = self.consider(job, shape)
            if verdict == _BLOCK:
                queue.block(shape)
            elif verdict == _STARTED and bf._exhausted(state):
                return


@dataclass
class _ConsPlan:
    """A conservative pass's plan, kept for the next pass. A new pass would make the same
    reservations (same jobs in the same order, same times and capacity) if the future went as
    planned: no job left before its expected end, every job that entered ``running`` is one the plan
    started, nothing else started, no node went down or came back, no reservation has come due, the
    profile moved to now equals the capacity really free, and the queue still begins with the
    reserved jobs in order (checked by the caller). Only for static queue orders without admission
    plugins, runtime estimator or planning horizon, where nothing else can change the plan."""

    prof: _Profile
    reserved: list[int]  # jobs looked at and reserved (or passed over), in queue order
    accounted: set[int]  # jobs in the profile that were not running when it was built
    min_start: float  # earliest reservation
    down_gpus: int
    up: BoolArray

    def still_valid(self, bf: Backfill, ctx: CycleContext) -> bool:
        """The checks left after :meth:`Backfill._sync` (which drops the plan when a job left early
        or a job the plan did not start is running)."""
        state, now = ctx.state, ctx.now
        if ctx.started or self.min_start <= now or state.down_gpus != self.down_gpus:
            return False
        if not np.array_equal(state.up, self.up):
            return False
        self.prof.advance(now)
        return bool(np.array_equal(self.prof.avail[:, 0, :], bf._free_now(state)))


@dataclass
class _SlotCache:
    """Per-row worker-slot counts of one request; rows ``[lo, hi)`` are stale."""

    counts: IntArray
    req: tuple[int, ...]
    tmask: BoolArray | None
    lo: int = 1 << 62
    hi: int = 0


class _Profile:
    """Free capacity over time: ``avail[:, k, :]`` (resources x nodes) holds on ``[times[k],
    times[k+1])`` for ``k < size``. Row 0 is the capacity free now; later rows add releases and
    subtract reservations. Rows share a time when jobs overran (their release is "right after now").
    Rows live in a buffer with spare room, and per-request worker-slot counts per row are cached and
    updated only on the rows a hold changes."""

    def __init__(
        self, now: float, free_now: IntArray, t: FloatArray, node: IntArray, amt: IntArray, modelled: IntArray
    ) -> None:
        uniq, inv = np.unique(t, return_inverse=True)
        n_res, n_nodes = free_now.shape
        size = 1 + len(uniq)
        cap = size + 32
        self.modelled = modelled
        self.times: FloatArray = np.full(cap, np.inf)
        self.times[0] = now
        self.times[1:size] = uniq
        delta = np.zeros((n_res, cap, n_nodes), dtype=np.int64)
        delta[:, 0, :] = free_now
        rows = inv.reshape(-1) + 1
        for r in range(n_res):
            np.add.at(delta[r], (rows, node), amt[:, r])
        self.avail: IntArray = np.cumsum(delta, axis=1)
        self.size = size
        self._slots: dict[tuple[tuple[int, ...], int], _SlotCache] = {}

    def _count(self, a: int, b: int, req: tuple[int, ...], tmask: BoolArray | None) -> IntArray:
        slots = _worker_slots(self.avail[:, a:b, :], req, tmask, self.modelled)
        out: IntArray = np.minimum(slots.sum(axis=1), _MANY)
        return out

    def row_slots(self, req: tuple[int, ...], type_code: int, tmask: BoolArray | None) -> IntArray:
        """Workers of ``req`` each row holds (summed over nodes); cached, and brought up to date
        lazily over the rows holds have changed since."""
        key = (req, type_code)
        entry = self._slots.get(key)
        if entry is None:
            counts = np.zeros(len(self.times), dtype=np.int64)
            counts[: self.size] = self._count(0, self.size, req, tmask)
            self._slots[key] = entry = _SlotCache(counts, req, tmask)
        elif entry.lo < entry.hi:
            entry.counts[entry.lo : entry.hi] = self._count(entry.lo, entry.hi, req, tmask)
            entry.lo, entry.hi = len(self.times), 0
        return entry.counts[: self.size]

    def candidates(
        self, req: tuple[int, ...], type_code: int, tmask: BoolArray | None, w: int, d: float, first_row: int,
        horizon: float, exact: bool,
    ) -> list[tuple[int, int]]:
        """(start row, end row) pairs in time order that may hold the job over ``[start, end)``: every
        row of the window alone holds all workers (necessary only; the caller checks the window
        minimum). With ``exact`` and one worker: some node holds it in every row of the window."""
        size = self.size
        times = self.times[:size]
        k_all = np.arange(size)
        ends = np.maximum(np.searchsorted(times, times + d, side="left"), k_all + 1)
        ok = (k_all >= first_row) & np.isfinite(times) & ((times <= horizon) | (k_all == 0))
        if exact and w == 1:
            short = _worker_slots(self.avail[:, :size, :], req, tmask, self.modelled) < 1  # rows x nodes
            cum = np.zeros((size + 1, short.shape[1]), dtype=np.int64)
            np.cumsum(short, axis=0, out=cum[1:])
            ok &= ((cum[ends] - cum[k_all]) == 0).any(axis=1)
        else:
            bad = self.row_slots(req, type_code, tmask) < w
            cum1 = np.concatenate(([0], np.cumsum(bad)))
            ok &= cum1[ends] == cum1[k_all]
        ks = np.flatnonzero(ok)
        return list(zip(ks.tolist(), ends[ks].tolist(), strict=True))

    def fits_now(self, req: tuple[int, ...], type_code: int, tmask: BoolArray | None, w: int, d: float) -> bool:
        """Do the job's workers fit, per node, the capacity free over ``[now, now + d)``?"""
        size = self.size
        end_row = max(1, int(np.searchsorted(self.times[:size], self.times[0] + d, side="left")))
        if int(self.row_slots(req, type_code, tmask)[:end_row].min()) < w:
            return False
        avail = self.window_min(0, end_row)
        return int(_worker_slots(avail, req, tmask, self.modelled).sum()) >= w

    def window_min(self, k: int, end_row: int) -> IntArray:
        out: IntArray = self.avail[:, k:end_row, :].min(axis=1)
        return out

    def last_finite(self) -> int:
        return int(np.flatnonzero(np.isfinite(self.times[: self.size]))[-1])

    def advance(self, now: float) -> None:
        """Drop the rows before ``now``: the row in effect at ``now`` becomes row 0."""
        size = self.size
        r = int(np.searchsorted(self.times[:size], now, side="right")) - 1
        if r > 0:
            keep = size - r
            self.times[:keep] = self.times[r:size]
            self.times[keep:size] = np.inf
            self.avail[:, :keep] = self.avail[:, r:size]
            for entry in self._slots.values():
                entry.counts[:keep] = entry.counts[r:size]
                if entry.lo < entry.hi:
                    entry.lo, entry.hi = max(entry.lo - r, 0), max(entry.hi - r, 0)
            self.size = keep
        self.times[0] = now

    def _grow(self) -> None:
        cap = len(self.times)
        self.times = np.concatenate((self.times, np.full(cap, np.inf)))
        self.avail = np.concatenate((self.avail, np.zeros_like(self.avail)), axis=1)
        for entry in self._slots.values():
            entry.counts = np.concatenate((entry.counts, np.zeros_like(entry.counts)))

    def hold(self, k: int, end: float, usage: IntArray) -> None:
        """Take ``usage`` from row ``k`` up to time ``end`` (a breakpoint is added there), and always
        from row ``k`` itself: a zero-length job still holds its capacity at its start."""
        size = self.size
        times = self.times
        pos = int(np.searchsorted(times[:size], end, side="left"))
        if math.isfinite(end) and end > times[k] and (pos == size or times[pos] != end):
            if size == len(times):
                self._grow()
                times = self.times
            times[pos + 1 : size + 1] = times[pos:size]
            times[pos] = end
            avail = self.avail
            avail[:, pos + 1 : size + 1] = avail[:, pos:size]
            avail[:, pos] = avail[:, pos - 1]
            for entry in self._slots.values():
                counts = entry.counts
                counts[pos + 1 : size + 1] = counts[pos:size]
                counts[pos] = counts[pos - 1]
                if entry.lo < entry.hi:
                    entry.lo += entry.lo >= pos
                    entry.hi += entry.hi > pos
            self.size = size + 1
        pos = max(pos, k + 1)
        self.avail[:, k:pos, :] -= usage[:, None, :]
        for entry in self._slots.values():
            entry.lo, entry.hi = min(entry.lo, k), max(entry.hi, pos)
