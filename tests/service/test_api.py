"""The REST API against a real ``kant serve`` process on 127.0.0.1 (SQLite, manual clock): round trips,
auth, isolation between tenants on every endpoint, idempotent submits, bad payloads, nodes, services,
metrics and the event stream."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.conftest import new_pg_database
from service.serve_proc import Server, running_server


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def srv(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One service for the module's tests, on each database (PostgreSQL: a fresh database)."""
    work = tmp_path_factory.mktemp("serve")
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{work / 'kant.db'}"
        else:
            request.getfixturevalue("pg_server")
            url = stack.enter_context(new_pg_database())
        yield stack.enter_context(running_server(work, url, cluster="4x8:V100,leaf=2"))


@pytest.fixture(scope="module")
def tokens(srv: Server) -> dict[str, str]:
    return {"a": srv.tenant("team-a"), "b": srv.tenant("team-b", max_gpus=16)}


def test_health_and_ready(srv: Server) -> None:
    assert httpx.get(f"{srv.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{srv.url}/readyz").json()
    assert ready["ready"] is True and ready["role"] == "leader"


def test_job_round_trip(srv: Server, tokens: dict[str, str]) -> None:
    a = srv.client(tokens["a"])
    r = a.post("/v1/jobs", json={"name": "train", "workers": 2, "gpus_per_worker": 8, "estimate_s": 100,
                                 "duration_s": 100, "labels": {"team": "nlp"}})
    assert r.status_code == 201, r.text
    job = r.json()["id"]
    got = a.get(f"/v1/jobs/{job}").json()
    assert got["state"] == "pending" and got["tenant"] == "team-a" and got["labels"] == {"team": "nlp"}
    assert [e["kind"] for e in got["events"]] == ["submitted"]
    now = a.get("/v1/clock").json()["now"]
    srv.advance(now)  # the cycle of this instant
    got = a.get(f"/v1/jobs/{job}").json()
    assert got["state"] == "running" and got["start_time"] == now and len(got["placement"]) == 2
    srv.advance(now + 100)
    got = a.get(f"/v1/jobs/{job}").json()
    assert got["state"] == "finished" and got["end_time"] == now + 100 and got["exit_code"] == 0
    assert [e["kind"] for e in got["events"]] == ["submitted", "started", "finished"]


def test_pending_job_says_why_and_where(srv: Server, tokens: dict[str, str]) -> None:
    a = srv.client(tokens["a"])
    now = a.get("/v1/clock").json()["now"]
    big = [a.post("/v1/jobs", json={"workers": 4, "gpus_per_worker": 8, "duration_s": 50}).json()["id"]
           for _ in range(2)]
    srv.advance(now)
    why = a.get(f"/v1/jobs/{big[1]}/why").json()
    assert why["state"] == "pending" and why["position"] == 0
    assert why["reason"] == "[allocate] no free GPU in the cluster" and why["plugin"] == "allocate"
    listed = a.get("/v1/jobs", params={"state": "pending"}).json()["items"]
    assert big[1] in [j["id"] for j in listed]
    assert next(j for j in listed if j["id"] == big[1])["reason"] == why["reason"]
    srv.advance(now + 200)


def test_idempotent_submit(srv: Server, tokens: dict[str, str]) -> None:
    a = srv.client(tokens["a"])
    first = a.post("/v1/jobs", json={"gpus_per_worker": 1}, headers={"Idempotency-Key": "k-1"})
    again = a.post("/v1/jobs", json={"gpus_per_worker": 1}, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == 201 and again.status_code == 200
    assert first.json()["id"] == again.json()["id"] and again.json()["created"] is False
    # the same key of another tenant is another job
    b = srv.client(tokens["b"])
    other = b.post("/v1/jobs", json={"gpus_per_worker": 1}, headers={"Idempotency-Key": "k-1"})
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]
    batch = a.post("/v1/jobs/batch", json={"jobs": [{"idempotency_key": "k-2"}, {"idempotency_key": "k-2"}]}).json()
    assert batch["jobs"][0]["id"] == batch["jobs"][1]["id"]


