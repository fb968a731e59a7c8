"""A dashboard an operator trusts at a glance (issue 31), in a real headless Chromium against a real
``kant serve`` replaying a Philly slice (the fixtures of test_dashboard.py): the tooltip never sticks;
the headline and the map are one snapshot; a busy cordoned node is marked; tenants get distinct
colours and a legend with their shares; the clock and durations read as the CLI writes them; the
queue is in the scheduler's order, with the head marked, sortable, filterable and stable across
refreshes; a phone gets cards without horizontal scroll; charts follow the window and their legends
show the latest values. Screenshots go to ``test-artifacts/`` (gitignored)."""

# ruff: noqa: F811 (the tests take test_dashboard's fixtures, imported, as their arguments)
from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest

from browser.test_dashboard import TIMEOUT_MS, ctx, open_page, shot, srv, value  # noqa: F401 (fixtures)
from service.serve_proc import Server

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the browser extra)")

CASES = json.loads((Path(__file__).parents[1] / "data" / "durations.json").read_text())["compact"]


def test_the_tooltip_never_sticks(ctx: Any, srv: Server, artifacts: Path) -> None:
    page = open_page(ctx, srv, srv.admin_token, "cluster")
    cell = page.locator("#map .cell[data-job]").first
    cell.hover()
    assert page.locator("#tip").is_visible()
    cell.click()  # on to the job's page: the tip of a cell that is gone must go too
    page.wait_for_selector("#view[data-ready='job']", timeout=TIMEOUT_MS)
    page.mouse.move(5, 5)
    assert page.locator("#tip").count() == 0 or page.locator("#tip").is_hidden()
    page.go_back()
    page.wait_for_selector("#view[data-ready='cluster']", timeout=TIMEOUT_MS)
    assert page.locator("#tip").count() == 0 or page.locator("#tip").is_hidden()
    shot(page, artifacts, "trust-after-tip")


def test_the_headline_and_the_map_are_one_snapshot(ctx: Any, srv: Server) -> None:
    # the cluster moves on between two reads of a page: here /v1/cluster answers as if a job had started
    # since; the headline must not take its numbers from a read other than the map's
    def later(route: Any) -> None:
        body = srv.admin.get("/v1/cluster").json()
        body["allocated_gpus"] += 1
        body["gar"] = body["allocated_gpus"] / body["total_gpus"]
        body["gfr_nodes"] = 0.0
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    page = ctx.new_page()
    page.route("**/v1/cluster", later)
    page.goto(f"{srv.url}/#/cluster")
    page.fill("#token", srv.admin_token)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#view[data-ready='cluster']", timeout=TIMEOUT_MS)
    held = page.locator("#map .cell[data-tenant]").count()
    assert int(value(page, "kpi-allocated")) == held == int(value(page, "map-held"))
    assert math.isclose(float(value(page, "kpi-gar")), held / page.locator("#map .cell").count())
    up = page.locator("#map .node[data-state='up']").count()
    partial = page.locator("#map .node.partial").count()
    assert math.isclose(float(value(page, "kpi-gfr-nodes")), partial / up)
    assert int(page.text_content("[data-testid='nodes-partial']") or "-1") == partial
    page.close()


def test_a_busy_cordoned_node_is_marked(ctx: Any, srv: Server, artifacts: Path) -> None:
    nodes = srv.admin.get("/v1/nodes").json()
    busy = next(n["name"] for n in nodes if n["used_gpus"] == n["gpus"])
    assert srv.admin.post(f"/v1/nodes/{busy}/cordon", json={}).status_code == 200
    try:
        page = open_page(ctx, srv, srv.admin_token, "cluster")
        node = page.locator(f"#map .node[data-node='{busy}']")
        assert node.get_attribute("data-state") == "cordoned"
        assert "off" in (node.get_attribute("class") or "")
        assert node.locator("[data-testid='node-state']").text_content() == "cordoned"
        assert node.locator(".cell[data-tenant]").count() == node.locator(".cell").count()  # busy, and still marked
        shot(page, artifacts, "trust-cordoned")
    finally:
        assert srv.admin.post(f"/v1/nodes/{busy}/uncordon", json={}).status_code == 200


