"""The web dashboard in a real headless Chromium, against a real ``kant serve`` replaying a Philly slice
(manual clock, simulated executor): every number the pages show is checked against the API's answer
at the same state; a click on a GPU cell leads to its job; a tenant's login shows its own jobs and
only totals of the others. Screenshots go to ``test-artifacts/`` (gitignored)."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kant.model.job import JobTable
from service.serve_proc import Server, running_server

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the browser extra)")

# 128 GPUs in 4 leaves; Philly jobs 20,000 to 20,499 (mostly 1-GPU, a few gangs, over 2 hours of the trace)
# leave it nearly full, with a queue and a partly used node
CLUSTER = "16x8:V100,leaf=4,spine=2"
FIRST, SLICE = 20_000, 500
TIMEOUT_MS = 15_000


def replay(srv: Server, jobs: JobTable, step: float = 60.0) -> float:
    """Submit the jobs minute by minute of the trace (each at the end of the minute it arrives in: the
    clock is moved there with ``hold``, the minute's jobs are submitted, the next move runs its cycle);
    returns the service time after the last minute's cycle."""
    adm = srv.admin
    for tenant in jobs.tenant_names:
        assert adm.post("/v1/tenants", json={"name": tenant}).status_code == 201
    submit = jobs.submit.tolist()
    i, n = 0, len(jobs)
    t = submit[0]
    while i < n:
        t = submit[0] + step * math.ceil((submit[i] - submit[0]) / step)
        srv.advance(t, hold=True)
        batch = []
        while i < n and submit[i] <= t:
            d = float(jobs.duration[i])
            batch.append({"name": f"philly-{FIRST + i}", "tenant": jobs.tenant_names[int(jobs.tenant[i])],
                          "workers": int(jobs.workers[i]), "gpus_per_worker": int(jobs.gpus_per_worker[i]),
                          "estimate_s": d if d > 0 else None, "duration_s": d})
            i += 1
        r = adm.post("/v1/jobs/batch", json={"jobs": batch})
        assert r.status_code == 201, r.text
    srv.advance(t + 1)
    return float(t + 1)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, philly_jobs: JobTable) -> Iterator[Server]:
    jobs = philly_jobs.sorted_by_submit().take(np.arange(FIRST, FIRST + SLICE))
    tmp = tmp_path_factory.mktemp("dashboard")
    shm = Path("/dev/shm")  # the database in memory where there is one: this test is about pages, not durability
    db = shm / f"kant-dashboard-{os.getpid()}.db" if shm.is_dir() and os.access(shm, os.W_OK) else tmp / "dash.db"
    with running_server(tmp, f"sqlite:///{db}", cluster=CLUSTER,
                        extra=["--clock-start", str(float(jobs.submit[0])), "--predict-runs", "1",
                               "--predict-every", "0.5"]) as server:
        t0 = time.perf_counter()
        end = replay(server, jobs)
        t1 = time.perf_counter()
        for _ in range(120):  # on to the first minute with a queue and a partly used node
            cl = server.admin.get("/v1/cluster").json()
            if cl["queue_len"] > 0 and cl["gfr_nodes"]:
                break
            end += 60.0
            server.advance(end)
        assert cl["queue_len"] > 0 and cl["gfr_nodes"], cl
        print(f"replay {t1 - t0:.1f} s, then {time.perf_counter() - t1:.1f} s to service time {end}")
        server.end = end  # type: ignore[attr-defined]
        yield server
    for f in db.parent.glob(db.name + "*"):
        f.unlink()


@pytest.fixture(scope="module")
def tenant(srv: Server) -> tuple[str, str]:
    """The tenant with the most jobs running or waiting, and a token of it."""
    cl = srv.admin.get("/v1/cluster").json()
    use = cl["tenants"]
    name = max(use, key=lambda t: (use[t]["running_gpus"] > 0 < use[t]["pending_jobs"], use[t]["running_gpus"], t))
    r = srv.admin.post(f"/v1/tenants/{name}/tokens", json={"name": "browser"})
    assert r.status_code == 201, r.text
    return name, str(r.json()["token"])


