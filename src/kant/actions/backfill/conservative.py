"""Conservative backfill: every job looked at that cannot start now gets a reservation.

* :class:`Conservative`: one pass (:meth:`Conservative.run`) and the plan it keeps for the next pass.
* :class:`ConsPlan`: a pass's plan, and when it still holds.
* :class:`Profile`: free capacity over time, per node, with per-request worker-slot counts cached.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kant.actions.backfill.fit import MANY, BoolArray, FloatArray, IntArray, share_milli, share_opens, worker_slots
from kant.actions.backfill.host import Host
from kant.actions.backfill.releases import events
from kant.framework.context import CycleContext
from kant.framework.queue import PendingQueue
from kant.framework.runner import Framework
from kant.model.state import ClusterState, Placement

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["ConsPlan", "Conservative", "Profile"]


class Conservative:
    """Conservative passes, and the plan kept from one pass to the next (see :class:`ConsPlan`)."""

    def __init__(self) -> None:
        self.plan: ConsPlan | None = None

    def after_sync(self, early: bool, added: list[tuple[int, float]]) -> None:
        """The release mirror caught up: drop the plan if a job left early or one it did not start runs."""
        plan = self.plan
        if plan is not None and (early or any(job not in plan.accounted for job, _ in added)):
            self.plan = None

    def run(self, bf: Host, ctx: CycleContext, fw: Framework) -> None:
        env, queue, now, cap = ctx.env, ctx.queue, ctx.now, bf.capacity
        shapes, requests = queue.shapes, queue.requests
        dynamic = fw.dynamic_key(now)
        bf.sync(ctx)  # drops the kept plan if a job left early or an unplanned one started
        cached, self.plan = self.plan, None
        # the plan of the last pass still holds when the future went as planned (see ConsPlan)
        cacheable = (
            dynamic is None and not fw.admitters and env.estimator is None and math.isinf(bf.args.window_s)
        )
        prof: Profile | None = None
        reserved: list[int] = []
        looked = 0
        walk: Iterator[int] | None = None
        if cached is not None and cacheable and cached.still_valid(bf, ctx):
            start = _queue_prefix(queue, cached.reserved)
            if start is not None:  # the queue still begins with the reserved jobs: go on behind them
                prof, reserved, looked = cached.prof, cached.reserved, len(cached.reserved)
                walk = queue.walk(start=start)
        if walk is None:
            walk = queue.walk(dynamic)
        accounted = set() if prof is None else cached.accounted  # type: ignore[union-attr]
        min_start = math.inf if prof is None else cached.min_start  # type: ignore[union-attr]
        pending: list[tuple[int, float]] = []  # jobs that cannot start now, not yet reserved
        no_room: set[int] = set()  # requests that do not fit the free capacity now
        shortest_fail: dict[int, float] = {}  # request -> shortest estimate that could not start now
        head_done = bool(reserved)
        try:
            for job in walk:
                looked += 1
                if looked > bf.max_jobs:
                    return
                shape, request = int(shapes[job]), int(requests[job])
                status = fw.admit(ctx, job)
                if not status.ok:
                    ctx.reasons[shape] = status
                    queue.block(shape)
                    continue
                d = env.estimate(job)
                if request in no_room or d >= shortest_fail.get(request, math.inf):
                    pending.append((job, d))
                    continue
                if bf.job_gpus[job] > 0 and fw.room_for(ctx, job) < bf.job_workers[job]:
                    no_room.add(request)
                    pending.append((job, d))
                    continue
                if prof is None:
                    bf.computed += 1
                    t, node, amt = events(bf.releases, cap, ctx)
                    prof = Profile(now, cap.free_now(ctx.state), t, node, amt, cap.modelled, ctx.state)
                    accounted.update(j for j, _ in ctx.started)
                req = cap.request_vector(job, bf.job_gpus[job], bf.job_milli[job])
                if not prof.fits_now(req, bf.job_type[job], bf.type_mask(env, job), bf.job_workers[job], d):
                    # not even without the reservations still to make: no need to make them yet
                    shortest_fail[request] = min(shortest_fail.get(request, math.inf), d)
                    pending.append((job, d))
                    continue
                for pjob, pd in pending:
                    when = self._plan(bf, ctx, fw, prof, pjob, pd, head=not head_done, can_start=False)
                    head_done = True
                    reserved.append(pjob)
                    min_start = min(min_start, when)
                pending.clear()
                when = self._plan(bf, ctx, fw, prof, job, d, head=not head_done, can_start=True)
                if when == -math.inf:  # started now
                    accounted.add(job)
                    if bf.exhausted(ctx.state):
                        return
                else:
                    head_done = True
                    reserved.append(job)
                    min_start = min(min_start, when)
                    shortest_fail[request] = min(shortest_fail.get(request, math.inf), d)
        finally:
            if prof is not None and cacheable:
                self.plan = ConsPlan(prof, reserved, accounted, min_start, ctx.state.down_gpus, ctx.state.up.copy(),
                                     share_token(ctx.state))

    def _plan(
        self, bf: Host, ctx: CycleContext, fw: Framework, prof: Profile, job: int, d: float, *, head: bool,
        can_start: bool,
    ) -> float:
        """Start ``job`` now if the profile allows, else reserve its earliest start. Returns -inf if
        it started, else the reserved start time (inf: no reservation).

        Starting now and the head's reservation use the policy's placement on the window's capacity;
        other reservations take worker slots best-fit (nodes with the fewest slots first)."""
        env, cap, args = ctx.env, bf.capacity, bf.args
        w = bf.job_workers[job]
        req = cap.request_vector(job, bf.job_gpus[job], bf.job_milli[job])
        share = len(req) > len(cap.attrs)  # a GPU share: see kant.actions.backfill.fit
        tmask = bf.type_mask(env, job)
        type_code = bf.job_type[job]
        horizon = ctx.now + args.window_s
        last = prof.last_finite()
        tries = 0
        misses = 0
        jumped = False  # the tries ran out and the last one went to the end of the profile
        first_row = 0 if can_start else 1
        cands = prof.candidates(req, type_code, tmask, w, d, first_row, horizon, exact=False)
        i = 0
        while i < len(cands):
            k, end_row = cands[i]
            i += 1
            if tries == args.max_place_tries - 1 and k < last and prof.times[last] <= horizon:
                k, end_row = last, last + 1  # the final try: the end of the profile
                jumped = True
            avail = prof.window_min(k, end_row)
            # the open GPU slots count for a start now only (a reservation later takes whole GPUs)
            slots = cap.worker_slots(avail, req, tmask, prof.share_free(req) if share and k == 0 else None)
            if int(slots.sum()) < w:
                if k == last:
                    break
                misses += 1
                if misses == 3 and w == 1:  # capacity moves between nodes: find exact windows at once
                    cands = prof.candidates(req, type_code, tmask, w, d, k + 1, horizon, exact=True)
                    i = 0
                continue
            tries += 1
            if k == 0 or head:
                view = ctx if (k == 0 and np.array_equal(avail, cap.free_now(ctx.state))) else \
                    cap.view(ctx, avail, shares=k == 0)
                result = fw.place(view, job)
                usage = cap.usage(result) if isinstance(result, Placement) else None
                if share and k == 0 and isinstance(result, Placement) and bool(
                    (prof.avail[0, : prof.size].min(axis=0) < share_opens(ctx.state, result)).any()
                ):
                    usage = None  # the GPUs it would open are not free for good (see below)
            else:
                result = None
                usage = cap.best_fit(slots, w, req)
            if usage is not None:
                if k == 0:
                    assert isinstance(result, Placement)
                    if share:
                        # the completely free GPUs it really took (none for workers on open GPU
                        # slots; checked free in every row above) are held for
                        # good: other shares may join them and stay after it ends; CPU and memory
                        # until its end
                        free_before = ctx.state.free.copy()
                        bf.start(ctx, fw, job, result)
                        gpus = np.zeros_like(usage)
                        gpus[0] = free_before - ctx.state.free
                        usage[0] = 0
                        prof.hold(0, ctx.now + d, usage)
                        prof.hold(0, math.inf, gpus)
                    else:
                        bf.start(ctx, fw, job, result)
                        prof.hold(0, ctx.now + d, usage)
                    return -math.inf
                when = float(prof.times[k])
                bf.approximated += jumped
                bf.record(job, when, head)
                prof.hold(k, when + d, usage)
                return when
            if k == last:
                break
            if tries >= args.max_place_tries:
                bf.approximated += 1  # out of tries before the end of the profile: no reservation
                break
        return math.inf


def share_token(state: ClusterState) -> int:
    """Changes whenever the GPU-share books change (0 while no share was ever booked)."""
    return int(state.shares.version.sum()) if state.shares.slots else 0


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


@dataclass
class ConsPlan:
    """A conservative pass's plan, kept for the next pass. A new pass would make the same
    reservations (same jobs in the same order, same times and capacity) if the future went as
    planned: no job left before its expected end, every job that entered ``running`` is one the plan
    started, nothing else started, no node went down or came back, no reservation has come due, the
    profile moved to now equals the capacity really free, and the queue still begins with the
    reserved jobs in order (checked by the caller). Only for static queue orders without admission
    plugins, runtime estimator or planning horizon, where nothing else can change the plan."""

    prof: Profile
    reserved: list[int]  # jobs looked at and reserved (or passed over), in queue order
    accounted: set[int]  # jobs in the profile that were not running when it was built
    min_start: float  # earliest reservation
    down_gpus: int
    up: BoolArray
    shares: int  # share_token of the state the plan was made on

    def still_valid(self, bf: Host, ctx: CycleContext) -> bool:
        """The checks left after :meth:`Backfill.sync` (which drops the plan when a job left early
        or a job the plan did not start is running)."""
        state, now = ctx.state, ctx.now
        if ctx.started or self.min_start <= now or state.down_gpus != self.down_gpus:
            return False
        if share_token(state) != self.shares:  # the open GPU slots changed
            return False
        if not np.array_equal(state.up, self.up):
            return False
        self.prof.advance(now)
        return bool(np.array_equal(self.prof.avail[:, 0, :], bf.capacity.free_now(state)))


@dataclass
class _SlotCache:
    """Per-row worker-slot counts of one request; rows ``[lo, hi)`` are stale."""

    counts: IntArray
    req: tuple[int, ...]
    tmask: BoolArray | None
    lo: int = 1 << 62
    hi: int = 0


class Profile:
    """Free capacity over time: ``avail[:, k, :]`` (resources x nodes) holds on ``[times[k],
    times[k+1])`` for ``k < size``. Row 0 is the capacity free now; later rows add releases and
    subtract reservations. Rows share a time when jobs overran (their release is "right after now").
    Rows live in a buffer with spare room, and per-request worker-slot counts per row are cached and
    updated only on the rows a hold changes."""

    def __init__(
        self, now: float, free_now: IntArray, t: FloatArray, node: IntArray, amt: IntArray, modelled: IntArray,
        state: ClusterState | None = None,
    ) -> None:
        uniq, inv = np.unique(t, return_inverse=True)
        n_res, n_nodes = free_now.shape
        size = 1 + len(uniq)
        cap = size + 32
        self.modelled = modelled
        self._state = state  # the live state: its open GPU slots, for a GPU share's counts
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

    def share_free(self, req: tuple[int, ...]) -> IntArray | None:
        """For a GPU share's request vector, the workers the open GPU slots hold now, per node; else None.

        The slot counts of a share (:meth:`row_slots`, :meth:`fits_now`, :meth:`candidates`) add
        them to every row: the open slots' room now is there later too as far as this plan goes (a
        slot only gains room as shares leave; reservations in later rows take completely free GPUs
        only). A reservation after now then checks and places on whole GPUs only (the caller)."""
        if len(req) <= len(self.modelled) or self._state is None:
            return None
        return self._state.shares.workers(share_milli(req, len(self.modelled)))

    def _count(self, a: int, b: int, req: tuple[int, ...], tmask: BoolArray | None) -> IntArray:
        slots = worker_slots(self.avail[:, a:b, :], req, tmask, self.modelled, self.share_free(req))
        out: IntArray = np.minimum(slots.sum(axis=1), MANY)
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
            short = worker_slots(self.avail[:, :size, :], req, tmask, self.modelled, self.share_free(req)) < 1
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
        return int(worker_slots(avail, req, tmask, self.modelled, self.share_free(req)).sum()) >= w

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
