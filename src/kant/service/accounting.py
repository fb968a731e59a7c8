"""Accounting of the live service (``kant acct``, ``GET /v1/accounting/jobs|usage``), like Slurm's
``sacct`` and ``sreport``: per job, and per tenant or user over a window of the service clock.

The figures come from the database: ended runs from ``job_runs`` (:mod:`kant.service.db.runs`) and the
runs going on now from the jobs that run (counted up to ``now``). A run counts in a window for the
part of it inside the window: ``GPU-seconds = GPUs x (share of a GPU) x seconds inside``. Per job:
every job active in the window (submitted before its end, not ended before its start). Per tenant or
user: GPU-hours, jobs submitted in the window, jobs that started for the first time in it with their
wait (first start - submit: mean, P50, P90, max), and the jobs that ended in it by state.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from kant.metrics.summary import Dist
from kant.service.db.database import Database
from kant.service.db.runs import RunRow, run_gpus
from kant.service.db.schema import ACTIVE_STATES, jobs

__all__ = ["JOB_COLUMNS", "USAGE_COLUMNS", "Window", "job_rows", "usage_rows"]

ENDED = ("finished", "failed", "cancelled", "timeout", "unschedulable")

#: the columns of the per-job answer, in order
JOB_COLUMNS = (
    "id",
    "name",
    "tenant",
    "user",
    "state",
    "submit_time",
    "first_start_time",
    "end_time",
    "wait_s",
    "runs",
    "gpus",
    "gpu_milli",
    "gpu_seconds",
    "exit_code",
    "nodes",
)
#: the columns of the per-tenant (per-user) answer, in order
USAGE_COLUMNS = (
    "tenant",
    "user",
    "gpu_hours",
    "runs",
    "jobs_submitted",
    "jobs_started",
    "wait_mean_s",
    "wait_p50_s",
    "wait_p90_s",
    "wait_max_s",
    "finished",
    "failed",
    "cancelled",
    "timeout",
    "unschedulable",
)


@dataclass(frozen=True)
class Window:
    """``[since, until)`` on the service clock (None: unbounded); ``now``: the clock now (open runs
    count up to it)."""

    since: float | None
    until: float | None
    now: float

    @property
    def lo(self) -> float:
        return -math.inf if self.since is None else self.since

    @property
    def hi(self) -> float:
        return min(self.now, math.inf if self.until is None else self.until)

    def inside(self, t: float | None) -> bool:
        return t is not None and self.lo <= t < (math.inf if self.until is None else self.until)

    def overlap(self, start: float, end: float) -> float:
        return max(0.0, min(end, self.hi) - max(start, self.lo))


@dataclass(frozen=True, slots=True)
class _Run:
    job_id: int
    tenant: str
    user: str
    start: float
    end: float
    gpus: int
    gpu_milli: int

    def gpu_seconds(self, w: Window) -> float:
        return self.gpus * self.gpu_milli / 1000 * w.overlap(self.start, self.end)


def _runs(db: Database, w: Window, tenant: str | None) -> list[_Run]:
    """The runs that overlap the window: ended ones (``job_runs``) and those going on now."""
    ended: Iterable[RunRow] = db.runs.ended_between(w.since, None, tenant=tenant)
    out = [
        _Run(r.job_id, r.tenant, r.user, r.start_time, r.end_time, r.gpus, r.gpu_milli)
        for r in ended
        if r.start_time < w.hi
    ]
    for j in _jobs(db, Window(None, None, w.now), tenant, ["running"]):
        if j.start_time is not None and j.start_time < w.hi:
            out.append(_Run(j.id, j.tenant, j.user, j.start_time, w.now,
                            run_gpus(j.placement, j.workers, j.gpus_per_worker), j.gpu_milli))
    return out


@dataclass(frozen=True, slots=True)
class _Job:
    """What accounting reads of a job (not its command, labels or environment)."""

    id: int
    name: str
    tenant: str
    user: str
    state: str
    workers: int
    gpus_per_worker: int
    gpu_milli: int
    submit_time: float
    first_start_time: float | None
    start_time: float | None
    end_time: float | None
    placement: list[str] | None
    runs: int
    exit_code: int | None


def _jobs(db: Database, w: Window, tenant: str | None, states: Sequence[str] | None = None) -> list[_Job]:
    """The jobs active in the window (submitted before its end, not ended before its start), of
    ``tenant``, in ``states``, by id: filtered by the database, their accounting columns only."""
    c = jobs.c
    q = sa.select(
        c.id,
        c.name,
        c.tenant,
        c.user,
        c.state,
        c.workers,
        c.gpus_per_worker,
        c.gpu_milli,
        c.submit_time,
        c.first_start_time,
        c.start_time,
        c.end_time,
        c.placement,
        c.runs,
        c.exit_code,
    )
    if w.until is not None:
        q = q.where(c.submit_time < w.until)
    if w.since is not None:
        q = q.where(sa.or_(c.end_time.is_(None), c.end_time >= w.since, c.state.in_(ACTIVE_STATES)))
    if tenant is not None:
        q = q.where(c.tenant == tenant)
    if states:
        q = q.where(c.state.in_(list(states)))
    with db.tx() as conn:
        rows = conn.execute(q.order_by(c.id)).cursor.fetchall()
    out = []
    for id_, name, tenant_, user, state, workers, gpw, milli, submit, first, start, end, placement, runs, code in rows:
        out.append(
            _Job(
                id_,
                name,
                tenant_,
                user,
                state,
                workers,
                gpw,
                milli,
                submit,
                first,
                start,
                end,
                None if placement is None else json.loads(placement),
                runs,
                code,
            )
        )
    return out


def job_rows(
    db: Database, w: Window, *, tenant: str | None = None, user: str | None = None, states: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """One row per job active in the window (``JOB_COLUMNS``), by id; ``gpu_seconds``: its runs'
    GPU time inside the window."""
    gpu_s: dict[int, float] = {}
    for r in _runs(db, w, tenant):
        gpu_s[r.job_id] = gpu_s.get(r.job_id, 0.0) + r.gpu_seconds(w)
    out = []
    for j in _jobs(db, w, tenant, states):
        if user is not None and j.user != user:
            continue
        out.append(
            {
                "id": j.id,
                "name": j.name,
                "tenant": j.tenant,
                "user": j.user,
                "state": j.state,
                "submit_time": j.submit_time,
                "first_start_time": j.first_start_time,
                "end_time": j.end_time if j.state in ENDED else None,
                "wait_s": None if j.first_start_time is None else j.first_start_time - j.submit_time,
                "runs": j.runs,
                "gpus": run_gpus(j.placement, j.workers, j.gpus_per_worker),
                "gpu_milli": j.gpu_milli,
                "gpu_seconds": gpu_s.get(j.id, 0.0),
                "exit_code": j.exit_code,
                "nodes": ",".join(dict.fromkeys(j.placement)) if j.placement else None,
            }
        )
    return out


@dataclass
class _Use:
    gpu_seconds: float = 0.0
    runs: int = 0
    submitted: int = 0
    waits: list[float] = field(default_factory=list)
    ended: dict[str, int] = field(default_factory=dict)


def usage_rows(db: Database, w: Window, *, by: str = "tenant", tenant: str | None = None) -> list[dict[str, Any]]:
    """One row per tenant (``by="tenant"``) or per tenant and user (``by="user"``), ``USAGE_COLUMNS``,
    sorted by tenant and user; ``user`` is None per tenant."""
    if by not in ("tenant", "user"):
        raise ValueError(f"by: {by!r} is not tenant or user")
    use: dict[tuple[str, str | None], _Use] = {}

    def key(t: str, u: str) -> tuple[str, str | None]:
        return (t, u if by == "user" else None)

    for r in _runs(db, w, tenant):
        gs = r.gpu_seconds(w)
        if gs > 0 or w.overlap(r.start, r.end) > 0:
            u = use.setdefault(key(r.tenant, r.user), _Use())
            u.gpu_seconds += gs
            u.runs += 1
    for j in _jobs(db, w, tenant):
        u = use.setdefault(key(j.tenant, j.user), _Use())
        if w.inside(j.submit_time):
            u.submitted += 1
        if w.inside(j.first_start_time):
            u.waits.append(j.first_start_time - j.submit_time)  # type: ignore[operator]
        if j.state in ENDED and w.inside(j.end_time):
            u.ended[j.state] = u.ended.get(j.state, 0) + 1
    out = []
    for (t, usr), u in sorted(use.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        d = Dist.of(u.waits)
        out.append(
            {
                "tenant": t,
                "user": usr,
                "gpu_hours": u.gpu_seconds / 3600,
                "runs": u.runs,
                "jobs_submitted": u.submitted,
                "jobs_started": len(u.waits),
                "wait_mean_s": d.mean,
                "wait_p50_s": d.p50,
                "wait_p90_s": d.p90,
                "wait_max_s": d.max,
                **{s: u.ended.get(s, 0) for s in ENDED},
            }
        )
    return out