@pytest.fixture
def ctx(browser: Any) -> Iterator[Any]:
    """A fresh browser context (its own session storage), closed after the test even when it fails (an
    open page holds an event stream that would delay the service's shutdown)."""
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    try:
        yield context
    finally:
        context.close()


def new_page(ctx: Any) -> Any:
    """A page that keeps its script errors (``page.errors``: a screenshot checks there are none)."""
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.errors = errors
    return page


def open_page(ctx: Any, srv: Server, token: str, route: str, query: str = "") -> Any:
    page = new_page(ctx)
    page.goto(f"{srv.url}/{query}#/{route}")
    page.fill("#token", token)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector(f"#view[data-ready='{route.split('/')[0].split('?')[0]}']", timeout=TIMEOUT_MS)
    return page


def shot(page: Any, artifacts: Path, name: str) -> None:
    page.screenshot(path=str(artifacts / f"dashboard-{name}.png"), full_page=True)
    assert not page.errors, page.errors


def value(page: Any, testid: str) -> str:
    return str(page.get_attribute(f"[data-testid='{testid}']", "data-value"))


def close(a: str, b: float | None) -> bool:
    return (b is None and a == "") or (b is not None and a != "" and math.isclose(float(a), b, rel_tol=1e-9))


def test_cluster_map_shows_the_apis_numbers(ctx: Any, srv: Server, artifacts: Path) -> None:
    page = open_page(ctx, srv, srv.admin_token, "cluster")
    cl = srv.admin.get("/v1/cluster").json()
    for testid, key in [("kpi-gar", "gar"), ("kpi-sor", "sor"), ("kpi-gfr-nodes", "gfr_nodes"),
                        ("kpi-gfr-gpus", "gfr_gpus"), ("kpi-allocated", "allocated_gpus"), ("kpi-queue", "queue_len"),
                        ("kpi-running", "running_jobs")]:
        assert close(value(page, testid), cl[key]), (testid, value(page, testid), cl[key])
    nodes = {n["name"]: n for n in srv.admin.get("/v1/nodes").json()}
    shown = page.eval_on_selector_all(
        "#map .node", "els => els.map(e => [e.dataset.node, +e.dataset.used, e.querySelectorAll('.cell').length, "
                      "e.querySelectorAll('.cell[data-tenant]').length, e.classList.contains('partial')])")
    assert {s[0] for s in shown} == set(nodes)
    for name, used, cells, held, partial in shown:
        n = nodes[name]
        assert (used, cells, held) == (n["used_gpus"], n["gpus"], n["used_gpus"]), name
        assert partial == (0 < n["used_gpus"] < n["gpus"])
    # fragmentation at a glance: the partly used nodes the page marks give the API's GFR
    up = [n for n in nodes.values() if n["state"] == "up"]
    partial = sum(1 for s in shown if s[4])
    assert partial > 0
    assert math.isclose(partial / len(up), cl["gfr_nodes"])
    assert int(page.text_content("[data-testid='nodes-partial']") or "-1") == partial
    shot(page, artifacts, "cluster")
    # every job cell names a running job of the API, with its GPUs on that node
    page_ = srv.admin.get("/v1/jobs", params={"state": "running", "limit": 1000}).json()
    running = {j["id"]: j for j in page_["items"]}
    cells = page.eval_on_selector_all("#map .cell[data-job]", "els => els.map(e => [+e.dataset.job, e.dataset.tenant])")
    assert cells and all(running[j]["tenant"] == t for j, t in cells)
    assert len(cells) == sum(j["workers"] * j["gpus_per_worker"] for j in running.values())
    page.select_option("#color-by", "kind")
    assert "training" in (page.text_content("#map-legend") or "")


