"""The ``events`` table: what happened to jobs, nodes and the cluster, in commit order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from kant.service.db.base import Backend
from kant.service.db.schema import events

__all__ = ["EventRepo", "EventRow", "NewEvent"]


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append (``time``: service clock, ``wall``: POSIX time)."""

    time: float
    wall: float
    kind: str
    job_id: int | None = None
    node: str | None = None
    tenant: str | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class EventRow:
    """One stored event; ids increase in commit order."""

    id: int
    time: float
    wall: float
    kind: str
    job_id: int | None
    node: str | None
    tenant: str | None
    message: str


class EventRepo:
    """The event log (``db.events``); events are written by :meth:`Database.apply
    <kant.service.db.database.Database.apply>` and with the jobs they are about."""

    def __init__(self, backend: Backend) -> None:
        self._db = backend

    def append(self, conn: Connection, new: Sequence[NewEvent]) -> None:
        """Append ``new`` in the caller's transaction."""
        self._db.insert_many(conn, events, [
            {"time": e.time, "wall": e.wall, "kind": e.kind, "job_id": e.job_id, "node": e.node,
             "tenant": e.tenant, "message": e.message} for e in new
        ])

    def of_job(self, job_id: int, limit: int = 200) -> list[EventRow]:
        """The job's latest ``limit`` events, oldest first."""
        q = sa.select(events).where(events.c.job_id == job_id).order_by(events.c.id.desc()).limit(limit)
        with self._db.tx() as conn:
            rows = [EventRow(*r) for r in conn.execute(q)]
        rows.reverse()
        return rows

    def after(self, after_id: int, *, tenant: str | None = None, limit: int = 1000) -> list[EventRow]:
        """Up to ``limit`` events with id > ``after_id``, oldest first.

        With ``tenant``, only events whose tenant column is that tenant (not the cluster's own events,
        whose tenant is NULL).
        """
        q = sa.select(events).where(events.c.id > after_id)
        if tenant is not None:
            q = q.where(events.c.tenant == tenant)
        q = q.order_by(events.c.id).limit(limit)
        with self._db.tx() as conn:
            return [EventRow(*r) for r in conn.execute(q)]

    def max_id(self) -> int:
        """The largest event id, 0 if there is none."""
        with self._db.tx() as conn:
            return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(events.c.id), 0))).scalar_one())

    def last_time(self) -> float | None:
        """The service time of the latest event (where a restarted non-wall clock resumes), None if none."""
        with self._db.tx() as conn:
            last = conn.execute(sa.select(events.c.time).order_by(events.c.id.desc()).limit(1)).scalar()
        return None if last is None else float(last)
