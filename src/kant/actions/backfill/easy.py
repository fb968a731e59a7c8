"""EASY backfill (Lifka's EASY, Slurm with one reservation): the head's reservation and the walk.

* :class:`EasyReservation`: the head's shadow time, what it reserves, what it leaves.
* :class:`ReservationKeeper`: keeps the reservation across cycles while recomputing it would give
  the same one; :func:`compute_reservation` computes a new one (searching the release times with
  :func:`earliest`).
* :class:`LongBlocked`: requests whose long jobs cannot start in what the reservation leaves.
* :class:`Leftover`: one cycle's capacity the reservation leaves free now (and what is derived from it).
* :class:`EasyCycle`: one pass over the queue: find the head, then backfill behind it.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from kant.actions.backfill.fit import BoolArray, IntArray, first_enough
from kant.actions.backfill.releases import events
from kant.framework.context import CycleContext
from kant.framework.runner import DynamicKey, Framework
from kant.framework.status import Status
from kant.model.fit import FULL_GPU_MILLI, is_share
from kant.model.state import ClusterState, Placement

if TYPE_CHECKING:
    from kant.actions.backfill.action import Backfill

__all__ = ["EasyCycle", "EasyReservation", "LongBlocked", "ReservationKeeper", "compute_reservation", "earliest"]

_T = TypeVar("_T")

# what one look at a job decided
SKIP = 0  # not now, look at the next job of the shape
STARTED = 1
BLOCK = 2  # no job of this shape can start this cycle
LONG = 3  # no job of this request that ends after the shadow time can start this cycle

_NO_ROOM = Status.unschedulable("no room for its workers in the free capacity", "backfill")


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


# --- the reservation -----------------------------------------------------------------------------
@dataclass
class EasyReservation:
    head: int
    shadow: float
    free_at_shadow: IntArray  # resources x nodes free at the shadow time, less long backfilled jobs
    reserved: IntArray  # resources x nodes the head holds from the shadow time
    down_gpus: int
    release_count: int  # state.release_count when it was last checked
    accounted: set[int] = field(default_factory=set)  # long jobs already taken off free_at_shadow
    serial: int = 0  # tells reservations apart (a new one gets a new number)
    pinned: bool = False  # short shares' GPUs were taken off (see pin)
    spare: IntArray = field(init=False)  # free_at_shadow - reserved: what the reservation leaves

    def __post_init__(self) -> None:
        self.spare = self.free_at_shadow - self.reserved

    def pin(self, gpus_taken: IntArray) -> None:
        """A short GPU share started and took ``gpus_taken`` completely free GPUs per node: it ends by
        the shadow time, but long shares may join its GPUs and hold them past it, so those GPUs no
        longer count as free then. Every GPU opened since the reservation was computed is thus taken
        off (GPUs open when it was computed never counted: a running share gives back no GPU), and
        a long share may start only while that leaves the reservation whole (``spare >= 0``)."""
        self.free_at_shadow[0] -= gpus_taken
        self.spare[0] -= gpus_taken
        self.pinned = True

    def take(self, placement: Placement, modelled: list[tuple[int, list[int]]],
             gpus_taken: IntArray | None = None) -> None:
        """A long job was backfilled on ``placement``: it still holds that capacity at the shadow time.
        ``gpus_taken`` (a GPU share): the completely free GPUs its start took, per node (its workers
        on open GPU slots took none). ``modelled``: :attr:`Capacity.modelled_rows`."""
        fas, spare = self.free_at_shadow, self.spare
        req = (placement.gpus, placement.cpu_milli, placement.memory_mib)
        for node, count in placement.per_node.items():
            for r, (f, m) in enumerate(modelled):
                use = req[f] * count * m[node] if r or gpus_taken is None else int(gpus_taken[node])
                if use:
                    fas[r, node] -= use
                    spare[r, node] -= use


class ReservationKeeper:
    """The EASY reservation kept across cycles while recomputing it would give the same one (same
    head, no job left before its estimated end, no job that ends after the shadow time started other
    than those backfilled against it, no node failure, ``now <= shadow``); property-tested."""

    def __init__(self) -> None:
        self.res: EasyReservation | None = None
        self.checked = 0  # hand-over lists already checked against the reservation
        self.serial = 0  # reservations computed so far (their serial numbers)

    def after_sync(self, early: bool, added: list[tuple[int, float]], release_count: int) -> None:
        """The release mirror caught up: drop the reservation if what changed could change it (a job
        left before its estimated end, or a job that ends after the shadow time started without
        being accounted for)."""
        self.checked = 0
        res = self.res
        if res is None:
            return
        if early:
            self.res = None
            return
        s, accounted = res.shadow, res.accounted
        for job, end in added:
            if end > s and job not in accounted:
                self.res = None
                return
        res.release_count = release_count

    def get(self, bf: Backfill, ctx: CycleContext, fw: Framework, head: int) -> EasyReservation | None:
        """The head's reservation: the one kept from earlier cycles while recomputing it would give
        the same, else a new one."""
        state, now = ctx.state, ctx.now
        res = self.res
        if res is not None and (res.head != head or now > res.shadow or state.down_gpus != res.down_gpus):
            res = self.res = None
        unsynced = bf.releases.unsynced
        if res is not None and state.release_count == res.release_count:
            # nothing has left since the last check: only the jobs started since need a look
            s, running, accounted = res.shadow, ctx.running, res.accounted
            fresh = True
            for _, lst in unsynced[self.checked :]:
                for job, _ in lst:
                    run = running.get(job)
                    if run is not None and run.expected_end > s and job not in accounted:
                        fresh = False
            if fresh:
                self.checked = len(unsynced)
        else:
            fresh = False
        if not fresh:
            bf.sync(ctx)
            res = self.res
        if res is not None and (not ctx.started or all(
            job in res.accounted or now + ctx.env.estimate(job) <= res.shadow for job, _ in ctx.started
        )):
            return res
        if bf.releases.unsynced:
            bf.sync(ctx)  # the mirror must be complete to compute a new one
        self.res = res = compute_reservation(bf, ctx, fw, head)
        return res


def compute_reservation(bf: Backfill, ctx: CycleContext, fw: Framework, job: int) -> EasyReservation | None:
    """The head's shadow time and reserved capacity, or None when it cannot have one."""
    bf.computed += 1
    env, now, cap = ctx.env, ctx.now, bf.capacity
    t, node, amt = events(bf.releases, cap, ctx)
    free_now = cap.free_now(ctx.state)
    g, w, milli = bf.job_gpus[job], bf.job_workers[job], bf.job_milli[job]
    tmask = bf.type_mask(env, job)
    n_nodes = cap.n_nodes
    # a GPU share counts the open GPU slots now; at a release time only completely free GPUs (the
    # view below leaves the open slots out; see kant.actions.backfill.fit)
    share = milli < FULL_GPU_MILLI and is_share(g, milli)
    if g > 0:
        sel = slice(None) if tmask is None else tmask[node]
        e_t = t[sel]
        first = first_enough(free_now[0], node[sel], amt[sel, 0], g, w, tmask, milli,
                             ctx.state.shares.workers(milli) if share else None)
        if first < 0:
            return None
        pool = e_t[first:] if len(e_t) else t
    else:
        pool = t
    pool = pool[np.isfinite(pool)]
    if len(pool) == 0:
        return None
    cand = pool[np.concatenate(([True], pool[1:] != pool[:-1]))]
    cand = cand[cand <= now + bf.args.window_s]
    times = cand.tolist()

    def place_at(i: int) -> tuple[IntArray, Placement] | None:
        upto = int(np.searchsorted(t, times[i], side="right"))
        free_s = np.array(free_now, dtype=np.int64)
        for r in range(free_s.shape[0]):
            free_s[r] += np.bincount(node[:upto], weights=amt[:upto, r], minlength=n_nodes).astype(np.int64)
        result = fw.place(cap.view(ctx, free_s, shares=not share), job)
        return (free_s, result) if isinstance(result, Placement) else None

    i, found, exact = earliest(len(times), place_at, bf.args.max_place_tries)
    if not exact:
        bf.approximated += 1
    if found is None:
        return None
    shadow = times[i]
    free_s, placement = found
    bf.record(job, shadow, head=True)
    keeper = bf.kept
    keeper.serial += 1
    res = EasyReservation(job, shadow, free_s, cap.usage(placement), ctx.state.down_gpus,
                          ctx.state.release_count, serial=keeper.serial)
    res.accounted.update(j for j, _ in ctx.started)  # already in the release profile
    return res


