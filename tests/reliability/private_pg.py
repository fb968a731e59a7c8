"""A private PostgreSQL server for tests that restart or stop it (never the shared server on 5432):
``initdb`` into a temporary folder and ``pg_ctl`` on a free loopback port, as a non-root user
(PostgreSQL refuses to run as root: as root, the server runs as the ``postgres`` user, or as
``nobody`` when that user does not exist)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.serve_proc import free_port

__all__ = ["PrivatePostgres", "pg_bin", "private_postgres", "private_postgres_or_skip"]


def pg_bin() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl`` (the newest under /usr/lib/postgresql, or on PATH)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    if found:
        return found[-1].parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


class PrivatePostgres:
    def __init__(self, bindir: Path, folder: Path, port: int, user: str | None) -> None:
        self.bindir, self.folder, self.port, self.user = bindir, folder, port, user
        self.data = folder / "data"
        self.log = folder / "server.log"
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=check)

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop", check=False)

    def restart(self, mode: str = "immediate") -> None:
        """Stop (``immediate``: as a crash, no checkpoint) and start again."""
        self.stop(mode)
        self.start()


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A running private server; stopped and removed afterwards. Raises RuntimeError with the reason
    when one cannot be made here."""
    bindir = pg_bin()
    if bindir is None:
        raise RuntimeError("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
    user = None
    if os.geteuid() == 0:
        user = next((u for u in ("postgres", "nobody") if _has_user(u)), None)
        if user is None:
            raise RuntimeError("running as root and no postgres or nobody user to run PostgreSQL as")
    folder = Path(tempfile.mkdtemp(prefix="kant-pg-"))
    try:
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(folder, entry.pw_uid, entry.pw_gid)
        server = PrivatePostgres(bindir, folder, free_port(), user)
        server.init()
        server.start()
        try:
            yield server
        finally:
            server.stop("immediate")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@contextlib.contextmanager
def private_postgres_or_skip() -> Iterator[PrivatePostgres]:
    """:func:`private_postgres` in a test: skipped where one cannot be made here (no server binaries,
    no user to run them as), failed where the server does not start."""
    cm = private_postgres()
    try:
        pg = cm.__enter__()
    except RuntimeError as exc:
        pytest.skip(f"no private PostgreSQL server: {exc}")
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"cannot start a private PostgreSQL server: {exc.stderr or exc}")
    try:
        yield pg
    finally:
        cm.__exit__(None, None, None)
