"""The dashboard's queue: what starts next (``GET /v1/dashboard/queue``, docs/dashboard.md).

The pending jobs in the scheduler's order (the order its next cycle walks them, as ``squeue --start``
lists them), each with its place, why it waits (the words of ``kant why``:
:meth:`~kant.service.live.reads.Reads.why_pending`) and the digital twin's predicted start, and a
summary of the reasons with counts. The first job of the queue is marked as the one the others wait
behind when the last cycle stopped there. Taken on the loop's thread in one pass (one state); the
twin's predictions are its latest (:meth:`~kant.service.twin.Twin.predicted`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kant.service.auth import Principal
from kant.service.dashboard.models import QueueOut, QueueRow, ReasonCount
from kant.service.loop import ServiceLoop
from kant.service.server import Service

__all__ = ["MAX_ROWS", "queue_rows", "reason_kind"]

#: most rows one answer lists (the summary counts every pending job the caller may see)
MAX_ROWS = 500

_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def reason_kind(reason: str) -> str:
    """A reason without its numbers (``waits behind job N, ...``), so that like reasons count together."""
    return _NUMBER.sub("N", reason.split("; back in the queue after:")[0])


def _capture(lp: ServiceLoop, tenant: str | None, see_all: bool, me: str | None) -> dict[str, Any]:
    """On the loop's thread: every pending job in scheduler order with its reason, the head, the clock."""
    sched = lp.sched
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
        if not (see_all or info.tenant == me) or (tenant is not None and info.tenant != tenant):
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
    return {"now": now, "queue_len": len(order), "rows": rows,
            "head": ids[head] if head is not None else None, "behind_head": behind}


def queue_rows(svc: Service, p: Principal, tenant: str | None, limit: int) -> QueueOut:
    """The queue as ``p`` may see it (a tenant: its own jobs), in scheduler order, at most ``limit`` rows."""
    loop = svc.leading()
    me = p.tenant
    got: dict[str, Any] = loop.call(lambda lp: _capture(lp, tenant, p.admin, me))
    counts: dict[str, int] = {}
    for r in got["rows"]:
        kind = reason_kind(r["reason"])
        counts[kind] = counts.get(kind, 0) + 1
    now = got["now"]
    out = []
    for r in got["rows"][:limit]:
        pred = svc.twin.predicted(r["id"])
        row = QueueRow.model_validate(r)
        if pred is not None:
            row.p10, row.p50, row.p90, row.as_of, row.runs = pred.p10, pred.p50, pred.p90, pred.as_of, pred.runs
        out.append(row)
    head = got["head"]
    if not p.admin and not any(r["id"] == head for r in got["rows"]):
        head = None  # (another tenant's job: a tenant sees only its own jobs' ids)
    reasons = [ReasonCount(reason=k, jobs=n) for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    return QueueOut(now=now, clock=svc.config.clock, queue_len=got["queue_len"], matching=len(got["rows"]),
                    head=head, behind_head=got["behind_head"], reasons=reasons, rows=out)
