"""Quotas apply by default on the live service: under the default policy (``kant``, which has no quota
plugin) a tenant given ``max_gpus`` through the API cannot run past it; its job waits, and ``why`` names
the quota. In-process (the service and its app in this process, a manual clock, SQLite)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from kant.service.config import ServeConfig
from kant.service.serve import build_app
from kant.service.server import Service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    svc = Service(
        ServeConfig(
            db_url=f"sqlite:///{tmp_path}/k.db", token_out=tmp_path / "t", cluster="tiny", clock="manual", predict=False
        )
    )
    svc.prepare()
    try:
        svc.start()
        svc.ready()
        deadline = time.monotonic() + 30
        while (svc.loop is None or svc.loop.view is None) and time.monotonic() < deadline:
            time.sleep(0.02)
        yield TestClient(build_app(svc)), {"Authorization": f"Bearer {(tmp_path / 't').read_text().strip()}"}
    finally:
        svc.close()


def test_default_policy_holds_a_job_over_its_tenants_max(service: tuple[TestClient, dict[str, str]]) -> None:
    client, admin = service
    assert client.get("/v1/cluster", headers=admin).json()["policy"] == "kant"
    assert client.post("/v1/tenants", json={"name": "team-a", "max_gpus": 8}, headers=admin).status_code == 201
    assert client.post("/v1/tenants", json={"name": "team-b"}, headers=admin).status_code == 201

    def submit(tenant: str, workers: int) -> int:
        r = client.post(
            "/v1/jobs",
            json={"tenant": tenant, "workers": workers, "gpus_per_worker": 8, "duration_s": 100},
            headers=admin,
        )
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    big = submit("team-a", 2)  # 16 GPUs: over team-a's max of 8, on a cluster of 32 free GPUs
    other = submit("team-b", 2)  # behind it in the queue: the held job must not block it
    assert client.post("/v1/clock", json={"to": 1.0}, headers=admin).status_code == 200
    held = client.get(f"/v1/jobs/{big}", headers=admin).json()
    assert held["state"] == "pending"  # held, not refused: an admin may raise the max
    why = client.get(f"/v1/jobs/{big}/why", headers=admin).json()
    assert "[quota] tenant team-a at its max of 8 GPUs (holds 0, the job needs 16)" in why["reason"], why
    assert client.get(f"/v1/jobs/{other}", headers=admin).json()["state"] == "running"
    # raising the max lets it run at the next cycle
    assert client.patch("/v1/tenants/team-a", json={"max_gpus": 16}, headers=admin).status_code == 200
    assert client.post("/v1/clock", json={"to": 2.0}, headers=admin).status_code == 200
    assert client.get(f"/v1/jobs/{big}", headers=admin).json()["state"] == "running"
    assert client.get("/v1/tenants/team-a", headers=admin).json()["quota_enforced"] is True
