"""The service's database: schema, typed rows, one method per transaction, and leader election.

SQLite (one file, WAL, fsync on every commit) is the embedded default; PostgreSQL (psycopg 3) is for
production. Every public method runs one transaction and returns plain frozen dataclasses, so rows
can cross threads. Writes that create jobs or events are serialised (``BEGIN IMMEDIATE`` on SQLite,
a transaction-level advisory lock on PostgreSQL), so job and event ids become visible in id order.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import gc
import hashlib
import hmac
import json
import operator
import os
import re
import secrets
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, Literal

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.engine.url import URL

from kant.errors import KantError
from kant.service.errors import Conflict, DatabaseError, Fenced, NotFound

__all__ = [
    "JOB_STATES",
    "LEADER_LOCK_KEY",
    "MIGRATION_LOCK_KEY",
    "NODE_STATES",
    "UNSET",
    "Database",
    "EventRow",
    "JobRow",
    "JobUpdate",
    "LeaderLock",
    "NewEvent",
    "NewJob",
    "NodeRow",
    "NodeUpdate",
    "ServiceRow",
    "TenantRow",
    "TokenRow",
    "Unset",
    "metadata",
]

# Fixed 64-bit PostgreSQL advisory lock keys (ASCII "kant_mig", "kant_ldr", "kant_wrt").
MIGRATION_LOCK_KEY: Final = 0x6B616E745F6D6967
LEADER_LOCK_KEY: Final = 0x6B616E745F6C6472
WRITER_LOCK_KEY: Final = 0x6B616E745F777274

JOB_STATES: Final = ("pending", "running", "finished", "failed", "cancelled", "unschedulable")
NODE_STATES: Final = ("up", "cordoned", "draining", "down", "removed")
ACTIVE_STATES: Final = ("pending", "running")
EPOCH_KEY: Final = "leader_epoch"
TOKEN_CACHE_TTL_S: Final = 2.0
_TOKEN_CACHE_MAX: Final = 10_000

MIGRATIONS_DIR: Final = Path(__file__).resolve().parent / "migrations"


# --- schema ---------------------------------------------------------------------------------------

metadata: Final = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# BIGINT on PostgreSQL; INTEGER on SQLite, where only "INTEGER PRIMARY KEY" is the rowid.
BigId: Final = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

tenants: Final = sa.Table(
    "tenants",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("guaranteed_gpus", sa.Integer, nullable=True),
    sa.Column("max_gpus", sa.Integer, nullable=True),
    sa.Column("created_wall", sa.Double, nullable=False),
)

tokens: Final = sa.Table(
    "tokens",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), nullable=True),
    sa.Column("created_wall", sa.Double, nullable=False),
    sa.Column("expires_wall", sa.Double, nullable=True),
    sa.Column("revoked_wall", sa.Double, nullable=True),
)

services: Final = sa.Table(
    "services",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), nullable=False),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("gpus_per_replica", sa.Integer, nullable=False),
    sa.Column("gpu_type", sa.String(64), nullable=True),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("replicas", sa.Integer, nullable=False),
    sa.Column("min_replicas", sa.Integer, nullable=False),
    sa.Column("max_replicas", sa.Integer, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("created_wall", sa.Double, nullable=False),
    # One active service per (tenant, name); a deleted service's name can be used again.
    sa.Index(
        "uq_services_tenant_name_active",
        "tenant",
        "name",
        unique=True,
        sqlite_where=sa.text("state = 'active'"),
        postgresql_where=sa.text("state = 'active'"),
    ),
)

jobs: Final = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), nullable=False),
    sa.Column("user", sa.String(128), nullable=False),
    sa.Column("name", sa.String(256), nullable=False),
    sa.Column("kind", sa.SmallInteger, nullable=False),
    sa.Column("service_id", sa.Integer, sa.ForeignKey("services.id"), nullable=True),
    sa.Column("workers", sa.Integer, nullable=False),
    sa.Column("gpus_per_worker", sa.Integer, nullable=False),
    sa.Column("gpu_milli", sa.Integer, nullable=False),
    sa.Column("gpu_type", sa.String(64), nullable=True),
    sa.Column("cpu_milli", sa.Integer, nullable=False),
    sa.Column("memory_mib", sa.Integer, nullable=False),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("estimate_s", sa.Double, nullable=True),
    sa.Column("duration_s", sa.Double, nullable=True),
    sa.Column("command", sa.Text, nullable=True),
    sa.Column("labels", sa.Text, nullable=False),
    sa.Column("idempotency_key", sa.String(128), nullable=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("submit_time", sa.Double, nullable=False),
    sa.Column("first_start_time", sa.Double, nullable=True),
    sa.Column("start_time", sa.Double, nullable=True),
    sa.Column("end_time", sa.Double, nullable=True),
    sa.Column("placement", sa.Text, nullable=True),
    sa.Column("runs", sa.Integer, nullable=False, server_default="0"),
    sa.Column("exit_code", sa.Integer, nullable=True),
    sa.Column("created_wall", sa.Double, nullable=False),
    sa.UniqueConstraint("tenant", "idempotency_key"),
    sa.Index("ix_jobs_state_id", "state", "id"),
    sa.Index("ix_jobs_tenant_state_id", "tenant", "state", "id"),
    sqlite_autoincrement=True,
)

nodes: Final = sa.Table(
    "nodes",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("position", sa.Integer, nullable=False, unique=True),
    sa.Column("gpu_type", sa.String(64), nullable=False),
    sa.Column("gpus", sa.Integer, nullable=False),
    sa.Column("cpu_milli", sa.Integer, nullable=False),
    sa.Column("memory_mib", sa.Integer, nullable=False),
    sa.Column("leaf", sa.String(128), nullable=True),
    sa.Column("spine", sa.String(128), nullable=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("updated_wall", sa.Double, nullable=False),
)

events: Final = sa.Table(
    "events",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("time", sa.Double, nullable=False),
    sa.Column("wall", sa.Double, nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("job_id", sa.BigInteger, nullable=True, index=True),
    sa.Column("node", sa.String(128), nullable=True),
    sa.Column("tenant", sa.String(64), nullable=True),
    sa.Column("message", sa.Text, nullable=False),
    sa.Index("ix_events_tenant_id", "tenant", "id"),
    sqlite_autoincrement=True,
)

_EVENTS: Final = events  # for methods whose parameters are named events and nodes
_NODES: Final = nodes

meta: Final = sa.Table(
    "meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)


# --- rows -----------------------------------------------------------------------------------------


class Unset(enum.Enum):
    """The type of :data:`UNSET`."""

    UNSET = "UNSET"


UNSET: Final = Unset.UNSET
"""Default of update fields: leave the stored value as it is (``None`` sets SQL NULL)."""


@dataclass(frozen=True, slots=True)
class TenantRow:
    """One tenant and its GPU quota (``None``: no guarantee / no cap)."""

    name: str
    guaranteed_gpus: int | None
    max_gpus: int | None
    created_wall: float


@dataclass(frozen=True, slots=True)
class TokenRow:
    """One API token (the plaintext is never stored; the hash is not exposed)."""

    id: int
    name: str
    role: str
    tenant: str | None
    created_wall: float
    expires_wall: float | None
    revoked_wall: float | None

    def valid_at(self, now_wall: float) -> bool:
        """True if the token is neither revoked nor expired at ``now_wall``."""
        return self.revoked_wall is None and (self.expires_wall is None or now_wall < self.expires_wall)


@dataclass(frozen=True, slots=True)
class JobRow:
    """One job, every column (``labels`` decoded; ``placement``: one node name per worker)."""

    id: int
    tenant: str
    user: str
    name: str
    kind: int
    service_id: int | None
    workers: int
    gpus_per_worker: int
    gpu_milli: int
    gpu_type: str | None
    cpu_milli: int
    memory_mib: int
    priority: int
    estimate_s: float | None
    duration_s: float | None
    command: str | None
    labels: dict[str, Any]
    idempotency_key: str | None
    state: str
    reason: str | None
    submit_time: float
    first_start_time: float | None
    start_time: float | None
    end_time: float | None
    placement: list[str] | None
    runs: int
    exit_code: int | None
    created_wall: float


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job to insert; the database adds id, state 'pending', submit_time and created_wall."""

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

    def __post_init__(self) -> None:
        if self.state is None or self.runs is None:
            raise ValueError(f"job {self.id}: state and runs cannot be NULL")