# --- what cannot start ---------------------------------------------------------------------------
class LongBlocked:
    """Requests whose *long* jobs (ending after the shadow time) cannot start in the capacity the
    reservation leaves free now, ``X = min(free_now, spare)`` per node and resource.

    A placement that fails on some capacity fails on any that is nowhere larger (the placers'
    monotonicity that the shadow-time search relies on too), so the set stays valid while the
    reservation is the same and X has grown nowhere since the set was filled: starts and long jobs
    backfilled against the reservation only shrink X, and a capacity return that does not reach X
    (it lands where the reservation needs it) changes nothing. ``bound`` is the last X the walk
    computed (X only shrinks within a pass); :meth:`renew` compares the next pass's X with it."""

    def __init__(self) -> None:
        self.requests: set[int] = set()  # read directly by the walk (a membership test)
        self._serial = -1  # the reservation the set was filled under
        self._shares = 0  # the GPU-share books' version when it was filled (0: no shares)
        self._bound: IntArray | None = None  # X when the last request was added, or later
        #: bumped whenever the set changes
        self.changes = 0

    def renew(self, res: EasyReservation | None, free_now: IntArray, state: ClusterState) -> None:
        """A pass planned its head with ``res``: forget everything unless the set still holds (the
        GPU-share books count as grown whenever they changed: a share that left opens room on a GPU
        slot without freeing a GPU)."""
        if res is None:  # no long jobs this pass: the set is not looked at
            return
        shares = int(state.shares.version.sum()) if state.shares.slots else 0
        if res.serial != self._serial or shares != self._shares:
            self._serial = res.serial
            self._shares = shares
            self._bound = None
            self._clear()
        elif self.requests:
            x = np.minimum(free_now, res.spare)
            bound = self._bound
            if bound is None or bool((x > bound).any()):
                self._clear()
            self._bound = x

    def note(self, x: IntArray) -> None:
        """The walk computed X (no larger than any X before it in this pass)."""
        self._bound = x.copy()  # X may be a view of the live free capacity

    def _clear(self) -> None:
        if self.requests:
            self.requests.clear()
            self.changes += 1

    def add(self, request: int) -> None:
        self.requests.add(request)
        self.changes += 1


