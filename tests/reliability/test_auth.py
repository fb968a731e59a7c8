"""Authentication on every route of the OpenAPI document, against a real ``kant serve`` logging at
debug level: no token, a malformed header, a wrong token, an expired token and a revoked token are
each answered 401 with a reason and no data; tokens never appear in the log nor in any answer but
the one that creates them; a token is compared as a SHA-256 digest with ``hmac.compare_digest``.
(Another tenant's token on every route is in tests/service/test_api.py.)"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kant.service.db import tokens as tokens_module
from kant.service.db.database import Database
from service.serve_proc import Server, running_server


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("auth")
    with running_server(work, f"sqlite:///{work / 'kant.db'}", cluster="2x8:V100",
                        extra=["--no-predict", "--log-level", "debug"]) as server:
        yield server


def _routes(srv: Server) -> list[tuple[str, str]]:
    spec = httpx.get(f"{srv.url}/openapi.json").json()
    out = []
    for path, ops in spec["paths"].items():
        if path in ("/healthz", "/readyz"):
            continue
        for method in ops:
            concrete = re.sub(r"\{(job_id|service_id|token_id)\}", "1", path)
            out.append((method.upper(), concrete.replace("{name}", "v100-0").replace("{op}", "cordon")))
    return out


def test_every_route_refuses_missing_bad_expired_and_revoked_tokens(srv: Server) -> None:
    tenant = srv.admin.post("/v1/tenants", json={"name": "t"})
    assert tenant.status_code == 201
    made = srv.admin.post("/v1/tenants/t/tokens", json={"ttl_s": 1.0}).json()
    expiring = made["token"]
    revoked = srv.admin.post("/v1/tokens", json={"name": "soon-revoked"}).json()
    assert httpx.get(f"{srv.url}/v1/jobs", headers={"Authorization": f"Bearer {expiring}"}).status_code == 200
    assert httpx.get(f"{srv.url}/v1/jobs", headers={"Authorization": f"Bearer {revoked['token']}"}).status_code == 200
    assert srv.admin.delete(f"/v1/tokens/{revoked['id']}").status_code == 200
    time.sleep(1.2)  # past the expiry (this process's cache holds a row, the expiry is checked on every use)
    headers: dict[str, dict[str, str]] = {
        "none": {},
        "not bearer": {"Authorization": f"Basic {expiring}"},
        "empty bearer": {"Authorization": "Bearer"},
        "wrong": {"Authorization": "Bearer kant_" + "x" * 43},
        "too long": {"Authorization": "Bearer " + "k" * 5000},
        "expired": {"Authorization": f"Bearer {expiring}"},
        "revoked": {"Authorization": f"Bearer {revoked['token']}"},
    }
    routes = _routes(srv)
    assert len(routes) >= 30
    anon = srv.client(None)
    for method, path in routes:
        for label, h in headers.items():
            r = anon.request(method, path, headers=h, json={} if method in ("POST", "PATCH") else None)
            assert r.status_code == 401, (label, method, path, r.status_code, r.text[:200])
            body = r.json()
            assert body["message"] and "\n" not in body["message"], body
            assert r.headers.get("WWW-Authenticate") == "Bearer"
            assert set(body) == {"detail", "message"}  # a reason, nothing else


def test_tokens_are_never_logged_nor_returned_again(srv: Server) -> None:
    made = [srv.admin.post("/v1/tenants", json={"name": "u"}).json()]
    tokens = [srv.admin.post("/v1/tenants/u/tokens", json={"name": "x"}).json(),
              srv.admin.post("/v1/tokens", json={"name": "y"}).json()]
    secrets = [srv.admin_token] + [t["token"] for t in tokens]
    assert all(s.startswith(("kant_", "kant_test_")) for s in secrets)
    with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {tokens[0]['token']}"}) as c:
        c.post("/v1/jobs", json={"gpus_per_worker": 1})
        c.get("/v1/jobs")
    seen: list[Any] = [made]
    for path in ("/v1/tokens", "/v1/tenants", "/v1/tenants/u", "/v1/jobs", "/v1/cluster", "/metrics",
                 "/v1/snapshot", "/openapi.json"):
        r = srv.admin.get(path)
        assert r.status_code == 200, path
        seen.append(r.text)
    blob = "\n".join(map(str, seen)) + srv.log_text()
    assert "DEBUG" in srv.log_text() or "INFO" in srv.log_text()  # (the log is verbose: a leak would show)
    for secret in secrets:
        assert secret not in blob
        assert hashlib.sha256(secret.encode()).hexdigest() not in blob  # nor their hashes


def test_tokens_are_compared_as_digests_in_constant_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str]] = []
    real = tokens_module.hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(tokens_module.hmac, "compare_digest", spy)
    db = Database(f"sqlite:///{tmp_path / 'k.db'}")
    db.migrate()
    token, _ = db.tokens.create(role="admin", name="a")
    assert db.tokens.verify(token, time.time()) is not None
    assert db.tokens.verify(token[:-1] + ("A" if token[-1] != "A" else "B"), time.time()) is None
    db.close()
    assert calls and all(len(a) == len(b) == 64 and a == b for a, b in calls)  # SHA-256 hex digests
    assert token not in str(calls)
