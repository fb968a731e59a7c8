"""Quotas apply by default on the live service: under the default policy (``kant``, which has no quota
plugin) a tenant given ``max_gpus`` through the API cannot run past it; its job waits, and ``why`` names
the quota. With ``--queues``, the tree of queues applies the same way and is shown on ``/v1/queues``,
``/metrics`` and ``kant top``. In-process (the service and its app in this process, a manual clock,
SQLite)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.inproc import app_on

QUEUES = """\
queues:
  - name: research
    guaranteed: 24
    children:
      - {name: team-a, guaranteed: 8, borrowing_limit: 0}
      - {name: team-b, guaranteed: 16, weight: 2}
fair_share: {half_life_s: 3600}
"""


@pytest.fixture
def service(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[TestClient, dict[str, str]]]:
    queues = None
    if request.param:
        queues = str(tmp_path / "queues.yaml")
        Path(queues).write_text(QUEUES)
    with app_on(f"sqlite:///{tmp_path}/k.db", tmp_path, queues=queues) as app:
        yield app.client, app.headers()


@pytest.mark.parametrize("service", [False], indirect=True)
def test_default_policy_holds_a_job_over_its_tenants_max(service: tuple[TestClient, dict[str, str]]) -> None:
    client, admin = service
    assert client.get("/v1/cluster", headers=admin).json()["policy"] == "kant"
    assert client.get("/v1/queues", headers=admin).json() == []  # (no --queues)
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


@pytest.mark.parametrize("service", [True], indirect=True)
def test_queues_live(service: tuple[TestClient, dict[str, str]]) -> None:
    client, admin = service
    for name in ("team-a", "team-b"):
        assert client.post("/v1/tenants", json={"name": name}, headers=admin).status_code == 201

    def submit(tenant: str, workers: int) -> int:
        r = client.post(
            "/v1/jobs",
            json={"tenant": tenant, "workers": workers, "gpus_per_worker": 8, "duration_s": 100},
            headers=admin,
        )
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    held = submit("team-a", 2)  # 16 GPUs; team-a may hold 8 (guarantee 8 + borrowing limit 0)
    ran = submit("team-b", 1)
    assert client.post("/v1/clock", json={"to": 1.0}, headers=admin).status_code == 200
    assert client.get(f"/v1/jobs/{held}", headers=admin).json()["state"] == "pending"
    why = client.get(f"/v1/jobs/{held}/why", headers=admin).json()["reason"]
    words = "queue team-a at its max of 8 GPUs (guarantee 8 + borrowing limit 0; holds 0, the job needs 16)"
    assert f"[queues] {words}" in why
    assert client.get(f"/v1/jobs/{ran}", headers=admin).json()["state"] == "running"
    assert client.post("/v1/clock", json={"to": 3601.0}, headers=admin).status_code == 200
    rows = {r["name"]: r for r in client.get("/v1/queues", headers=admin).json()}
    assert list(rows) == ["research", "team-a", "team-b"]
    b = rows["team-b"]
    # team-b holds 8 GPUs since t=1 (its job runs 100 s, ends at 101): shares 1/3 and 2/3 by weight;
    # team-b did all the decayed usage, so its usage is 1 and its factor 2^(-1 / (2/3)) = 2^-1.5
    assert (b["in_use"], b["guaranteed"], b["parent"]) == (0.0, 16.0, "research")
    assert b["share"] == pytest.approx(2 / 3) and b["usage"] == pytest.approx(1.0)
    assert b["factor"] == pytest.approx(2**-1.5)
    assert rows["team-a"]["factor"] == 1.0 and rows["research"]["usage"] == pytest.approx(1.0)
    assert rows["team-a"]["tenants"] == ["team-a"] and rows["research"]["tenants"] == []
    # a tenant sees its own leaf and the queues above it, not its sibling's
    r = client.post("/v1/tenants/team-a/tokens", json={}, headers=admin)
    mine = client.get("/v1/queues", headers={"Authorization": f"Bearer {r.json()['token']}"}).json()
    assert [q["name"] for q in mine] == ["research", "team-a"]
    text = client.get("/metrics", headers=admin).text
    assert 'kant_queue_gpus{kind="guaranteed",queue="team-b"} 16.0' in text
    assert 'kant_queue_fair_share{kind="factor",queue="team-a"} 1.0' in text
    from rich.console import Console

    from kant.cli.client.common import Clock
    from kant.cli.client.top import _frame

    data = client.get("/v1/cluster", headers=admin).json()
    console = Console(width=200, record=True)
    console.print(_frame(data, Clock(0.0, "manual"), "http://x"))
    frame = console.export_text()
    assert "QUEUE" in frame and "  team-b" in frame and "0.354" in frame  # (2^-1.5 = 0.3536)