class Leftover:
    """One cycle's capacity that the reservation leaves free now: ``X = min(free_now, spare)`` per
    node and resource, computed when first needed and dropped when a job starts."""

    def __init__(self, bf: Backfill) -> None:
        self._capacity = bf.capacity
        self._long_blocked = bf.long_blocked
        self.free: IntArray | None = None
        self.whole = False  # X is all that is free now (the reservation needs nothing free now)
        self._view: CycleContext | None = None  # the cycle as if X were all that is free
        self._slots: dict[tuple[int, int], int] = {}  # (GPUs per worker, GPU type) -> worker slots in X
        self._state: ClusterState | None = None

    def reset(self) -> None:
        self.free = None
        self._view = None
        self._slots.clear()

    def get(self, ctx: CycleContext, res: EasyReservation) -> IntArray:
        x_free = self.free
        if x_free is None:
            free_now = self._capacity.free_now(ctx.state)
            self._state = ctx.state
            self.whole = bool((free_now <= res.spare).all())
            x_free = self.free = free_now if self.whole else np.minimum(free_now, res.spare)
            if res.pinned:  # spare may be below 0 on a node (see EasyReservation.pin)
                x_free = self.free = np.maximum(x_free, 0)
            self._long_blocked.note(x_free)
        return x_free

    def slots(self, g: int, type_code: int, tmask: BoolArray | None, milli: int = FULL_GPU_MILLI) -> int:
        """Workers of ``g`` GPUs at ``milli`` that X holds on the nodes of ``tmask`` (those of GPU
        type ``type_code``; after :meth:`get`). A GPU share counts the open GPU slots too: the
        reservation holds completely free GPUs only."""
        assert self.free is not None
        if milli < FULL_GPU_MILLI and is_share(g, milli):
            key = (-milli, type_code)  # cannot clash with a whole-GPU key
            n = self._slots.get(key)
            if n is None:
                assert self._state is not None
                n = self._slots[key] = self._capacity.gpu_slots(self.free[0], g, tmask, milli,
                                                                self._state.shares.workers(milli))
            return n
        n = self._slots.get((g, type_code))
        if n is None:
            n = self._slots[(g, type_code)] = self._capacity.gpu_slots(self.free[0], g, tmask)
        return n

    def view(self, ctx: CycleContext) -> CycleContext:
        """The cycle as if X were all that is free (after :meth:`get`; built once per X)."""
        assert self.free is not None
        if self._view is None:
            self._view = self._capacity.view(ctx, self.free)
        return self._view


