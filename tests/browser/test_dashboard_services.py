"""The dashboard's Services view in a real headless Chromium, against a real ``kant serve`` (wall
clock, the ``unified`` policy, simulated executor) with a real replica (the example model server)
answering requests through the route, and a training job borrowing GPUs of the service's headroom:
the view shows the API's numbers (``GET /v1/dashboard/services``), and a tenant sees only its own
services. Screenshots go to ``test-artifacts/`` (gitignored)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.serve_proc import Server, eventually, running_server

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the browser extra)")

TIMEOUT_MS = 15_000
MODEL_SERVER = f"exec {sys.executable} -m kant.model_server --ms-per-token 0.05"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("services")
    with running_server(tmp / "work", f"sqlite:///{tmp / 'kant.db'}", cluster="1x8:V100", clock="wall",
                        policy="unified") as s:
        a, b = s.client(s.tenant("a")), s.client(s.tenant("b"))
        r = a.post("/v1/services", json={"name": "chat", "gpus_per_replica": 1, "replicas": 1, "min_replicas": 1,
                                         "max_replicas": 3, "slo_ms": 5000, "command": MODEL_SERVER})
        assert r.status_code == 201, r.text
        chat = r.json()["id"]
        assert b.post("/v1/services", json={"name": "idle", "gpus_per_replica": 1, "replicas": 1,
                                            "max_replicas": 1}).status_code == 201
        train = a.post("/v1/jobs", json={"gpus_per_worker": 6, "duration_s": 3600}).json()["id"]
        eventually(lambda: a.get(f"/v1/jobs/{train}").json()["state"] == "running", "training runs")
        eventually(lambda: a.get(f"/v1/services/{chat}").json()["ready_replicas"] == 1, "the replica is ready")
        for i in range(5):
            r = a.post(f"/v1/services/{chat}/serve/v1/completions", json={"max_tokens": 8, "prompt_tokens": i})
            assert r.status_code == 200, r.text
        s.tokens = {"a": a.headers["Authorization"][7:], "b": b.headers["Authorization"][7:]}  # type: ignore[attr-defined]
        yield s


@pytest.fixture
def ctx(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 700})
    try:
        yield context
    finally:
        context.close()


def open_services(ctx: Any, srv: Server, token: str) -> Any:
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.errors = errors
    page.goto(f"{srv.url}/#/services")
    page.fill("#token", token)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#view[data-ready='services']", timeout=TIMEOUT_MS)
    return page


def cell(page: Any, sid: int, col: str) -> Any:
    return page.locator(f"#services tr[data-service='{sid}'] [data-col='{col}']")


def test_services_view_shows_the_apis_numbers(ctx: Any, srv: Server, artifacts: Path) -> None:
    api = srv.admin.get("/v1/dashboard/services").json()
    page = open_services(ctx, srv, srv.admin_token)
    rows = page.locator("#services tbody tr[data-service]")
    assert rows.count() == 2
    for s in api["services"]:
        replicas = cell(page, s["id"], "replicas")
        assert (replicas.get_attribute("data-ready"), replicas.get_attribute("data-target")) == (
            str(s["ready_replicas"]), str(s["target_replicas"]))
        assert cell(page, s["id"], "lent").get_attribute("data-value") == str(s["lent_gpus"])
        assert cell(page, s["id"], "reclaims").get_attribute("data-value") == str(s["reclaims"])
        assert cell(page, s["id"], "state").inner_text() == s["state"]
    chat = next(s for s in api["services"] if s["name"] == "chat")
    assert chat["lent_gpus"] == 2 and chat["ready_replicas"] == 1
    assert float(cell(page, chat["id"], "rate").get_attribute("data-value")) > 0
    assert float(cell(page, chat["id"], "p99").get_attribute("data-value")) > 0
    assert "/ 5000 ms" in cell(page, chat["id"], "p99").inner_text()
    assert cell(page, chat["id"], "slo").inner_text() == "100.0%"
    assert page.get_by_test_id("kpi-loaned").get_attribute("data-value") == str(api["loaned_gpus"]) == "2"
    assert page.get_by_test_id("kpi-training-gpus").get_attribute("data-value") == "6"
    # the view reads the panel again while it is shown (traffic moves without a state change)
    renders = int(page.locator("#view").get_attribute("data-renders"))
    page.wait_for_function(f"Number(document.querySelector('#view').dataset.renders) > {renders}", timeout=TIMEOUT_MS)
    page.screenshot(path=str(artifacts / "dashboard-services.png"), full_page=True)
    assert page.errors == []


def test_a_tenant_sees_only_its_services(ctx: Any, srv: Server) -> None:
    page = open_services(ctx, srv, srv.tokens["b"])  # type: ignore[attr-defined]
    names = page.locator("#services tbody tr[data-service] td:first-child").all_inner_texts()
    assert names == ["idle"]
    assert page.errors == []