_JOB_UPDATE_FIELDS: Final = (
    "state", "reason", "first_start_time", "start_time", "end_time", "placement", "runs", "exit_code"
)


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One node of the inventory (``position``: registration order)."""

    name: str
    position: int
    gpu_type: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    leaf: str | None
    spine: str | None
    state: str
    reason: str | None
    updated_wall: float


@dataclass(frozen=True, slots=True)
class NodeUpdate:
    """A node's new state and reason (``wall``: updated_wall; ``None`` = now)."""

    name: str
    state: str
    reason: str | None
    wall: float | None = None


@dataclass(frozen=True, slots=True)
class ServiceRow:
    """One inference service (``replicas``: desired count)."""

    id: int
    tenant: str
    name: str
    gpus_per_replica: int
    gpu_type: str | None
    priority: int
    replicas: int
    min_replicas: int
    max_replicas: int
    state: str
    created_wall: float


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
    """Decode ``SELECT jobs.*`` rows; flat label objects seen before are copied, not parsed again."""
    flat: dict[str, dict[str, Any]] = {}
    out: list[JobRow] = []
    for (id_, tenant, user, name, kind, service_id, workers, gpw, milli, gtype, cpu, mem, prio, est, dur, cmd,
         labels, ikey, state, reason, submit, first, start, end, placement, runs, code, created) in rows:
        known = flat.get(labels)
        if known is not None:
            decoded = known.copy()
        else:
            decoded = json.loads(labels)
            if not any(isinstance(v, dict | list) for v in decoded.values()):
                flat[labels] = decoded.copy()
        out.append(JobRow(
            id_, tenant, user, name, kind, service_id, workers, gpw, milli, gtype, cpu, mem, prio, est, dur, cmd,
            decoded, ikey, state, reason, submit, first, start, end,
            None if placement is None else json.loads(placement), runs, code, created,
        ))
    return out


def _token_row(r: Any) -> TokenRow:
    return TokenRow(r.id, r.name, r.role, r.tenant, r.created_wall, r.expires_wall, r.revoked_wall)