def test_map_aggregates_per_leaf_with_drill_down(ctx: Any, srv: Server, artifacts: Path) -> None:
    page = open_page(ctx, srv, srv.admin_token, "cluster", query="?max_nodes=8")
    nodes = srv.admin.get("/v1/nodes").json()
    per_leaf: dict[str, list[int]] = {}
    for n in nodes:
        per_leaf.setdefault(n["leaf"], [0, 0, 0])
        per_leaf[n["leaf"]][0] += n["used_gpus"]
        per_leaf[n["leaf"]][1] += n["gpus"]
        per_leaf[n["leaf"]][2] += n["state"] == "up" and 0 < n["used_gpus"] < n["gpus"]
    assert page.locator("#map .node").count() == 0  # no node drawn one by one: one row per leaf
    rows = page.eval_on_selector_all(
        "table.leaves tr[data-leaf]", "els => els.map(e => [e.dataset.leaf, "
        "e.querySelector('[data-testid=leaf-used]').textContent, "
        "+e.querySelector('[data-testid=leaf-partial]').textContent])")
    assert {r[0]: (r[1], r[2]) for r in rows} == {leaf: (f"{u} / {g}", p) for leaf, (u, g, p) in per_leaf.items()}
    shot(page, artifacts, "leaves")
    page.select_option("#leaf-order", "partial")  # the most fragmented leaves first
    first = page.get_attribute("table.leaves tr[data-leaf]", "data-leaf")
    assert per_leaf[str(first)][2] == max(p for _, _, p in per_leaf.values())
    busiest = max(per_leaf, key=lambda leaf: per_leaf[leaf][0])
    page.click(f"table.leaves tr[data-leaf='{busiest}']")
    page.wait_for_selector(f"#map .leaf[data-leaf='{busiest}']", timeout=TIMEOUT_MS)
    shown = page.eval_on_selector_all("#map .node", "els => els.map(e => [e.dataset.node, +e.dataset.used])")
    assert sorted(map(tuple, shown)) == sorted((n["name"], n["used_gpus"]) for n in nodes if n["leaf"] == busiest)


