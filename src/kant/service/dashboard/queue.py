"""The dashboard's queue: what starts next (``GET /v1/dashboard/queue``, docs/dashboard.md).

The pending jobs in the scheduler's order (the order its next cycle walks them, as ``squeue --start``
lists them), each with its place, why it waits (the words of ``kant why``:
:meth:`~kant.service.live.reads.Reads.why_pending`) and the digital twin's predicted start, and a
summary of the reasons with counts. The first job of the queue is marked as the one the others wait
behind when the last cycle stopped there. Taken on the loop's thread in one pass (one state), kept
by :class:`QueueCache` until the queue may have changed; the twin's predictions are its latest
(:meth:`~kant.service.twin.Twin.predicted`).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kant.service.auth import Principal
from kant.service.dashboard.models import QueueOut, QueueRow, ReasonCount
from kant.service.loop import ServiceLoop
from kant.service.server import Service

__all__ = ["MAX_ROWS", "QueueCache", "reason_kind"]

#: most rows one answer lists (the summary counts every pending job the caller may see)
MAX_ROWS = 500

_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def reason_kind(reason: str) -> str:
    """A reason without its numbers (``waits behind job N, ...``), so that like reasons count together."""
    return _NUMBER.sub("N", reason.split("; back in the queue after:")[0])


def _capture(lp: ServiceLoop) -> _Queue:
    """On the loop's thread: every pending job in scheduler order with its reason, the head, the clock."""
    t0 = time.thread_time()
    sched = lp.sched
    stamp = lp.queue_stamp(read=True)
    now = lp.clock.now()
    dynamic = sched.framework.dynamic_key(now)
    key: Callable[[int], Any] = dynamic if dynamic is not None else sched.queue.key_of
    order = sorted(sched.queue, key=key)
    ids, active, store = lp.ids, lp.active, sched.jobs
    head = order[0] if order else None
    rows = []
    for position, row in enumerate(order):
        info = active.get(ids[row])
        if info is None:
            continue
        rows.append({"id": info.id, "name": store.names[row] if row < len(store.names) else "",
                     "tenant": info.tenant, "position": position, "workers": int(store.workers[row]),
                     "gpus_per_worker": int(store.gpus_per_worker[row]), "gpu_milli": int(store.gpu_milli[row]),
                     "gpus": info.total_gpus, "submit_time": info.submit_time,
                     "reason": lp.reads.why_pending(info, now), "head": row == head})
    behind = 0
    if head is not None:
        behind = sum(1 for r in order if r != head and (i := active.get(ids[r])) is not None
                     and lp.reads.behind(i, now) == head)
    return _Queue(sched, stamp, now, len(order), rows, ids[head] if head is not None else None, behind,
                  time.thread_time() - t0)


@dataclass(frozen=True, slots=True)
class _Queue:
    """The queue as the loop's thread read it, for every caller (scoped per request)."""

    sched: object  # the scheduler it was read from (a rebuild makes a new one)
    stamp: tuple[int, int, int, int]  # ServiceLoop.queue_stamp(read=True) when read
    now: float
    queue_len: int
    rows: list[dict[str, Any]]  # every pending job, in order, with its reason
    head: int | None
    behind_head: int
    cpu_s: float  # CPU time of the read on the loop's thread


class QueueCache:
    """The one copy of the queue in the scheduler's order with every pending job's reason, read on the
    loop's thread when the queue may have changed (:meth:`ServiceLoop.queue_stamp
    <kant.service.loop.ServiceLoop.queue_stamp>`: a state change, a scheduling cycle, a job in or
    out, a submit acknowledged) and kept until then; each request's view (a tenant's jobs, a tenant
    filter, a limit) is cut from it off the loop's thread. Many requests between two cycles cost one
    sort and one pass of reasons."""

    def __init__(self, svc: Service) -> None:
        self.svc = svc
        self._got: _Queue | None = None
        #: per caller scope and tenant filter, of _got: the rows it sees and the reasons counted
        self._views: dict[tuple[str | None, str | None], tuple[list[dict[str, Any]], list[ReasonCount]]] = {}
        self._lock = threading.Lock()
        #: milliseconds of the last read: waiting for the loop's thread and reading there (wall), its CPU
        self.last_ms: tuple[float, float] = (0.0, 0.0)

    def _fresh(self, loop: ServiceLoop) -> bool:
        got = self._got
        return got is not None and got.sched is loop.sched and got.stamp == loop.queue_stamp()

    def get(self) -> tuple[_Queue, bool]:
        """The queue, and whether this call read it afresh."""
        loop = self.svc.leading()
        with self._lock:
            got = self._got
            if got is not None and self._fresh(loop):
                return got, False
            t0 = time.perf_counter()
            got = loop.call(_capture)
            self._got, self._views = got, {}
            self.last_ms = (1000 * (time.perf_counter() - t0), 1000 * got.cpu_s)
            return got, True

    def timing(self, fresh: bool) -> str:
        """A ``Server-Timing`` header value: the read this request made, if it made one."""
        if not fresh:
            return "cache;desc=\"queue from the cache\""
        wall, cpu = self.last_ms
        return f"loop;dur={wall:.1f};desc=\"wait for the loop and read the queue\", loop-cpu;dur={cpu:.1f}"

    def _view(self, got: _Queue, p: Principal, tenant: str | None) -> tuple[list[dict[str, Any]], list[ReasonCount]]:
        """The rows of ``got`` that ``p`` sees (with ``tenant``: that tenant's only), and their reasons
        counted, kept with ``got``."""
        key = (p.scope(), tenant)
        view = self._views.get(key)
        if view is not None:
            return view
        see_all, me = p.admin, p.tenant
        mine = [r for r in got.rows if (see_all or r["tenant"] == me) and (tenant is None or r["tenant"] == tenant)]
        counts: dict[str, int] = {}
        for r in mine:
            kind = reason_kind(r["reason"])
            counts[kind] = counts.get(kind, 0) + 1
        reasons = [ReasonCount(reason=k, jobs=n) for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
        with self._lock:
            if self._got is got and len(self._views) < 256:
                self._views[key] = (mine, reasons)
        return mine, reasons

    def rows(self, svc: Service, p: Principal, tenant: str | None, limit: int) -> tuple[QueueOut, bool]:
        """The queue as ``p`` may see it (a tenant: its own jobs), in scheduler order, at most ``limit``
        rows; and whether the queue was read afresh."""
        got, fresh = self.get()
        mine, reasons = self._view(got, p, tenant)
        out = []
        for r in mine[:limit]:
            pred = svc.twin.predicted(r["id"])
            row = QueueRow.model_validate(r)
            if pred is not None:
                row.p10, row.p50, row.p90, row.as_of, row.runs = pred.p10, pred.p50, pred.p90, pred.as_of, pred.runs
                row.covers = pred.covers or None  # (as the why API's prediction: queries.why)
            out.append(row)
        head = got.head
        if not p.admin and not any(r["id"] == head for r in mine):
            head = None  # (another tenant's job: a tenant sees only its own jobs' ids)
        return QueueOut(now=got.now, clock=svc.config.clock, queue_len=got.queue_len, matching=len(mine),
                        head=head, behind_head=got.behind_head, reasons=reasons, rows=out), fresh
