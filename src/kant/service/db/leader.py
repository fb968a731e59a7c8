"""Leader election: one holder per database, fenced by the leader epoch in the ``meta`` table."""

from __future__ import annotations

import contextlib
import fcntl
from typing import IO, Any

from kant.service.db.base import driver_reason
from kant.service.db.database import Database
from kant.service.db.schema import LEADER_LOCK_KEY
from kant.service.errors import DatabaseError

__all__ = ["LeaderLock"]


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
            self.epoch = self.db.meta.bump_epoch()
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
                raise DatabaseError(f"cannot connect to database {self.db.safe_url}: {driver_reason(e)}") from None
        try:
            got = bool(self._pg.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()[0])
        except psycopg.Error as e:
            self.release()
            raise DatabaseError(f"database {self.db.safe_url}: {driver_reason(e)}") from None
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