def test_tenants_get_distinct_colours_and_a_legend_with_shares(ctx: Any, srv: Server) -> None:
    page = open_page(ctx, srv, srv.admin_token, "cluster")
    legend = page.eval_on_selector_all(
        "#map-legend [data-legend]", "els => els.map(e => [e.dataset.legend, getComputedStyle(e.querySelector('.sw'))"
                                      ".backgroundImage + getComputedStyle(e.querySelector('.sw')).backgroundColor, "
                                      "e.textContent])")
    tenants = [row for row in legend if row[0] != "free"]
    assert len(tenants) >= 3
    assert len({c for _, c, _ in tenants}) == len(tenants)  # one colour per tenant
    cells = dict(page.eval_on_selector_all(
        "#map .cell[data-tenant]", "els => els.map(e => [e.dataset.tenant, getComputedStyle(e).backgroundColor])"))
    assert len(set(cells.values())) == len(cells)
    total = page.locator("#map .cell").count()
    shares = 0.0
    for name, _, text in legend:
        gpus = page.locator(f"#map .cell[data-tenant='{name}']").count() if name != "free" else \
            total - page.locator("#map .cell[data-tenant]").count()
        shown_name, shown_gpus, shown_share = text.split()
        assert (shown_name, int(shown_gpus)) == (name, gpus)
        assert abs(float(shown_share.rstrip("%")) - 100 * gpus / total) <= 0.05 + 1e-9, (name, text)
        shares += gpus / total
    assert math.isclose(shares, 1.0)
    # the "full" swatch is drawn as full nodes are (cells in tenants' colours), not one colour of its own
    assert "gradient" in page.eval_on_selector("[data-testid='nodes-full']", "e => getComputedStyle("
                                               "e.previousElementSibling).backgroundImage")


def test_durations_and_the_clock_read_as_the_cli_writes_them(ctx: Any, srv: Server) -> None:
    page = open_page(ctx, srv, srv.admin_token, "cluster")
    got = page.evaluate("cases => cases.map(([s]) => window.kant.dur(s))", CASES)
    assert got == [text for _, text in CASES]
    now = srv.admin.get("/v1/clock").json()["now"]
    s = int(now)
    want = f"day {s // 86400} {s % 86400 // 3600:02d}:{s % 3600 // 60:02d} · manual clock"
    page.wait_for_function(f"document.querySelector('#now').textContent === {json.dumps(want)}", timeout=TIMEOUT_MS)


def _rows(page: Any) -> list[list[Any]]:
    return page.eval_on_selector_all(  # type: ignore[no-any-return]
        "#jobs tbody tr[data-job]", "els => els.map(e => [+e.dataset.job, +e.querySelector('[data-col=pos]')"
                                    ".textContent, e.classList.contains('head'), "
                                    "e.querySelector('[data-col=gpus]').textContent])")


