"""EASY backfill (Lifka's EASY, Slurm with one reservation): one pass over the queue.

* :class:`EasyCycle`: one pass over the queue: find the head, then backfill behind it.
* :class:`~kant.actions.backfill.quiet.QuietWalk` (re-exported here): the last walk that changed nothing,
  to skip the next one when it would repeat it.

The head's reservation is in :mod:`~kant.actions.backfill.reservation`, what it leaves for long jobs
in :mod:`~kant.actions.backfill.leftover`.
"""

from __future__ import annotations

import heapq
import math
import sys
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Container
from itertools import islice
from typing import Protocol

from kant.actions.backfill.host import Host
from kant.actions.backfill.leftover import Leftover, LongBlocked, ShortOfSlots
from kant.actions.backfill.long_run import LongRun
from kant.actions.backfill.quiet import QuietWalk
from kant.actions.backfill.reservation import EasyReservation, ReservationKeeper
from kant.actions.backfill.resume import HEAP_EMPTY, KeptWalk
from kant.framework.context import CycleContext
from kant.framework.queue import QueueViews
from kant.framework.runner import DynamicKey, Framework
from kant.framework.status import Status
from kant.model.fit import FULL_GPU_MILLI, is_share
from kant.model.state import Placement

__all__ = ["BLOCK", "LONG", "SKIP", "STARTED", "EasyCycle", "EasyHost", "LongRun", "QuietWalk"]

# what one look at a job decided
SKIP = 0  # not now, look at the next job of the shape
STARTED = 1
BLOCK = 2  # no job of this shape can start this cycle
LONG = 3  # no job of this request that ends after the shadow time can start this cycle

#: long jobs passed over one by one that start or extend a LongRun: fewer cost more to keep than to pass
#: over again (a 100,000-job run on 10,000 nodes enters the loop some 30 times a walk, mostly for a few jobs)
_MIN_RUN = 8

#: a walk keeps its looks for the next one (KeptWalk) only after a walk that looked at this many jobs:
#: keeping costs every walk, resuming pays only where walks are long (the Kant policy at 300k jobs
#: looks at 300 in most walks; the README default's walks mostly at one or two)
_MIN_RESUME = 100

_NO_ROOM = Status.unschedulable("no room for its workers in the free capacity", "backfill")


class EasyHost(Host, Protocol):
    """The backfill action as the EASY pass sees it: a :class:`Host` with the EASY pass's own state
    kept between cycles."""

    #: the head's reservation
    kept: ReservationKeeper
    #: requests whose long jobs cannot start in what the reservation leaves
    long_blocked: LongBlocked


