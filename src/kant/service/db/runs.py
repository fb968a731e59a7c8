"""The ``job_runs`` table: every run of a job that ended, kept for accounting (``kant acct``,
``GET /v1/accounting/...``).

A run is recorded where it ends: in :meth:`Database.apply <kant.service.db.database.Database.apply>`,
the loop turn's one transaction, from the job updates of the turn themselves: an update that moves a
running job to another state (finished, failed, cancelled, timeout, or back to pending: requeued,
preempted, lost) ends its run, whose start, nodes and GPUs are the job's row before the update (or an
earlier update of the same turn, for a run that started and ended in one turn). So every way a run can
end is recorded, whichever part of the service ended it, with no bookkeeping of its own. The end time
is the update's ``end_time``, else the time of the job's event in the same turn (a requeue writes no
end time), and the run's ``end`` is that event's kind.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from kant.service.db.base import Backend, json_text
from kant.service.db.events import NewEvent
from kant.service.db.jobs import JobUpdate
from kant.service.db.schema import UNSET, job_runs, jobs

__all__ = ["RunRepo", "RunRow", "run_gpus"]

_RUN_COLUMNS = (
    "job_id",
    "run",
    "tenant",
    "user",
    "submit_time",
    "start_time",
    "end_time",
    "nodes",
    "gpus",
    "gpu_milli",
    "end",
    "reason",
    "exit_code",
)


def run_gpus(placement: Sequence[str] | None, workers: int, gpus_per_worker: int) -> int:
    """The GPUs a run holds: one placement entry per worker, times GPUs per worker (an elastic job's
    run may have another size than the job asked for); the asked size where no placement is known."""
    return (len(placement) if placement else workers) * gpus_per_worker


@dataclass(frozen=True, slots=True)
class RunRow:
    """One ended run of a job (``gpus``: workers x GPUs per worker; ``gpu_milli``: thousandths of a GPU
    each holds, 1000 for whole GPUs)."""

    job_id: int
    run: int
    tenant: str
    user: str
    submit_time: float
    start_time: float
    end_time: float
    nodes: list[str]
    gpus: int
    gpu_milli: int
    end: str
    reason: str | None
    exit_code: int | None

    @property
    def gpu_seconds(self) -> float:
        """GPU time the run held: its GPUs (a share counts as its fraction) x its length."""
        return self.gpus * self.gpu_milli / 1000 * max(self.end_time - self.start_time, 0.0)


@dataclass(slots=True)
class _Open:
    """A job of the turn as the updates leave it: its state and, while running, its run."""

    state: str
    tenant: str
    user: str
    submit_time: float
    workers: int
    gpus_per_worker: int
    gpu_milli: int
    run: int
    start: float | None
    nodes: list[str] | None


class RunRepo:
    """Ended runs (``db.runs``): written by :meth:`record`, in the turn's transaction; read by window."""

    def __init__(self, backend: Backend) -> None:
        self._db = backend

    def record(self, conn: Connection, updates: Sequence[JobUpdate], events: Sequence[NewEvent]) -> list[RunRow]:
        """Insert a row for every run the turn's ``updates`` end (see the module docstring); returns them."""
        touched = {u.id for u in updates if u.state is not UNSET and u.state != "running"}
        if not touched:
            return []
        cur: dict[int, _Open] = {}
        q = sa.select(
            jobs.c.id,
            jobs.c.state,
            jobs.c.tenant,
            jobs.c.user,
            jobs.c.submit_time,
            jobs.c.workers,
            jobs.c.gpus_per_worker,
            jobs.c.gpu_milli,
            jobs.c.runs,
            jobs.c.start_time,
            jobs.c.placement,
        )
        for id_, state, tenant, user, submit, workers, gpw, milli, runs, start, placement in conn.execute(
            q.where(jobs.c.id.in_(sorted(touched)))
        ):
            cur[id_] = _Open(
                state,
                tenant,
                user,
                submit,
                workers,
                gpw,
                milli,
                runs,
                start,
                None if placement is None else json.loads(placement),
            )
        ends: dict[int, list[NewEvent]] = {}
        for ev in events:
            if ev.job_id in touched and ev.kind != "started":
                ends.setdefault(ev.job_id, []).append(ev)
        out: list[RunRow] = []
        for u in updates:
            job = cur.get(u.id)
            if job is None:
                continue
            if u.start_time is not UNSET and u.start_time is not None:
                job.start = u.start_time
            if u.placement is not UNSET:
                job.nodes = None if u.placement is None else list(u.placement)
            if u.runs is not UNSET:
                job.run = u.runs
            if u.state is UNSET:
                continue
            if job.state == "running" and u.state != "running" and job.start is not None and job.nodes:
                evs = ends.get(u.id) or []
                by = evs.pop(0) if evs else None
                end = u.end_time if isinstance(u.end_time, float | int) else (by.time if by is not None else job.start)
                out.append(
                    RunRow(
                        u.id,
                        job.run,
                        job.tenant,
                        job.user,
                        job.submit_time,
                        job.start,
                        float(end),
                        list(job.nodes),
                        run_gpus(job.nodes, job.workers, job.gpus_per_worker),
                        job.gpu_milli,
                        by.kind if by is not None else u.state,
                        u.reason if isinstance(u.reason, str) else None,
                        u.exit_code if isinstance(u.exit_code, int) else None,
                    )
                )
            job.state = u.state
        if out:
            self._db.insert_many(
                conn,
                job_runs,
                [
                    {**{c: getattr(r, c) for c in _RUN_COLUMNS if c != "nodes"}, "nodes": json_text(r.nodes)}
                    for r in out
                ],
            )
        return out

    def ended_between(
        self, since: float | None, until: float | None, *, tenant: str | None = None, job_id: int | None = None
    ) -> builtins.list[RunRow]:
        """The runs that ended in ``[since, until)`` (None: open), oldest end first; of one tenant or job."""
        q = sa.select(*[job_runs.c[c] for c in _RUN_COLUMNS])
        if since is not None:
            q = q.where(job_runs.c.end_time >= since)
        if until is not None:
            q = q.where(job_runs.c.end_time < until)
        if tenant is not None:
            q = q.where(job_runs.c.tenant == tenant)
        if job_id is not None:
            q = q.where(job_runs.c.job_id == job_id)
        q = q.order_by(job_runs.c.end_time, job_runs.c.id)
        with self._db.tx() as conn:
            rows = conn.execute(q).cursor.fetchall()
        return [_run_row(r) for r in rows]


def _run_row(r: Sequence[Any]) -> RunRow:
    (job_id, run, tenant, user, submit, start, end_time, nodes, gpus, milli, end, reason, code) = r
    return RunRow(job_id, run, tenant, user, submit, start, end_time, json.loads(nodes), gpus, milli, end, reason, code)
