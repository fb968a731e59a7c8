"""``GET /v1/dashboard/services`` (the dashboard's Services panel) on a real ``kant serve`` (wall
clock, the ``unified`` policy, simulated executor: the replica is a real example model server, the
training job is simulated): its numbers against the API's and against the rule of GPUs lent
(docs/dashboard.md), and its tenant scoping. Every wait polls with a deadline (no timed asserts)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx

from service.serve_proc import eventually, running_server

MODEL_SERVER = f"exec {sys.executable} -m kant.model_server --ms-per-token 0.05"


def panel(api: httpx.Client) -> dict[str, Any]:
    r = api.get("/v1/dashboard/services")
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def test_services_panel_numbers_and_scoping(tmp_path: Path) -> None:
    with running_server(tmp_path / "work", f"sqlite:///{tmp_path / 'kant.db'}", cluster="1x8:V100", clock="wall",
                        policy="unified") as s:
        a, b = s.client(s.tenant("a")), s.client(s.tenant("b"))
        # a: a real model server, 1 replica of 1 GPU, up to 3 (headroom 2); b: 1 replica that runs nothing
        r = a.post("/v1/services", json={"name": "chat", "gpus_per_replica": 1, "replicas": 1, "min_replicas": 1,
                                         "max_replicas": 3, "slo_ms": 5000, "command": MODEL_SERVER})
        assert r.status_code == 201, r.text
        chat = r.json()["id"]
        r = b.post("/v1/services", json={"name": "idle", "gpus_per_replica": 1, "replicas": 1, "min_replicas": 1,
                                         "max_replicas": 1})
        assert r.status_code == 201, r.text
        idle = r.json()["id"]
        # training takes the 6 GPUs no replica holds: 2 above its share (8 - 3 - 1 = 4), from chat's headroom
        train = a.post("/v1/jobs", json={"gpus_per_worker": 6, "duration_s": 3600}).json()["id"]
        eventually(lambda: a.get(f"/v1/jobs/{train}").json()["state"] == "running", "training runs")
        eventually(lambda: a.get(f"/v1/services/{chat}").json()["ready_replicas"] == 1, "chat's replica is ready")
        for i in range(5):
            r = a.post(f"/v1/services/{chat}/serve/v1/completions", json={"max_tokens": 8, "prompt_tokens": 10 + i})
            assert r.status_code == 200, r.text

        admin = panel(s.admin)
        assert (admin["total_gpus"], admin["training_gpus"], admin["training_share_gpus"],
                admin["loaned_gpus"]) == (8, 6, 4, 2)
        rows = {x["name"]: x for x in admin["services"]}
        assert set(rows) == {"chat", "idle"}
        c = rows["chat"]
        assert (c["id"], c["tenant"], c["state"], c["degraded_reason"]) == (chat, "a", "active", None)
        assert (c["ready_replicas"], c["target_replicas"], c["headroom_gpus"], c["lent_gpus"]) == (1, 1, 2, 2)
        assert (rows["idle"]["headroom_gpus"], rows["idle"]["lent_gpus"]) == (0, 0)
        # the traffic numbers are the route's own (GET /v1/services/{id}/stats over the same window)
        stats = s.admin.get(f"/v1/services/{chat}/stats", params={"window": 60}).json()
        assert c["total_requests"] == stats["total_requests"] == 5
        assert c["arrival_rate"] > 0 and c["response_p99_ms"] is not None and c["response_p99_ms"] > 0
        assert c["slo_ms"] == 5000 and c["slo_attainment"] == 1.0
        assert c["reclaims"] == 0 and c["reclaim_p50_s"] is None

        # a tenant sees its own services only, with the same figures
        mine = panel(a)
        assert [x["name"] for x in mine["services"]] == ["chat"]
        assert mine["services"][0]["lent_gpus"] == 2 and mine["loaned_gpus"] == 2
        theirs = panel(b)
        assert [(x["id"], x["lent_gpus"]) for x in theirs["services"]] == [(idle, 0)]
        assert s.client(None).get("/v1/dashboard/services").status_code == 401
        assert s.admin.get("/v1/dashboard/services", params={"window": 0}).status_code == 422
