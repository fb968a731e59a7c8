"""The pending jobs in a dynamic queue order, kept across cycles instead of sorted at each walk.

A dynamic order (Tiresias' LAS queues) is sorted afresh at every walk because a job's key may change
with time. For a waiting job it often changes only at instants known in advance: Tiresias' level is
fixed from the job's stop to its next start, except that it drops to queue 0 once the job has waited
long enough to starve. :class:`KeptOrder` keeps every pending job's full sort key (the sorters'
keys, then submit time and job row: the runner's order) in a sorted list per shape (a walk merges the
lists of the shapes it walks), updated as the queue pushes and removes jobs (it observes the queue)
and, at each read, for the jobs whose key may have changed since: each key comes with the time from which it may change
(:meth:`kant.framework.plugin.QueueSort.waiting_key`), kept in a heap.

A key is computed at the first read after the job's push (when every listener has seen the stop
that requeued it), at the read's time. Reads at a time earlier than an earlier read are refused
(None): keys computed later may not hold then; the caller sorts instead.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

__all__ = ["KeptOrder", "WaitingKey"]

SortKey = tuple[float, ...]
#: job, now -> (the job's full sort key while it waits, from ``now``; the time from which it may change)
WaitingKey = Callable[[int, float], tuple[SortKey, float]]

#: fewer jobs than this pushed since the last read are inserted one by one; more: one sort
_INSORT = 8
#: the change heap is rebuilt from its live items once it holds more than twice the queue plus this
_SLACK = 64


class _Queue(Protocol):
    shape_of: list[int]

    def observe(self, observer: KeptOrder) -> None: ...

    def __iter__(self) -> Iterator[int]: ...


class KeptOrder:
    """Every pending job of one queue in queue order, per shape, kept across cycles (see the module
    notes). :meth:`by_shape` is the only read; the queue calls :meth:`added` and :meth:`removed`."""

    __slots__ = ("_by_shape", "_changes", "_entry_of", "_fresh", "_key", "_last", "_queue", "_shape_of")

    def __init__(self, key: WaitingKey) -> None:
        self._key = key
        self._queue: _Queue | None = None
        self._shape_of: list[int] = []
        # per shape, its jobs' full sort keys in order (each ends with the job row)
        self._by_shape: dict[int, list[SortKey]] = {}
        self._entry_of: dict[int, SortKey] = {}
        self._fresh: set[int] = set()  # pushed since the last read: no key yet
        self._changes: list[tuple[float, int, SortKey]] = []  # (from when, job, its entry)
        self._last = -math.inf  # the time of the last read

    # --- the queue's notices ---------------------------------------------------------------------
    def added(self, job: int) -> None:
        self._fresh.add(job)

    def removed(self, job: int) -> None:
        if job in self._fresh:
            self._fresh.discard(job)
            return
        self._drop(job, self._entry_of.pop(job))

    def _drop(self, job: int, entry: SortKey) -> None:
        shape = self._shape_of[job]
        lst = self._by_shape[shape]
        del lst[bisect_left(lst, entry)]
        if not lst:
            del self._by_shape[shape]

    def _put(self, job: int, entry: SortKey) -> None:
        shape = self._shape_of[job]
        lst = self._by_shape.get(shape)
        if lst is None:
            self._by_shape[shape] = [entry]
        else:
            insort(lst, entry)

    # --- the read --------------------------------------------------------------------------------
    def by_shape(self, queue: _Queue, now: float) -> Mapping[int, list[SortKey]] | None:
        """Per shape with pending jobs, its jobs' full sort keys at ``now`` in order (the job row
        last; the live lists, read only: they change as the queue does), or None when ``now`` is
        earlier than an earlier read."""
        if queue is not self._queue:
            self._attach(queue)
        if now < self._last:
            return None
        self._last = now
        self._refresh(now)
        return self._by_shape

    def _attach(self, queue: _Queue) -> None:
        self._queue = queue
        self._shape_of = queue.shape_of
        self._by_shape.clear()
        self._entry_of.clear()
        self._changes.clear()
        self._fresh = set(queue)
        self._last = -math.inf
        queue.observe(self)

    def _refresh(self, now: float) -> None:
        key, entry_of, changes = self._key, self._entry_of, self._changes
        if self._fresh:
            fresh = self._fresh
            many = len(fresh) >= _INSORT
            touched: set[int] = set()
            for job in fresh:
                entry, at = key(job, now)
                entry_of[job] = entry
                if many:  # appended, each touched list sorted once below
                    shape = self._shape_of[job]
                    self._by_shape.setdefault(shape, []).append(entry)
                    touched.add(shape)
                else:
                    self._put(job, entry)
                if at != math.inf:
                    heapq.heappush(changes, (max(at, math.nextafter(now, math.inf)), job, entry))
            fresh.clear()
            for shape in touched:
                self._by_shape[shape].sort()
        if len(changes) > 2 * len(entry_of) + _SLACK:
            # mostly items of jobs that started (or came back with a new entry) before their time:
            # keep the live ones (each job's item for its present entry), so pushes and pops stay short
            changes[:] = [item for item in changes if entry_of.get(item[1]) is item[2]]
            heapq.heapify(changes)
        while changes and changes[0][0] <= now:
            _, job, old = heapq.heappop(changes)
            if entry_of.get(job) is not old:
                continue  # the job left the queue (or came back with a new entry)
            entry, at = key(job, now)
            if entry != old:
                self._drop(job, old)
                self._put(job, entry)
                entry_of[job] = entry
            if at != math.inf:
                heapq.heappush(changes, (max(at, math.nextafter(now, math.inf)), job, entry_of[job]))
