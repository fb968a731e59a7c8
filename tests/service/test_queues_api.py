"""An admin edits the tree of queues through the API (GET/PUT/DELETE /v1/queues/config, PATCH
/v1/queues/{name}): validated as the file (422 naming the key), applied at the next cycle, kept in
the database over a restart of the service; tenants get 403. In-process (a manual clock, SQLite)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
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
"""


@contextmanager
def _service(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    queues = tmp_path / "queues.yaml"
    queues.write_text(QUEUES)
    with app_on(f"sqlite:///{tmp_path}/k.db", tmp_path, queues=str(queues)) as app:
        yield app.client, app.headers()


def test_an_admin_sets_the_tree_and_it_survives_a_restart(tmp_path: Path) -> None:
    with _service(tmp_path) as (client, admin):
        for name in ("team-a", "team-b"):
            assert client.post("/v1/tenants", json={"name": name}, headers=admin).status_code == 201
        doc = client.get("/v1/queues/config", headers=admin).json()
        assert doc["source"] == "file"
        assert doc["queues"][0]["children"][0] == {"name": "team-a", "guaranteed": 8, "borrowing_limit": 0}
        # a tenant may not see or change the tree itself
        token = client.post("/v1/tenants/team-a/tokens", json={}, headers=admin).json()["token"]
        tenant = {"Authorization": f"Bearer {token}"}
        assert client.get("/v1/queues/config", headers=tenant).status_code == 403
        assert client.put("/v1/queues/config", json=doc, headers=tenant).status_code == 403
        assert client.patch("/v1/queues/team-a", json={"borrowing_limit": 8}, headers=tenant).status_code == 403

        r = client.post("/v1/jobs", json={"tenant": "team-a", "workers": 2, "gpus_per_worker": 8, "duration_s": 100},
                        headers=admin)
        held = r.json()["id"]
        assert client.post("/v1/clock", json={"to": 1.0}, headers=admin).status_code == 200
        assert client.get(f"/v1/jobs/{held}", headers=admin).json()["state"] == "pending"

        # mistakes are 422s naming the key, and change nothing
        bad = {"queues": [{"name": "a", "guaranteed": {"GPU": -1}}]}
        r = client.put("/v1/queues/config", json=bad, headers=admin)
        assert r.status_code == 422 and r.json()["message"] == (
            "queues[0]: queue a: guaranteed.GPU: must be a whole number of GPUs >= 0, got -1")
        r = client.put("/v1/queues/config", json={"queues": [{"name": "a", "guaranteed": 64}]}, headers=admin)
        assert r.status_code == 422 and "the queues guarantee 64 GPUs; the cluster has 32" in r.json()["message"]
        r = client.put("/v1/queues/config", json={"queues": [{"name": "a", "guaranteed": {"V100": 8}}]},
                       headers=admin)
        assert r.status_code == 422 and "no GPU type V100 in the cluster" in r.json()["message"]
        r = client.patch("/v1/queues/team-a", json={"colour": "red"}, headers=admin)
        assert r.status_code == 422 and r.json()["message"].startswith("colour: not a key")
        assert client.patch("/v1/queues/nobody", json={"weight": 2}, headers=admin).status_code == 404
        assert client.get("/v1/queues/config", headers=admin).json()["source"] == "file"

        # a PATCH of one queue: team-a's borrowing limit is now of type GPU only (the tiny cluster's
        # type), 16; guaranteed none of that type, it may hold 16 of it
        r = client.patch("/v1/queues/team-a", json={"borrowing_limit": {"GPU": 16}}, headers=admin)
        assert r.status_code == 200, r.text
        assert r.json()["source"] == "api"
        assert client.post("/v1/clock", json={"to": 2.0}, headers=admin).status_code == 200
        assert client.get(f"/v1/jobs/{held}", headers=admin).json()["state"] == "running"
        rows = {q["name"]: q for q in client.get("/v1/queues", headers=admin).json()}
        assert rows["team-a"]["per_type"]["GPU"] == {"guaranteed": 0.0, "borrowing_limit": 16.0,
                                                     "lending_limit": None, "in_use": 16.0, "borrowed": 16.0,
                                                     "capacity": 16.0}
        text = client.get("/metrics", headers=admin).text
        assert 'kant_queue_type_gpus{gpu_type="GPU",kind="in_use",queue="team-a"} 16.0' in text
        from rich.console import Console

        from kant.cli.client.common import Clock
        from kant.cli.client.top import _frame

        console = Console(width=200, record=True)
        console.print(_frame(client.get("/v1/cluster", headers=admin).json(), Clock(0.0, "manual"), "http://x"))
        frame = console.export_text()
        assert "BY TYPE" in frame and "GPU 16/0" in frame  # (kant top: team-a's GPUs in use / guaranteed)
        new = client.get("/v1/queues/config", headers=admin).json()

    # a restart with the same --queues FILE keeps the API's tree
    with _service(tmp_path) as (client, admin):
        assert client.get("/v1/queues/config", headers=admin).json() == new
        assert client.get(f"/v1/jobs/{held}", headers=admin).json()["state"] == "running"
        # DELETE forgets it: the file's tree again
        r = client.delete("/v1/queues/config", headers=admin)
        assert r.status_code == 200 and r.json()["source"] == "file"
        assert client.post("/v1/clock", json={"to": 3.0}, headers=admin).status_code == 200
        text = client.get("/metrics", headers=admin).text
        assert 'kant_queue_gpus{kind="guaranteed",queue="team-a"} 8.0' in text
        assert 'kant_queue_type_gpus{' not in text  # (the file's tree has no per-type limits)
    with _service(tmp_path) as (client, admin):
        assert client.get("/v1/queues/config", headers=admin).json()["source"] == "file"


@pytest.mark.parametrize("body", [[1, 2], {"queues": []}])
def test_a_body_that_is_no_queues_document_is_a_422(tmp_path: Path, body: object) -> None:
    with _service(tmp_path) as (client, admin):
        r = client.put("/v1/queues/config", json=body, headers=admin)
        assert r.status_code == 422, r.text


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_kant_queues_show_set_reset(request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> None:
    """The CLI over the API, on SQLite and PostgreSQL (the tree is kept in the meta table of both)."""
    from service.inproc import app_for

    good = tmp_path / "good.yaml"
    good.write_text(QUEUES)
    bad = tmp_path / "bad.yaml"
    bad.write_text("queues:\n  - {name: a, guaranteed: {GPU: -8}}\n")
    with app_for(request, tmp_path, backend) as app:
        r = app.kant("queues", "show")
        assert r.exit_code == 0 and r.stdout.strip() == "# queues in force: none"
        r = app.kant("queues", "set", str(bad))
        assert r.exit_code == 2
        assert r.stderr.strip() == (f"error: {bad}: queues[0]: queue a: guaranteed.GPU: must be a whole number of "
                                    "GPUs >= 0, got -8")
        r = app.kant("queues", "set", str(good))
        assert r.exit_code == 0, r.stderr
        assert r.stdout.splitlines()[:3] == ["# queues in force: set through the API", "queues:", "- name: research"]
        assert "{name: team-a, guaranteed: 8, borrowing_limit: 0}" in r.stdout
        assert app.svc.db.meta.get("queues") is not None
        tenant = app.tenant("team-a")
        r = app.kant("queues", "show", token=tenant)
        assert r.exit_code == 2 and r.stderr.strip() == "error: 403: this needs an admin token"
        r = app.kant("queues", "reset", "--json")
        assert r.exit_code == 0 and '"source": null' in r.stdout
        assert app.svc.db.meta.get("queues") is None
