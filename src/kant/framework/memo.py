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
from typing import NamedTuple

from kant.framework.context import SchedulerEnv
from kant.framework.replay import Kind, ReleaseReplay
from kant.framework.status import Status
from kant.model.fit import is_share
from kant.model.state import ClusterState
from kant.model.store import JobStore

__all__ = ["FailedRequests"]


@dataclass(slots=True)
class _Entry:
    status: Status
    serial: int  # tells this entry's heap item from those of an earlier failure of the request


class _Columns(NamedTuple):
    """The job columns :meth:`FailedRequests.add` reads, as the store's own Python lists (one item
    read is a list index, not a NumPy scalar; the lists grow and change with the store)."""

    store: JobStore
    gpus_per_worker: list[int]
    workers: list[int]
    gpu_type: list[int]
    cpu_milli: list[int]
    memory_mib: list[int]
    gpu_milli: list[int]

    @classmethod
    def of(cls, jobs: JobStore) -> _Columns:
        return cls(jobs, *(jobs.list_of(c) for c in cls._fields[1:]))


class FailedRequests:
    """The failed requests, with for each the worker slots it still lacks.

    Requests of one :data:`Kind` gain the same slots from a return, so the returns are summed per
    kind (a :class:`ReleaseReplay`, shared by the memos of one scheduler: the environment's, taken
    at the first failure; the log is replayed once for all of them) and the memo keeps, per failed
    request, the kind's total at which it has gained all it lacked (a heap per kind, soonest first):
    a refresh costs O(kinds x returns) once for every memo, plus O(kinds) per memo when some total
    grew, plus O(log n) per request forgotten, however many requests are remembered."""

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        #: the release count the memo has replayed up to (see :meth:`refresh`; read only: an attribute,
        #: as the allocate action's idle test reads it at every idle cycle)
        self.seen = 0
        #: bumped whenever the set of failed requests changes (a reader may cache what it derived)
        self.changes = 0
        self._serial = 0
        self._retry: dict[int, int] = {}  # request -> serial: failed with room enough, retry on any return
        self._replay: ReleaseReplay | None = None  # bound at the first failure
        self._state: ClusterState | None = None  # the state of the last refresh
        self._grown = -1  # the replay's ``grown`` when the heaps were last checked (-1: check them)
        self._due: dict[Kind, list[tuple[int, int, int]]] = {}  # per watched kind: (total due, serial, request)
        self._kinds: dict[tuple[int, int, bool], Kind] = {}  # (GPUs, job GPU-type code, other) -> kind
        self._columns: _Columns | None = None  # the job store's columns add reads, as Python lists

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
        cols = self._columns
        if cols is None or cols[0] is not env.jobs:
            cols = self._columns = _Columns.of(env.jobs)
        _, gpus, workers, types, cpu, mem, milli = cols
        g, w, t = gpus[job], workers[job], types[job]
        # a GPU share gains from returns that free no whole GPU too: any return on an allowed node may help
        other = bool(cpu[job] or mem[job]) or (g == 1 and is_share(g, milli[job]))
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
        replay = self._replay
        if replay is None:
            shared = getattr(env, "release_replay", None)
            replay = self._replay = shared if isinstance(shared, ReleaseReplay) else ReleaseReplay()
        if replay.seen < self.seen and self._state is not None:
            replay.advance(self._state)  # (so that what it replayed covers this memo's refresh)
        lacks = 1 if other else w - room  # CPU or memory needs: any return on an allowed node may help
        heap = self._due.get(kind)
        if heap is None:
            heap = self._due[kind] = []
            replay.watch(kind)
        # the kind's total as of this memo's last refresh (returns logged since count towards it)
        heappush(heap, (replay.total_at(kind, self.seen) + lacks, serial, request))
        self._grown = -1  # (it may be due already, at the next refresh)

    def refresh(self, state: ClusterState) -> None:
        """Replay the capacity returns logged since the last refresh; forget requests they may help."""
        end = state.release_count
        seen = self.seen
        if seen >= end:
            return
        self.seen = end
        self._state = state
        entries = self._entries
        if not entries:
            if self._due or self._retry:
                self._drop_all()
            return
        if seen < state.release_log_start:
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
            replay = self._replay
            assert replay is not None
            replay.advance(state)
            if replay.grown != self._grown:  # else no total moved since the heaps were last checked
                self._grown = replay.grown
                totals = replay.totals
                emptied: list[Kind] = []
                for kind, heap in due.items():
                    total = totals[kind]
                    if heap[0][0] > total:
                        continue
                    while heap and heap[0][0] <= total:
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
                for kind in emptied:  # nothing waits on the kind's total here any more
                    del due[kind]
                    replay.unwatch(kind)
        if len(entries) != n_before:
            self.changes += 1

    def _drop_all(self) -> None:
        """Forget the per-kind bookkeeping (no request is remembered any more)."""
        self._retry.clear()
        if self._due:
            assert self._replay is not None
            for kind in self._due:
                self._replay.unwatch(kind)
            self._due.clear()
