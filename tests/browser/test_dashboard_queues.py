"""The Tenants view's tree of queues in a real headless Chromium, against a real ``kant serve --queues``
(manual clock, simulated executor): each queue's row shows ``GET /v1/queues``'s numbers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.serve_proc import Server, running_server

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the browser extra)")

TIMEOUT_MS = 15_000
QUEUES = """\
queues:
  - name: research
    guaranteed: 24
    children:
      - {name: team-a, guaranteed: 8}
      - {name: team-b, guaranteed: 16, weight: 2}
fair_share: {half_life_s: 3600}
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("queues")
    (tmp / "queues.yaml").write_text(QUEUES)
    with running_server(
        tmp / "work", f"sqlite:///{tmp / 'kant.db'}", cluster="4x8:V100", extra=["--queues", str(tmp / "queues.yaml")]
    ) as s:
        a = s.client(s.tenant("team-a"))
        s.tenant("team-b")
        assert a.post("/v1/jobs", json={"workers": 2, "gpus_per_worker": 8, "duration_s": 600}).status_code == 201
        s.advance(60.0)
        yield s


def test_tenants_view_shows_the_tree_of_queues(browser: Any, srv: Server, artifacts: Path) -> None:
    queues = srv.admin.get("/v1/queues").json()
    # team-a holds 16 GPUs, 8 above its guarantee, and has done all the decayed usage so far
    a = next(q for q in queues if q["name"] == "team-a")
    assert (a["in_use"], a["borrowed"], a["usage"]) == (16.0, 8.0, 1.0)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{srv.url}/#/tenants")
        page.fill("#token", srv.admin_token)
        page.click("#login-form button[type=submit]")
        page.wait_for_selector("#view[data-ready='tenants']", timeout=TIMEOUT_MS)
        rows = page.eval_on_selector_all(
            "#queues tbody tr",
            "els => els.map(e => [e.dataset.queue, ...['in-use', 'guaranteed', 'borrowed', "
            "'capacity', 'factor'].map(c => e.querySelector(`[data-col=${c}]`).textContent)])",
        )
        assert rows == [
            [
                q["name"],
                f"{q['in_use']:g}",
                f"{q['guaranteed']:g}",
                f"{q['borrowed']:g}",
                f"{q['capacity']:g}",
                f"{q['factor']:.3f}",
            ]
            for q in queues
        ]
        page.screenshot(path=str(artifacts / "dashboard-queues.png"), full_page=True)
        assert not errors, errors
    finally:
        context.close()


def test_tenants_view_shows_each_queues_gpus_by_type(browser: Any, srv: Server, artifacts: Path) -> None:
    """With per-GPU-type guarantees (set through the API), the table has a column of each queue's GPUs
    in use / guaranteed per type."""
    tree = {"queues": [{"name": "research", "children": [
        {"name": "team-a", "guaranteed": {"V100": 8}}, {"name": "team-b", "guaranteed": {"V100": 16}}]}]}
    r = srv.admin.put("/v1/queues/config", json=tree)
    assert r.status_code == 200, r.text
    try:
        srv.advance(61.0)
        queues = srv.admin.get("/v1/queues").json()
        want = [" ".join(f"{t} {c['in_use']:g}/{c['guaranteed']:g}" for t, c in q["per_type"].items())
                for q in queues]
        assert want == ["V100 16/24", "V100 16/8", "V100 0/16"]
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        try:
            page = context.new_page()
            page.goto(f"{srv.url}/#/tenants")
            page.fill("#token", srv.admin_token)
            page.click("#login-form button[type=submit]")
            page.wait_for_selector("#view[data-ready='tenants']", timeout=TIMEOUT_MS)
            cells = page.eval_on_selector_all("#queues tbody [data-col=by-type]", "els => els.map(e => e.textContent)")
            assert cells == want
            page.screenshot(path=str(artifacts / "dashboard-queues-by-type.png"), full_page=True)
        finally:
            context.close()
    finally:
        srv.admin.delete("/v1/queues/config")
