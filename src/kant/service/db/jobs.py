"""The ``jobs`` table and the service's one job model.

:class:`NewJob` lists a job's submitted fields once; :class:`JobRow` (a stored job) is a
:class:`NewJob` plus what the service adds (id, state, times, placement, runs). The API's
``JobSubmit`` is validated into a :class:`NewJob` and ``JobOut`` is built from a :class:`JobRow`
(``kant.service.schemas``), each by one function that copies the fields by name. Adding a job
field: a :class:`NewJob` field, its column in :mod:`kant.service.db.schema` and a migration, its
constraint in ``JobSubmit`` and its line in ``JobOut``; ``tests/service/test_db.py`` checks that they
agree.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import gc
import json
import operator
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection

from kant.service.db.base import Backend, json_text, pg_array_params
from kant.service.db.schema import ACTIVE_STATES, UNSET, Unset, events, jobs, services, tenants
from kant.service.errors import Conflict, NotFound

__all__ = ["SUBMITTED_FIELDS", "JobRepo", "JobRow", "JobUpdate", "NewJob"]


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job as submitted: the one list of a job's submitted fields. The database adds id, state
    'pending', submit_time and created_wall (:class:`JobRow`)."""

    tenant: str
    user: str
    name: str
    kind: int = 0
    service_id: int | None = None
    workers: int = 1
    gpus_per_worker: int = 1
    gpu_milli: int = 1000
    gpu_type: str | None = None
    cpu_milli: int = 0
    memory_mib: int = 0
    priority: int = 0
    estimate_s: float | None = None
    duration_s: float | None = None
    command: str | None = None
    labels: dict[str, Any] = field(default_factory=dict)
    idempotency_key: str | None = None
    chdir: str | None = None  # the working directory (None: the executor's own)
    environment: dict[str, str] | None = None  # the job's environment (--export; None: the node's)
    time_limit_s: float | None = None  # past it the job is stopped and ends 'timeout' (None: no limit)
    dependency: str | None = None  # waits for other jobs (kant.model.deps: afterok:41:42); None: no dependency
    kill_on_invalid_dep: bool = False  # cancelled when its dependency can never be met (else it waits)
    array_task_id: int | None = None  # a job array's task: its index (kant.service.arrays); None: no array
    array_position: int | None = None  # its place in the array: the array's id is the job id minus it
    array_throttle: int | None = None  # at most this many tasks of its array are queued or running at once
    min_workers: int | None = None  # an elastic gang's bounds (kant.model.elastic); None: rigid
    max_workers: int | None = None


@dataclass(frozen=True, slots=True)
class JobRow(NewJob):
    """One stored job: its submitted fields (``labels`` decoded) and what the service keeps of it
    (``placement``: one node name per worker).

    The defaults (a job just inserted) are there because a dataclass's fields after NewJob's must have
    them; every row is built with all its fields, by position (keywords cost ~14 % more per row when a
    start decodes every active job).
    """

    id: int = 0
    state: str = "pending"
    reason: str | None = None
    submit_time: float = 0.0
    first_start_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    placement: list[str] | None = None
    runs: int = 0
    exit_code: int | None = None
    created_wall: float = 0.0
    held: str | None = None  # who holds the pending job out of the queue (kant hold); None: not held


@dataclass(frozen=True, slots=True)
class JobUpdate:
    """New values for one job; fields left :data:`UNSET` are not changed, ``None`` writes NULL."""

    id: int
    state: str | Unset = UNSET
    reason: str | Unset | None = UNSET
    first_start_time: float | Unset | None = UNSET
    start_time: float | Unset | None = UNSET
    end_time: float | Unset | None = UNSET
    placement: Sequence[str] | Unset | None = UNSET
    runs: int | Unset = UNSET
    exit_code: int | Unset | None = UNSET
    held: str | Unset | None = UNSET
    # a pending job's fields a user may change (kant update)
    name: str | Unset = UNSET
    priority: int | Unset = UNSET
    estimate_s: float | Unset | None = UNSET
    time_limit_s: float | Unset | None = UNSET

    def __post_init__(self) -> None:
        if self.state is None or self.runs is None:
            raise ValueError(f"job {self.id}: state and runs cannot be NULL")


SUBMITTED_FIELDS: Final = tuple(f.name for f in dataclasses.fields(NewJob))
"""The names of a job's submitted fields, in column order."""
_submitted_values: Final = operator.attrgetter(*SUBMITTED_FIELDS)
_UPDATE_FIELDS: Final = tuple(f.name for f in dataclasses.fields(JobUpdate) if f.name != "id")

