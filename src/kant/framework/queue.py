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
import math
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from itertools import chain

import numpy as np
import numpy.typing as npt

from kant.model.job import JobTable

__all__ = ["PendingQueue", "shape_ids"]

IntArray = npt.NDArray[np.int64]
SortKey = tuple[float, ...]


def shape_ids(jobs: JobTable, *, by_tenant: bool = True) -> tuple[IntArray, IntArray]:
    """Dense ids per job: ``(shape, request)``.

    Equal *request* ids mean identical resource requests (workers, GPUs and GPU share per worker,
    CPU, memory, GPU type) of the same kind (training or inference: a filter may place the two
    kinds on different nodes): whether such a job can be placed depends only on the cluster state.
    Equal *shape* ids additionally share tenant, priority and kind, which admission may look at;
    with ``by_tenant=False`` (a policy without admission plugins) shapes are just requests.
    """
    if len(jobs) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy()
    request_cols = [jobs.workers, jobs.gpus_per_worker, jobs.gpu_milli, jobs.cpu_milli, jobs.memory_mib, jobs.gpu_type,
                    jobs.kind]
    request = _row_ids(request_cols)
    if not by_tenant:
        return request, request
    return _row_ids([request, jobs.tenant, jobs.priority, jobs.kind]), request


def _row_ids(cols: list[IntArray]) -> IntArray:
    """Dense id per row of the columns ``cols``: the rank of the row among the distinct rows in
    lexicographic order, i.e. ``np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)[1]``,
    computed from one int64 key per row (column codes in mixed radix) when their product fits."""
    codes, sizes = [], []
    for col in cols:
        values, code = np.unique(col, return_inverse=True)
        codes.append(code.reshape(-1).astype(np.int64))
        sizes.append(len(values))
    if math.prod(sizes) >= (1 << 62):  # pragma: no cover - thousands of distinct values in every column
        _, ids = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
        return ids.reshape(-1).astype(np.int64)
    key = codes[0]
    for code, size in zip(codes[1:], sizes[1:], strict=True):
        key = key * size + code
    _, ids = np.unique(key, return_inverse=True)
    return ids.reshape(-1).astype(np.int64)


_EMPTY: deque[int] = deque()
_NEAR = 64  # removals this close to the front of a shape's list scan for the job instead of bisecting


