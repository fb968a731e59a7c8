"""Remembering which requests failed to place, across cycles, until capacity that could help returns.

Within a run, capacity is only taken by starts and only comes back through releases (a job ends or
is evicted, a node is repaired); the cluster state logs each return as ``(node, free before, free
after)``. For a request of ``w`` workers x ``g`` GPUs that failed with an upper bound of ``room``
worker slots (see :meth:`Framework.room_for`), a return on a node of an allowed GPU type adds
``after // g - before // g`` slots. While ``room < w`` the request still cannot fit, whatever placer
the policy uses, so a cycle skips it without looking at its jobs. A request that failed with enough
room (a placer's or filter's own constraint, such as a quota) is retried after any return, and a
request with CPU or memory needs, or for a GPU share, after any return on an allowed node (a share
release that frees no whole GPU is logged as ``(node, f, f)``). Slots are counted by the one rule,
:mod:`kant.model.fit`.
"""

from __future__ import annotations

from collections.abc import KeysView, Mapping
from dataclasses import dataclass
from heapq import heapify, heappop, heappush

from kant.framework.context import SchedulerEnv
from kant.framework.status import Status
from kant.model.fit import is_share, slots_gained
from kant.model.state import ClusterState

__all__ = ["FailedRequests"]


#: what decides whether a capacity return helps a request: (GPUs per worker, allowed cluster GPU
#: types or None for any, asks for CPU or memory)
Kind = tuple[int, frozenset[int] | None, bool]


@dataclass(slots=True)
class _Entry:
    status: Status
    serial: int  # tells this entry's heap item from those of an earlier failure of the request


class FailedRequests:
    """The failed requests, with for each the worker slots it still lacks.

    Requests of one :data:`Kind` gain the same slots from a return, so the memo keeps one running
    total of slots returned per kind and, per failed request, the total at which it has gained all it
    lacked (a heap per kind, soonest first): replaying the returns since the last refresh costs
    O(kinds x returns) plus O(log n) per request forgotten, however many requests are remembered."""

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        self._seen = 0
        #: bumped whenever the set of failed requests changes (a reader may cache what it derived)
        self.changes = 0
        self._serial = 0
        self._retry: dict[int, int] = {}  # request -> serial: failed with room enough, retry on any return
        self._gained: dict[Kind, int] = {}  # slots returned so far, per kind (while it has requests)
        self._due: dict[Kind, list[tuple[int, int, int]]] = {}  # per kind: (gained total, serial, request)
        self._kinds: dict[tuple[int, int, bool], Kind] = {}  # (GPUs, job GPU-type code, other) -> kind

    @property
    def seen(self) -> int:
        """The release count the memo has replayed up to (see :meth:`refresh`)."""
        return self._seen

    def __contains__(self, request: object) -> bool:
        return request in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._entries)

    def request_keys(self) -> KeysView[int]:
        """The failed request ids as a set-like view (C-speed membership tests)."""
        return self._entries.keys()

    def get(self, request: int) -> Status | None:
        entry = self._entries.get(request)
        return None if entry is None else entry.status

    def fill_reasons(self, shape_request: Mapping[int, int], reasons: dict[int, Status], default: Status) -> None:
        """``reasons[shape]``: the failure of the shape's request (``default`` if it has none)."""
        entries = self._entries
        for shape, request in shape_request.items():
            entry = entries.get(request)
            reasons[shape] = default if entry is None else entry.status

    def add(self, env: SchedulerEnv, request: int, job: int, status: Status, room: int) -> None:
        """``request`` (that of ``job``) failed with an upper bound of ``room`` worker slots."""
        jobs = env.jobs
        g, w, t = int(jobs.gpus_per_worker[job]), int(jobs.workers[job]), int(jobs.gpu_type[job])
        # a GPU share gains from returns that free no whole GPU too: any return on an allowed node may help
        other = bool(jobs.cpu_milli[job] or jobs.memory_mib[job]) or (g == 1 and is_share(g, int(jobs.gpu_milli[job])))
        kind = self._kinds.get((g, t, other))
        if kind is None:
            kind = self._kinds[(g, t, other)] = (g, None if t < 0 else frozenset(env.cluster_types_of(t)), other)
        self.changes += 1
        self._serial += 1
        serial = self._serial
        self._entries[request] = _Entry(status, serial)
        if room >= w:  # failed for a reason other than capacity
            self._retry[request] = serial
            return
        self._retry.pop(request, None)
        gained = self._gained.setdefault(kind, 0)
        lacks = 1 if other else w - room  # CPU or memory needs: any return on an allowed node may help
        heap = self._due.get(kind)
        if heap is None:
            heap = self._due[kind] = []
        heappush(heap, (gained + lacks, serial, request))

    def refresh(self, state: ClusterState) -> None:
        """Replay the capacity returns logged since the last refresh; forget requests they may help."""
        end = state.release_count
        seen = self._seen
        if seen >= end:
            return
        self._seen = end
        entries = self._entries
        if not entries:
            if self._due or self._retry:
                self._drop_all()
            return
        start = state.release_log_start
        if seen < start:
            entries.clear()  # fell behind the trimmed log: start afresh
            self._drop_all()
            self.changes += 1
            return
        n_before = len(entries)
        retry = self._retry
        if retry:
            for request, serial in retry.items():
                entry = entries.get(request)
                if entry is not None and entry.serial == serial:
                    del entries[request]
            retry.clear()
        due = self._due
        if due:  # (each kind in it has a non-empty heap: a kind is dropped when its heap empties)
            new = state.release_log[seen - start :]
            gained_of = self._gained
            node_types = state.node_types
            emptied: list[Kind] = []
            for kind, heap in due.items():
                gain = slots_gained(new, node_types, *kind)
                if not gain:
                    continue
                gained = gained_of[kind] = gained_of[kind] + gain
                while heap and heap[0][0] <= gained:
                    _, serial, request = heappop(heap)
                    entry = entries.get(request)
                    if entry is not None and entry.serial == serial:
                        del entries[request]
                if len(heap) > 2 * len(entries) + 64:  # mostly items of forgotten or re-failed requests
                    heap[:] = [item for item in heap
                               if (e := entries.get(item[2])) is not None and e.serial == item[1]]
                    heapify(heap)
                if not heap:
                    emptied.append(kind)
            for kind in emptied:  # nothing waits on the kind's total any more: a later failure starts it afresh
                del due[kind], gained_of[kind]
        if len(entries) != n_before:
            self.changes += 1

    def _drop_all(self) -> None:
        """Forget the per-kind bookkeeping (no request is remembered any more)."""
        self._retry.clear()
        self._due.clear()
        self._gained.clear()