def _pg_array_params(table: sa.Table, cols: Sequence[str], rows: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """One list per column (``p0``, ``p1``, ...), numbers made uniform (psycopg dumps a list by one type)."""
    out: dict[str, list[Any]] = {}
    for i, c in enumerate(cols):
        col_type = table.c[c].type
        conv: type[float] | type[int] | None = (
            float if isinstance(col_type, sa.Float) else int if isinstance(col_type, sa.Integer) else None
        )
        values = [r[c] for r in rows]
        out[f"p{i}"] = values if conv is None else [None if v is None else conv(v) for v in values]
    return out


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _hash_token(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


_TOKEN_COLS: Final = (tokens.c.id, tokens.c.name, tokens.c.role, tokens.c.tenant, tokens.c.created_wall,
                      tokens.c.expires_wall, tokens.c.revoked_wall)


_PG_ORDERED_BEGIN: Final = sa.text(
    "SELECT pg_advisory_xact_lock(:k), set_config('enable_seqscan', 'off', true),"
    " (SELECT value FROM meta WHERE key = :ek FOR SHARE)"  # the leader epoch, read-locked till commit
)
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


# --- URLs and errors ------------------------------------------------------------------------------


def _fence(epoch: int, current: str | None) -> None:
    if current != str(epoch):
        raise Fenced(f"leader epoch {epoch} is stale (current: {current})")


def _redact(url: str) -> str:
    """``url`` without its password (works on URLs SQLAlchemy cannot parse)."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


def _reason(err: BaseException) -> str:
    """The driver's one-line reason for ``err``."""
    orig = getattr(err, "orig", None) or err
    text = str(orig).strip()
    return text.splitlines()[0].strip() if text else type(orig).__name__


# --- the database ---------------------------------------------------------------------------------


class Database:
    """The service database at ``url`` (``sqlite:///path`` or ``postgresql+psycopg://...``); thread-safe."""

    def __init__(self, url: str) -> None:
        try:
            parsed = make_url(url)
        except sa_exc.ArgumentError:
            raise KantError(f"unsupported database URL {_redact(url)!r}") from None
        backend, _, driver = parsed.drivername.partition("+")
        self.safe_url = parsed.render_as_string(hide_password=True)
        self._token_cache: dict[str, tuple[TokenRow, float]] = {}
        self._cache_lock = threading.Lock()
        self.sqlite_path: Path | None = None
        if backend == "sqlite" and driver in ("", "pysqlite"):
            self.dialect: Literal["sqlite", "postgresql"] = "sqlite"
            self.sqlite_path = _check_sqlite_path(parsed)
            self._engine = sa.create_engine(
                parsed, connect_args={"check_same_thread": False}, poolclass=sa.QueuePool,
                pool_size=5, max_overflow=10,
            )
            sa.event.listen(self._engine, "connect", _sqlite_on_connect)
            sa.event.listen(self._engine, "begin", _sqlite_on_begin)
        elif backend in ("postgresql", "postgres") and driver in ("", "psycopg", "psycopg2"):
            # "postgresql://" alone means psycopg2 to SQLAlchemy; kant ships psycopg 3 only.
            self.dialect = "postgresql"
            parsed = parsed.set(drivername="postgresql+psycopg")
            # prepare_threshold=None: no server-side prepared statements. A prepared statement's
            # generic plan, made while the jobs table was small, keeps scanning it once it is large;
            # unprepared statements are planned on current sizes (and pass through pgbouncer).
            args: dict[str, Any] = {"application_name": "kant", "prepare_threshold": None}
            if "connect_timeout" not in parsed.query:
                args["connect_timeout"] = 10
            self._engine = sa.create_engine(
                parsed, pool_pre_ping=True, pool_size=5, max_overflow=10, connect_args=args,
            )
        else:
            raise KantError(
                f"unsupported database URL {self.safe_url!r} (use sqlite:///PATH or postgresql+psycopg://...)"
            )
        self.url: URL = parsed
        self._load_active_sql = str(sa.select(jobs).where(jobs.c.state.in_(ACTIVE_STATES)).compile(
            dialect=self._engine.dialect, compile_kwargs={"literal_binds": True}
        ))

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for migrations and tests)."""
        return self._engine

    def close(self) -> None:
        """Close every pooled connection."""
        self._engine.dispose()

    # --- transactions ---

    @contextlib.contextmanager
    def _tx(self, *, write: bool = False, ordered: bool = False, epoch: int | None = None) -> Iterator[Connection]:
        """One transaction; ``write``: take SQLite's write lock first; ``ordered``: also serialise on
        PostgreSQL; ``epoch``: raise :class:`Fenced` before anything is written unless it is the
        leader epoch (on PostgreSQL read in the statement that takes the ordering lock: one round trip)."""
        try:
            conn = self._engine.connect()
        except sa_exc.DBAPIError as e:
            raise DatabaseError(f"cannot connect to database {self.safe_url}: {_reason(e)}") from None
        try:
            with conn:
                if write:
                    conn.execution_options(kant_write=True)
                with conn.begin():
                    if ordered and self.dialect == "postgresql":
                        # Every statement of these transactions reads by key: no plan should scan a
                        # table, even while its statistics are stale (set_config(..., true): this
                        # transaction only).
                        row = conn.execute(_PG_ORDERED_BEGIN, {"k": WRITER_LOCK_KEY, "ek": EPOCH_KEY}).one()
                        if epoch is not None:
                            _fence(epoch, row[2])
                    else:
                        self._check_epoch(conn, epoch)
                    yield conn
        except sa_exc.OperationalError as e:
            raise DatabaseError(f"database {self.safe_url}: {_reason(e)}") from None
        except sa_exc.DataError as e:  # a value the column cannot hold (too long, out of range)
            raise DatabaseError(f"invalid value: {_reason(e)}") from None

    def ping(self) -> None:
        """Run ``SELECT 1``; raise :class:`DatabaseError` if the database cannot be reached."""
        with self._tx() as conn:
            conn.execute(sa.text("SELECT 1"))

    def migrate(self) -> None:
        """Upgrade the schema to the newest migration (idempotent; safe when several services start at once)."""
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        try:
            with self._tx(write=True) as conn:
                if self.dialect == "postgresql":
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK_KEY})
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
        except sa_exc.DBAPIError as e:  # e.g. no right to create tables
            raise DatabaseError(f"cannot migrate database {self.safe_url}: {_reason(e)}") from None

    # --- tenants ---

    def create_tenant(
        self, name: str, guaranteed_gpus: int | None = None, max_gpus: int | None = None, *,
        now_wall: float | None = None,
    ) -> TenantRow:
        """Create a tenant; :class:`Conflict` if it exists."""
        row = TenantRow(name, guaranteed_gpus, max_gpus, time.time() if now_wall is None else now_wall)
        try:
            with self._tx(write=True) as conn:
                if conn.execute(sa.select(tenants.c.name).where(tenants.c.name == name)).first() is not None:
                    raise Conflict(f"tenant {name!r} already exists")
                conn.execute(tenants.insert().values(
                    name=name, guaranteed_gpus=guaranteed_gpus, max_gpus=max_gpus, created_wall=row.created_wall,
                ))
        except sa_exc.IntegrityError:
            raise Conflict(f"tenant {name!r} already exists") from None
        return row

    def update_tenant(
        self, name: str, *, guaranteed_gpus: int | Unset | None = UNSET, max_gpus: int | Unset | None = UNSET,
    ) -> TenantRow:
        """Change a tenant's quota (``None`` clears a bound); :class:`NotFound` if missing."""
        values = {k: v for k, v in (("guaranteed_gpus", guaranteed_gpus), ("max_gpus", max_gpus)) if v is not UNSET}
        with self._tx(write=True) as conn:
            if values:
                conn.execute(tenants.update().where(tenants.c.name == name).values(values))
            r = conn.execute(sa.select(tenants).where(tenants.c.name == name)).first()
        if r is None:
            raise NotFound(f"tenant {name!r} does not exist")
        return TenantRow(*r)

    def get_tenant(self, name: str) -> TenantRow | None:
        """The tenant ``name``, or None."""
        with self._tx() as conn:
            r = conn.execute(sa.select(tenants).where(tenants.c.name == name)).first()
        return None if r is None else TenantRow(*r)

    def list_tenants(self) -> list[TenantRow]:
        """Every tenant, by name."""
        with self._tx() as conn:
            return [TenantRow(*r) for r in conn.execute(sa.select(tenants).order_by(tenants.c.name))]

    # --- tokens ---

    def create_token(
        self, *, role: str, tenant: str | None = None, name: str = "", expires_wall: float | None = None,
        now_wall: float | None = None,
    ) -> tuple[str, TokenRow]:
        """Create a token; returns its plaintext (shown once, stored only as SHA-256) and its row."""
        plaintext = "kant_" + secrets.token_urlsafe(32)
        row = self.add_token_hash(plaintext, role=role, tenant=tenant, name=name, expires_wall=expires_wall,
                                  now_wall=now_wall)
        return plaintext, row

    def add_token_hash(
        self, plaintext: str, *, role: str, tenant: str | None = None, name: str = "",
        expires_wall: float | None = None, now_wall: float | None = None,
    ) -> TokenRow:
        """Store the hash of a given token (e.g. an operator's admin token).

        Idempotent: if the token is stored already with the same role and tenant, its row comes back
        (revoked or not); with another role or tenant, :class:`Conflict`.
        """
        if role == "admin":
            if tenant is not None:
                raise ValueError("an admin token has no tenant")
        elif role == "tenant":
            if tenant is None:
                raise ValueError("a tenant token needs a tenant")
        else:
            raise ValueError(f"unknown token role {role!r} (admin or tenant)")
        if not plaintext:
            raise ValueError("empty token")
        digest = _hash_token(plaintext)
        created = time.time() if now_wall is None else now_wall
        with self._tx(write=True) as conn:
            old = conn.execute(sa.select(*_TOKEN_COLS).where(tokens.c.token_hash == digest)).first()
            if old is not None:
                if (old.role, old.tenant) != (role, tenant):
                    raise Conflict(f"this token is stored already with role {old.role!r} and tenant {old.tenant!r}")
                return _token_row(old)
            if tenant is not None and conn.execute(
                    sa.select(tenants.c.name).where(tenants.c.name == tenant)).first() is None:
                raise NotFound(f"tenant {tenant!r} does not exist")
            token_id = conn.execute(tokens.insert().values(
                token_hash=digest, name=name, role=role, tenant=tenant, created_wall=created,
                expires_wall=expires_wall,
            ).returning(tokens.c.id)).scalar_one()
        return TokenRow(token_id, name, role, tenant, created, expires_wall, None)

    def verify_token(self, plaintext: str, now_wall: float) -> TokenRow | None:
        """The token's row if it is known, not revoked and not expired at ``now_wall``; else None.

        Rows are cached for :data:`TOKEN_CACHE_TTL_S` seconds per process (a revocation by another
        process is seen within that delay; by this one, at once).
        """
        digest = _hash_token(plaintext)
        now = time.monotonic()
        with self._cache_lock:
            hit = self._token_cache.get(digest)
        if hit is not None and now - hit[1] < TOKEN_CACHE_TTL_S:
            row = hit[0]
        else:
            with self._tx() as conn:
                r = conn.execute(
                    sa.select(tokens.c.token_hash, *_TOKEN_COLS).where(tokens.c.token_hash == digest)
                ).first()
            if r is None or not hmac.compare_digest(r.token_hash, digest):
                return None
            row = _token_row(r)
            with self._cache_lock:
                if len(self._token_cache) >= _TOKEN_CACHE_MAX:
                    self._token_cache = {
                        k: v for k, v in self._token_cache.items() if now - v[1] < TOKEN_CACHE_TTL_S
                    }
                    if len(self._token_cache) >= _TOKEN_CACHE_MAX:
                        self._token_cache.clear()
                self._token_cache[digest] = (row, now)
        return row if row.valid_at(now_wall) else None

    def list_tokens(self, tenant: str | None = None) -> list[TokenRow]:
        """Every token (of ``tenant`` if given), by id."""
        q = sa.select(*_TOKEN_COLS).order_by(tokens.c.id)
        if tenant is not None:
            q = q.where(tokens.c.tenant == tenant)
        with self._tx() as conn:
            return [_token_row(r) for r in conn.execute(q)]

    def revoke_token(self, token_id: int, now_wall: float) -> bool:
        """Revoke a token; False if it does not exist or was already revoked."""
        with self._tx(write=True) as conn:
            r = conn.execute(
                sa.select(tokens.c.token_hash, tokens.c.revoked_wall).where(tokens.c.id == token_id)
            ).first()
            if r is None:
                return False
            with self._cache_lock:
                self._token_cache.pop(r.token_hash, None)
            if r.revoked_wall is not None:
                return False
            conn.execute(tokens.update().where(tokens.c.id == token_id).values(revoked_wall=now_wall))
        with self._cache_lock:  # a verify between the pop above and the commit may have cached it again
            self._token_cache.pop(r.token_hash, None)
        return True

    def count_tokens(self) -> int:
        """How many tokens are stored (revoked ones included)."""
        with self._tx() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(tokens)).scalar_one())

    # --- jobs ---

    def insert_jobs(
        self, batch: Sequence[NewJob], *, now_time: float, now_wall: float, epoch: int | None = None,
    ) -> list[tuple[int, bool]]:
        """Insert a batch of jobs in one transaction; returns (id, created) per input, in order.

        A job whose (tenant, idempotency_key) exists already, in the database or earlier in the
        batch, is not inserted: its existing id comes back with created=False. New jobs get state
        'pending' and ids in batch order, and one 'submitted' event each. ``epoch``: as in :meth:`apply`.
        """
        if not batch:
            return []
        try:
            return self._insert_jobs(batch, now_time, now_wall, epoch)
        except sa_exc.IntegrityError:  # a foreign key: say which tenant or service is missing
            self._missing_owner(batch)
            raise

    def _missing_owner(self, batch: Sequence[NewJob]) -> None:
        """Raise :class:`NotFound` for the first tenant or service of ``batch`` that does not exist."""
        names = {j.tenant for j in batch}
        sids = {j.service_id for j in batch if j.service_id is not None}
        with self._tx() as conn:
            found = set(conn.execute(sa.select(tenants.c.name).where(tenants.c.name.in_(names))).scalars())
            if names - found:
                raise NotFound(f"tenant {min(names - found)!r} does not exist")
            found_ids = set(conn.execute(sa.select(services.c.id).where(services.c.id.in_(sids))).scalars())
            if sids - found_ids:
                raise NotFound(f"service {min(sids - found_ids)} does not exist")

    def _insert_jobs(self, batch: Sequence[NewJob], now_time: float, now_wall: float,
                     epoch: int | None) -> list[tuple[int, bool]]:
        keys = {(j.tenant, j.idempotency_key) for j in batch if j.idempotency_key is not None}
        with self._tx(write=True, ordered=True, epoch=epoch) as conn:
            known: dict[tuple[str, str], int] = {}
            if keys:
                known = self._known_keys(conn, keys)
            rows: list[dict[str, Any]] = []
            slots: list[int] = []  # per input: index into rows, or -1 when the id is known
            pending: dict[tuple[str, str], int] = {}
            for j in batch:
                key = None if j.idempotency_key is None else (j.tenant, j.idempotency_key)
                if key is not None and key in known:
                    slots.append(-1)
                    continue
                if key is not None and key in pending:
                    slots.append(pending[key])
                    continue
                if key is not None:
                    pending[key] = len(rows)
                slots.append(len(rows))
                rows.append({
                    "tenant": j.tenant, "user": j.user, "name": j.name, "kind": j.kind, "service_id": j.service_id,
                    "workers": j.workers, "gpus_per_worker": j.gpus_per_worker, "gpu_milli": j.gpu_milli,
                    "gpu_type": j.gpu_type, "cpu_milli": j.cpu_milli, "memory_mib": j.memory_mib,
                    "priority": j.priority, "estimate_s": j.estimate_s, "duration_s": j.duration_s,
                    "command": j.command, "labels": _json(j.labels), "idempotency_key": j.idempotency_key,
                    "state": "pending", "submit_time": now_time, "runs": 0, "created_wall": now_wall,
                })
            ids = self._new_job_ids(conn, len(rows))
            for id_, r in zip(ids, rows, strict=True):
                r["id"] = id_
            if self.dialect == "postgresql" and rows:  # the jobs and their events in one statement
                cols = list(rows[0])
                names = ", ".join(self._quote(c) for c in cols)
                sql = _PG_JOBS_AND_EVENTS.format(names=names, arrays=self._pg_arrays(jobs, cols))
                conn.execute(sa.text(sql), {**_pg_array_params(jobs, cols, rows), "now_time": now_time,
                                            "now_wall": now_wall})
            else:
                self._insert_many(conn, jobs, rows)
                self._insert_many(conn, events, [
                    {"time": now_time, "wall": now_wall, "kind": "submitted", "job_id": id_, "node": None,
                     "tenant": r["tenant"], "message": f"submitted by {r['user']}"}
                    for id_, r in zip(ids, rows, strict=True)
                ])
        out: list[tuple[int, bool]] = []
        seen: set[int] = set()
        for j, slot in zip(batch, slots, strict=True):
            if slot < 0:
                out.append((known[(j.tenant, j.idempotency_key)], False))  # type: ignore[index]
            else:
                out.append((ids[slot], slot not in seen))
                seen.add(slot)
        return out

    def _known_keys(self, conn: Connection, keys: set[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """The ids of the stored jobs among the (tenant, idempotency_key) pairs ``keys``."""
        if self.dialect == "postgresql":
            # One probe of the unique index per key (an IN list is planned as a scan of the tenant's jobs).
            pairs = sorted(keys)
            rows = conn.execute(_PG_KEY_LOOKUP, {"ts": [t for t, _ in pairs], "ks": [k for _, k in pairs]})
        else:  # SQLite probes the unique index for two IN lists (a row-value IN would scan it)
            rows = conn.execute(sa.select(jobs.c.id, jobs.c.tenant, jobs.c.idempotency_key).where(
                jobs.c.tenant.in_(sorted({t for t, _ in keys})),
                jobs.c.idempotency_key.in_(sorted({k for _, k in keys})),
            ))
        return {(t, k): id_ for id_, t, k in rows if (t, k) in keys}

    def _new_job_ids(self, conn: Connection, n: int) -> range:
        """``n`` consecutive unused job ids; the caller holds the writer lock, so nobody else takes ids meanwhile."""
        if n == 0:
            return range(0)
        if self.dialect == "postgresql":
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

    def apply(
        self, updates: Sequence[JobUpdate], events: Sequence[NewEvent], nodes: Sequence[NodeUpdate] = (), *,
        epoch: int | None = None,
    ) -> None:
        """Write job updates, events and node states in one transaction.

        With ``epoch``, nothing is written and :class:`Fenced` is raised unless meta['leader_epoch']
        is ``str(epoch)``. Several updates of one job apply in order; updates of unknown ids and
        nodes change nothing.
        """
        with self._tx(write=True, ordered=True, epoch=epoch) as conn:
            merged: dict[int, dict[str, Any]] = {}
            for u in updates:
                vals = merged.setdefault(u.id, {})
                for name in _JOB_UPDATE_FIELDS:
                    v = getattr(u, name)
                    if v is not UNSET:
                        vals[name] = (None if v is None else _json(list(v))) if name == "placement" else v
            groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
            for id_, vals in merged.items():
                if vals:
                    groups.setdefault(tuple(sorted(vals)), []).append({"id": id_, **vals})
            for params in groups.values():
                self._update_many(conn, jobs, params)
            now = time.time()
            self._update_many(conn, _NODES, list({
                n.name: {"name": n.name, "state": n.state, "reason": n.reason,
                         "updated_wall": now if n.wall is None else n.wall} for n in nodes
            }.values()))
            self._insert_many(conn, _EVENTS, [
                {"time": e.time, "wall": e.wall, "kind": e.kind, "job_id": e.job_id, "node": e.node,
                 "tenant": e.tenant, "message": e.message} for e in events
            ])

    def _check_epoch(self, conn: Connection, epoch: int | None) -> None:
        """Raise :class:`Fenced` unless ``epoch`` is None or meta['leader_epoch'] (locked until commit)."""
        if epoch is None:
            return
        q = sa.select(meta.c.value).where(meta.c.key == EPOCH_KEY)
        if self.dialect == "postgresql":  # a new leader's epoch bump waits for this transaction
            q = q.with_for_update(read=True)
        _fence(epoch, conn.execute(q).scalar_one_or_none())

    def _insert_many(self, conn: Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
        """Insert ``rows`` (dicts with the same keys); on PostgreSQL as one statement over arrays."""
        if not rows:
            return
        if self.dialect == "sqlite":
            conn.execute(table.insert(), rows)
            return
        cols = list(rows[0])
        names = ", ".join(self._quote(c) for c in cols)
        sql = f"INSERT INTO {table.name} ({names}) SELECT * FROM unnest({self._pg_arrays(table, cols)})"
        conn.execute(sa.text(sql), _pg_array_params(table, cols, rows))

    def _update_many(self, conn: Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
        """Update rows by primary key: each dict holds the key and the same new values (keys unique)."""
        if not rows:
            return
        key = table.primary_key.columns.values()[0].name
        cols = list(rows[0])
        if self.dialect == "sqlite":
            conn.execute(
                table.update().where(table.c[key] == sa.bindparam("_key")).values(
                    {c: sa.bindparam(c) for c in cols if c != key}
                ),
                [{c: r[c] for c in cols if c != key} | {"_key": r[key]} for r in rows],
            )
            return
        sets = ", ".join(f"{self._quote(c)} = u.{self._quote(c)}" for c in cols if c != key)
        alias = ", ".join(self._quote(c) for c in cols)
        sql = (f"UPDATE {table.name} SET {sets} FROM unnest({self._pg_arrays(table, cols)}) AS u({alias})"
               f" WHERE {table.name}.{self._quote(key)} = u.{self._quote(key)}")
        conn.execute(sa.text(sql), _pg_array_params(table, cols, rows))

    def _quote(self, name: str) -> str:
        return self._engine.dialect.identifier_preparer.quote(name)

    def _pg_arrays(self, table: sa.Table, cols: Sequence[str]) -> str:
        """``CAST(:p0 AS type[]), ...``: one array parameter per column.

        Strings travel as ``text[]``: a cast to ``varchar(n)`` would cut long values silently, while
        storing text in the column checks the length.
        """
        dialect = self._engine.dialect
        return ", ".join(
            f"CAST(:p{i} AS {'text' if isinstance(t, sa.String) else t.compile(dialect=dialect)}[])"
            for i, t in enumerate(table.c[c].type for c in cols)
        )

    def load_active(self) -> list[JobRow]:
        """Every pending or running job, by id."""
        with _gc_paused():  # ~30 objects per job: the cyclic GC would otherwise rescan them again and again
            with self._tx() as conn:  # plain driver rows: SQLAlchemy's result processing doubles the time
                rows = conn.exec_driver_sql(self._load_active_sql).cursor.fetchall()
            # One sorted run per state (the (state, id) index): sorting merges them in linear time.
            return _job_rows(sorted(rows, key=operator.itemgetter(0)))

    def get_job(self, job_id: int) -> JobRow | None:
        """The job ``job_id``, or None."""
        with self._tx() as conn:
            r = conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).first()
        return None if r is None else _job_rows([r])[0]

    @staticmethod
    def _job_filter(q: sa.Select[Any], tenant: str | None, states: Collection[str] | None) -> sa.Select[Any]:
        if tenant is not None:
            q = q.where(jobs.c.tenant == tenant)
        if states is not None:
            q = q.where(jobs.c.state.in_(list(states)))
        return q

    def list_jobs(
        self, *, tenant: str | None = None, states: Collection[str] | None = None, after_id: int | None = None,
        limit: int = 100, descending: bool = False,
    ) -> list[JobRow]:
        """Up to ``limit`` jobs by id (keyset page: ids after ``after_id``, or before it when ``descending``)."""
        q = self._job_filter(sa.select(jobs), tenant, states)
        if after_id is not None:
            q = q.where(jobs.c.id < after_id if descending else jobs.c.id > after_id)
        q = q.order_by(jobs.c.id.desc() if descending else jobs.c.id).limit(limit)
        with self._tx() as conn:
            return _job_rows(conn.execute(q))

    def count_jobs(self, *, tenant: str | None = None, states: Collection[str] | None = None) -> int:
        """How many jobs match."""
        q = self._job_filter(sa.select(sa.func.count()).select_from(jobs), tenant, states)
        with self._tx() as conn:
            return int(conn.execute(q).scalar_one())

    def max_job_id(self) -> int:
        """The largest job id, 0 if there is none."""
        with self._tx() as conn:
            return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(jobs.c.id), 0))).scalar_one())

    # --- events ---

    def job_events(self, job_id: int, limit: int = 200) -> list[EventRow]:
        """The job's latest ``limit`` events, oldest first."""
        q = sa.select(events).where(events.c.job_id == job_id).order_by(events.c.id.desc()).limit(limit)
        with self._tx() as conn:
            rows = [EventRow(*r) for r in conn.execute(q)]
        rows.reverse()
        return rows

    def events_after(self, after_id: int, *, tenant: str | None = None, limit: int = 1000) -> list[EventRow]:
        """Up to ``limit`` events with id > ``after_id``, oldest first.

        With ``tenant``, only events whose tenant column is that tenant (not the cluster's own events,
        whose tenant is NULL).
        """
        q = sa.select(events).where(events.c.id > after_id)
        if tenant is not None:
            q = q.where(events.c.tenant == tenant)
        q = q.order_by(events.c.id).limit(limit)
        with self._tx() as conn:
            return [EventRow(*r) for r in conn.execute(q)]

    def max_event_id(self) -> int:
        """The largest event id, 0 if there is none."""
        with self._tx() as conn:
            return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(events.c.id), 0))).scalar_one())

    def last_event_time(self) -> float | None:
        """The service time of the latest event (where a restarted non-wall clock resumes), None if none."""
        with self._tx() as conn:
            last = conn.execute(sa.select(events.c.time).order_by(events.c.id.desc()).limit(1)).scalar()
        return None if last is None else float(last)

    # --- nodes ---

    def upsert_nodes(self, rows: Sequence[NodeRow]) -> None:
        """Insert new nodes and update known ones (by name; the last row of a name wins).

        A known node keeps its position; new nodes take the positions after the largest stored one,
        in input order (the ``position`` field of the rows is not used).
        """
        if not rows:
            return
        latest = {r.name: r for r in rows}
        with self._tx(write=True) as conn:
            known = set(conn.execute(sa.select(nodes.c.name).where(nodes.c.name.in_(list(latest)))).scalars())
            nxt = int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(nodes.c.position), -1))).scalar_one()) + 1
            new: list[dict[str, Any]] = []
            old: list[dict[str, Any]] = []
            for r in latest.values():
                vals = {"name": r.name, "gpu_type": r.gpu_type, "gpus": r.gpus, "cpu_milli": r.cpu_milli,
                        "memory_mib": r.memory_mib, "leaf": r.leaf, "spine": r.spine, "state": r.state,
                        "reason": r.reason, "updated_wall": r.updated_wall}
                if r.name in known:
                    old.append(vals)
                else:
                    new.append({**vals, "position": nxt})
                    nxt += 1
            self._insert_many(conn, nodes, new)
            self._update_many(conn, nodes, old)

    def list_nodes(self) -> list[NodeRow]:
        """Every node, by position."""
        with self._tx() as conn:
            return [NodeRow(*r) for r in conn.execute(sa.select(nodes).order_by(nodes.c.position))]

    def get_node(self, name: str) -> NodeRow | None:
        """The node ``name``, or None."""
        with self._tx() as conn:
            r = conn.execute(sa.select(nodes).where(nodes.c.name == name)).first()
        return None if r is None else NodeRow(*r)

    # --- services ---

    def create_service(
        self, *, tenant: str, name: str, gpus_per_replica: int, replicas: int, min_replicas: int,
        max_replicas: int, gpu_type: str | None = None, priority: int = 0, now_wall: float | None = None,
    ) -> ServiceRow:
        """Create an active service; :class:`Conflict` if the tenant has an active one of that name."""
        created = time.time() if now_wall is None else now_wall
        try:
            with self._tx(write=True) as conn:
                if conn.execute(sa.select(tenants.c.name).where(tenants.c.name == tenant)).first() is None:
                    raise NotFound(f"tenant {tenant!r} does not exist")
                if conn.execute(sa.select(services.c.id).where(
                        services.c.tenant == tenant, services.c.name == name, services.c.state == "active")
                ).first() is not None:
                    raise Conflict(f"service {name!r} of tenant {tenant!r} already exists")
                sid = conn.execute(services.insert().values(
                    tenant=tenant, name=name, gpus_per_replica=gpus_per_replica, gpu_type=gpu_type,
                    priority=priority, replicas=replicas, min_replicas=min_replicas, max_replicas=max_replicas,
                    state="active", created_wall=created,
                ).returning(services.c.id)).scalar_one()
        except sa_exc.IntegrityError:
            raise Conflict(f"service {name!r} of tenant {tenant!r} already exists") from None
        return ServiceRow(sid, tenant, name, gpus_per_replica, gpu_type, priority, replicas, min_replicas,
                          max_replicas, "active", created)

    def update_service(
        self, service_id: int, *, replicas: int | Unset = UNSET, min_replicas: int | Unset = UNSET,
        max_replicas: int | Unset = UNSET, state: str | Unset = UNSET,
    ) -> ServiceRow:
        """Change a service's replica counts or state; :class:`NotFound` if missing."""
        values = {k: v for k, v in (("replicas", replicas), ("min_replicas", min_replicas),
                                    ("max_replicas", max_replicas), ("state", state)) if v is not UNSET}
        try:
            with self._tx(write=True) as conn:
                if values:
                    conn.execute(services.update().where(services.c.id == service_id).values(values))
                r = conn.execute(sa.select(services).where(services.c.id == service_id)).first()
        except sa_exc.IntegrityError:
            raise Conflict(f"service {service_id}: another active service has its name") from None
        if r is None:
            raise NotFound(f"service {service_id} does not exist")
        return ServiceRow(*r)

    def get_service(self, service_id: int) -> ServiceRow | None:
        """The service ``service_id``, or None."""
        with self._tx() as conn:
            r = conn.execute(sa.select(services).where(services.c.id == service_id)).first()
        return None if r is None else ServiceRow(*r)

    def list_services(self, tenant: str | None = None, *, include_deleted: bool = False) -> list[ServiceRow]:
        """The services (of ``tenant`` if given; active ones unless ``include_deleted``), by id."""
        q = sa.select(services).order_by(services.c.id)
        if tenant is not None:
            q = q.where(services.c.tenant == tenant)
        if not include_deleted:
            q = q.where(services.c.state == "active")
        with self._tx() as conn:
            return [ServiceRow(*r) for r in conn.execute(q)]

    # --- meta ---

    def get_meta(self, key: str) -> str | None:
        """The value stored under ``key``, or None."""
        with self._tx() as conn:
            v = conn.execute(sa.select(meta.c.value).where(meta.c.key == key)).scalar_one_or_none()
        return None if v is None else str(v)

    def set_meta(self, key: str, value: str) -> None:
        """Store ``value`` under ``key``."""
        with self._tx(write=True) as conn:
            self._upsert_meta(conn, key, value)

    def _upsert_meta(self, conn: Connection, key: str, value: str) -> None:
        if conn.execute(meta.update().where(meta.c.key == key).values(value=value)).rowcount == 0:
            conn.execute(meta.insert().values(key=key, value=value))

    def _bump_epoch(self) -> int:
        """Add one to meta['leader_epoch'] (0 when unset) and return it."""
        with self._tx(write=True) as conn:
            q = sa.select(meta.c.value).where(meta.c.key == EPOCH_KEY)
            if self.dialect == "postgresql":
                q = q.with_for_update()
            old = conn.execute(q).scalar_one_or_none()
            epoch = (int(old) if old is not None else 0) + 1
            self._upsert_meta(conn, EPOCH_KEY, str(epoch))
        return epoch