def test_the_queue_says_what_starts_next(ctx: Any, srv: Server, artifacts: Path) -> None:
    page = open_page(ctx, srv, srv.admin_token, "queue")
    rows = _rows(page)
    assert len(rows) == srv.admin.get("/v1/cluster").json()["queue_len"] > 1
    assert [r[1] for r in rows] == list(range(1, len(rows) + 1))  # the scheduler's order, each with its place
    for job_id, pos, _, _ in rows[:3] + rows[-2:]:  # the place `kant why` gives
        assert srv.admin.get(f"/v1/jobs/{job_id}").json()["why"]["position"] == pos - 1
    assert rows[0][2] and not any(r[2] for r in rows[1:])  # the head is marked
    assert str(rows[0][0]) in (page.text_content("[data-testid='next']") or "")
    chips = page.eval_on_selector_all("#reasons [data-reason]",
                                      "els => els.map(e => +e.querySelector('b').textContent)")
    assert sum(chips) == len(rows)
    assert all(t.strip() for t in page.eval_on_selector_all("#jobs tbody [data-col=reason]",
                                                            "els => els.map(e => e.textContent)"))
    # what a prediction's band covers: the twin's words, as `kant why`'s prediction gives them
    predicted = page.eval_on_selector_all("#jobs tbody tr[data-job]", "els => els.map(e => [+e.dataset.job, "
                                          "e.querySelector('[data-col=predicted]').getAttribute('title')])")
    said = [(j, t) for j, t in predicted if t]
    assert said, "no predicted start says what its band covers"
    for job_id, title in said[:3]:
        covers = srv.admin.get(f"/v1/jobs/{job_id}/why").json()["prediction"]["covers"]
        assert covers and title == f"the band covers: {covers}", (job_id, title, covers)
        assert f"The band covers: {covers}." == page.text_content("[data-testid='band-covers']")
    shot(page, artifacts, "trust-queue")
    # stable: nothing changed, the page is read again: no row moves
    renders = int(page.get_attribute("#view", "data-renders") or "0")
    page.evaluate("window.dispatchEvent(new HashChangeEvent('hashchange'))")
    page.wait_for_function(f"+document.querySelector('#view').dataset.renders > {renders}", timeout=TIMEOUT_MS)
    assert _rows(page) == rows
    # sortable: by GPUs, then back to the scheduler's order
    page.click("#jobs th[data-sort='gpus']")
    page.wait_for_function(f"+document.querySelector('#view').dataset.renders > {renders + 1}", timeout=TIMEOUT_MS)
    by_gpus = _rows(page)
    gpus = [int(a) * int(b) for a, b in (r[3].split("×") for r in by_gpus)]  # (the page's "2×4")
    assert gpus == sorted(gpus) and sorted(by_gpus) == sorted(rows)
    page.click("#jobs th[data-sort='pos']")
    page.wait_for_function(f"+document.querySelector('#view').dataset.renders > {renders + 2}", timeout=TIMEOUT_MS)
    assert _rows(page) == rows
    # filterable: one tenant's name typed in keeps the focus and shows only its jobs
    who = page.text_content("#jobs tbody tr[data-job] [data-col=tenant]") or ""
    page.fill("#q-filter", who)
    page.wait_for_function(f"[...document.querySelectorAll('#jobs tbody [data-col=tenant]')].every(e => "
                           f"e.textContent === {json.dumps(who)})", timeout=TIMEOUT_MS)
    assert page.evaluate("document.activeElement.id") == "q-filter"
    page.fill("#q-filter", "")


def test_a_phone_gets_cards_and_one_line_of_navigation(browser: Any, srv: Server, artifacts: Path) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
    try:
        for route in ("queue", "cluster", "tenants", "services", "charts", "results"):
            page = open_page(context, srv, srv.admin_token, "queue" if route == "results" else route)
            if route == "results":  # (a page that asks for no token: reached by its link, logged in)
                page.click("nav a[data-view='results']")
                page.wait_for_selector("#view[data-ready='results']", timeout=TIMEOUT_MS)
            if route == "charts":
                page.wait_for_selector("#chart-ratios .uplot", timeout=TIMEOUT_MS)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, (route, width)
            assert page.evaluate("document.querySelector('header').offsetHeight") < 60
            # every entry of the navigation wholly on screen, the navigation not scrolling sideways
            boxes = page.eval_on_selector_all("header a, header button:not([hidden])", "els => els.map(e => "
                                              "{ const r = e.getBoundingClientRect(); "
                                              "return [e.textContent.trim(), r.left, r.right, r.top]; })")
            assert len(boxes) == 8, boxes  # the brand, six pages, log out
            for label, left, right, _top in boxes:
                assert label and left >= 0 and right <= 390, (route, label, left, right)
            assert len({round(b[3] / 10) for b in boxes[1:7]}) == 1, boxes  # one line
            assert page.evaluate("(() => { const n = document.querySelector('nav'); "
                                 "return n.scrollWidth <= n.clientWidth; })()"), route
            if route == "queue":
                assert page.evaluate("getComputedStyle(document.querySelector('#jobs tbody tr')).display") == "block"
            shot(page, artifacts, f"trust-phone-{route}")
            page.close()
    finally:
        context.close()


