"""The API refuses what it cannot keep or mean, alike on SQLite and PostgreSQL (issue 28): text no
database stores (a NUL byte), node names no URL path holds, an idempotency key reused for another job,
ints given as strings or booleans, a tenant naming the user, a GPU share on a multi-GPU worker, a
streamed body over the cap; and a failed node keeps why it failed when drained."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from service.inproc import App, app_for


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    with app_for(request, tmp_path_factory.mktemp("strict"), request.param) as a:
        yield a


@pytest.fixture(scope="module")
def token(app: App) -> str:
    return app.tenant("team-a")


def _refused(r: Any, status: int, words: str) -> None:
    assert r.status_code == status, r.text
    assert words in r.json()["message"], r.json()["message"]


@pytest.mark.parametrize(
    "field,value",
    [
        ("name", "a\x00b"),
        ("command", "echo \x00"),
        ("labels", {"k": "v\x00"}),
        ("labels", {"k\x00": "v"}),
        ("chdir", "/tmp/\x00"),
        ("environment", {"A": "\x00"}),
        ("idempotency_key", "k\x00"),
    ],
)
def test_nul_byte_is_422_naming_the_field(app: App, token: str, field: str, value: Any) -> None:
    r = app.call("POST", "/v1/jobs", token, json={"gpus_per_worker": 1, field: value})
    _refused(r, 422, f"body.{field}")
    assert "NUL" in r.json()["message"] and "Retry-After" not in r.headers


def test_unpaired_surrogate_and_nul_in_other_bodies(app: App, token: str) -> None:
    raw = b'{"name": "\\ud800", "gpus_per_worker": 1}'
    _refused(
        app.call("POST", "/v1/jobs", token, content=raw, headers={"Content-Type": "application/json"}),
        422,
        "body.name: Input should be a valid string",
    )
    _refused(app.call("POST", "/v1/tenants/team-a/tokens", json={"name": "x\x00"}), 422, "body.name")
    _refused(app.call("POST", "/v1/nodes/gpu-0/cordon", json={"reason": "\x00"}), 422, "body.reason")
    assert app.call("POST", "/v1/jobs/batch", token, json={"jobs": [{"name": "\x00"}]}).status_code == 422


@pytest.mark.parametrize("name", ["a/b", "A100-0", "node_1", "-a", "a..b", "b-"])
def test_node_names_are_rfc1123(app: App, name: str) -> None:
    r = app.call("POST", "/v1/nodes", json={"name": name, "gpu_type": "V100", "gpus": 8})
    _refused(r, 422, "body.name: String should match pattern")


def test_idempotency_key_reuse(app: App, token: str) -> None:
    body = {"name": "a", "gpus_per_worker": 1, "duration_s": 10.0, "idempotency_key": "k-1"}
    first = app.call("POST", "/v1/jobs", token, json=body)
    assert first.status_code == 201
    again = app.call("POST", "/v1/jobs", token, json=body)  # a retry: the same job
    assert again.status_code == 200 and again.json() == {"id": first.json()["id"], "created": False}
    other = app.call("POST", "/v1/jobs", token, json={**body, "gpus_per_worker": 2})
    _refused(
        other,
        409,
        f"idempotency key 'k-1' was used for job {first.json()['id']} with another body (gpus_per_worker differ)",
    )
    # the header alone, with the same body, is the same retry
    hdr = app.call(
        "POST",
        "/v1/jobs",
        token,
        json={k: v for k, v in body.items() if k != "idempotency_key"},
        headers={"Idempotency-Key": "k-1"},
    )
    assert hdr.status_code == 200
    mismatch = app.call("POST", "/v1/jobs", token, json=body, headers={"Idempotency-Key": "k-2"})
    _refused(mismatch, 422, "idempotency_key: the Idempotency-Key header 'k-2' and the body's idempotency_key")
    batch = app.call(
        "POST",
        "/v1/jobs/batch",
        token,
        json={"jobs": [{"name": "x", "idempotency_key": "k-3"}, {"name": "y", "idempotency_key": "k-3"}]},
    )
    _refused(batch, 409, "idempotency key 'k-3' is given to two different jobs of this batch")
    same = app.call(
        "POST",
        "/v1/jobs/batch",
        token,
        json={"jobs": [{"name": "x", "idempotency_key": "k-4"}, {"name": "x", "idempotency_key": "k-4"}]},
    )
    assert same.status_code == 201 and [j["created"] for j in same.json()["jobs"]] == [True, False]
    for job in {first.json()["id"], same.json()["jobs"][0]["id"]}:
        app.call("POST", f"/v1/jobs/{job}/cancel", token)


@pytest.mark.parametrize(
    "body,status,words",
    [
        ({"workers": "2"}, 422, "body.workers: Input should be a valid integer"),
        ({"workers": True}, 422, "body.workers: Input should be a valid integer"),
        ({"gpus_per_worker": 1.0}, 422, "body.gpus_per_worker: Input should be a valid integer"),
        ({"estimate_s": "10"}, 422, "body.estimate_s: Input should be a valid number"),
        (
            {"gpus_per_worker": 8, "gpu_milli": 500},
            422,
            "body.gpu_milli: Value error, a share of a GPU (500 thousandths) "
            "is for workers of exactly 1 GPU, and gpus_per_worker is 8",
        ),
        ({"gpus_per_worker": 0, "gpu_milli": 500}, 422, "body.gpu_milli"),
        ({"user": "mallory"}, 403, "user: only an admin's submit names the user"),
    ],
)
def test_strict_job_payload(app: App, token: str, body: dict[str, Any], status: int, words: str) -> None:
    _refused(app.call("POST", "/v1/jobs", token, json=body), status, words)


def test_admin_names_the_user_and_a_share_of_one_gpu_is_fine(app: App, token: str) -> None:
    r = app.call("POST", "/v1/jobs", json={"tenant": "team-a", "user": "bob", "gpu_milli": 500, "estimate_s": 5})
    assert r.status_code == 201, r.text
    job = app.call("GET", f"/v1/jobs/{r.json()['id']}").json()
    assert (job["user"], job["gpu_milli"], job["estimate_s"]) == ("bob", 500, 5.0)
    app.call("POST", f"/v1/jobs/{job['id']}/cancel")


def test_streamed_body_over_the_cap_is_413(app: App, token: str) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"name": "'
        for _ in range(10):
            yield b"x" * (1 << 20)
        yield b'"}'

    r = app.call("POST", "/v1/jobs", token, content=chunks(), headers={"Content-Type": "application/json"})
    assert "content-length" not in {k.lower() for k in r.request.headers}
    _refused(r, 413, "request body over 1048576 bytes")


def test_drain_keeps_the_failure_reason(app: App) -> None:
    assert app.call("POST", "/v1/nodes/gpu-3/fail", json={"reason": "PSU burnt"}).status_code == 200
    for op in ("drain", "cordon", "uncordon"):
        node = app.call("POST", f"/v1/nodes/gpu-3/{op}").json()
        assert (node["state"], node["reason"]) == ("down", "PSU burnt"), op
    node = app.call("POST", "/v1/nodes/gpu-3/repair").json()
    assert node["state"] == "up"