#: insert jobs (columns ``names`` from the arrays ``arrays``) and their 'submitted' events, in id order
_PG_JOBS_AND_EVENTS: Final = (
    'WITH new AS (INSERT INTO jobs ({names}) SELECT * FROM unnest({arrays}) RETURNING id, tenant, "user")'
    " INSERT INTO events (time, wall, kind, job_id, node, tenant, message)"
    " SELECT :now_time, :now_wall, 'submitted', id, NULL, tenant, 'submitted by ' || \"user\" FROM new ORDER BY id"
)
_PG_KEY_LOOKUP: Final = sa.text(
    "SELECT j.id, k.t, k.k FROM unnest(CAST(:ts AS varchar[]), CAST(:ks AS varchar[])) AS k(t, k)"
    " CROSS JOIN LATERAL (SELECT id FROM jobs WHERE tenant = k.t AND idempotency_key = k.k LIMIT 1) AS j"
)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (if it runs) for the block."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _job_rows(rows: Iterable[Sequence[Any]]) -> list[JobRow]:
    """Decode ``SELECT jobs.*`` rows; flat label objects seen before are copied, not parsed again.

    The columns are written out in table order: this loop decodes every active job at a start.
    """
    flat: dict[str, dict[str, Any]] = {}
    out: list[JobRow] = []
    for (id_, tenant, user, name, kind, service_id, workers, gpw, milli, gtype, cpu, mem, prio, est, dur, cmd,
         labels, ikey, chdir, environment, limit, dependency, kill_dep, task, position, throttle, min_w, max_w,
         state, reason, submit, first, start, end, placement, runs, code, created, held) in rows:
        known = flat.get(labels)
        if known is not None:
            decoded = known.copy()
        else:
            decoded = json.loads(labels)
            if not any(isinstance(v, dict | list) for v in decoded.values()):
                flat[labels] = decoded.copy()
        out.append(JobRow(
            tenant, user, name, kind, service_id, workers, gpw, milli, gtype, cpu, mem, prio, est, dur, cmd,
            decoded, ikey, chdir, None if environment is None else json.loads(environment), limit,
            dependency, bool(kill_dep), task, position, throttle, min_w, max_w, id_, state, reason, submit, first,
            start, end,
            None if placement is None else json.loads(placement), runs, code, created, held,
        ))
    return out


