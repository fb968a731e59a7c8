"""Fixtures of the service tests: a fresh SQLite file per test, a fresh PostgreSQL database per module.

PostgreSQL is the server ``KANT_TEST_PG`` names (default: postgres on 127.0.0.1:5432, database
``test``); when it cannot be reached, the PostgreSQL tests fail (they never skip).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from kant.service.db.database import Database

PG_ADMIN_URL = os.environ.get("KANT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", "postgresql"]
TABLES = "tenants, tokens, services, jobs, nodes, events, job_runs, meta"


def _admin_conninfo() -> str:
    return make_url(PG_ADMIN_URL).set(drivername="postgresql").render_as_string(hide_password=False)


def _start_local_postgresql() -> None:
    """Start this machine's PostgreSQL cluster if it is stopped (Debian's ``pg_ctlcluster``)."""
    versions = sorted(Path("/etc/postgresql").glob("*")) if Path("/etc/postgresql").is_dir() else []
    if not versions or shutil.which("pg_ctlcluster") is None:
        return
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1].name, "main", "start"],
                   capture_output=True, timeout=60, check=False)


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The admin URL of the test PostgreSQL server, after checking that it answers (a stopped local
    server is started first)."""
    try:
        try:
            with psycopg.connect(_admin_conninfo(), autocommit=True, connect_timeout=5) as conn:
                conn.execute("SELECT 1")
        except psycopg.OperationalError:
            _start_local_postgresql()
            with psycopg.connect(_admin_conninfo(), autocommit=True, connect_timeout=10) as conn:
                conn.execute("SELECT 1")
    except psycopg.Error as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        pytest.fail(
            f"the PostgreSQL test server {make_url(PG_ADMIN_URL).render_as_string(hide_password=True)} cannot be "
            f"reached ({reason}); the service tests need it (set KANT_TEST_PG to use another one)",
            pytrace=False,
        )
    return PG_ADMIN_URL


NewPgDatabase = Callable[[], contextlib.AbstractContextManager[str]]


@contextlib.contextmanager
def new_pg_database() -> Iterator[str]:
    """A fresh, empty PostgreSQL database (dropped afterwards); yields its SQLAlchemy URL."""
    name = f"kant_t_{secrets.token_hex(6)}"
    with psycopg.connect(_admin_conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(PG_ADMIN_URL).set(drivername="postgresql+psycopg", database=name).render_as_string(
            hide_password=False
        )
    finally:
        with psycopg.connect(_admin_conninfo(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def new_pg_db(pg_server: str) -> NewPgDatabase:
    """Makes fresh, empty PostgreSQL databases: ``with new_pg_db() as url: ...``."""
    return new_pg_database


@pytest.fixture(scope="module")
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh PostgreSQL database for the module, migrated."""
    with new_pg_database() as url:
        db = Database(url)
        db.migrate()
        db.close()
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite file in the test's temporary folder (not created yet)."""
    return f"sqlite:///{tmp_path / 'kant.db'}"


@pytest.fixture
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty, unmigrated database of the backend the test is parametrised with (``backend``)."""
    if request.node.callspec.params["backend"] == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh.db'}"
    else:
        request.getfixturevalue("pg_server")
        with new_pg_database() as url:
            yield url


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """``sqlite`` or ``postgresql``."""
    return str(request.param)


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated database with empty tables: a new SQLite file, or the module's PostgreSQL database."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'kant.db'}"
        db = Database(url)
        db.migrate()
        db.close()
        return url
    url = str(request.getfixturevalue("pg_url"))
    db = Database(url)
    with db.engine.begin() as conn:
        conn.exec_driver_sql(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")
    db.close()
    return url


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    """A :class:`Database` on ``db_url``, closed after the test."""
    database = Database(db_url)
    yield database
    database.close()