def test_queue_with_reasons_filters_and_a_job_page(ctx: Any, srv: Server, artifacts: Path) -> None:
    page = open_page(ctx, srv, srv.admin_token, "queue")
    api = srv.admin.get("/v1/jobs", params={"state": "pending", "limit": 1000}).json()["items"]
    assert api
    now = srv.admin.get("/v1/clock").json()["now"]
    rows = page.eval_on_selector_all(
        "#jobs tbody tr[data-job]",
        "els => els.map(e => [+e.dataset.job, e.querySelector('[data-col=tenant]').textContent, "
        "e.querySelector('[data-col=reason]').textContent, e.querySelector('[data-col=gpus]').textContent, "
        "e.querySelector('[data-col=wait]').textContent])")
    # (in the scheduler's order: test_dashboard_trust.py)
    assert sorted(r[0] for r in rows) == sorted(j["id"] for j in api)
    by_id = {j["id"]: j for j in api}
    for job_id, tenant, reason, gpus, wait in rows:
        j = by_id[job_id]
        assert (tenant, gpus) == (j["tenant"], f"{j['workers']}×{j['gpus_per_worker']}")
        assert reason.endswith(j["reason"])  # (the head's says first how many wait behind it)
        assert wait  # the wait so far, from the service clock
    assert any(now - j["submit_time"] > 0 for j in api)
    # the predicted start: the digital twin's, from now, with its band (GET /v1/dashboard/queue)
    deadline = time.monotonic() + 60
    while not (preds := srv.admin.get("/v1/dashboard/predictions",
                                      params={"ids": ",".join(str(j["id"]) for j in api)}).json()["predictions"]):
        assert time.monotonic() < deadline, "no prediction within 60 s"
        time.sleep(0.5)
    page.reload()
    page.wait_for_selector("#view[data-ready='queue']", timeout=TIMEOUT_MS)
    shown = dict(page.eval_on_selector_all(
        "#jobs tbody tr[data-job]", "els => els.map(e => [e.dataset.job, [e.querySelector('[data-col=predicted]')"
                                    ".textContent, e.querySelector('[data-col=predicted]').dataset.p50]])"))
    for job_id, pred in preds.items():
        text, p50 = shown[job_id]
        if pred["p50"] is not None and pred["p50"] > now:
            assert float(p50) == pred["p50"] and text.startswith("in ~"), (text, pred)
    shot(page, artifacts, "queue")
    # filter by tenant: exactly that tenant's pending jobs
    who = api[0]["tenant"]
    page.select_option("#f-tenant", who)
    page.wait_for_function(f"location.hash.includes('tenant={who}') && "
                           "document.querySelector('#view').dataset.ready === 'queue'", timeout=TIMEOUT_MS)
    page.wait_for_selector("#f-tenant >> nth=0", timeout=TIMEOUT_MS)
    want = [j["id"] for j in srv.admin.get("/v1/jobs", params={"state": "pending", "tenant": who,
                                                                 "limit": 1000}).json()["items"]]
    page.wait_for_function(f"document.querySelectorAll('#jobs tbody tr[data-job]').length === {len(want)}",
                           timeout=TIMEOUT_MS)
    got = page.eval_on_selector_all("#jobs tbody tr[data-job]", "els => els.map(e => +e.dataset.job)")
    assert sorted(got) == sorted(want)
    # running jobs
    page.select_option("#f-state", "running")
    running = srv.admin.get("/v1/jobs", params={"state": "running", "limit": 100, "tenant": who}).json()["items"]
    page.wait_for_function(f"location.hash.includes('state=running') && document.querySelectorAll("
                           f"'#jobs tbody tr[data-job]').length === {len(running)}", timeout=TIMEOUT_MS)
    # click through to a job: its page shows the API's events and why it waits
    job = api[0]
    page.select_option("#f-state", "pending")
    page.wait_for_selector(f"#jobs a[href='#/job/{job['id']}']", timeout=TIMEOUT_MS)
    page.click(f"#jobs a[href='#/job/{job['id']}']")
    page.wait_for_selector("#view[data-ready='job']", timeout=TIMEOUT_MS)
    detail = srv.admin.get(f"/v1/jobs/{job['id']}").json()
    assert page.text_content("[data-testid='job-title']").startswith(f"Job {job['id']}")
    assert page.locator("#events tbody tr").count() == len(detail["events"]) > 0
    assert detail["why"]["reason"] in (page.text_content("[data-testid='why']") or "")
    # the simulated executor keeps no output: the page says so (a Ray service shows the worker's text)
    logs = srv.admin.get(f"/v1/jobs/{job['id']}/logs")
    kept = logs.status_code == 200 and logs.json()["kept"] and logs.json()["size"] > 0
    assert page.text_content("[data-testid='logs']") == (logs.json()["text"] if kept else "no logs")
    shot(page, artifacts, "job")


def test_a_gpu_cell_leads_to_its_job(ctx: Any, srv: Server) -> None:
    page = open_page(ctx, srv, srv.admin_token, "cluster")
    cell = page.locator("#map .cell[data-job]").first
    job_id = int(cell.get_attribute("data-job") or "0")
    cell.hover()
    assert f"job {job_id}" in (page.text_content("#tip") or "")
    cell.click()
    page.wait_for_selector("#view[data-ready='job']", timeout=TIMEOUT_MS)
    detail = srv.admin.get(f"/v1/jobs/{job_id}").json()
    assert detail["state"] == "running"
    assert page.text_content("[data-field='nodes']") == ", ".join(detail["placement"])