class QuietWalk:
    """The last EASY walk that changed nothing (it started no job and added nothing to the failure
    memo or to :class:`LongBlocked`), kept to tell when the next walk would repeat it exactly and can
    be skipped: the cycles that only arrivals trigger, behind a blocked head, on a long queue.

    Each verdict of such a walk came from the failure memo, from :class:`LongBlocked` or from whether
    a job ends by the shadow time, never from the free capacity itself (a look at the free capacity
    either starts the job or adds its request to one of the two). Another walk gives every job the
    same verdict, so looks at the same jobs in the same order and stops at the same place, while:

    * the memo and LongBlocked hold the same requests (their change counters);
    * the queue's jobs up to the last key the walk looked at are the same: no job left the queue and
      every job pushed since sorts after that key (``frontier``), which the walk stopped before
      reaching because it had looked at ``max_jobs`` jobs;
    * the head gets the same reservation object, unchanged (a job that starts changes it);
    * no job the walk found short has become long: ``now + max_short <= shadow`` (a long job stays
      long as time advances).

    Only for the static queue order, without admission plugins or a runtime estimator."""

    def __init__(self) -> None:
        self.valid = False
        self.memo_changes = -1
        self.long_changes = -1
        self.planned = False  # the walk asked for the head's reservation
        self.head = -1
        self.res: EasyReservation | None = None
        self.serial = -1
        self.frontier: tuple[float, ...] = ()
        self.max_short = -math.inf  # longest estimate of a job found short once the head was planned

    def remember(self, cycle: EasyCycle, frontier: tuple[float, ...]) -> None:
        """``cycle`` walked and changed nothing; the queue is marked from here."""
        bf = cycle.bf
        self.valid = True
        self.memo_changes = bf.failed.changes
        self.long_changes = bf.long_blocked.changes
        self.planned, self.head, self.res = cycle.planned, cycle.head, cycle.res
        self.serial = -1 if cycle.res is None else cycle.res.serial
        self.frontier = frontier
        self.max_short = cycle.max_short
        cycle.ctx.queue.mark()

    def repeats(self, cycle: EasyCycle) -> bool:
        """Would ``cycle`` (reset, not walked yet) repeat the remembered walk? May plan the head's
        reservation on the way (as the walk would, with the same state: nothing starts before)."""
        if not self.valid:
            return False
        bf = cycle.bf
        removed, lowest = cycle.ctx.queue.since_mark()
        if removed or (lowest is not None and lowest <= self.frontier) or bf.failed.changes != self.memo_changes:
            self.valid = False
            return False
        if self.planned:
            # the walk plans the head at its first look at a job not known to fail; nothing can start
            # before that (the jobs ahead are those of the remembered walk), so the state is this one
            res = cycle.prefetch(self.head)
            if res is not self.res or res is None or res.serial != self.serial:
                self.valid = False
                return False
            if cycle.now + self.max_short > res.shadow or cycle.now > res.shadow:
                self.valid = False
                return False
        if bf.long_blocked.changes != self.long_changes:
            self.valid = False
            return False
        return True


