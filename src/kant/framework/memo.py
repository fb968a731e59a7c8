"""Remembering which requests failed to place, across cycles, until capacity that could help returns.

Within a run, capacity is only taken by starts and only comes back through releases (a job ends or
is evicted, a node is repaired); the cluster state logs each return as ``(node, free before, free
after)``. For a request of ``w`` workers x ``g`` GPUs that failed with an upper bound of ``room``
worker slots (see :meth:`Framework.room_for`), a return on a node of an allowed GPU type adds
``after // g - before // g`` slots. While ``room < w`` the request still cannot fit, whatever placer
the policy uses, so a cycle skips it without looking at its jobs. A request that failed with enough
room (a placer's or filter's own constraint, such as a quota) is retried after any return, and a
request with CPU or memory needs after any return on an allowed node.
"""

from __future__ import annotations

from collections.abc import KeysView, Mapping
from dataclasses import dataclass

from kant.framework.context import SchedulerEnv
from kant.framework.status import Status
from kant.model.state import ClusterState

__all__ = ["FailedRequests"]


@dataclass(slots=True)
class _Entry:
    status: Status
    room: int
    workers: int
    gpus: int
    types: frozenset[int] | None  # cluster GPU-type codes allowed, None = any
    other_resources: bool  # asks for CPU or memory


class FailedRequests:
    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        self._seen = 0
        #: bumped whenever the set of failed requests changes (a reader may cache what it derived)
        self.changes = 0

    def __contains__(self, request: object) -> bool:
        return request in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._entries)

    def request_keys(self) -> KeysView[int]:
        """The failed request ids as a set-like view (for :meth:`PendingQueue.requests_within`)."""
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
        jobs = env.jobs
        t = int(jobs.gpu_type[job])
        self.changes += 1
        self._entries[request] = _Entry(
            status,
            room,
            int(jobs.workers[job]),
            int(jobs.gpus_per_worker[job]),
            None if t < 0 else frozenset(env.cluster_types_of(t)),
            bool(jobs.cpu_milli[job] or jobs.memory_mib[job]),
        )

    def refresh(self, state: ClusterState) -> None:
        """Replay the capacity returns logged since the last refresh; forget requests they may help."""
        end = state.release_count
        if self._seen >= end:
            return
        entries = self._entries
        if not entries:
            self._seen = end
            return
        if self._seen < state.release_log_start:
            entries.clear()  # fell behind the trimmed log: start afresh
            self._seen = end
            self.changes += 1
            return
        new = state.release_log[self._seen - state.release_log_start :]
        self._seen = end
        n_before = len(entries)
        # worker slots the new returns add, per (GPUs per worker, allowed types, other resources):
        # the same for every request of that kind, and never negative (capacity only comes back)
        gains: dict[tuple[int, frozenset[int] | None, bool], int] = {}
        for request, e in list(entries.items()):
            if e.room >= e.workers:  # failed for a reason other than capacity: retry on any return
                del entries[request]
                continue
            kind = (e.gpus, e.types, e.other_resources)
            gain = gains.get(kind)
            if gain is None:
                gain = gains[kind] = _gain(new, state.node_types, *kind)
            if e.other_resources:
                helped = gain > 0  # CPU or memory came back too (or may have): retry
            else:
                e.room += gain
                helped = e.room >= e.workers
            if helped:
                del entries[request]
        if len(entries) != n_before:
            self.changes += 1


def _gain(new: list[tuple[int, int, int]], node_types: list[int], g: int, types: frozenset[int] | None,
          other_resources: bool) -> int:
    """Worker slots of ``g`` GPUs the capacity returns ``new`` add on nodes of ``types`` (None: any);
    for a request with CPU or memory needs, just whether any return is on such a node."""
    gain = 0
    for node, before, after in new:
        if types is not None and node_types[node] not in types:
            continue
        if other_resources:
            return 1
        gain += after // g - before // g if g > 0 else 1
    return gain
