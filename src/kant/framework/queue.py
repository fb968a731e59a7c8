"""The pending queue, grouped by request shape so a cycle costs O(shapes + starts), not O(queue).

Two jobs have the same *shape* when every input that placement and admission look at is equal:
workers, GPUs (and GPU share) per worker, CPU and memory per worker, GPU type, tenant, priority and
kind. Within one cycle the cluster only loses capacity as jobs start, so once a job fails to place,
every later job of the same shape fails too: the cycle marks the shape blocked and skips the rest.

With static sort keys each shape's list is kept sorted on insert and a cycle merges the heads of the
lists through a heap. With a dynamic key (attained service, fair share) the cycle sorts all pending
jobs afresh.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from itertools import chain
from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from kant.framework.row_groups import intern_rows
from kant.model.store import JobStore, grow

__all__ = ["PendingQueue", "QueueObserver", "QueueOrder", "QueueViews", "ShapeIndex"]

IntArray = npt.NDArray[np.int64]
SortKey = tuple[float, ...]


class QueueObserver(Protocol):
    """Told of every job pushed into and removed from a :class:`PendingQueue` (:meth:`PendingQueue.observe`)."""

    def added(self, job: int) -> None: ...

    def removed(self, job: int) -> None: ...


class QueueOrder(ABC):
    """A queue order that changes with time (the runner's ``DynamicKey``): the sort key of one job,
    and many jobs sorted at once (what :meth:`PendingQueue.walk` uses)."""

    __slots__ = ()

    @abstractmethod
    def __call__(self, job: int) -> SortKey: ...

    @abstractmethod
    def order(self, jobs: IntArray) -> IntArray: ...

    #: the key's places equal for every job of a shape (see QueueSort.SHAPE_KEYED), or None
    shape_slots: tuple[int, ...] | None = None

    def shape_values(self, reps: IntArray) -> list[tuple[float, ...]]:
        """For one job of each shape, the values of the ``shape_slots`` places."""
        raise NotImplementedError

    def kept_by_shape(self, queue: PendingQueue) -> Mapping[int, list[SortKey]] | None:
        """Per shape of ``queue``, its jobs in this order as their sort keys (the job row last; read
        only), from an order kept across cycles (:class:`~kant.framework.kept_order.KeptOrder`), or
        None: none is kept (sort instead)."""
        return None


_REQUEST_COLUMNS = ("workers", "gpus_per_worker", "gpu_milli", "cpu_milli", "memory_mib", "gpu_type", "kind")


class ShapeIndex:
    """Dense *shape* and *request* ids per job, interned in order of first appearance as jobs arrive.

    Equal *request* ids mean identical resource requests (workers, GPUs and GPU share per worker,
    CPU, memory, GPU type) of the same kind (training or inference: a filter may place the two
    kinds on different nodes): whether such a job can be placed depends only on the cluster state.
    Equal *shape* ids additionally share tenant, priority and kind, which admission may look at;
    with ``by_tenant=False`` (a policy without admission plugins) shapes are just requests. With
    ``per_shape=True`` (a filter or placer that looks beyond the request) request ids are shape ids,
    so placement failures are remembered per shape.

    ``shape_of``/``request_of`` are Python lists (read one job at a time); ``shapes``/``requests``
    the same ids as read-only NumPy views, replaced as jobs are added.
    """

    def __init__(self, *, by_tenant: bool = True, per_shape: bool = False) -> None:
        self.by_tenant = by_tenant
        self.per_shape = per_shape
        self._request_ids: dict[tuple[int, ...], int] = {}
        self._shape_ids: dict[tuple[int, ...], int] = {}
        #: shapes and requests are the same ids (kept once)
        self._same = per_shape or not by_tenant
        self.shape_of: list[int] = []
        self.request_of: list[int] = self.shape_of if self._same else []
        self._shape_buf = np.zeros(16, dtype=np.int64)
        self._request_buf = self._shape_buf if self._same else np.zeros(16, dtype=np.int64)
        self.shapes: IntArray = self._shape_buf[:0]
        self.requests: IntArray = self.shapes

    def __len__(self) -> int:
        return len(self.shape_of)

    def extend(self, jobs: JobStore) -> range:
        """Give ids to the jobs of ``jobs`` not indexed yet; returns their rows."""
        start, stop = len(self.shape_of), len(jobs)
        if start >= stop:
            return range(start, start)
        part = slice(start, stop)
        request = intern_rows(self._request_ids, [getattr(jobs, c)[part] for c in _REQUEST_COLUMNS])
        shape = request
        if self.by_tenant:
            shape = intern_rows(self._shape_ids, [request, jobs.tenant[part], jobs.priority[part], jobs.kind[part]])
        if self.per_shape:
            request = shape
        self._shape_buf = grow(self._shape_buf, stop)
        self._shape_buf[part] = shape
        self.shapes = self._shape_buf[:stop]
        self.shapes.setflags(write=False)
        self.shape_of.extend(shape.tolist())
        if self._same:
            self.requests = self.shapes
        else:
            self._request_buf = grow(self._request_buf, stop)
            self._request_buf[part] = request
            self.requests = self._request_buf[:stop]
            self.requests.setflags(write=False)
            self.request_of.extend(request.tolist())
        return range(start, stop)


_EMPTY: deque[int] = deque()
_NEAR = 64  # removals this close to the front of a shape's list scan for the job instead of bisecting


class PendingQueue:
    """Jobs waiting to run. ``static_key(job)`` gives each job's sort key once, on push."""

    def __init__(self, jobs: JobStore, index: ShapeIndex, static_key: Callable[[int], SortKey]) -> None:
        self.jobs = jobs
        self.index = index
        # the ids as Python lists (the index's own, growing with it): read one job at a time
        self.shape_of: list[int] = index.shape_of
        self.request_of: list[int] = index.request_of
        self._total_gpus: list[int] = jobs.list_of("total_gpus")
        self._static_key = static_key
        self._keys: dict[int, SortKey] = {}
        #: the queued jobs, each with its static key (read only): ``len(queue.queued)`` is
        #: ``len(queue)`` without a Python-level call (the drivers read it at every instant)
        self.queued: Mapping[int, SortKey] = self._keys
        # per shape, its jobs in static-key order; a deque, so the usual removal (the shape's first
        # job starts) is O(1) however long the queue is
        self._by_shape: dict[int, deque[int]] = {}
        # per shape, (the key of its first job, the shape): the walks' heap entries, kept as jobs come
        # and go instead of rebuilt by each walk
        self._heads: dict[int, tuple[SortKey, int]] = {}
        # the least of ``_heads`` (the queue's first job's entry), kept as jobs come and go; None:
        # to be found again (its shape's first job left) or the queue is empty
        self._first: tuple[SortKey, int] | None = None
        self._request_count: dict[int, int] = {}
        self._shape_request: dict[int, int] = {}  # every job of a shape has the same request
        self.pending_gpus = 0
        #: bumped whenever a request id starts or stops having pending jobs
        self.request_changes = 0
        #: bumped whenever a shape starts or stops having pending jobs
        self.shape_changes = 0
        self._blocked: set[int] = set()
        # what changed since mark(): jobs removed, and the smallest key pushed (None: no push)
        self._removed_since_mark = 0
        self._lowest_pushed: SortKey | None = None
        # per shape, how many jobs left the front of its list (positions counted from the list's
        # creation: a job keeps its position until a job ahead of it leaves other than at the front
        # or one is inserted ahead of it), and the watchers told of such edits (see watch_edits)
        self._front: dict[int, int] = {}
        self._watchers: list[dict[int, int]] = []
        self._observers: list[QueueObserver] = []  # told of every push and removal

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def shapes(self) -> IntArray:
        """Shape id per job (read-only NumPy view; see :class:`ShapeIndex`)."""
        return self.index.shapes

    @property
    def requests(self) -> IntArray:
        """Request id per job (read-only NumPy view; see :class:`ShapeIndex`)."""
        return self.index.requests

    def __contains__(self, job: int) -> bool:
        return job in self._keys

    def __iter__(self) -> Iterator[int]:
        return iter(self._keys)

    def n_shapes(self) -> int:
        return len(self._by_shape)

    def shape_requests(self) -> Mapping[int, int]:
        """Request id of each shape with pending jobs (read only)."""
        return self._shape_request

    def requests_outside(self, requests: Container[int]) -> set[int]:
        """Request ids of pending jobs that are not in ``requests``."""
        return {r for r in self._request_count if r not in requests}

    def has_request(self, request: int) -> bool:
        """Has some pending job this request id?"""
        return request in self._request_count

    def pending_shapes(self) -> list[int]:
        """Shape ids with at least one pending job (read only)."""
        return list(self._by_shape)

    def head_entries(self) -> Mapping[int, tuple[SortKey, int]]:
        """Per shape with pending jobs, (the static key of its first job, the shape) (read only)."""
        return self._heads

    def key(self, job: int) -> SortKey:
        """The static sort key ``job`` was queued with."""
        return self._keys[job]

    @property
    def key_of(self) -> Callable[[int], SortKey]:
        """:meth:`key` as the key table's own lookup (no Python-level call per job; for hot loops)."""
        return self._keys.__getitem__

    def shape_jobs(self, shape: int) -> Sequence[int]:
        """Jobs of one shape in static-key order (read only; indexing near either end is O(1))."""
        return self._by_shape.get(shape, _EMPTY)

    def shape_lists(self) -> Mapping[int, Sequence[int]]:
        """Per shape with pending jobs, its jobs in static-key order (read only): :meth:`shape_jobs`
        as the queue's own dict, for hot loops (``.get(shape, ())`` without a Python-level call)."""
        return self._by_shape

    def mark(self) -> None:
        """Start noting what changes (for :meth:`since_mark`); a new mark replaces the last."""
        self._removed_since_mark = 0
        self._lowest_pushed = None

    def since_mark(self) -> tuple[int, SortKey | None]:
        """Since the last :meth:`mark`: how many jobs left the queue, and the smallest static key of
        the jobs pushed (None: none pushed)."""
        return self._removed_since_mark, self._lowest_pushed

    def watch_edits(self) -> dict[int, int]:
        """A dict the queue keeps, per shape, the lowest position (see :meth:`position_base`) at which
        a job was inserted or removed since the caller last cleared that shape's entry (-1: the list
        was emptied), except removals at the front and appends at the back, which move no other job.
        The caller owns the clearing; positions below the entry (all, without one) at or after the
        list's front hold the same jobs as when it was cleared."""
        edits: dict[int, int] = {}
        self._watchers.append(edits)
        return edits

    def position_base(self, shape: int) -> int:
        """Jobs that left the front of ``shape``'s list so far: ``base + i`` is the position of the
        list's ``i``-th job, stable while no edit below it is reported (see :meth:`watch_edits`)."""
        return self._front.get(shape, 0)

    def position_bases(self) -> Mapping[int, int]:
        """:meth:`position_base` of every shape that has one other than 0 (read only; for hot loops)."""
        return self._front

    def observe(self, observer: QueueObserver) -> None:
        """Tell ``observer`` of every job pushed and removed from now on."""
        self._observers.append(observer)

    def unobserve(self, observer: QueueObserver) -> None:
        """Stop telling ``observer`` (one told by :meth:`observe`)."""
        self._observers.remove(observer)

    def _edited(self, shape: int, at: int) -> None:
        for edits in self._watchers:
            low = edits.get(shape)
            if low is None or at < low:
                edits[shape] = at

    def push(self, job: int) -> None:
        key = self._static_key(job)
        keys = self._keys
        keys[job] = key
        low = self._lowest_pushed
        if low is None or key < low:
            self._lowest_pushed = key
        shape = self.shape_of[job]
        request = self.request_of[job]
        lst = self._by_shape.get(shape)
        if lst is None:
            lst = self._by_shape[shape] = deque()
            self._shape_request[shape] = request
            self.shape_changes += 1
        if not lst:
            lst.append(job)
            self._new_head(shape, key)
        elif keys[lst[-1]] <= key:
            lst.append(job)
        else:
            i = bisect_right(lst, key, key=keys.__getitem__)
            lst.insert(i, job)
            if not i:
                self._new_head(shape, key)
            if self._watchers:
                self._edited(shape, self._front.get(shape, 0) + i)
        self.pending_gpus += self._total_gpus[job]
        count = self._request_count.get(request, 0)
        if not count:
            self.request_changes += 1
        self._request_count[request] = count + 1
        for observer in self._observers:
            observer.added(job)

    def remove(self, job: int) -> None:
        self._removed_since_mark += 1
        for observer in self._observers:
            observer.removed(job)
        keys = self._keys
        key = keys[job]
        shape = self.shape_of[job]
        lst = self._by_shape[shape]
        if lst[0] == job:
            lst.popleft()
            self._front[shape] = self._front.get(shape, 0) + 1
            if lst:
                self._heads[shape] = (keys[lst[0]], shape)
            first = self._first
            if first is not None and first[1] == shape:
                self._first = None  # (the shape's next key may not be the least any more)
        else:
            try:  # most other removals are near the front (backfill, preemption of a recent arrival)
                i = lst.index(job, 1, _NEAR)
            except ValueError:
                i = bisect_left(lst, key, key=keys.__getitem__)
                if lst[i] != job:  # pragma: no cover - keys end in the job row, so they are unique
                    i = lst.index(job)
            del lst[i]
            if self._watchers:
                self._edited(shape, self._front.get(shape, 0) + i)
        if not lst:
            if self._watchers:
                self._edited(shape, -1)
            del self._by_shape[shape]
            del self._heads[shape]
            del self._shape_request[shape]
            self.shape_changes += 1
        del keys[job]
        self.pending_gpus -= self._total_gpus[job]
        request = self.request_of[job]
        left = self._request_count[request] - 1
        if left:
            self._request_count[request] = left
        else:
            del self._request_count[request]
            self.request_changes += 1

    def _new_head(self, shape: int, key: SortKey) -> None:
        """``key`` is now the first key of ``shape``'s list (a push at its front)."""
        entry = self._heads[shape] = (key, shape)
        first = self._first
        if first is not None and key < first[0]:
            self._first = entry

    def head_entry(self) -> tuple[SortKey, int] | None:
        """(the static key of the queue's first job, its shape), the least of :meth:`head_entries`
        (None: the queue is empty); O(1) while the first job stays, O(shapes) once after it leaves."""
        first = self._first
        if first is None:
            first = self._first = min(self._heads.values(), default=None)
        return first

    def position(self, job: int, dynamic_key: Callable[[int], SortKey] | None = None) -> int:
        """How many pending jobs come before ``job`` in queue order (O(shapes log n) for a static
        order, a full sort for a dynamic one)."""
        if dynamic_key is not None:
            key = dynamic_key(job)
            return sum(1 for j in self._keys if dynamic_key(j) < key)
        key = self._keys[job]
        keys = self._keys
        return sum(bisect_left(lst, key, key=keys.__getitem__) for lst in self._by_shape.values())

    def head(self, dynamic_key: Callable[[int], SortKey] | None = None) -> int | None:
        """The first pending job in queue order (None: the queue is empty); O(shapes) for a static
        order, a scan for a dynamic one."""
        if dynamic_key is not None:
            return min(self._keys, key=dynamic_key, default=None)
        first = self._first  # (kept: no call to head_entry while the first job stays)
        if first is None:
            first = self.head_entry()
        return None if first is None else self._by_shape[first[1]][0]

    # --- one cycle's walk --------------------------------------------------------------------
    def block(self, shape: int) -> None:
        """No more jobs of ``shape`` this cycle."""
        self._blocked.add(shape)

    def is_blocked(self, shape: int) -> bool:
        return shape in self._blocked

    def walk(
        self, dynamic_key: Callable[[int], SortKey] | None = None, skip_requests: Container[int] = (),
        start: Mapping[int, int] | None = None,
    ) -> Iterator[int]:
        """Yield pending jobs in queue order, skipping shapes blocked during the walk and jobs whose
        request id is in ``skip_requests``. Jobs the caller starts (removes) during the walk are
        handled; the walk ends early once every shape is blocked. ``start`` (static order only):
        per shape, how many of its first jobs to pass over (the walk resumes behind them)."""
        self._blocked = set()
        if dynamic_key is not None:
            assert start is None, "start applies to the static order"
            if isinstance(dynamic_key, QueueOrder):
                if dynamic_key.shape_slots is not None and self.index.by_tenant:
                    yield from self._walk_shapes(dynamic_key, skip_requests)
                else:
                    kept = dynamic_key.kept_by_shape(self)
                    if kept is None:
                        yield from self._walk_ordered(dynamic_key.order, skip_requests)
                    else:
                        yield from self._walk_kept(kept, skip_requests)
            else:  # a plain key function
                yield from self._walk_sorted(dynamic_key, skip_requests)
            return
        shape_request = self._shape_request
        heap: list[tuple[SortKey, int]]
        if start is None:
            pos: dict[int, int] = {}
            if type(skip_requests) is tuple and not skip_requests:
                heap = list(self._heads.values())
            else:
                heap = [e for s, e in self._heads.items() if shape_request[s] not in skip_requests]
        else:
            pos = dict(start)
            heap = [(self._keys[lst[pos.get(s, 0)]], s) for s, lst in self._by_shape.items()
                    if shape_request[s] not in skip_requests and pos.get(s, 0) < len(lst)]
        yield from self._merge(heap, pos, None)

    def _merge(self, heap: list[tuple[SortKey, int]], pos: dict[int, int],
               head: Callable[[int, int], SortKey] | None) -> Iterator[int]:
        """The walk's merge of the shapes' lists: ``heap`` holds each shape's next key, ``pos`` each
        shape's index in its list; a shape blocked or emptied during the walk drops out. A list's next
        key is its job's queue key, or ``head(job, shape)`` (a dynamic order keyed per shape)."""
        by_shape, keys = self._by_shape, self._keys
        heapq.heapify(heap)
        while heap:
            _, shape = heapq.heappop(heap)
            lst = by_shape.get(shape)
            if lst is None:
                continue
            i = pos.get(shape, 0)
            job = lst[i]
            yield job
            if shape in self._blocked:
                continue
            lst = by_shape.get(shape)
            if lst is None:
                continue
            if job in keys:  # still pending: move past it
                i += 1
            pos[shape] = i
            if i < len(lst):
                nxt = lst[i]
                heapq.heappush(heap, (keys[nxt] if head is None else head(nxt, shape), shape))

    def _walk_shapes(self, order: QueueOrder, skip_requests: Container[int]) -> Iterator[int]:
        """Dynamic walk when the dynamic keys are equal within a shape (``order.shape_slots``): the
        keys once per shape, then the static walk's merge of the shapes' lists (each in the order of
        the rest of the key), with each head's key completed by its shape's values."""
        shape_request = self._shape_request
        by_shape = self._by_shape
        shapes = [s for s in by_shape if shape_request[s] not in skip_requests]
        if not shapes:
            return
        reps = np.fromiter((by_shape[s][0] for s in shapes), dtype=np.int64, count=len(shapes))
        values = dict(zip(shapes, order.shape_values(reps), strict=True))
        slots = order.shape_slots
        assert slots is not None
        keys = self._keys

        m = len(slots)
        if slots == tuple(range(m)):  # (the usual case: the shape-keyed sorters come first)

            def head(job: int, shape: int) -> SortKey:
                return values[shape] + keys[job][m:]
        else:

            def head(job: int, shape: int) -> SortKey:
                k = list(keys[job])
                for i, v in zip(slots, values[shape], strict=True):
                    k[i] = v
                return tuple(k)

        yield from self._merge([(head(by_shape[s][0], s), s) for s in shapes if by_shape[s]], {}, head)

    def _walk_sorted(self, dynamic_key: Callable[[int], SortKey], skip_requests: Container[int]) -> Iterator[int]:
        """Dynamic walk for a plain key function (one sort in Python)."""
        order = sorted(self._keys, key=dynamic_key)
        n_shapes = len(self._by_shape)
        for job in order:
            if len(self._blocked) >= n_shapes:
                return
            if job not in self._keys or self.shape_of[job] in self._blocked or self.request_of[job] in skip_requests:
                continue
            yield job

    def _walk_ordered(self, order_all: Callable[[IntArray], IntArray], skip_requests: Container[int]) -> Iterator[int]:
        """Dynamic walk with a vectorised sort: drop skipped requests, sort once with NumPy, then go
        down the order, passing over the jobs of blocked shapes (a set lookup each: cheaper than
        grouping the order by shape for a merge, for the few hundred jobs a walk sorts), until every
        shape of the walk is blocked."""
        shape_request = self._shape_request
        walked = [s for s in self._by_shape if shape_request[s] not in skip_requests]
        lists = [self._by_shape[s] for s in walked]
        n = sum(map(len, lists))
        if n == 0:
            return
        jobs = np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=n)
        n_shapes = len(walked)
        blocked, keys, shape_of = self._blocked, self._keys, self.shape_of
        for job in order_all(jobs).tolist():
            if shape_of[job] in blocked:
                continue
            if job in keys:
                yield job
                if len(blocked) >= n_shapes and all(s in blocked for s in walked):
                    return

    def _walk_kept(self, lists: Mapping[int, list[SortKey]], skip_requests: Container[int]) -> Iterator[int]:
        """:meth:`_walk_ordered` on an order kept across cycles (``lists``: per pending shape, its
        jobs' sort keys in order, the job row last): the walked shapes' lists merged through a heap,
        a shape dropping out once blocked. The same jobs in the same order, without the sort."""
        shape_request = self._shape_request
        # the walked shapes' lists as they are now (the caller's starts edit the live ones)
        heap = [(lst[0], s, 0, lst[:]) for s, lst in lists.items() if shape_request[s] not in skip_requests]
        heapq.heapify(heap)
        blocked, keys = self._blocked, self._keys
        while heap:
            entry, shape, i, lst = heapq.heappop(heap)
            if shape in blocked:
                continue
            job = int(entry[-1])
            if job in keys:  # (not started earlier in the walk)
                yield job
                if shape in blocked:
                    continue
            i += 1
            if i < len(lst):
                heapq.heappush(heap, (lst[i], shape, i, lst))


class QueueViews(NamedTuple):
    """The queue's read-only views that a walk reads at every walk (the EASY walk's), got once per
    queue: each is the queue's own live object, which it never replaces (``tests/test_queue_views.py``)."""

    queue: PendingQueue
    key: Callable[[int], SortKey]  # PendingQueue.key_of
    lists: Mapping[int, Sequence[int]]  # PendingQueue.shape_lists(): ``lists.get(shape, ())`` is shape_jobs
    bases: Mapping[int, int]  # PendingQueue.position_bases()
    heads: Mapping[int, tuple[SortKey, int]]  # PendingQueue.head_entries()
    shape_requests: Mapping[int, int]

    @classmethod
    def of(cls, queue: PendingQueue) -> QueueViews:
        return cls(queue, queue.key_of, queue.shape_lists(), queue.position_bases(), queue.head_entries(),
                   queue.shape_requests())