@pytest.mark.parametrize(("body", "where"), [
    ({"workers": 0}, "body.workers"),
    ({"gpus_per_worker": "eight"}, "body.gpus_per_worker"),
    ({"estimate_s": -5}, "body.estimate_s"),
    ({"surprise": 1}, "body.surprise"),
    ({"labels": {"k": 5}}, "body.labels.k"),
    ({"name": "x" * 300}, "body.name"),
])
def test_bad_payload_is_422_with_the_field(srv: Server, tokens: dict[str, str], body: dict[str, Any],
                                           where: str) -> None:
    r = srv.client(tokens["a"]).post("/v1/jobs", json=body)
    assert r.status_code == 422
    assert r.json()["message"].startswith(where), r.json()


@pytest.mark.parametrize(("body", "words"), [
    ({"gpu_type": "H100"}, "no node has GPU type H100"),
    ({"gpus_per_worker": 16}, "the largest node has 8"),
    ({"workers": 5, "gpus_per_worker": 8}, "more than the cluster's 32 GPUs"),
])
def test_impossible_job_is_refused(srv: Server, tokens: dict[str, str], body: dict[str, Any], words: str) -> None:
    r = srv.client(tokens["a"]).post("/v1/jobs", json=body)
    assert r.status_code == 422 and words in r.text


def test_oversized_body_is_413(srv: Server, tokens: dict[str, str]) -> None:
    r = srv.client(tokens["a"]).post("/v1/jobs", content=b"{" + b" " * (2 << 20) + b"}",
                                     headers={"Content-Type": "application/json"})
    assert r.status_code == 413


