"""``kant serve``'s app in this process (no subprocess, no port): a :class:`Service` on a manual clock
and the tiny cluster (4 nodes x 8 V100), on SQLite or PostgreSQL, driven through FastAPI's
TestClient. Quicker than :mod:`service.serve_proc` for tests of the API's answers."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient

from kant.cli.main import cli
from kant.service.config import ServeConfig
from kant.service.serve import build_app
from kant.service.server import Service
from service.conftest import new_pg_database

__all__ = ["ADMIN", "App", "app_for", "app_on"]

ADMIN = "kant_test-admin-token-0123456789"


@dataclass
class App:
    svc: Service
    client: TestClient

    def headers(self, token: str = ADMIN) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def call(self, method: str, path: str, token: str = ADMIN, **kw: Any) -> Any:
        """The answer of ``method path`` with ``token``."""
        return self.client.request(method, path, headers={**self.headers(token), **kw.pop("headers", {})}, **kw)

    def tenant(self, name: str, **quota: Any) -> str:
        """Create tenant ``name`` (if new) and return a new token of it."""
        r = self.call("POST", "/v1/tenants", json={"name": name, **quota})
        assert r.status_code in (201, 409), r.text
        r = self.call("POST", f"/v1/tenants/{name}/tokens", json={"name": f"{name}-test"})
        assert r.status_code == 201, r.text
        return str(r.json()["token"])

    def kant(self, *args: str, token: str = ADMIN) -> Result:
        """``kant ARGS`` (the command-line client) against this app, in this process: the client's
        HTTP connection is the app's TestClient."""
        app = self.client.app

        def connect(*, base_url: str, headers: dict[str, str], **kw: Any) -> TestClient:
            return _NoTimeout(app, base_url=base_url, headers=headers)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(httpx, "Client", connect)
            mp.setenv("KANT_TOKEN", token)
            mp.setenv("KANT_URL", "http://testserver")
            return CliRunner().invoke(cli, list(args), catch_exceptions=False)

    def advance(self, to: float) -> None:
        r = self.call("POST", "/v1/clock", json={"to": float(to)})
        assert r.status_code == 200, r.text


class _NoTimeout(TestClient):
    """The TestClient as the CLI's connection: a request's timeout is dropped (the app answers in
    this process; the TestClient warns of a timeout, into the stderr the test reads)."""

    def request(self, *args: Any, **kw: Any) -> Any:
        kw.pop("timeout", None)
        return super().request(*args, **kw)


@contextlib.contextmanager
def app_on(url: str, work: Path, **config: Any) -> Iterator[App]:
    """The service on database ``url`` (its files in ``work``), leading, with its app."""
    cfg = ServeConfig(
        db_url=url,
        admin_token=ADMIN,
        token_out=work / "admin.token",
        cluster="tiny",
        clock="manual",
        predict=False,
        **config,
    )
    svc = Service(cfg)
    svc.prepare()
    try:
        svc.start()
        svc.ready()
        deadline = time.monotonic() + 30
        while (svc.loop is None or svc.loop.view is None) and time.monotonic() < deadline:
            time.sleep(0.02)
        with TestClient(build_app(svc)) as client:
            yield App(svc, client)
    finally:
        svc.close()


@contextlib.contextmanager
def app_for(request: pytest.FixtureRequest, work: Path, backend: str) -> Iterator[App]:
    """:func:`app_on` a new SQLite file or a new PostgreSQL database."""
    with contextlib.ExitStack() as stack:
        if backend == "sqlite":
            url = f"sqlite:///{work / 'kant.db'}"
        else:
            request.getfixturevalue("pg_server")
            url = stack.enter_context(new_pg_database())
        yield stack.enter_context(app_on(url, work))
