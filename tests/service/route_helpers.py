"""Real parts for the request route's tests and bench: ``kant serve``'s app on a real uvicorn in this
process (so that a test registers replicas into its :class:`Endpoints` directly: the replicas'
lifecycle is not the route's), and the example model server (``examples/model_server.py``) as
subprocesses on free loopback ports."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from kant.service.config import ServeConfig
from kant.service.serve import build_app
from kant.service.server import Service
from kant.service.serving.endpoints import Endpoint

__all__ = ["Kant", "Replica", "free_port", "model_server", "running_kant"]

ROOT = Path(__file__).resolve().parents[2]
MODEL_SERVER = ROOT / "examples" / "model_server.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Replica:
    """One example model server process."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def model_server(workdir: Path, *, ms_per_token: float = 1.0, warmup: float = 0.0, name: str | None = None,
                 wait: bool = True) -> Replica:
    """Start ``examples/model_server.py`` on a free port (``$PORT``, as kant hands a replica) and wait
    until ``/health`` answers (200, or 503 while it warms up)."""
    port = free_port()
    log = workdir / f"model-{port}.log"
    workdir.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, str(MODEL_SERVER), "--ms-per-token", str(ms_per_token), "--warmup", str(warmup)]
    if name is not None:
        args += ["--name", name]
    with open(log, "ab") as out:
        proc = subprocess.Popen(args, env={**os.environ, "PORT": str(port), "KANT_HOST": "127.0.0.1"},
                                stdout=out, stderr=subprocess.STDOUT)
    replica = Replica(proc, port, log)
    if wait:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"the model server exited: {log.read_text(errors='replace')}")
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"{replica.url}/health", timeout=2.0)
                break
            if time.monotonic() > deadline:
                replica.stop()
                raise AssertionError("the model server did not start in 30 s")
            time.sleep(0.05)
    return replica


@dataclass
class Kant:
    """``kant serve``'s app on uvicorn in this process, its :class:`Service` and an admin token."""

    svc: Service
    url: str
    admin_token: str
    server: uvicorn.Server
    thread: threading.Thread
    clients: list[httpx.Client] = field(default_factory=list)

    def client(self, token: str | None = None, timeout: float = 60.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token or self.admin_token}"}
        c = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        self.clients.append(c)
        return c

    def tenant(self, name: str) -> str:
        admin = self.client()
        r = admin.post("/v1/tenants", json={"name": name})
        assert r.status_code == 201, r.text
        r = admin.post(f"/v1/tenants/{name}/tokens", json={"name": "test"})
        assert r.status_code == 201, r.text
        return str(r.json()["token"])

    def service(self, token: str, name: str) -> int:
        """An inference service with no replica run (the test registers its replicas)."""
        r = self.client(token).post("/v1/services", json={"name": name, "gpus_per_replica": 1, "replicas": 0})
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def register(self, service_id: int, job_id: int, replica: Replica, *, ready: bool = True) -> Endpoint:
        """Put a running model server into the registry, as the replicas' lifecycle would."""
        ep = Endpoint(service_id, job_id, 1, "127.0.0.1", replica.port, ready=ready)
        self.svc.endpoints.add(ep)
        return ep


@contextlib.contextmanager
def running_kant(workdir: Path, **config: Any) -> Iterator[Kant]:
    """A leading service (SQLite, a small simulated cluster, manual clock) with its API on a real
    uvicorn at 127.0.0.1 (uvloop and httptools where installed, as ``kant serve``)."""
    token = f"kant_test_{secrets.token_hex(16)}"
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = ServeConfig(db_url=f"sqlite:///{workdir / 'kant.db'}", cluster="2x8:V100", clock="manual", predict=False,
                      admin_token=token, token_out=workdir / "token", log_level="warning", **config)
    svc = Service(cfg)
    svc.prepare()
    svc.start()
    deadline = time.monotonic() + 30
    while (svc.loop is None or svc.loop.view is None) and time.monotonic() < deadline:
        time.sleep(0.02)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(build_app(svc), host="127.0.0.1", port=port, log_level="warning",
                                           access_log=False, server_header=False))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    kant = Kant(svc, f"http://127.0.0.1:{port}", token, server, thread)
    try:
        assert server.started, "uvicorn did not start"
        yield kant
    finally:
        for c in kant.clients:
            c.close()
        server.should_exit = True
        thread.join(30)
        svc.close()