def test_tenants_page_shows_quota_use_and_demand(ctx: Any, srv: Server, artifacts: Path) -> None:
    cl = srv.admin.get("/v1/cluster").json()["tenants"]
    # quotas (applied from the next cycle; the manual clock does not move here): the busiest tenant
    # borrows above its guarantee, an idle one lends what it does not use
    busy = max(cl, key=lambda t: (cl[t]["running_gpus"], t))
    idle = min(cl, key=lambda t: (cl[t]["running_gpus"], t))
    assert cl[busy]["running_gpus"] >= 4 and cl[idle]["running_gpus"] == 0
    quota = {busy: cl[busy]["running_gpus"] - 4, idle: 10}
    for t, g in quota.items():
        assert srv.admin.patch(f"/v1/tenants/{t}", json={"guaranteed_gpus": g, "max_gpus": 100}).status_code == 200
    page = open_page(ctx, srv, srv.admin_token, "tenants")
    cl = srv.admin.get("/v1/cluster").json()["tenants"]
    borrowed = {t: max(0, u["running_gpus"] - (u["guaranteed_gpus"] or 0)) for t, u in cl.items()}
    idle_guarantee = {t: max(0, g - cl[t]["running_gpus"]) for t, g in quota.items()}
    share = min(1.0, sum(borrowed.values()) / sum(idle_guarantee.values()))
    table = {r[0]: r[1:] for r in page.eval_on_selector_all(
        "#tenants tbody tr", "els => els.map(e => [e.dataset.tenant, ...['guaranteed', 'max', 'borrowed', 'lent']"
                             ".map(c => e.querySelector(`[data-col=${c}]`).textContent)])")}
    for t in cl:
        want = ["", "", "", ""] if t not in quota else [
            str(quota[t]), "100", str(borrowed[t]), str(int(idle_guarantee.get(t, 0) * share))]
        assert table[t] == want, t
    rows = page.eval_on_selector_all(
        "#tenants tbody tr", "els => els.map(e => [e.dataset.tenant, +e.querySelector('[data-col=used]').textContent, "
        "+e.querySelector('[data-col=pending-jobs]').textContent, "
        "+e.querySelector('[data-col=pending-gpus]').textContent])")
    assert {r[0] for r in rows} == set(cl)
    pending = srv.admin.get("/v1/jobs", params={"state": "pending", "limit": 1000}).json()["items"]
    for name, used, waiting, asked in rows:
        assert (used, waiting) == (cl[name]["running_gpus"], cl[name]["pending_jobs"]), name
        assert asked == sum(j["workers"] * j["gpus_per_worker"] for j in pending if j["tenant"] == name), name
    shot(page, artifacts, "tenants")


def test_charts_update_live_from_server_sent_events(ctx: Any, srv: Server, artifacts: Path) -> None:
    page = open_page(ctx, srv, srv.admin_token, "charts")
    series = srv.admin.get("/v1/dashboard/series").json()
    assert series["samples"]
    page.wait_for_selector("#chart-ratios .uplot", timeout=TIMEOUT_MS)
    assert int((page.text_content("[data-testid='samples']") or "0").split()[0]) == len(series["samples"])
    before = srv.admin.get("/v1/cluster").json()
    # time moves on: jobs end and others start; the page hears it over SSE and shows the new values
    srv.end += 6 * 3600  # type: ignore[attr-defined]
    srv.advance(srv.end)  # type: ignore[attr-defined]
    after = srv.admin.get("/v1/cluster").json()
    assert after["now"] > before["now"]
    page.wait_for_function(f"document.querySelector(\"[data-testid='last-t']\") && "
                           f"+document.querySelector(\"[data-testid='last-t']\").dataset.value === {after['now']}",
                           timeout=TIMEOUT_MS)
    for key in ("gar", "sor", "queue_len"):
        assert close(value(page, f"last-{key}"), after[key]), key
    shot(page, artifacts, "charts")


