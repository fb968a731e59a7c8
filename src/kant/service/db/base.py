"""The database's backend: the URL checks, the engine, its transactions and the bulk writes that every
repository shares.

SQLite (one file, WAL, fsync on every commit) is the embedded default; PostgreSQL (psycopg 3) is for
production. Writes that create jobs or events are serialised (``BEGIN IMMEDIATE`` on SQLite, a
transaction-level advisory lock on PostgreSQL), so job and event ids become visible in id order.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.engine.url import URL

from kant.errors import KantError
from kant.service.db.schema import EPOCH_KEY, MIGRATION_LOCK_KEY, WRITER_LOCK_KEY, meta
from kant.service.errors import DatabaseError, Fenced

__all__ = ["MIGRATIONS_DIR", "Backend", "driver_reason", "json_text", "pg_array_params"]

MIGRATIONS_DIR: Final = Path(__file__).resolve().parent.parent / "migrations"

_PG_ORDERED_BEGIN: Final = sa.text(
    "SELECT pg_advisory_xact_lock(:k), set_config('enable_seqscan', 'off', true),"
    " (SELECT value FROM meta WHERE key = :ek FOR SHARE)"  # the leader epoch, read-locked till commit
)


_JSON: Final = json.JSONEncoder(separators=(",", ":"), sort_keys=True)  # json.dumps would make one per call


def json_text(value: object) -> str:
    """``value`` as compact JSON with sorted keys (how labels and placements are stored)."""
    return _JSON.encode(value)


def pg_array_params(table: sa.Table, cols: Sequence[str], rows: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
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


def driver_reason(err: BaseException) -> str:
    """The driver's one-line reason for ``err``."""
    orig = getattr(err, "orig", None) or err
    text = str(orig).strip()
    return text.splitlines()[0].strip() if text else type(orig).__name__


def _fence(epoch: int, current: str | None) -> None:
    if current != str(epoch):
        raise Fenced(f"leader epoch {epoch} is stale (current: {current})")


def _redact(url: str) -> str:
    """``url`` without its password (works on URLs SQLAlchemy cannot parse)."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


class Backend:
    """The database at ``url`` (``sqlite:///path`` or ``postgresql+psycopg://...``): its engine and
    transactions; thread-safe. :class:`~kant.service.db.database.Database` is this plus one repository
    per table group, each running its queries through :meth:`tx`."""

    def __init__(self, url: str) -> None:
        try:
            parsed = make_url(url)
        except sa_exc.ArgumentError:
            raise KantError(f"unsupported database URL {_redact(url)!r}") from None
        backend, _, driver = parsed.drivername.partition("+")
        self.safe_url = parsed.render_as_string(hide_password=True)
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

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for migrations and tests)."""
        return self._engine

    def close(self) -> None:
        """Close every pooled connection."""
        self._engine.dispose()

    def ping(self) -> None:
        """Run ``SELECT 1``; raise :class:`DatabaseError` if the database cannot be reached."""
        with self.tx() as conn:
            conn.execute(sa.text("SELECT 1"))

    def migrate(self) -> None:
        """Upgrade the schema to the newest migration (idempotent; safe when several services start at once)."""
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        try:
            with self.tx(write=True) as conn:
                if self.dialect == "postgresql":
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK_KEY})
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
        except sa_exc.DBAPIError as e:  # e.g. no right to create tables
            raise DatabaseError(f"cannot migrate database {self.safe_url}: {driver_reason(e)}") from None

    # --- transactions ---

    @contextlib.contextmanager
    def tx(self, *, write: bool = False, ordered: bool = False, epoch: int | None = None) -> Iterator[Connection]:
        """One transaction; ``write``: take SQLite's write lock first; ``ordered``: also serialise on
        PostgreSQL; ``epoch``: raise :class:`Fenced` before anything is written unless it is the
        leader epoch (on PostgreSQL read in the statement that takes the ordering lock: one round trip)."""
        try:
            conn = self._engine.connect()
        except sa_exc.DBAPIError as e:
            raise DatabaseError(f"cannot connect to database {self.safe_url}: {driver_reason(e)}") from None
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
            raise DatabaseError(f"database {self.safe_url}: {driver_reason(e)}") from None
        except sa_exc.DataError as e:  # a value the column cannot hold (too long, out of range)
            raise DatabaseError(f"invalid value: {driver_reason(e)}") from None

    def _check_epoch(self, conn: Connection, epoch: int | None) -> None:
        """Raise :class:`Fenced` unless ``epoch`` is None or meta['leader_epoch'] (locked until commit)."""
        if epoch is None:
            return
        q = sa.select(meta.c.value).where(meta.c.key == EPOCH_KEY)
        if self.dialect == "postgresql":  # a new leader's epoch bump waits for this transaction
            q = q.with_for_update(read=True)
        _fence(epoch, conn.execute(q).scalar_one_or_none())

    # --- bulk writes ---

    def insert_many(self, conn: Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
        """Insert ``rows`` (dicts with the same keys); on PostgreSQL as one statement over arrays."""
        if not rows:
            return
        if self.dialect == "sqlite":
            conn.execute(table.insert(), rows)
            return
        cols = list(rows[0])
        names = ", ".join(self.quote(c) for c in cols)
        sql = f"INSERT INTO {table.name} ({names}) SELECT * FROM unnest({self.pg_arrays(table, cols)})"
        conn.execute(sa.text(sql), pg_array_params(table, cols, rows))

    def update_many(self, conn: Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
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
        sets = ", ".join(f"{self.quote(c)} = u.{self.quote(c)}" for c in cols if c != key)
        alias = ", ".join(self.quote(c) for c in cols)
        sql = (f"UPDATE {table.name} SET {sets} FROM unnest({self.pg_arrays(table, cols)}) AS u({alias})"
               f" WHERE {table.name}.{self.quote(key)} = u.{self.quote(key)}")
        conn.execute(sa.text(sql), pg_array_params(table, cols, rows))

    def quote(self, name: str) -> str:
        """``name`` quoted as an SQL identifier where it needs it (``"user"``)."""
        return self._engine.dialect.identifier_preparer.quote(name)

    def pg_arrays(self, table: sa.Table, cols: Sequence[str]) -> str:
        """``CAST(:p0 AS type[]), ...``: one array parameter per column.

        Strings travel as ``text[]``: a cast to ``varchar(n)`` would cut long values silently, while
        storing text in the column checks the length.
        """
        dialect = self._engine.dialect
        return ", ".join(
            f"CAST(:p{i} AS {'text' if isinstance(t, sa.String) else t.compile(dialect=dialect)}[])"
            for i, t in enumerate(table.c[c].type for c in cols)
        )


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