# --- the walk ----------------------------------------------------------------------------------
class EasyCycle:
    """One EASY pass: look at queued jobs in order, find the head, then backfill behind it.

    What cannot fit is remembered across cycles while it provably still cannot: requests that do not
    fit the free capacity in the action's :class:`FailedRequests` memo (forgotten when capacity that
    could help them returns), requests that do not fit the capacity the reservation leaves in
    :class:`LongBlocked`."""

    def __init__(self, bf: EasyHost, ctx: CycleContext, fw: Framework) -> None:
        self.room_ok: set[int] = set()
        self.leftover = Leftover(bf.capacity, bf.long_blocked)
        self.long_blocked = bf.long_blocked.requests
        self.quiet = QuietWalk()
        # long runs per shape (see LongRun), with the queue's report of the edits since
        self.keep_runs = True  # off: every long job is passed over one by one (for the tests)
        self.jump_ok = True  # off: long jobs are passed over only up to the merge's next key (for the tests)
        self.min_run = _MIN_RUN
        self.runs: dict[int, LongRun] = {}
        self.planned = False
        self.res: EasyReservation | None = None
        self.shadow = math.inf
        # the last walk's looks, to resume from, and what it planned with (see KeptWalk). What it
        # needs between walks lives there, not here: an EasyCycle holds 27 attributes, and CPython
        # 3.11 keeps an object's attributes in its class's shared keys only up to 30 (past that
        # every ``self.x`` in the walk is a dict lookup: 32 of them cost 0.6 % more instructions on
        # ``cg.py philly-80 kant 20000``)
        self.kept_walk = KeptWalk(_MIN_RESUME)
        self._edits: dict[int, int] = {}
        self._watched: object = None  # the queue the edits are watched on
        self._queue_views = QueueViews.of(ctx.queue)
        self.env = ctx.env
        self.estimate: Callable[[int], float] = (
            self.env.estimate if self.env.estimator is not None else self.env.default_estimates().__getitem__)
        self.failed = bf.failed
        self.failed_keys = bf.failed.request_keys()
        self.reset(bf, ctx, fw)

    def reset(self, bf: EasyHost, ctx: CycleContext, fw: Framework) -> None:
        """Start a new pass (the object is reused from cycle to cycle)."""
        self.bf, self.ctx, self.fw = bf, ctx, fw
        self.check_admit = bool(fw.admitters)
        env = ctx.env
        if env is not self.env or env.estimator is not None:
            # the store's estimate list grows in place: got once per environment without an estimator
            self.env = env
            self.estimate = env.estimate if env.estimator is not None else env.default_estimates().__getitem__
        self.now = ctx.now
        self.head = -1
        self.planned = False
        self.res = None
        self.shadow = math.inf  # jobs ending after it are "long"
        self.max_short = -math.inf  # longest estimate of a job found short once planned (see QuietWalk)
        self._prefetched: tuple[int, EasyReservation | None] | None = None  # (head, its reservation)
        failed = bf.failed
        if failed.seen != ctx.state.release_count:  # else refresh has nothing to replay (its first test)
            failed.refresh(ctx.state)
        if failed is not self.failed:
            self.failed = failed
            # the failed request ids as a live view of the memo (a membership test without a Python call)
            self.failed_keys = failed.request_keys()
        self.room_ok.clear()  # requests with room now (until the next start)
        if self.leftover.free is not None:  # else it holds nothing (Leftover fills only after get)
            self.leftover.reset()
        self.requests: list[int] = ctx.queue.request_of

    def _run_of(self, shape: int) -> LongRun | None:
        """``shape``'s long run, cut to the positions that still hold the same jobs."""
        run = self.runs.get(shape)
        low = self._edits.pop(shape, None)
        if run is not None and low is not None:
            run.cut(low, self.estimate)
        return run

    def _keep_run(self, shape: int, lo: int, hi: int) -> None:
        """The walk is at index ``hi`` of ``shape``'s list, and every job it passed there from index
        ``lo`` was long: ``shape``'s long run is extended up to there (from its end: the jobs between
        were passed too, earlier in the walk), or a new one starts at ``lo`` (not for fewer than
        ``min_run`` jobs). What the run holds is checked where it is used (its jobs' estimates and
        keys, the queue's edits), not assumed from here."""
        queue = self.ctx.queue
        base = queue.position_base(shape)
        run = self._run_of(shape)
        if run is not None and run.start <= base + lo:
            end = run.start + len(run.jobs) - base  # the index its end stands at
            if end < 0:  # all its jobs left the list's front
                run = self.runs[shape] = LongRun(base)
                end = 0
            lo = end
        elif hi - lo >= self.min_run:
            run = self.runs[shape] = LongRun(base + lo)
        else:
            return
        if lo >= hi:
            return
        jobs = list(islice(queue.shape_jobs(shape), lo, hi))  # deque: one skip
        run.jobs += jobs
        run.keys += map(queue.key_of, jobs)
        mn = min(map(self.estimate, jobs))
        if mn < run.min_est:
            run.min_est = mn

    def is_long(self, job: int) -> bool:
        return self.now + self.estimate(job) > self.shadow

    def prefetch(self, head: int) -> EasyReservation | None:
        """The reservation :meth:`plan` will find for ``head``, got now (the state must not change
        before the walk plans)."""
        bf, ctx = self.bf, self.ctx
        res = bf.kept.get(bf, ctx, self.fw, head)
        bf.long_blocked.renew(res, bf.capacity.free_now(ctx.state), ctx.state)
        self._prefetched = (head, res)
        return res

    def plan(self) -> None:
        """Get the head's reservation: from here on, jobs that end after its shadow time are long."""
        self.planned = True
        got = self._prefetched
        res = self.res = got[1] if got is not None and got[0] == self.head else self.prefetch(self.head)
        self.shadow = math.inf if res is None else res.shadow
        self.kept_walk.last_plan = res  # what the next walk may resume under

    def room(self, job: int) -> int:
        """-1 when the free capacity may hold ``job``'s workers (as far as :meth:`Framework.room_for`
        tells), else the room it has."""
        if self.bf.job_gpus[job] > 0:
            room = self.fw.room_for(self.ctx, job)
            if room < self.bf.job_workers[job]:
                return room
        return -1

    def has_room(self, job: int) -> bool:
        return self.room(job) < 0

    def _cannot_fit(self, job: int, request: int, status: Status, room: int) -> int:
        self.failed.add(self.env, request, job, status, room)
        if self.head < 0:
            self.head = job
        return BLOCK

    def _started(self, job: int, placement: Placement) -> None:
        self.bf.start(self.ctx, self.fw, job, placement)
        if self.leftover.free is not None:
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
            room = self.room(job)
            if room >= 0:
                return self._cannot_fit(job, request, _NO_ROOM, room)
            self.room_ok.add(request)
        if self.head >= 0 and not self.planned:
            self.plan()
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
        placed = self.long_placement(job, request)
        if placed is None:
            return LONG
        res = self.res
        assert res is not None
        if placed.gpu_milli < FULL_GPU_MILLI and placed.gpus == 1:  # a share: what it takes of the free GPUs
            free_before = ctx.state.free.copy()
            self._started(job, placed)
            res.take(placed, bf.capacity.modelled_rows, free_before - ctx.state.free)
        else:
            self._started(job, placed)
            res.take(placed, bf.capacity.modelled_rows)
        res.accounted.add(job)
        return STARTED

    def long_placement(self, job: int, request: int) -> Placement | None:
        """Where long ``job`` can start in what the reservation leaves (its request has room in the
        free capacity and is not in LongBlocked); None: it cannot, and its request goes into
        LongBlocked."""
        bf, ctx, fw = self.bf, self.ctx, self.fw
        res = self.res
        assert res is not None
        leftover = self.leftover
        leftover.get(ctx, res)
        g = bf.job_gpus[job]
        if g == 1 and bf.job_milli[job] < FULL_GPU_MILLI and bool((res.spare[0] < 0).any()):
            # a long share could stay on a GPU the reservation needs back (see EasyReservation.pin)
            bf.long_blocked.add(request)
            return None
        if leftover.whole:  # the room for its workers was checked on this capacity
            result = fw.place(ctx, job)
        else:
            if g > 0:
                t, milli, w = bf.job_type[job], bf.job_milli[job], bf.job_workers[job]
                mask = bf.type_mask(self.env, job)
                n = leftover.slots(g, t, mask, milli)
                if n < w:  # too few worker slots (for whole GPUs, LongBlocked keeps the count)
                    bf.long_blocked.add(request, None if is_share(g, milli) else ShortOfSlots(g, t, mask, n, w))
                    return None
            result = fw.place(leftover.view(ctx), job)
        if not isinstance(result, Placement):
            bf.long_blocked.add(request)
            return None
        return result

    def _rewind(self, ahead: dict[int, int], pos: dict[int, int], heap: list[tuple[tuple[float, ...], int]],
                started: tuple[float, ...]) -> None:
        """A job of key ``started`` started, so what has room changed (``room_ok`` was cleared): each
        shape whose long jobs were passed beyond the merge's progress (``ahead``: the shape and the
        index its pass began at) goes back to its first job after ``started``, where a walk that
        merges one key at a time stands now, and is merged from there (its heap entry replaced: a
        shape has at most one). Up to there both walks passed the same long jobs: nothing started in
        between, so each still had room and was still long."""
        queue = self.ctx.queue
        key = queue.key_of
        moved: dict[int, tuple[tuple[float, ...], int]] = {}
        for shape, lo in ahead.items():
            lst = queue.shape_jobs(shape)
            i = pos[shape]
            back = bisect_right(lst, started, lo, i, key=key)
            if back < i:
                pos[shape] = back
                moved[shape] = (key(lst[back]), shape)
        ahead.clear()
        if moved:
            heap[:] = [entry for entry in heap if entry[1] not in moved]
            heap += moved.values()
            heapq.heapify(heap)

    def _merge_start(self) -> tuple[list[tuple[tuple[float, ...], int]], list[tuple[float, ...]]]:
        """The walk's first heap, (each pending shape's first key, the shape), and the first keys of
        the shapes left out of it (looked at in passing). When the queue's first job is known not to
        fit it is the head, and a shape whose first job is known not to fit would only be looked at
        once and dropped: such shapes are left out."""
        queue, requests, failed = self.ctx.queue, self.requests, self.failed_keys
        views = self._queue_views
        if views.queue is not queue:
            views = self._queue_views = QueueViews.of(queue)
        heads = views.heads  # (each shape's first key, the shape)
        least = queue.head_entry()  # the least of them: the queue's first job's (kept by the queue)
        if least is None:
            return [], []
        left_out: list[tuple[float, ...]] = []
        heap: list[tuple[tuple[float, ...], int]]
        first = views.lists[least[1]][0]  # the queue's first job
        if requests[first] in failed and (not self.check_admit or self.fw.admit(self.ctx, first).ok):
            self.head = first
            shape_request = views.shape_requests  # a shape's jobs all have its request
            heap = []
            for entry in heads.values():
                if shape_request[entry[1]] in failed:
                    left_out.append(entry[0])
                else:
                    heap.append(entry)
        else:
            heap = list(heads.values())
        heapq.heapify(heap)
        return heap, left_out

    def run_static(self) -> None:
        """Queue order by merging the per-shape lists (as ``PendingQueue.walk``); a shape whose long
        jobs cannot start skips them without the full look (each still counts as looked at).

        Kept in one frame (about 150 lines), for reading more than for speed: the walk's counters
        (position in the shape, jobs looked at, the limit, left-out shapes passed, the last job) are
        one state machine that the merge and the inner pass over long jobs both advance. Moving that
        inner pass into a method (tried) passes six of them in and out on every call: 31,426 calls
        in a Philly replay with the ``kant`` policy, about 0.44 us each (some 14 ms, below the
        noise of ``bench/bench_philly.py``), and a loop that no longer reads in one place."""
        bf, queue, state = self.bf, self.ctx.queue, self.ctx.state
        quiet = self.quiet
        quiet_ok = not self.check_admit and self.env.estimator is None
        if quiet_ok and quiet.valid and quiet.repeats(self):
            return
        quiet.valid = False
        keep_runs = self.keep_runs and self.env.estimator is None
        runs, min_run, edits = self.runs, self.min_run, self._edits
        if keep_runs and self._watched is not queue:
            self._watched = queue
            self._edits = queue.watch_edits()
            self.runs.clear()
        before = (bf.backfilled, bf.failed.changes, bf.long_blocked.changes)
        max_jobs = bf.max_jobs
        heap, left_out = self._merge_start()  # (sets self._queue_views to this queue's)
        _, key, lists, bases = self._queue_views[:4]
        shape_jobs = lists.get  # (shape, ()): the shape's jobs
        consider, is_long = self.consider, self.is_long
        now, estimate, requests, failed = self.now, self.estimate, self.requests, self.failed_keys
        # passing over a long job of a LongBlocked request without consider() skips admission
        long_blocked: Container[int] = self.long_blocked if not self.check_admit else ()
        room_ok = self.room_ok
        heappop, heappush = heapq.heappop, heapq.heappush
        n_left = len(left_out)
        # Each job the walk looks at counts once, so with fewer queued jobs than the limit the limit
        # cannot bind and which long jobs are passed first does not matter, only which jobs consider()
        # sees and in what order: a shape's long jobs are then passed up to its next short job, past
        # the merge's next key (``ahead``), and a start sends such shapes back (``_rewind``). Not with
        # admission (consider() would admit the long jobs the merge reaches after a start).
        jump = self.jump_ok and not self.check_admit and len(queue.queued) < max_jobs - n_left
        ahead: dict[int, int] = {}
        pos: dict[int, int] = {}
        short_only: set[int] = set()
        # ``looked`` counts a left-out shape once the walk passes its first key. That count matters
        # only near max_jobs: until ``looked`` (without them) reaches max_jobs - n_left, no limit test
        # can change, so they are sorted and counted only then (``exact``), by bisection.
        exact = not n_left and not jump  # with jump, no limit test (``looked`` may count a job twice)
        limit = max_jobs - n_left if not jump else sys.maxsize  # with jump, ``looked`` may count a job twice
        looked = 0
        passed = 0  # left-out shapes passed so far (once exact)
        top_key: tuple[float, ...] | None = None
        last = -1  # the last job looked at
        # the looks at shapes whose long jobs are passed over, kept for the next walk (see KeptWalk),
        # up to the first start or the first limit test that can bind; ``fb``: looks at shapes a
        # fresh walk would leave out next time (their request is in the memo)
        kept = self.kept_walk
        logging = kept.long_walk and quiet_ok and not jump and self.head >= 0
        if logging:
            log, limit0, fb = kept.entries.append, limit, 0
            bound: tuple[float, ...] | None = None
            got = kept.resume(self, heap, left_out, max_jobs)
            if got is not None:
                heap, pos, short_only, looked, last, top_key = got[:6]
                room_ok |= got.room_ok
        elif kept.watching:
            kept.forget()
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
            if ahead:
                ahead.pop(shape, None)  # the merge has caught up with it
            if exact:
                while passed < n_left and left_out[passed] < top_key:
                    passed += 1
                    looked += 1
                if looked >= max_jobs:
                    break
            lst = shape_jobs(shape, ())
            i = pos.get(shape, 0)
            if i >= len(lst):
                continue
            job = last = lst[i]
            looked += 1
            request = requests[job]
            if self.head >= 0 and request in failed:
                if logging:
                    fb += 1
                continue  # known not to fit the free capacity; the head is already found
            if request in long_blocked and request in room_ok and now + estimate(job) > self.shadow:
                # consider's verdict without the call (the most frequent look on a long queue): a
                # long job whose request has room in the free capacity (checked this pass, since
                # the last start) but cannot start in what the reservation leaves
                shadow = self.shadow
                i += 1
                short_only.add(shape)
                verdict = SKIP
            else:
                verdict = consider(job, shape)
                if verdict == BLOCK:
                    if logging:
                        fb += 1
                    continue
                shadow = self.shadow  # known once the head is planned
                if verdict == STARTED:
                    logging = False
                    if bf.exhausted(state):
                        kept.long_walk = looked >= kept.min_looks
                        return
                    lst = shape_jobs(shape, ())  # the started job left the list
                    if ahead:
                        self._rewind(ahead, pos, heap, top_key)
                else:
                    i += 1
                    if verdict == LONG or (verdict == SKIP and is_long(job)):
                        short_only.add(shape)
            if shape in short_only:  # skip long jobs, but only those ahead of every other shape's
                top = bound = heap[0][0] if heap else None
                if jump and request in room_ok:  # not right after a start (see _rewind)
                    top = None
                i_entry = i
                lo = i if verdict == STARTED else i - 1  # the first long job of this look
                n = len(lst)
                run = runs.get(shape) if keep_runs else None
                if run is not None and i < n and looked < limit:
                    # the long jobs passed over in earlier walks, at once (see LongRun)
                    at = bases.get(shape, 0) + i
                    if shape in edits:  # cut to the positions that still hold the same jobs
                        run.cut(edits.pop(shape), estimate)
                    if now + run.min_est <= shadow:  # some are short now: keep those before the first
                        run.cut_short(now, shadow, estimate)
                    off = at - run.start
                    end = len(run.jobs)
                    if 0 <= off < end:
                        if top is not None:
                            end = bisect_right(run.keys, top, off)
                        t = min(end - off, limit - looked)
                        if t > 0:
                            i += t
                            looked += t
                            last = run.jobs[off + t - 1]
                        if t == end - off < len(run.jobs) - off:
                            # stopped by the next key inside the run: the job there is long and above
                            # it, so the pass below would stop at once (its limit test, if due, is
                            # the merge's next one: the same, with the same top_key)
                            n = i
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
                if keep_runs and (i - lo >= min_run if run is None else
                                  run.start + len(run.jobs) < bases.get(shape, 0) + i):
                    self._keep_run(shape, lo, i)
                if jump and bound is not None and i > i_entry and key(lst[i - 1]) > bound:
                    ahead[shape] = i_entry
            pos[shape] = i
            if i < len(lst):
                heappush(heap, (key(lst[i]), shape))
            if logging:  # a look that passed the shape's long jobs over (a start ended the logging)
                if looked < limit0:
                    log((shape, job, bases.get(shape, 0) + i, looked - fb, last, self.max_short,
                         bound if bound is not None else HEAP_EMPTY))
                else:
                    logging = False
        kept.long_walk = looked >= kept.min_looks
        if quiet_ok and not jump and looked >= max_jobs and before == (
                bf.backfilled, bf.failed.changes, bf.long_blocked.changes):
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
