"""The EASY walk's verdicts kept between cycles: :class:`KeptWalk`.

A walk over a long queue behind a blocked head (the Kant policy at scale: 300 looks, most of them at
long jobs passed over) is mostly redone after each event with the same verdicts in the same order.
:class:`KeptWalk` keeps the merge's progress after each of those looks and lets the next walk start
from the last point that no event since can have changed, with the state a fresh walk would have
there (what the walk skipped had no side effect: the verdicts it relies on are re-checked here).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable
from heapq import heapify
from operator import itemgetter
from typing import TYPE_CHECKING, NamedTuple, Protocol

from kant.framework.queue import PendingQueue, SortKey

if TYPE_CHECKING:
    from collections.abc import Container

    from kant.actions.backfill.reservation import EasyReservation
    from kant.framework.context import CycleContext
    from kant.model.state import Placement

__all__ = ["HEAP_EMPTY", "KeptWalk", "Resumed", "Walker"]


class Walker(Protocol):
    """What a :class:`KeptWalk` reads and calls of the walk it keeps and resumes
    (:class:`kant.actions.backfill.easy.EasyCycle`, which imports this module: typed here, not
    imported back)."""

    max_short: float  # the longest estimate of a job found short once planned (the resume sets it)

    @property
    def ctx(self) -> CycleContext: ...
    @property
    def head(self) -> int: ...
    @property
    def now(self) -> float: ...
    @property
    def res(self) -> EasyReservation | None: ...
    @property
    def requests(self) -> list[int]: ...
    @property
    def failed_keys(self) -> Container[int]: ...
    @property
    def long_blocked(self) -> Container[int]: ...
    @property
    def estimate(self) -> Callable[[int], float]: ...

    def has_room(self, job: int) -> bool: ...
    def plan(self) -> None: ...
    def long_placement(self, job: int, request: int) -> Placement | None: ...

#: one kept look: (shape, its job, the shape's position after the look and the long jobs passed with
#: it, jobs looked at so far less those of shapes a fresh walk leaves out, the last job looked at,
#: the walk's ``max_short``, the smallest key left in the merge's heap after the pop)
Entry = tuple[int, int, int, int, int, float, SortKey]
#: the bound of a look after which the heap was empty: above every key (they begin with a finite float)
HEAP_EMPTY: SortKey = (math.inf,)
_BOUND = itemgetter(6)


def _no_key(job: int) -> SortKey:  # pragma: no cover - not watching a queue yet, so never told of edits
    return ()

_LOOKED = itemgetter(3)
_JOB, _SHAPE_AT = itemgetter(1), itemgetter(0, 2)


class Resumed(NamedTuple):
    """The walk's state at the point it resumes from (what a fresh walk would hold there)."""

    heap: list[tuple[SortKey, int]]
    pos: dict[int, int]
    short_only: set[int]
    looked: int
    last: int
    top_key: SortKey
    room_ok: set[int]  # the requests looked at: each has room