def test_auth_failures(srv: Server, tokens: dict[str, str]) -> None:
    assert httpx.get(f"{srv.url}/v1/jobs").status_code == 401
    assert httpx.get(f"{srv.url}/v1/jobs", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert httpx.get(f"{srv.url}/v1/jobs", headers={"Authorization": "Basic abc"}).status_code == 401
    # a short-lived token expires; a revoked one stops at once
    made = srv.admin.post("/v1/tenants/team-a/tokens", json={"ttl_s": 0.5}).json()
    short = srv.client(made["token"])
    assert short.get("/v1/jobs").status_code == 200
    time.sleep(2.6)  # past the expiry and the 2 s token cache
    assert short.get("/v1/jobs").status_code == 401
    made = srv.admin.post("/v1/tenants/team-a/tokens", json={}).json()
    revocable = srv.client(made["token"])
    assert revocable.get("/v1/jobs").status_code == 200
    assert srv.admin.delete(f"/v1/tokens/{made['id']}").status_code == 200
    assert revocable.get("/v1/jobs").status_code == 401
    # tokens are never returned after creation
    assert "token" not in srv.admin.get("/v1/tokens").json()[0]


def test_tenant_isolation_on_every_endpoint(srv: Server, tokens: dict[str, str]) -> None:
    """Each route of the OpenAPI document, called with no token, with tenant B's token on tenant A's
    things, and (where admin-only) with a tenant token: 401 / 404 / 403, and never A's data."""
    a, b = srv.client(tokens["a"]), srv.client(tokens["b"])
    job = a.post("/v1/jobs", json={"gpus_per_worker": 1, "duration_s": 1000}).json()["id"]
    service = a.post("/v1/services", json={"name": "chat", "gpus_per_replica": 1, "replicas": 1}).json()["id"]
    token_id = srv.admin.post("/v1/tenants/team-a/tokens", json={}).json()["id"]
    node = srv.admin.get("/v1/nodes").json()[0]["name"]
    # (method, path, body, tenant B's expected status)
    cases: dict[tuple[str, str], tuple[str, Any, int]] = {
        ("get", "/v1/jobs"): ("/v1/jobs?tenant=team-a", None, 403),
        ("post", "/v1/jobs"): ("/v1/jobs", {"tenant": "team-a"}, 403),
        ("post", "/v1/jobs/batch"): ("/v1/jobs/batch", {"jobs": [{"tenant": "team-a"}]}, 403),
        ("get", "/v1/jobs/{job_id}"): (f"/v1/jobs/{job}", None, 404),
        ("get", "/v1/jobs/{job_id}/why"): (f"/v1/jobs/{job}/why", None, 404),
        ("get", "/v1/jobs/{job_id}/logs"): (f"/v1/jobs/{job}/logs", None, 404),
        ("post", "/v1/jobs/{job_id}/cancel"): (f"/v1/jobs/{job}/cancel", None, 404),
        ("post", "/v1/jobs/{job_id}/hold"): (f"/v1/jobs/{job}/hold", None, 404),
        ("post", "/v1/jobs/{job_id}/release"): (f"/v1/jobs/{job}/release", None, 404),
        ("post", "/v1/jobs/{job_id}/requeue"): (f"/v1/jobs/{job}/requeue", None, 404),
        ("patch", "/v1/jobs/{job_id}"): (f"/v1/jobs/{job}", {"priority": 1}, 404),
        ("post", "/v1/arrays/{array_id}/cancel"): (f"/v1/arrays/{job}/cancel", None, 404),
        ("get", "/v1/services"): ("/v1/services", None, 200),
        ("post", "/v1/services"): ("/v1/services", {"name": "x", "tenant": "team-a", "gpus_per_replica": 1}, 403),
        ("get", "/v1/services/{service_id}"): (f"/v1/services/{service}", None, 404),
        ("patch", "/v1/services/{service_id}"): (f"/v1/services/{service}", {"command": "true"}, 404),
        ("post", "/v1/services/{service_id}/scale"): (f"/v1/services/{service}/scale", {"replicas": 0}, 404),
        ("delete", "/v1/services/{service_id}"): (f"/v1/services/{service}", None, 404),
        ("get", "/v1/services/{service_id}/stats"): (f"/v1/services/{service}/stats", None, 404),
        ("get", "/v1/nodes"): ("/v1/nodes", None, 200),
        ("post", "/v1/nodes"): ("/v1/nodes", {"name": "n9", "gpu_type": "V100", "gpus": 8}, 403),
        ("get", "/v1/nodes/{name}"): (f"/v1/nodes/{node}", None, 200),
        ("post", "/v1/nodes/{name}/{op}"): (f"/v1/nodes/{node}/cordon", None, 403),
        ("delete", "/v1/nodes/{name}"): (f"/v1/nodes/{node}", None, 403),
        ("get", "/v1/tenants"): ("/v1/tenants", None, 200),
        ("post", "/v1/tenants"): ("/v1/tenants", {"name": "evil"}, 403),
        ("get", "/v1/tenants/{name}"): ("/v1/tenants/team-a", None, 404),
        ("patch", "/v1/tenants/{name}"): ("/v1/tenants/team-b", {"max_gpus": 999}, 403),
        ("post", "/v1/tenants/{name}/tokens"): ("/v1/tenants/team-a/tokens", {}, 403),
        ("post", "/v1/tokens"): ("/v1/tokens", {}, 403),
        ("get", "/v1/tokens"): ("/v1/tokens", None, 403),
        ("delete", "/v1/tokens/{token_id}"): (f"/v1/tokens/{token_id}", None, 403),
        ("get", "/v1/accounting/jobs"): ("/v1/accounting/jobs?tenant=team-a", None, 403),
        ("get", "/v1/accounting/usage"): ("/v1/accounting/usage?tenant=team-a", None, 403),
        ("get", "/v1/cluster"): ("/v1/cluster", None, 200),
        ("get", "/v1/queues"): ("/v1/queues", None, 200),
        ("get", "/v1/queues/config"): ("/v1/queues/config", None, 403),
        ("put", "/v1/queues/config"): ("/v1/queues/config", {"queues": [{"name": "all", "tenants": ["team-b"]}]}, 403),
        ("delete", "/v1/queues/config"): ("/v1/queues/config", None, 403),
        ("patch", "/v1/queues/{name}"): ("/v1/queues/all", {"guaranteed": 8}, 403),
        ("get", "/v1/events"): ("/v1/events", None, 200),
        ("get", "/v1/clock"): ("/v1/clock", None, 200),
        ("post", "/v1/clock"): ("/v1/clock", {"to": 1e9}, 403),
        ("get", "/metrics"): ("/metrics", None, 403),
        ("post", "/v1/whatif"): ("/v1/whatif", {"horizon_h": 1, "runs": 1}, 200),
        ("get", "/v1/snapshot"): ("/v1/snapshot", None, 403),
    }
    spec = httpx.get(f"{srv.url}/openapi.json").json()
    routes = {(m, p) for p, ops in spec["paths"].items() for m in ops if p not in ("/healthz", "/readyz")}
    assert routes == set(cases), f"untested: {routes - set(cases)}; gone: {set(cases) - routes}"
    anon = srv.client(None)
    for (method, _), (path, body, want) in sorted(cases.items()):
        if path == "/v1/events":
            continue  # a stream: checked below
        kw = {"json": body} if body is not None else {}
        assert anon.request(method.upper(), path, **kw).status_code == 401, (method, path)
        r = b.request(method.upper(), path, **kw)
        assert r.status_code == want, (method, path, r.status_code, r.text)
        if want == 200:
            assert f'"id":{job},' not in r.text.replace(" ", "") and "team-a" not in r.text, (method, path)
    # what B may see of the cluster: its own use and the others' total
    cluster = b.get("/v1/cluster").json()
    assert set(cluster["tenants"]) <= {"team-b"} and cluster["others"] is not None
    with b.stream("GET", "/v1/events", headers={"Last-Event-ID": "0"}, timeout=5) as stream:
        lines = _first_lines(stream, ": connected")
    assert all("team-a" not in line for line in lines)
    assert a.post(f"/v1/jobs/{job}/cancel").json()["state"] == "cancelled"
    again = a.post(f"/v1/jobs/{job}/cancel")
    assert again.status_code == 409 and again.json()["message"] == f"job {job} is cancelled: only pending or " \
        "running jobs can be cancelled"


def _first_lines(stream: httpx.Response, until: str) -> list[str]:
    lines = []
    for line in stream.iter_lines():
        lines.append(line)
        if line.startswith(until):
            break
    return lines


def test_event_stream_replays_and_follows(srv: Server, tokens: dict[str, str]) -> None:
    a = srv.client(tokens["a"])
    got: list[dict[str, Any]] = []
    ready = threading.Event()
    target: list[int] = []

    def listen() -> None:
        with a.stream("GET", "/v1/events", timeout=30) as stream:
            for line in stream.iter_lines():
                if line.startswith(": connected"):
                    ready.set()
                if line.startswith("data: "):
                    got.append(json.loads(line[6:]))
                    if got[-1]["kind"] == "started" and target and got[-1]["job_id"] == target[0]:
                        return

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    assert ready.wait(10)
    job = a.post("/v1/jobs", json={"gpus_per_worker": 1, "duration_s": 5}).json()["id"]
    target.append(job)
    srv.advance(a.get("/v1/clock").json()["now"])
    t.join(10)
    mine = [e["kind"] for e in got if e["job_id"] == job]
    assert mine == ["submitted", "started"]
    assert [e["id"] for e in got] == sorted(e["id"] for e in got)  # in commit order
    # a reconnect with Last-Event-ID replays what came after
    with a.stream("GET", "/v1/events", headers={"Last-Event-ID": str(got[-2]["id"])}, timeout=10) as stream:
        lines = _first_lines(stream, ": connected")
    assert any(f'"job_id":{job}' in line and '"started"' in line for line in lines)


def test_nodes_cordon_drain_fail_repair_add_remove(srv: Server, tokens: dict[str, str]) -> None:
    a = srv.client(tokens["a"])
    adm = srv.admin
    now = a.get("/v1/clock").json()["now"] + 1000
    srv.advance(now)
    nodes = adm.get("/v1/nodes").json()
    names = [n["name"] for n in nodes]
    assert len(names) == 4 and all(n["state"] == "up" for n in nodes)
    first = next(n["name"] for n in nodes if n["used_gpus"] == 0)  # (a service of another test holds a GPU)
    for name in names:
        if name == first:
            continue
        assert adm.post(f"/v1/nodes/{name}/cordon").json()["state"] == "cordoned"
    job = a.post("/v1/jobs", json={"gpus_per_worker": 8, "duration_s": 100}).json()["id"]
    srv.advance(now)
    assert a.get(f"/v1/jobs/{job}").json()["placement"] == [first]
    assert adm.post(f"/v1/nodes/{first}/drain").json()["state"] == "draining"
    fail = adm.post(f"/v1/nodes/{first}/fail", json={"reason": "ECC errors"}).json()
    assert fail["state"] == "down" and fail["reason"] == "ECC errors"
    got = a.get(f"/v1/jobs/{job}").json()
    assert got["state"] == "pending" and f"node {first} failed" in got["reason"]
    assert adm.post("/v1/nodes/node-9/cordon").status_code == 404
    assert adm.post(f"/v1/nodes/{first}/explode").status_code == 404
    # a new node: the job starts there
    r = adm.post("/v1/nodes", json={"name": "node-9", "gpu_type": "V100", "gpus": 8})
    assert r.status_code == 201 and r.json()["state"] == "up"
    srv.advance(now + 1)
    assert a.get(f"/v1/jobs/{job}").json()["placement"] == ["node-9"]
    assert adm.delete("/v1/nodes/node-9").status_code == 409  # it runs a job
    assert adm.post("/v1/nodes/node-9/drain").json()["state"] == "draining"
    srv.advance(now + 101)
    assert adm.get("/v1/nodes/node-9").json()["state"] == "drained"
    assert adm.delete("/v1/nodes/node-9").status_code == 200
    assert "node-9" not in {n["name"] for n in adm.get("/v1/nodes").json()}
    for name in names:
        assert adm.post(f"/v1/nodes/{name}/repair").json()["state"] == "up"


def test_services_scale(srv: Server, tokens: dict[str, str]) -> None:
    a = srv.client(tokens["a"])
    now = a.get("/v1/clock").json()["now"]
    svc = a.post("/v1/services", json={"name": "llm", "gpus_per_replica": 2, "replicas": 2, "max_replicas": 4})
    assert svc.status_code == 201, svc.text
    sid = svc.json()["id"]
    srv.advance(now)
    replicas = [j for j in a.get("/v1/jobs", params={"state": "running"}).json()["items"] if j["service_id"] == sid]
    assert len(replicas) == 2 and all(j["kind"] == "inference" for j in replicas)
    assert a.post(f"/v1/services/{sid}/scale", json={"replicas": 5}).status_code == 422
    assert a.post(f"/v1/services/{sid}/scale", json={"replicas": 1}).json()["replicas"] == 1
    running = [j for j in a.get("/v1/jobs", params={"state": "running"}).json()["items"] if j["service_id"] == sid]
    assert len(running) == 1
    assert a.delete(f"/v1/services/{sid}").json()["state"] == "deleted"


def test_cluster_and_metrics(srv: Server, tokens: dict[str, str]) -> None:
    c = srv.admin.get("/v1/cluster").json()
    assert c["total_gpus"] == 32 and c["policy"] == "kant" and c["clock"] == "manual"
    assert c["quota_enforced"] is True  # (quotas apply under every policy)
    assert c["allocated_gpus"] + c["free_gpus"] + c["down_gpus"] + c["cordoned_gpus"] == 32
    text = srv.admin.get("/metrics").text
    for name in ("kant_gar", "kant_sor", "kant_gfr_nodes", "kant_queue_length", "kant_wait_seconds_bucket",
                 "kant_cycle_seconds_bucket", "kant_jobs_started_total", "kant_jobs_finished_total"):
        assert name in text, name


def test_the_manual_clock_does_not_go_back(srv: Server) -> None:
    now = srv.admin.get("/v1/clock").json()["now"] + 10
    srv.advance(now)
    r = srv.admin.post("/v1/clock", json={"to": now - 5})
    assert r.status_code == 409 and "cannot go back" in r.json()["message"]
    assert httpx.get(f"{srv.url}/readyz").status_code == 200  # the loop goes on


def test_only_a_manual_clock_moves(tmp_path: Path) -> None:
    with running_server(tmp_path, f"sqlite:///{tmp_path / 'w.db'}", clock="wall") as s:
        r = s.admin.post("/v1/clock", json={"to": 10})
        assert r.status_code == 409 and "only a manual clock" in r.text
        assert abs(s.admin.get("/v1/clock").json()["now"] - time.time()) < 60


@pytest.mark.parametrize(("args", "words"), [
    (["--cluster", "0x8:V100"], "cluster spec: node count must be >= 1"),
    (["--policy", "sjf"], "sjf plugin: it orders jobs by their true run times, which only a simulation knows"),
    (["--policy", "capacity-quota"], "weights_from: gpu-time-share reads the trace's GPU-time"),
    (["--db", "mysql://x"], "unsupported database URL 'mysql://x'"),
    (["--host", "0.0.0.0"], "refusing to listen on 0.0.0.0, a non-loopback address, without tokens"),
    (["--default-estimate", "soon"], "'soon' is not a duration"),
    (["--queues", "nope.yaml"], "nope.yaml: cannot read: file not found"),
])
def test_bad_serve_options_are_one_line_errors(tmp_path: Path, args: list[str], words: str) -> None:
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "KANT_ADMIN_TOKEN"}
    run = subprocess.run([sys.executable, "-m", "kant.cli.main", "serve", "--db", f"sqlite:///{tmp_path / 'x.db'}",
                          "--port", "0", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert words in run.stderr and "Traceback" not in run.stderr