class JobRepo:
    """Jobs (``db.jobs``): batch inserts with idempotency keys, reads by id, keyset pages, the active set."""

    def __init__(self, backend: Backend) -> None:
        self._db = backend
        self._load_active_sql = str(sa.select(jobs).where(jobs.c.state.in_(ACTIVE_STATES)).compile(
            dialect=backend.engine.dialect, compile_kwargs={"literal_binds": True}
        ))

    # --- writes ---

    def insert(
        self, batch: Sequence[NewJob], *, now_time: float, now_wall: float, epoch: int | None = None,
    ) -> builtins.list[tuple[int, bool]]:
        """Insert a batch of jobs in one transaction; returns (id, created) per input, in order.

        A job whose (tenant, idempotency_key) exists already, in the database or earlier in the
        batch, is not inserted: its existing id comes back with created=False. New jobs get state
        'pending' and ids in batch order, and one 'submitted' event each. ``epoch``: as in
        :meth:`Database.apply <kant.service.db.database.Database.apply>`.
        """
        if not batch:
            return []
        try:
            return self._insert(batch, now_time, now_wall, epoch)
        except sa_exc.IntegrityError:  # a foreign key: say which tenant or service is missing
            self._missing_owner(batch)
            raise

    def _missing_owner(self, batch: Sequence[NewJob]) -> None:
        """Raise :class:`NotFound` for the first tenant or service of ``batch`` that does not exist."""
        names = {j.tenant for j in batch}
        sids = {j.service_id for j in batch if j.service_id is not None}
        with self._db.tx() as conn:
            found = set(conn.execute(sa.select(tenants.c.name).where(tenants.c.name.in_(names))).scalars())
            if names - found:
                raise NotFound(f"tenant {min(names - found)!r} does not exist")
            found_ids = set(conn.execute(sa.select(services.c.id).where(services.c.id.in_(sids))).scalars())
            if sids - found_ids:
                raise NotFound(f"service {min(sids - found_ids)} does not exist")

    def _insert(self, batch: Sequence[NewJob], now_time: float, now_wall: float,
                epoch: int | None) -> list[tuple[int, bool]]:
        keys = {(j.tenant, j.idempotency_key) for j in batch if j.idempotency_key is not None}
        with self._db.tx(write=True, ordered=True, epoch=epoch) as conn:
            known: dict[tuple[str, str], int] = {}
            if keys:
                known = self._known_keys(conn, keys)
                if known:
                    self._same_as_stored(conn, batch, known)
            rows: list[dict[str, Any]] = []
            slots: list[int] = []  # per input: index into rows, or -1 when the id is known
            pending: dict[tuple[str, str], int] = {}
            first: dict[tuple[str, str], NewJob] = {}  # the batch's job of each key
            added = {"state": "pending", "submit_time": now_time, "runs": 0, "created_wall": now_wall}
            for j in batch:
                key = None if j.idempotency_key is None else (j.tenant, j.idempotency_key)
                if key is not None and key in known:
                    slots.append(-1)
                    continue
                if key is not None and key in pending:
                    if _submitted_values(j) != _submitted_values(first[key]):
                        raise Conflict(f"idempotency key {key[1]!r} is given to two different jobs of this batch: "
                                       "one key, one job")
                    slots.append(pending[key])
                    continue
                if key is not None:
                    pending[key] = len(rows)
                    first[key] = j
                slots.append(len(rows))
                r = dict(zip(SUBMITTED_FIELDS, _submitted_values(j), strict=True))
                r["labels"] = json_text(j.labels)
                r["environment"] = None if j.environment is None else json_text(j.environment)
                r |= added
                rows.append(r)
            ids = self._new_ids(conn, len(rows))
            for id_, r in zip(ids, rows, strict=True):
                r["id"] = id_
            self._write_new(conn, rows, now_time, now_wall)
        out: list[tuple[int, bool]] = []
        seen: set[int] = set()
        for j, slot in zip(batch, slots, strict=True):
            if slot < 0:
                out.append((known[(j.tenant, j.idempotency_key)], False))  # type: ignore[index]
            else:
                out.append((ids[slot], slot not in seen))
                seen.add(slot)
        return out

    def _write_new(self, conn: Connection, rows: list[dict[str, Any]], now_time: float, now_wall: float) -> None:
        """Insert the new jobs' rows and one 'submitted' event each (on PostgreSQL in one statement)."""
        if self._db.dialect == "postgresql" and rows:
            cols = list(rows[0])
            names = ", ".join(self._db.quote(c) for c in cols)
            sql = _PG_JOBS_AND_EVENTS.format(names=names, arrays=self._db.pg_arrays(jobs, cols))
            conn.execute(sa.text(sql), {**pg_array_params(jobs, cols, rows), "now_time": now_time,
                                        "now_wall": now_wall})
            return
        self._db.insert_many(conn, jobs, rows)
        self._db.insert_many(conn, events, [
            {"time": now_time, "wall": now_wall, "kind": "submitted", "job_id": r["id"], "node": None,
             "tenant": r["tenant"], "message": f"submitted by {r['user']}"}
            for r in rows
        ])

    def _same_as_stored(self, conn: Connection, batch: Sequence[NewJob], known: dict[tuple[str, str], int]) -> None:
        """Raise :class:`Conflict` for a job of ``batch`` whose idempotency key is stored (``known``) with
        another job: a retry sends the same job; a different one under a used key is refused, not
        silently answered with the first."""
        stored = {r.id: r for r in _job_rows(conn.execute(sa.select(jobs).where(jobs.c.id.in_(set(known.values())))))}
        for j in batch:
            id_ = None if j.idempotency_key is None else known.get((j.tenant, j.idempotency_key))
            if id_ is not None and id_ in stored and _submitted_values(stored[id_]) != _submitted_values(j):
                diff = [n for n, a, b in zip(SUBMITTED_FIELDS, _submitted_values(stored[id_]), _submitted_values(j),
                                             strict=True) if a != b]
                raise Conflict(f"idempotency key {j.idempotency_key!r} was used for job {id_} with another body "
                               f"({', '.join(diff)} differ): a retry sends the same job; use a new key for a new one")

    def _known_keys(self, conn: Connection, keys: set[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """The ids of the stored jobs among the (tenant, idempotency_key) pairs ``keys``."""
        if self._db.dialect == "postgresql":
            # One probe of the unique index per key (an IN list is planned as a scan of the tenant's jobs).
            pairs = sorted(keys)
            rows = conn.execute(_PG_KEY_LOOKUP, {"ts": [t for t, _ in pairs], "ks": [k for _, k in pairs]})
        else:  # SQLite probes the unique index for two IN lists (a row-value IN would scan it)
            rows = conn.execute(sa.select(jobs.c.id, jobs.c.tenant, jobs.c.idempotency_key).where(
                jobs.c.tenant.in_(sorted({t for t, _ in keys})),
                jobs.c.idempotency_key.in_(sorted({k for _, k in keys})),
            ))
        return {(t, k): id_ for id_, t, k in rows if (t, k) in keys}

    def _new_ids(self, conn: Connection, n: int) -> range:
        """``n`` consecutive unused job ids; the caller holds the writer lock, so nobody else takes ids meanwhile."""
        if n == 0:
            return range(0)
        if self._db.dialect == "postgresql":
            last = conn.execute(sa.text(
                "SELECT setval(pg_get_serial_sequence('jobs', 'id'),"
                " nextval(pg_get_serial_sequence('jobs', 'id')) + :n - 1)"
            ), {"n": n}).scalar_one()
        else:  # AUTOINCREMENT: a new id is above every id ever used (sqlite_sequence) and every id present
            last = conn.execute(sa.text(
                "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'jobs'), 0),"
                " coalesce((SELECT max(id) FROM jobs), 0))"
            )).scalar_one() + n
        return range(last - n + 1, last + 1)

    def write_updates(self, conn: Connection, updates: Sequence[JobUpdate]) -> None:
        """Apply ``updates`` in the caller's transaction: several updates of one job apply in order;
        jobs with the same set of changed columns are updated by one statement."""
        merged: dict[int, dict[str, Any]] = {}
        for u in updates:
            vals = merged.setdefault(u.id, {})
            for name in _UPDATE_FIELDS:
                v = getattr(u, name)
                if v is not UNSET:
                    vals[name] = (None if v is None else json_text(list(v))) if name == "placement" else v
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for id_, vals in merged.items():
            if vals:
                groups.setdefault(tuple(sorted(vals)), []).append({"id": id_, **vals})
        for params in groups.values():
            self._db.update_many(conn, jobs, params)

    # --- reads ---

    def load_active(self) -> builtins.list[JobRow]:
        """Every pending or running job, by id."""
        with _gc_paused():  # ~30 objects per job: the cyclic GC would otherwise rescan them again and again
            with self._db.tx() as conn:  # plain driver rows: SQLAlchemy's result processing doubles the time
                rows = conn.exec_driver_sql(self._load_active_sql).cursor.fetchall()
            # One sorted run per state (the (state, id) index): sorting merges them in linear time.
            return _job_rows(sorted(rows, key=operator.itemgetter(0)))

    def get(self, job_id: int) -> JobRow | None:
        """The job ``job_id``, or None."""
        with self._db.tx() as conn:
            r = conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).first()
        return None if r is None else _job_rows([r])[0]

    def count(self, *, tenant: str | None = None, states: Collection[str] | None = None) -> int:
        """How many jobs match."""
        q = _filter(sa.select(sa.func.count()).select_from(jobs), tenant, states)
        with self._db.tx() as conn:
            return int(conn.execute(q).scalar_one())

    def max_id(self) -> int:
        """The largest job id, 0 if there is none."""
        with self._db.tx() as conn:
            return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(jobs.c.id), 0))).scalar_one())

    def list(
        self, *, tenant: str | None = None, states: Collection[str] | None = None, after_id: int | None = None,
        limit: int = 100, descending: bool = False,
    ) -> builtins.list[JobRow]:
        """Up to ``limit`` jobs by id (keyset page: ids after ``after_id``, or before it when ``descending``).

        Several states are read one state at a time, each in the order of the (state, id) index, and
        merged: one query for all of them makes both databases read every job of those states after
        ``after_id`` and sort them (25 ms a page over 100,000 pending jobs, against 2 ms)."""
        parts = [None] if not states or len(states) == 1 else sorted(set(states))
        out: builtins.list[Any] = []
        with self._db.tx() as conn:
            for state in parts:
                q = _filter(sa.select(jobs), tenant, states if state is None else [state])
                if after_id is not None:
                    q = q.where(jobs.c.id < after_id if descending else jobs.c.id > after_id)
                q = q.order_by(jobs.c.id.desc() if descending else jobs.c.id).limit(limit)
                out += conn.execute(q).cursor.fetchall()  # plain driver rows, as load_active
        if len(parts) > 1:
            out.sort(key=operator.itemgetter(0), reverse=descending)
            del out[limit:]
        return _job_rows(out)


def _filter(q: sa.Select[Any], tenant: str | None, states: Collection[str] | None) -> sa.Select[Any]:
    if tenant is not None:
        q = q.where(jobs.c.tenant == tenant)
    if states is not None:
        q = q.where(jobs.c.state.in_(list(states)))
    return q