def test_a_tenant_sees_its_own_jobs_and_only_totals_of_others(ctx: Any, srv: Server, tenant: tuple[str, str],
                                                              artifacts: Path) -> None:
    name, token = tenant
    page = open_page(ctx, srv, token, "cluster")
    assert page.text_content("[data-testid='who']") == f"tenant {name}"
    cells = page.eval_on_selector_all("#map .cell[data-tenant]",
                                      "els => els.map(e => [e.dataset.tenant, e.dataset.job || null])")
    assert {t for t, _ in cells} <= {name, "others"}
    assert all(j is None for t, j in cells if t == "others")  # no job id of another tenant
    assert all(j is not None for t, j in cells if t == name)
    cl = srv.admin.get("/v1/cluster").json()
    others_gpus = sum(u["running_gpus"] for t, u in cl["tenants"].items() if t != name)
    assert sum(1 for t, _ in cells if t == "others") == others_gpus
    shot(page, artifacts, "tenant-cluster")
    page.goto(f"{srv.url}/#/queue?state=active")
    page.wait_for_selector("#view[data-ready='queue']", timeout=TIMEOUT_MS)
    tenants = page.eval_on_selector_all("#jobs tbody tr[data-job] [data-col=tenant]",
                                        "els => els.map(e => e.textContent)")
    assert tenants and set(tenants) == {name}
    assert page.locator("#f-tenant").count() == 0
    page.goto(f"{srv.url}/#/tenants")
    page.wait_for_selector("#view[data-ready='tenants']", timeout=TIMEOUT_MS)
    rows = page.eval_on_selector_all("#tenants tbody tr", "els => els.map(e => [e.dataset.tenant, "
                                     "+e.querySelector('[data-col=used]').textContent])")
    assert rows == [[name, cl["tenants"][name]["running_gpus"]], ["others", others_gpus]]
    # another tenant's job is not found
    other = next(j for j in srv.admin.get("/v1/jobs", params={"limit": 1000}).json()["items"] if j["tenant"] != name)
    page.goto(f"{srv.url}/#/job/{other['id']}")
    page.wait_for_selector("#view[data-ready='error:job']", state="attached", timeout=TIMEOUT_MS)
    assert "404" in (page.text_content("#error") or "")
    shot(page, artifacts, "tenant-queue")


def test_the_dashboard_routes_take_the_apis_tokens_and_scope(srv: Server, tenant: tuple[str, str]) -> None:
    name, token = tenant
    me = srv.client(token)
    running = srv.admin.get("/v1/jobs", params={"state": "running", "limit": 1000}).json()["items"]
    pending = srv.admin.get("/v1/jobs", params={"state": "pending", "limit": 1000}).json()["items"]
    theirs = [j["id"] for j in running + pending if j["tenant"] != name]
    ids = ",".join(str(j["id"]) for j in pending[:50])
    for path in ("/v1/dashboard/whoami", "/v1/dashboard/map", "/v1/dashboard/map?leaf=leaf-0", "/v1/dashboard/tenants",
                 "/v1/dashboard/series", f"/v1/dashboard/predictions?ids={ids}", "/v1/dashboard/stream",
                 "/v1/dashboard/queue"):
        assert srv.client(None).get(path).status_code == 401, path
        assert srv.client("kant_wrong").get(path).status_code == 401, path
    assert me.get("/v1/dashboard/whoami").json() == {"role": "tenant", "tenant": name}
    nodes = me.get("/v1/dashboard/map?max_nodes=100").json()["node_rows"]
    seen = {j["id"] for n in nodes for j in n["jobs"]}
    assert seen and None in seen and not seen & set(theirs)
    leaves = me.get("/v1/dashboard/map?max_nodes=0").json()
    assert leaves["node_rows"] == [] and all(set(leaf["tenants"]) <= {name, "others"} for leaf in leaves["leaves"])
    assert me.get("/v1/dashboard/map?leaf=nowhere").status_code == 404
    assert me.get("/v1/dashboard/predictions?ids=1,x").status_code == 422
    # the queue: a tenant sees its own waiting jobs, with their places among all; another's head has no id
    q = me.get("/v1/dashboard/queue").json()
    everyone = srv.admin.get("/v1/dashboard/queue", params={"limit": 500}).json()
    assert {r["tenant"] for r in q["rows"]} <= {name} and q["queue_len"] == everyone["queue_len"]
    assert [(r["id"], r["position"]) for r in q["rows"]] == [
        (r["id"], r["position"]) for r in everyone["rows"] if r["tenant"] == name]
    assert q["head"] in (None, *(r["id"] for r in q["rows"]))
    assert me.get("/v1/dashboard/queue?limit=0").status_code == 422
    with me.stream("GET", "/v1/dashboard/stream", timeout=10) as stream:
        first = next(line for line in stream.iter_lines() if line.startswith("data:"))
    assert json.loads(first[5:])["samples"]