class PendingQueue:
    """Jobs waiting to run. ``static_key(job)`` gives each job's sort key once, on push."""

    def __init__(
        self, jobs: JobTable, shapes: IntArray, static_key: Callable[[int], SortKey], requests: IntArray | None = None
    ) -> None:
        self.jobs = jobs
        self.shapes = shapes
        self.requests = requests if requests is not None else shapes
        # the same ids as Python lists: the per-job bookkeeping reads them one at a time
        self.shape_of: list[int] = np.asarray(shapes).tolist()
        self.request_of: list[int] = self.shape_of if requests is None else np.asarray(requests).tolist()
        self._total_gpus: list[int] = jobs.total_gpus.tolist()
        self._static_key = static_key
        self._keys: dict[int, SortKey] = {}
        # per shape, its jobs in static-key order; a deque, so the usual removal (the shape's first
        # job starts) is O(1) however long the queue is
        self._by_shape: dict[int, deque[int]] = {}
        self._request_count: dict[int, int] = {}
        self._shape_request: dict[int, int] = {}  # every job of a shape has the same request
        self.pending_gpus = 0
        #: bumped whenever a request id starts or stops having pending jobs
        self.request_changes = 0
        #: bumped whenever a shape starts or stops having pending jobs
        self.shape_changes = 0
        self._blocked: set[int] = set()

    def __len__(self) -> int:
        return len(self._keys)

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

    def key(self, job: int) -> SortKey:
        """The static sort key ``job`` was queued with."""
        return self._keys[job]

    def shape_jobs(self, shape: int) -> Sequence[int]:
        """Jobs of one shape in static-key order (read only; indexing near either end is O(1))."""
        return self._by_shape.get(shape, _EMPTY)

    def push(self, job: int) -> None:
        key = self._static_key(job)
        keys = self._keys
        keys[job] = key
        shape = self.shape_of[job]
        request = self.request_of[job]
        lst = self._by_shape.get(shape)
        if lst is None:
            lst = self._by_shape[shape] = deque()
            self._shape_request[shape] = request
            self.shape_changes += 1
        if not lst or keys[lst[-1]] <= key:
            lst.append(job)
        else:
            insort(lst, job, key=keys.__getitem__)
        self.pending_gpus += self._total_gpus[job]
        count = self._request_count.get(request, 0)
        if not count:
            self.request_changes += 1
        self._request_count[request] = count + 1

    def remove(self, job: int) -> None:
        keys = self._keys
        key = keys[job]
        shape = self.shape_of[job]
        lst = self._by_shape[shape]
        if lst[0] == job:
            lst.popleft()
        else:
            try:  # most other removals are near the front (backfill, preemption of a recent arrival)
                i = lst.index(job, 1, _NEAR)
            except ValueError:
                i = bisect_left(lst, key, key=keys.__getitem__)
                if lst[i] != job:  # pragma: no cover - keys end in the job row, so they are unique
                    i = lst.index(job)
            del lst[i]
        if not lst:
            del self._by_shape[shape]
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

    # --- one cycle's walk --------------------------------------------------------------------
    def block(self, shape: int) -> None:
        """No more jobs of ``shape`` this cycle."""
        self._blocked.add(shape)

    def is_blocked(self, shape: int) -> bool:
        return shape in self._blocked

    def walk(
        self, dynamic_key: Callable[[int], SortKey] | None = None, skip_requests: Container[int] = ()
    ) -> Iterator[int]:
        """Yield pending jobs in queue order, skipping shapes blocked during the walk and jobs whose
        request id is in ``skip_requests``. Jobs the caller starts (removes) during the walk are
        handled; the walk ends early once every shape is blocked."""
        self._blocked = set()
        if dynamic_key is not None:
            yield from self._walk_sorted(dynamic_key, skip_requests)
            return
        shape_request = self._shape_request
        heap: list[tuple[SortKey, int]] = [
            (self._keys[lst[0]], s) for s, lst in self._by_shape.items() if shape_request[s] not in skip_requests
        ]
        heapq.heapify(heap)
        pos: dict[int, int] = {}
        while heap:
            _, shape = heapq.heappop(heap)
            lst = self._by_shape.get(shape)
            if lst is None:
                continue
            i = pos.get(shape, 0)
            job = lst[i]
            yield job
            if shape in self._blocked:
                continue
            lst = self._by_shape.get(shape)
            if lst is None:
                continue
            if job in self._keys:  # still pending: move past it
                i += 1
            pos[shape] = i
            if i < len(lst):
                heapq.heappush(heap, (self._keys[lst[i]], shape))

    def _walk_sorted(self, dynamic_key: Callable[[int], SortKey], skip_requests: Container[int]) -> Iterator[int]:
        order_all = getattr(dynamic_key, "order", None)
        if order_all is not None:
            yield from self._walk_ordered(order_all, skip_requests)
            return
        order = sorted(self._keys, key=dynamic_key)
        n_shapes = len(self._by_shape)
        for job in order:
            if len(self._blocked) >= n_shapes:
                return
            if job not in self._keys or self.shape_of[job] in self._blocked or self.request_of[job] in skip_requests:
                continue
            yield job

    def _walk_ordered(self, order_all: Callable[[IntArray], IntArray], skip_requests: Container[int]) -> Iterator[int]:
        """Dynamic walk with a vectorised sort: drop skipped requests, sort once with NumPy, then merge
        the per-shape runs through a heap (like the static walk), so a blocked shape costs nothing."""
        shape_request = self._shape_request
        lists = [lst for s, lst in self._by_shape.items() if shape_request[s] not in skip_requests]
        n = sum(map(len, lists))
        if n == 0:
            return
        jobs = np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=n)
        order = order_all(jobs)
        shapes = self.shapes[order]
        by_shape = np.argsort(shapes, kind="stable")  # positions in `order`, grouped by shape
        grouped = shapes[by_shape]
        first = np.flatnonzero(np.concatenate(([True], grouped[1:] != grouped[:-1])))
        stop = np.concatenate((first[1:], [len(grouped)])).tolist()
        positions = by_shape.tolist()
        order_list = order.tolist()
        heap = sorted(zip(by_shape[first].tolist(), range(len(first)), strict=True))
        nxt = first.tolist()
        blocked = self._blocked
        while heap:
            pos, group = heapq.heappop(heap)
            job = order_list[pos]
            shape = int(shapes[pos])
            if shape in blocked:
                continue
            if job in self._keys:
                yield job
                if shape in blocked:
                    continue
            k = nxt[group] + 1
            nxt[group] = k
            if k < stop[group]:
                heapq.heappush(heap, (positions[k], group))