class KeptWalk:
    """The last EASY walk's looks at shapes whose long jobs it passed over (``entries``, one per pop
    of the merge's heap, in walk order), up to its first start, its first limit test that could
    bind, or the end of the walk.

    A fresh walk repeats the kept looks ``0 .. k-1`` exactly, with the same state after them, when:

    * the head is the same (found in the failure memo when the walk begins, as before) and gets the
      same reservation object, unchanged (so the same shadow time);
    * no job was pushed or removed at a key at or below the heap's smallest key after look ``k-1``
      (``bound``: nondecreasing along the walk), so the jobs looked at, the heap's smallest key at
      each look and every shape's next job up to there are the same; and every shape the kept looks
      did not reach (a new one, one the memo left out before and no longer does) begins above it;
    * every request looked at is still outside the failure memo, still has room for its workers in
      the free capacity (tested again, as the walk would) and is still in :class:`LongBlocked`
      (after the reservation's renewal); so each look passes its job over again, with no side effect;
    * no job found short has become long: ``now + max_short <= shadow`` (a long job stays long);
    * the jobs looked at (without those of shapes left out, which a fresh walk does not look at
      until the limit is near) stay below the limit that makes the walk count left-out shapes.

    Shapes whose first job is known not to fit are not kept (a fresh walk leaves them out when their
    request is in the memo; otherwise they begin below ``bound`` and the resume stops before them).

    The queue tells this object of every push and removal (it is a :class:`QueueObserver`); the
    walk calls :meth:`resume` when it starts keeping (from then on the queue's edits count) and
    appends entries."""

    def __init__(self, min_looks: int) -> None:
        self.entries: list[Entry] = []
        self.head = -1  # the head of the walk the entries are of (it planned with last_plan)
        #: the reservation the last walk that planned planned with (EasyCycle.plan sets it; a
        #: reservation is never given a new serial, so the same object is the same reservation)
        self.last_plan: EasyReservation | None = None
        #: the walk keeps its looks only after a walk that looked at this many jobs or more (the
        #: tests: 1 keeps after every walk, ``sys.maxsize`` never)
        self.min_looks = min_looks
        self.long_walk = False  # the last walk looked at min_looks jobs or more
        self._queue: PendingQueue | None = None
        #: told of the queue's edits: from the walk that may keep entries until they are forgotten
        #: (a push or removal costs a call only while something may be kept)
        self.watching = False
        self._key: Callable[[int], SortKey] = _no_key
        self._low: SortKey | None = None  # the lowest key pushed or removed since begin()
        self._left: set[SortKey] = set()  # the first keys of the shapes the walk left out

    # --- the queue's edits (QueueObserver) --------------------------------------------------------
    def edited(self, job: int) -> None:
        """``job`` was pushed or removed."""
        key = self._key(job)
        low = self._low
        if low is None or key < low:
            self._low = key

    added = removed = edited

    # --- the walk ---------------------------------------------------------------------------------
    def forget(self) -> None:
        """Keep nothing, and stop watching the queue until the next :meth:`resume`."""
        self.entries.clear()
        if self.watching:
            assert self._queue is not None
            self._queue.unobserve(self)
            self.watching = False

    def resume(self, cycle: Walker, start: list[tuple[SortKey, int]], left_out: list[SortKey],
               max_jobs: int) -> Resumed | None:
        """The state after the kept looks ``cycle`` (reset; its head found in the memo, nothing looked
        at yet) repeats (None: none; it walks from the beginning), and from here on the looks it
        passes long jobs at are kept after those. ``start``: the walk's first heap, (first key,
        shape) of each shape it does not leave out; ``left_out``: the first keys of those it leaves
        out. Does on the way what a fresh walk does at the kept looks (plans the head, tests each
        request's room and fills :class:`LongBlocked`), in their order."""
        queue = cycle.ctx.queue
        if queue is not self._queue:  # a new queue: nothing kept
            self.forget()
            self._queue = queue
            self._key = queue.key_of
        if not self.watching:
            queue.observe(self)
            self.watching = True
        k, got = self._resume(cycle, start, left_out, max_jobs)
        del self.entries[k:]
        self.head = cycle.head
        self._left = set(left_out)
        self._low = None
        return got

    def _resume(self, cycle: Walker, start: list[tuple[SortKey, int]], left_out: list[SortKey],
                max_jobs: int) -> tuple[int, Resumed | None]:
        entries = self.entries
        if not entries or cycle.head != self.head:
            return 0, None
        k = len(entries)
        if self._low is not None:
            k = bisect_left(entries, self._low, hi=k, key=_BOUND)  # those with bound < low
        k = bisect_left(entries, max_jobs - len(left_out), hi=k, key=_LOOKED)  # no limit test binds before
        planned = self.last_plan  # read before the walk plans again (in _verdicts)
        now, shadow = cycle.now, math.inf if planned is None else planned.shadow
        while k and now + entries[k - 1][5] > shadow:  # a job found short has become long
            k -= 1
        got = self._heap(cycle, start, left_out, k)
        while got[2] is not None:  # a fresh walk's heap differs at or below the bound
            k = bisect_left(entries, got[2], hi=k - 1, key=_BOUND)
            got = self._heap(cycle, start, left_out, k)
        if not k:
            return 0, None
        # the fresh walk's looks up to entry k - 1 are those kept (the queue is the same there): the
        # verdicts now, one look per request (the later ones of a request repeat the first)
        kept = k
        k = self._verdicts(cycle, k, planned)
        if not k:
            return 0, None
        if k < kept:
            got = self._heap(cycle, start, left_out, k)
        heap, pos, _ = got
        heapify(heap)
        # the jobs a fresh walk found short so far: where each shape's pass stopped (every job it
        # looked at is long; the shapes it found short jobs of elsewhere are left out or not kept)
        estimate = cycle.estimate
        max_short = -math.inf
        queue = cycle.ctx.queue
        for shape, i in pos.items():
            lst = queue.shape_jobs(shape)
            if i < len(lst):
                est = estimate(lst[i])
                if now + est <= shadow and est > max_short:
                    max_short = est
        cycle.max_short = max_short
        last = entries[k - 1]
        return k, Resumed(heap, pos, set(pos), last[3], last[4], queue.key(last[1]),
                          set(map(cycle.requests.__getitem__, map(_JOB, entries[:k]))))

    def _verdicts(self, cycle: Walker, k: int, planned: EasyReservation | None) -> int:
        """How many of the first ``k`` entries a fresh walk repeats, with its looks' side effects
        (``planned``: the reservation the kept walk planned with)."""
        jobs = list(map(_JOB, self.entries[:k]))
        looked = list(map(cycle.requests.__getitem__, jobs))
        failed = cycle.failed_keys
        for request in dict.fromkeys(looked):  # in the order of their first looks
            e = looked.index(request)
            job = jobs[e]
            if request in failed or not cycle.has_room(job):
                return e
            if not e:  # the first look plans the head: the same reservation as the kept walk's
                cycle.plan()
                if cycle.res is None or cycle.res is not planned:
                    return 0
            if request not in cycle.long_blocked and cycle.long_placement(job, request) is not None:
                return e  # it can start now: the walk looks again from here
        return k

    def _heap(self, cycle: Walker, start: list[tuple[SortKey, int]], left_out: list[SortKey],
              k: int) -> tuple[list[tuple[SortKey, int]], dict[int, int], SortKey | None]:
        """The merge's heap (not heapified) and each shape's index after entry ``k - 1``, from the
        walk's first heap ``start`` (the shapes it does not leave out) and the first keys of those it
        leaves out; and the lowest first key of a shape that a fresh walk has at or below the bound
        there and the kept walk did not, or the other way round (None: none; the last shape's next
        key may be below the bound: it is the one pushed after the look)."""
        if not k:
            return [], {}, None
        queue = self._queue
        assert queue is not None
        entries = self.entries
        kept = entries[:k]
        pos = dict(map(_SHAPE_AT, kept))  # each shape's last
        bound, pushed = entries[k - 1][6], entries[k - 1][0]
        heap = [entry for entry in start if entry[1] not in pos]  # as they begin
        below: SortKey | None = min(heap)[0] if heap else None
        if below is not None and below >= bound:
            below = None
        base, key = queue.position_base, queue.key_of
        for shape, at in pos.items():
            i = pos[shape] = at - base(shape)
            lst = queue.shape_jobs(shape)
            if i < len(lst):
                first = key(lst[i])
                heap.append((first, shape))
                if first < bound and shape != pushed and (below is None or first < below):
                    below = first
        for first in left_out:  # left out now and not before, at or below the bound
            if first <= bound and first not in self._left and (below is None or first < below):
                below = first
        return heap, pos, below