def test_a_wrong_token_is_refused(ctx: Any, srv: Server) -> None:
    page = new_page(ctx)
    page.goto(f"{srv.url}/#/cluster")
    page.fill("#token", "kant_not_a_token")
    page.click("#login-form button[type=submit]")
    page.wait_for_function("document.querySelector('#login-error').textContent.length > 0", timeout=TIMEOUT_MS)
    assert "not valid" in (page.text_content("#login-error") or "")
    assert page.locator("#nav").is_hidden()


def _results(tmp: Path, jobs: JobTable) -> tuple[Path, Path, dict[str, Any]]:
    """A result.json written by ``kant simulate``'s writer and a comparison.json as ``kant compare``
    writes it (one :func:`~kant.metrics.report.report_dict` per policy) of a Philly slice."""
    from kant.config import load_policy
    from kant.metrics.report import report_dict, write_json
    from kant.metrics.summary import summarize
    from kant.sim import Simulator
    from kant.traces.registry import load_nodes

    runs = {}
    for policy in ("kant", "volcano-binpack"):
        result = Simulator(load_nodes(CLUSTER), jobs, load_policy(policy)).run()
        runs[policy] = (result, summarize(result))
    single = write_json(tmp / "result.json", *next(iter(runs.values())))
    data = {label: report_dict(r, m) for label, (r, m) in runs.items()}
    comparison = tmp / "comparison.json"
    comparison.write_text(json.dumps(data, indent=2, sort_keys=True, allow_nan=False))
    return single, comparison, json.loads(comparison.read_text())


def test_simulation_results_and_a_side_by_side(ctx: Any, srv: Server, tmp_path: Path, artifacts: Path,
                                               philly_jobs: JobTable) -> None:
    single, comparison, data = _results(tmp_path, philly_jobs.sorted_by_submit().take(np.arange(FIRST, FIRST + SLICE)))
    page = new_page(ctx)
    page.goto(f"{srv.url}/#/results")  # no token needed: the file is read in the browser
    page.wait_for_selector("#view[data-ready='results']", timeout=TIMEOUT_MS)
    page.set_input_files("#results-file", str(single))
    page.wait_for_selector("#result-table", timeout=TIMEOUT_MS)
    want = json.loads(single.read_text())["metrics"]
    assert close(page.get_attribute("tr[data-key='gar.window'] td[data-value]", "data-value") or "",
                 want["gar"]["window"])
    page.set_input_files("#results-file", str(comparison))
    page.wait_for_function("document.querySelectorAll('#result-table thead th').length === 3", timeout=TIMEOUT_MS)
    for key in ("gar.window", "sor", "jwtd.overall.p50", "counts.finished"):
        got = page.eval_on_selector_all(f"tr[data-key='{key}'] td[data-value]", "els => els.map(e => e.dataset.value)")
        vals = []
        for run in data.values():
            v: Any = run["metrics"]
            for part in key.split("."):
                v = v[part]
            vals.append(v)
        assert len(got) == 2 and all(close(g, v) for g, v in zip(got, vals, strict=True)), key
    # the rows are kant compare's (kant.metrics.report.METRIC_ROWS, written into the page as JSON)
    from kant.metrics.report import METRIC_ROWS

    rows = page.eval_on_selector_all("#result-table tr[data-key]",
                                     "els => els.map(e => [e.querySelector('td').textContent, e.dataset.key])")
    assert rows == [[label, key] for label, key, _, _ in METRIC_ROWS]
    assert page.evaluate("JSON.parse(document.getElementById('metric-rows').textContent)") == [
        {"label": label, "key": key, "format": kind, "better": better} for label, key, kind, better in METRIC_ROWS]
    page.wait_for_selector("#chart-daily .uplot", timeout=TIMEOUT_MS)
    shot(page, artifacts, "results")
    page.set_input_files("#results-file", files=[{"name": "x.json", "mimeType": "application/json",
                                                  "buffer": b'{"a": 1}'}])
    page.wait_for_function("document.querySelector('#results-error').textContent.length > 0", timeout=TIMEOUT_MS)
    assert "x.json: not a kant result.json" in (page.text_content("#results-error") or "")