# --- SQLite connection setup ----------------------------------------------------------------------


def _check_sqlite_path(url: URL) -> Path:
    """The database file of a SQLite URL; :class:`KantError` unless it is a writable file path."""
    db = url.database
    if not db or db == ":memory:" or db.startswith("file:") or url.query.get("mode") == "memory":
        raise KantError(f"{url.render_as_string()}: the service needs a SQLite file path (sqlite:///PATH)")
    path = Path(db)
    folder = path.parent
    if not folder.is_dir():
        raise KantError(f"cannot open database {path}: folder {folder} does not exist")
    if path.is_dir():
        raise KantError(f"cannot open database {path}: it is a folder")
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise KantError(f"cannot open database {path}: not writable")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise KantError(f"cannot open database {path}: folder {folder} is not writable")
    return path


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # transactions are begun by _sqlite_on_begin
    cur = dbapi_conn.cursor()
    try:
        cur.execute("PRAGMA busy_timeout=10000")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=FULL")
        cur.execute("PRAGMA foreign_keys=ON")
    finally:
        cur.close()


def _sqlite_on_begin(conn: Connection) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("kant_write") else "BEGIN")


# --- leader election ------------------------------------------------------------------------------


class LeaderLock:
    """Leader election: one holder per database; each acquisition bumps meta['leader_epoch'].

    PostgreSQL: a session advisory lock on a dedicated connection (freed by the server when the
    holder's connection closes, e.g. when its process dies). SQLite: an exclusive ``flock`` on
    ``<db file>.lock``.
    """

    def __init__(self, db: Database, key: int = LEADER_LOCK_KEY) -> None:
        self.db = db
        self.key = key
        self.epoch: int | None = None
        self._pg: Any = None  # psycopg.Connection
        self._file: IO[bytes] | None = None

    def try_acquire(self) -> int | None:
        """Take the lock if free and return the new epoch; the current epoch if held already; None if taken."""
        if self.epoch is not None:
            return self.epoch
        if self.db.dialect == "postgresql":
            if not self._pg_try_lock():
                return None
        elif not self._flock():
            return None
        try:
            self.epoch = self.db._bump_epoch()
        except BaseException:
            self.release()
            raise
        return self.epoch

    def still_held(self) -> bool:
        """True while this object holds the lock (PostgreSQL: its connection still answers)."""
        if self.epoch is None:
            return False
        if self.db.dialect == "postgresql":
            try:
                self._pg.execute("SELECT 1")
            except Exception:
                self.release()
                return False
        return True

    def release(self) -> None:
        """Give the lock up (no-op if not held)."""
        self.epoch = None
        if self._pg is not None:
            conn, self._pg = self._pg, None
            with contextlib.suppress(Exception):
                conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
            with contextlib.suppress(Exception):
                conn.close()
        if self._file is not None:
            f, self._file = self._file, None
            with contextlib.suppress(OSError):
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
            f.close()

    def _pg_try_lock(self) -> bool:
        import psycopg

        if self._pg is not None and (self._pg.closed or self._pg.broken):
            self._pg = None
        if self._pg is None:
            url = self.db.url.set(drivername="postgresql")
            kwargs: dict[str, Any] = {"autocommit": True, "application_name": "kant-leader"}
            if "connect_timeout" not in url.query:
                kwargs["connect_timeout"] = 10
            try:
                self._pg = psycopg.connect(url.render_as_string(hide_password=False), **kwargs)
            except psycopg.Error as e:
                raise DatabaseError(f"cannot connect to database {self.db.safe_url}: {_reason(e)}") from None
        try:
            got = bool(self._pg.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()[0])
        except psycopg.Error as e:
            self.release()
            raise DatabaseError(f"database {self.db.safe_url}: {_reason(e)}") from None
        return got

    def _flock(self) -> bool:
        assert self.db.sqlite_path is not None
        f = open(f"{self.db.sqlite_path}.lock", "ab")  # noqa: SIM115 (kept open while the lock is held)
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            return False
        self._file = f
        return True

    def __enter__(self) -> LeaderLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