def test_charts_follow_the_window_and_show_the_latest_values(ctx: Any, srv: Server, artifacts: Path) -> None:
    page = open_page(ctx, srv, srv.admin_token, "charts")
    page.wait_for_selector("#chart-ratios .uplot", timeout=TIMEOUT_MS)
    last = srv.admin.get("/v1/dashboard/series").json()["samples"][-1]
    legend = page.eval_on_selector_all("#chart-ratios .u-legend .u-series",
                                       "els => els.map(e => e.textContent.trim())")
    assert "n/a" not in " ".join(legend)
    # GAR is drawn over SOR (dashed): at 100 % both show
    order = page.evaluate("window.kant.charts()[0].series.map(s => [s.label, !!s.dash])")
    assert [o[0] for o in order[1:3]] == ["SOR", "GAR"] and order[1][1] and not order[2][1]
    assert any(f"GAR{100 * last['gar']:.1f}%" in v.replace(" ", "") for v in legend), legend
    page.set_viewport_size({"width": 800, "height": 900})
    page.wait_for_function("document.querySelector('#chart-ratios canvas').getBoundingClientRect().width <= 780",
                           timeout=TIMEOUT_MS)
    assert page.evaluate("document.documentElement.scrollWidth") <= 800
    # the x axis: round ticks on the service clock (whole hours or days)
    splits, ticks = page.evaluate("(() => { const a = window.kant.charts()[0].axes[0]; "
                                  "return [a._splits, a._values]; })()")
    step = min(b - a for a, b in itertools.pairwise(splits)) if len(splits) > 1 else 3600
    assert step % 60 == 0 and all(s % step == 0 for s in splits), splits
    assert all(t.startswith("day ") or (len(t) == 5 and t[2] == ":") for t in ticks), ticks
    shot(page, artifacts, "trust-charts")


def test_the_queue_is_read_once_per_queue_state(srv: Server) -> None:
    # the queue is read on the loop's thread when it may have changed, and from QueueCache until then
    # (Server-Timing says which): a job in or out is seen at once
    def read() -> tuple[dict[str, Any], str]:
        r = srv.admin.get("/v1/dashboard/queue", params={"limit": 500})
        assert r.status_code == 200, r.text
        return r.json(), r.headers["server-timing"]

    before, _ = read()
    again, timing = read()
    assert timing.startswith("cache") and again == before
    tenant = before["rows"][0]["tenant"]
    job = srv.admin.post("/v1/jobs", json={"tenant": tenant, "workers": 16, "gpus_per_worker": 8,
                                           "duration_s": 60.0, "name": "too-big"})
    assert job.status_code in (200, 201), job.text
    job_id = job.json()["id"]
    try:
        got, timing = read()
        assert timing.startswith("loop") and got["queue_len"] == before["queue_len"] + 1
        assert job_id in [r["id"] for r in got["rows"]]
        mine = srv.admin.get("/v1/dashboard/queue", params={"tenant": tenant, "limit": 500}).json()
        assert {r["tenant"] for r in mine["rows"]} == {tenant} and job_id in [r["id"] for r in mine["rows"]]
    finally:
        assert srv.admin.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    after, timing = read()
    assert timing.startswith("loop") and job_id not in [r["id"] for r in after["rows"]]
    assert after["queue_len"] == before["queue_len"]
