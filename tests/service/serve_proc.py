"""A real ``kant serve`` process on 127.0.0.1 for the service tests, and an HTTP client for it."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx

__all__ = ["Server", "free_port", "start_server", "running_server"]

T = TypeVar("T")


def eventually(fn: Callable[[], T | None], what: str, timeout: float = 60.0, *, every: float = 0.1,
               detail: Callable[[], str] | None = None) -> T:
    """``fn()``'s first truthy value, polled every ``every`` s for up to ``timeout`` s (else an
    AssertionError naming ``what``, and ``detail()`` when given: a server's log, say)."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}" + (f"\n{detail()}" if detail else ""))
        time.sleep(every)


def job_of(srv: Server, job_id: int) -> dict[str, Any]:
    """The job as the admin sees it (``GET /v1/jobs/{id}``)."""
    r = srv.admin.get(f"/v1/jobs/{job_id}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def wait_for_job(srv: Server, job_id: int, states: tuple[str, ...], timeout: float = 60.0) -> dict[str, Any]:
    """The job once it is in one of ``states`` (else an AssertionError with the server's log tail)."""
    deadline = time.monotonic() + timeout
    while True:
        data = job_of(srv, job_id)
        if data["state"] in states:
            return data
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} is {data['state']}, not {states} after {timeout} s: {data}\n"
                                 f"{srv.log_text()[-3000:]}")
        time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One ``kant serve`` subprocess."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, admin_token: str, log: Path, args: list[str]) -> None:
        self.proc = proc
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.admin_token = admin_token
        self.log = log
        self.args = args
        self.admin = self.client(admin_token)

    def client(self, token: str | None) -> httpx.Client:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60.0)

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"kant serve exited with {self.proc.returncode}:\n{self.log_text()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/readyz", timeout=2.0).status_code == 200:
                    return
            time.sleep(0.05)
        raise AssertionError(f"kant serve not ready after {timeout} s:\n{self.log_text()}")

    def wait_listening(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"kant serve exited with {self.proc.returncode}:\n{self.log_text()}")
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"{self.url}/healthz", timeout=2.0)
                return
            time.sleep(0.05)
        raise AssertionError(f"kant serve not listening after {timeout} s:\n{self.log_text()}")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        """``kill -9``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.admin.close()

    # --- shortcuts ----------------------------------------------------------------------------------
    def tenant(self, name: str, **quota: Any) -> str:
        """Create tenant ``name`` and return a token of it."""
        r = self.admin.post("/v1/tenants", json={"name": name, **quota})
        assert r.status_code == 201, r.text
        r = self.admin.post(f"/v1/tenants/{name}/tokens", json={"name": "test"})
        assert r.status_code == 201, r.text
        return str(r.json()["token"])

    def advance(self, to: float, *, hold: bool = False) -> None:
        """Move the manual clock to ``to`` (``hold``: leave that instant's cycle for the next move)."""
        r = self.admin.post("/v1/clock", json={"to": to, "hold": hold})
        assert r.status_code == 200, r.text


def start_server(workdir: Path, db_url: str, *, cluster: str = "4x8:V100", policy: str = "kant",
                 clock: str = "manual", extra: Sequence[str] = (), admin_token: str | None = None,
                 port: int | None = None, wait: bool = True) -> Server:
    port = port or free_port()
    token = admin_token or f"kant_test_{secrets.token_hex(16)}"
    args = [sys.executable, "-m", "kant.cli.main", "serve", "--db", db_url, "--port", str(port), "--cluster", cluster,
            "--policy", policy, "--clock", clock, "--log-level", "warning", *extra]
    env = {**os.environ, "KANT_ADMIN_TOKEN": token, "PYTHONUNBUFFERED": "1"}
    log = workdir / f"serve-{port}.log"
    workdir.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(args, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(proc, port, token, log, args)
    if wait:
        server.wait_ready()
    return server


@contextlib.contextmanager
def running_server(workdir: Path, db_url: str, **kw: Any) -> Iterator[Server]:
    server = start_server(workdir, db_url, **kw)
    try:
        yield server
    finally:
        server.stop()
