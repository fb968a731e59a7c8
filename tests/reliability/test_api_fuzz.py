"""API fuzzing of a real ``kant serve`` process from its OpenAPI document (Schemathesis): every
operation, valid and invalid requests, as an admin and as a tenant; no 5xx, every rejection a 4xx
with a one-line message, no traceback in the server's log. The suite sends about 600 requests;
``bench/bench_reliability.py fuzz`` sends 10,000+ (docs/reliability.md)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest

from reliability.apifuzz import fuzz, log_problems
from service.serve_proc import Server, running_server

EXAMPLES = int(os.environ.get("KANT_API_FUZZ_EXAMPLES", "5"))  # per operation, mode and role


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("fuzz")
    with running_server(work, f"sqlite:///{work / 'kant.db'}", cluster="4x8:V100,leaf=2",
                        extra=["--no-predict"]) as server:
        yield server


def test_generated_requests_get_no_5xx_and_every_rejection_says_why(srv: Server) -> None:
    tenant = srv.tenant("team-a")
    # every job and service the fuzzer touches belongs somewhere: one of each exists up front
    srv.client(tenant).post("/v1/jobs", json={"gpus_per_worker": 1, "duration_s": 100})
    keep = frozenset(t["id"] for t in srv.admin.get("/v1/tokens").json())
    admin = fuzz(srv.url, srv.admin_token, examples=EXAMPLES, keep_tokens=keep, seed=1)
    tenants = fuzz(srv.url, tenant, examples=EXAMPLES, keep_tokens=keep, seed=2)
    print(f"admin: {admin.summary()}\ntenant: {tenants.summary()}")
    assert admin.problems == [] and tenants.problems == []
    assert len(admin.by_operation) == len(tenants.by_operation) >= 30  # every operation was called
    assert admin.requests + tenants.requests >= 500
    assert admin.by_status[201] > 0 and tenants.by_status[403] > 0  # (some were accepted, some refused)
    assert log_problems(srv.log_text()) == []


def test_a_rejected_key_with_a_line_break_gives_a_one_line_message(srv: Server) -> None:
    """Found by the fuzzer: a dict key holding a line break (a what-if quota's tenant) made the 422's
    message two lines; the key is now quoted."""
    r = srv.admin.post("/v1/whatif", json={"scenarios": [{"name": "s", "quotas": {"a\nb": {"max": 1}}}]})
    assert r.status_code == 422
    message = r.json()["message"]
    assert "\n" not in message and message.startswith("body.scenarios.0.quotas.'a\\nb'"), message


def test_the_event_stream_refuses_a_bad_last_event_id(srv: Server) -> None:
    r = httpx.get(f"{srv.url}/v1/events", headers={"Authorization": f"Bearer {srv.admin_token}",
                                                   "Last-Event-ID": "-3"})
    assert r.status_code == 422 and r.json()["message"].startswith("header.last-event-id")


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/v1/jobs/99999999999999999999"),
    ("GET", "/v1/jobs/99999999999999999999/why"),
    ("GET", "/v1/jobs/99999999999999999999/logs"),
    ("POST", "/v1/jobs/99999999999999999999/cancel"),
    ("GET", "/v1/services/99999999999999999999"),
    ("DELETE", "/v1/services/99999999999999999999"),
    ("DELETE", "/v1/tokens/99999999999999999999"),
    ("GET", "/v1/jobs?after=99999999999999999999"),
])
def test_an_id_past_64_bits_is_422_not_500(srv: Server, method: str, path: str) -> None:
    """Found by the fuzzer: an id over 2^63 - 1 reached the database driver (SQLite's OverflowError:
    500 and a traceback; PostgreSQL's DataError: 503)."""
    r = srv.admin.request(method, path)
    assert r.status_code == 422 and "less than or equal to 9223372036854775807" in r.json()["message"], r.text
    r = srv.admin.post("/v1/services/99999999999999999999/scale", json={"replicas": 1})
    assert r.status_code == 422