# --- the walk ----------------------------------------------------------------------------------
class EasyCycle:
    """One EASY pass: look at queued jobs in order, find the head, then backfill behind it.

    What cannot fit is remembered across cycles while it provably still cannot: requests that do not
    fit the free capacity in the action's :class:`FailedRequests` memo (forgotten when capacity that
    could help them returns), requests that do not fit the capacity the reservation leaves in
    :class:`LongBlocked`."""

    def __init__(self, bf: Backfill, ctx: CycleContext, fw: Framework) -> None:
        self.room_ok: set[int] = set()
        self.leftover = Leftover(bf)
        self.long_blocked = bf.long_blocked.requests
        self.quiet = QuietWalk()
        self.reset(bf, ctx, fw)

    def reset(self, bf: Backfill, ctx: CycleContext, fw: Framework) -> None:
        """Start a new pass (the object is reused from cycle to cycle)."""
        self.bf, self.ctx, self.fw = bf, ctx, fw
        self.check_admit = bool(fw.admitters)
        self.env = ctx.env
        self.now = ctx.now
        self.head = -1
        self.planned = False
        self.res: EasyReservation | None = None
        self.shadow = math.inf  # jobs ending after it are "long"
        self.max_short = -math.inf  # longest estimate of a job found short once planned (see QuietWalk)
        self._prefetched: tuple[int, EasyReservation | None] | None = None  # (head, its reservation)
        bf.failed.refresh(ctx.state)
        self.failed = bf.failed
        # the failed request ids as a live view of the memo (a membership test without a Python call)
        self.failed_keys = bf.failed.request_keys()
        self.room_ok.clear()  # requests with room now (until the next start)
        self.leftover.reset()
        self.requests: list[int] = ctx.queue.request_of
        self.estimate = ctx.env.estimate if ctx.env.estimator is not None else ctx.env.default_estimates().__getitem__

    def is_long(self, job: int) -> bool:
        return self.now + self.estimate(job) > self.shadow

    def prefetch(self, head: int) -> EasyReservation | None:
        """The reservation :meth:`_plan` will find for ``head``, got now (the state must not change
        before the walk plans)."""
        bf, ctx = self.bf, self.ctx
        res = bf.kept.get(bf, ctx, self.fw, head)
        bf.long_blocked.renew(res, bf.capacity.free_now(ctx.state), ctx.state)
        self._prefetched = (head, res)
        return res

    def _plan(self) -> None:
        """Get the head's reservation: from here on, jobs that end after its shadow time are long."""
        self.planned = True
        got = self._prefetched
        res = got[1] if got is not None and got[0] == self.head else self.prefetch(self.head)
        self.res = res
        self.shadow = math.inf if res is None else res.shadow

    def _cannot_fit(self, job: int, request: int, status: Status, room: int) -> int:
        self.failed.add(self.env, request, job, status, room)
        if self.head < 0:
            self.head = job
        return BLOCK

    def _started(self, job: int, placement: Placement) -> None:
        self.bf.start(self.ctx, self.fw, job, placement)
        self.leftover.reset()
        self.room_ok.clear()

    def consider(self, job: int, shape: int) -> int:
        bf, ctx, fw = self.bf, self.ctx, self.fw
        request = self.requests[job]
        est = self.estimate(job)
        long = self.now + est > self.shadow
        if self.planned and not long and est > self.max_short:
            self.max_short = est
        # What the free capacity says comes first (it blocks the whole shape), LongBlocked after: a
        # verdict must not depend on what the caches happen to hold, or the walk's reach would (a
        # SKIP passes one job, a BLOCK its whole shape, and both count against max_jobs).
        if request in self.failed_keys:  # cannot fit; admission only decides whether it is the head
            if self.head < 0 and (not self.check_admit or fw.admit(ctx, job).ok):
                self.head = job
            return BLOCK
        if self.check_admit:
            status = fw.admit(ctx, job)
            if not status.ok:
                ctx.reasons[shape] = status
                return BLOCK
        if request not in self.room_ok:
            if bf.job_gpus[job] > 0:
                room = fw.room_for(ctx, job)
                if room < bf.job_workers[job]:
                    return self._cannot_fit(job, request, _NO_ROOM, room)
            self.room_ok.add(request)
        if self.head >= 0 and not self.planned:
            self._plan()
            long = self.now + est > self.shadow
            if not long and est > self.max_short:
                self.max_short = est
        if long and request in self.long_blocked:
            return SKIP
        if not long:
            result = fw.place(ctx, job)
            if isinstance(result, Placement):
                if result.gpu_milli < FULL_GPU_MILLI and self.res is not None and result.gpus == 1:
                    # a short share: the GPUs it opens may hold long shares past the shadow time
                    free_before = ctx.state.free.copy()
                    self._started(job, result)
                    self.res.pin(free_before - ctx.state.free)
                else:
                    self._started(job, result)
                return STARTED
            if self.head < 0:
                ctx.reasons[shape] = result
            return self._cannot_fit(job, request, result, fw.room_for(ctx, job))
        res = self.res
        assert res is not None
        leftover = self.leftover
        leftover.get(ctx, res)
        g = bf.job_gpus[job]
        if g == 1 and bf.job_milli[job] < FULL_GPU_MILLI and bool((res.spare[0] < 0).any()):
            # a long share could stay on a GPU the reservation needs back (see EasyReservation.pin)
            bf.long_blocked.add(request)
            return LONG
        if leftover.whole:  # the room for its workers was checked on this capacity
            result = fw.place(ctx, job)
        elif g > 0 and leftover.slots(g, bf.job_type[job], bf.type_mask(self.env, job),
                                      bf.job_milli[job]) < bf.job_workers[job]:
            bf.long_blocked.add(request)
            return LONG
        else:
            result = fw.place(leftover.view(ctx), job)
        if not isinstance(result, Placement):
            bf.long_blocked.add(request)
            return LONG
        if result.gpu_milli < FULL_GPU_MILLI and result.gpus == 1:  # a share: what it takes of the free GPUs
            free_before = ctx.state.free.copy()
            self._started(job, result)
            res.take(result, bf.capacity.modelled_rows, free_before - ctx.state.free)
        else:
            self._started(job, result)
            res.take(result, bf.capacity.modelled_rows)
        res.accounted.add(job)
        return STARTED

    def run_static(self) -> None:
        """Queue order by merging the per-shape lists (as ``PendingQueue.walk``); a shape whose long
        jobs cannot start skips them without the full look (each still counts as looked at)."""
        bf, queue, state = self.bf, self.ctx.queue, self.ctx.state
        quiet = self.quiet
        quiet_ok = not self.check_admit and self.env.estimator is None
        if quiet_ok and quiet.repeats(self):
            return
        quiet.valid = False
        before = (bf.backfilled, bf.failed.changes, bf.long_blocked.changes)
        max_jobs = bf.max_jobs
        key, shape_jobs, consider, is_long = queue.key_of, queue.shape_jobs, self.consider, self.is_long
        now, estimate, requests, failed = self.now, self.estimate, self.requests, self.failed_keys
        # passing over a long job of a LongBlocked request without consider() skips admission
        long_blocked: Container[int] = self.long_blocked if not self.check_admit else ()
        room_ok = self.room_ok
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
        last = -1  # the last job looked at
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
            job = last = lst[i]
            looked += 1
            request = requests[job]
            if self.head >= 0 and request in failed:
                continue  # known not to fit the free capacity; the head is already found
            if request in long_blocked and request in room_ok and now + estimate(job) > self.shadow:
                # consider's verdict without the call (the most frequent look on a long queue): a
                # long job whose request has room in the free capacity (checked this pass, since
                # the last start) but cannot start in what the reservation leaves
                shadow = self.shadow
                i += 1
                short_only.add(shape)
            else:
                verdict = consider(job, shape)
                if verdict == BLOCK:
                    continue
                shadow = self.shadow  # known once the head is planned
                if verdict == STARTED:
                    if bf.exhausted(state):
                        return
                    lst = shape_jobs(shape)  # the started job left the list
                else:
                    i += 1
                    if verdict == LONG or (verdict == SKIP and is_long(job)):
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
                    est = estimate(j)
                    if now + est <= shadow:
                        self.max_short = max(self.max_short, est)
                        break
                    if top is not None and key(j) > top:
                        break
                    i += 1
                    looked += 1
                    last = j
            pos[shape] = i
            if i < len(lst):
                heappush(heap, (key(lst[i]), shape))
        if quiet_ok and looked >= max_jobs and before == (bf.backfilled, bf.failed.changes, bf.long_blocked.changes):
            frontier = key(last) if last >= 0 else ()
            if top_key is not None and top_key > frontier:
                frontier = top_key
            quiet.remember(self, frontier)

    def run_dynamic(self, dynamic: DynamicKey) -> None:
        bf, queue, state = self.bf, self.ctx.queue, self.ctx.state
        shapes = queue.shapes
        for looked, job in enumerate(queue.walk(dynamic), start=1):
            if looked > bf.max_jobs:
                return
            shape = int(shapes[job])
            verdict = self.consider(job, shape)
            if verdict == BLOCK:
                queue.block(shape)
            elif verdict == STARTED and bf.exhausted(state):
                return
