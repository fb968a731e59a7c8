"""The dashboard's cost on a large cluster: 10,000 nodes (80,000 GPUs) with ~20,000 running and
10,000 pending jobs.

    python bench/bench_dashboard.py                    # 10,000 nodes, 10,000 pending jobs
    python bench/bench_dashboard.py --nodes 2000 --pending 2000 --repeat 3

A real ``kant serve`` (manual clock, simulated executor, SQLite in a temporary folder, no
predictions; pinned to one core as in bench_serve.py) gets running jobs of 1, 2, 4 and 8 GPUs until
about 97% of the GPUs are held (partly used nodes everywhere), then ``--pending`` gangs of 8 x 8 GPUs
that cannot start. Printed:

* each JSON route the pages read: the answer's size and the wall time of a request on loopback
  (median of ``--repeat``; "cold" for the map and tenants is the first request after a job was
  cancelled, when the loop's pass over the cluster is taken again, "warm" is from the cache; the
  service's ``Server-Timing`` splits a cold request into "loop": waiting for the loop's thread, which
  first finishes the turn the cancel started, and copying there, and "build": making the layout off
  the loop's thread, each with the CPU time it took, which a busy machine inflates less than wall time);
* in headless Chromium (Playwright, /usr/bin/chromium): the time from navigation to each page
  rendered (cluster by leaf, one leaf drilled into, queue, tenants, charts), the DOM size, and the
  JS heap; and the update cost: from a running job's cancel to the open cluster page re-rendered (the
  stream looks for changes every 0.5 s; the page refreshes at once, then at most once a second).

Figures are printed, never asserted; taken on a shared machine they are noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serve import Served

CHROMIUM = "/usr/bin/chromium"


def fill(srv: Served, client: httpx.Client, nodes: int, pending: int) -> dict[str, Any]:
    tenants = [f"team-{k}" for k in range(12)]
    for t in tenants:
        client.post("/v1/tenants", json={"name": t}).raise_for_status()
    target = int(nodes * 8 * 0.9)
    sizes = (3, 5, 6, 7, 1, 2, 4, 8, 6, 3)  # sizes that leave holes: partly used nodes
    jobs: list[dict[str, Any]] = []
    held = 0
    k = 0
    while held < target:
        g = min(sizes[k % len(sizes)], target - held)
        jobs.append({"tenant": tenants[k % len(tenants)], "gpus_per_worker": g, "duration_s": 1e7, "estimate_s": 1e7,
                     "name": f"run-{k}"})
        held += g
        k += 1
    jobs += [{"tenant": tenants[(k + i) % len(tenants)], "workers": 8, "gpus_per_worker": 8, "duration_s": 3600.0,
              "estimate_s": 3600.0, "name": f"wait-{i}"} for i in range(pending)]
    t0 = time.perf_counter()
    for i in range(0, len(jobs), 1000):
        client.post("/v1/jobs/batch", json={"jobs": jobs[i:i + 1000]}).raise_for_status()
    client.post("/v1/clock", json={"to": 1.0}).raise_for_status()
    cl = client.get("/v1/cluster").json()
    print(f"filled in {time.perf_counter() - t0:.1f} s: {len(jobs):,} jobs submitted; {cl['running_jobs']:,} running, "
          f"{cl['queue_len']:,} pending, GAR {cl['gar']:.3f}, GFR nodes {cl['gfr_nodes']:.3f}")
    return cl


def timed(client: httpx.Client, path: str, parts: list[dict[str, float]] | None = None) -> tuple[float, int]:
    t0 = time.perf_counter()
    r = client.get(path)
    dt = time.perf_counter() - t0
    r.raise_for_status()
    if parts is not None:  # the service's Server-Timing: loop (wait for the loop's turn and copy), build
        for item in r.headers.get("server-timing", "").split(","):
            name, _, rest = item.strip().partition(";")
            for attr in rest.split(";"):
                if attr.startswith("dur="):
                    parts.append({name: float(attr[4:])})
    return dt, len(r.content)


def routes(client: httpx.Client, repeat: int) -> None:
    leaves = client.get("/v1/dashboard/map").json()["leaves"]
    leaf = leaves[0]["leaf"]
    print(f"the map: {len(leaves)} leaves")
    page = client.get("/v1/jobs", params={"state": "pending", "limit": 100}).json()["items"]
    victims = iter(client.get("/v1/jobs", params={"state": "running", "limit": 1000, "order": "desc"}).json()["items"])
    ids = ",".join(str(j["id"]) for j in page)
    paths = [
        ("/v1/cluster", False),
        ("/v1/dashboard/map", True),
        (f"/v1/dashboard/map?leaf={leaf}", True),
        ("/v1/dashboard/tenants", True),
        ("/v1/dashboard/queue", True),
        ("/v1/dashboard/queue?limit=500", True),
        ("/v1/dashboard/series", False),
        ("/v1/jobs?state=pending&limit=100", False),
        (f"/v1/dashboard/predictions?ids={ids}", False),
        ("/v1/nodes", False),
    ]
    print(f"{'route':<44} {'bytes':>10} {'cold ms':>9} {'warm ms':>9}   cold: loop (its CPU) / build (its CPU) ms")
    for path, cached in paths:
        cold = []
        warm = []
        parts: list[dict[str, float]] = []
        size = 0
        for _ in range(repeat):
            if cached:  # a job ends: the next request takes the pass over the cluster again
                client.post(f"/v1/jobs/{next(victims)['id']}/cancel").raise_for_status()
                dt, size = timed(client, path, parts)
                cold.append(dt)
            dt, size = timed(client, path)
            warm.append(dt)
        shown = path if len(path) < 44 else path[:40] + "..."
        c = f"{1000 * statistics.median(cold):9.1f}" if cold else f"{'':>9}"
        split = ""
        if parts and all(any(k in d for d in parts) for k in ("loop", "copy-cpu", "build", "build-cpu")):
            med = {k: statistics.median(d[k] for d in parts if k in d) for k in ("loop", "copy-cpu", "build",
                                                                                "build-cpu")}
            split = f"   {med['loop']:.0f} ({med['copy-cpu']:.0f}) / {med['build']:.0f} ({med['build-cpu']:.0f})"
        elif parts and any("loop-cpu" in d for d in parts):  # (the queue: read on the loop's thread, no build)
            split = (f"   {statistics.median(d['loop'] for d in parts if 'loop' in d):.0f} "
                     f"({statistics.median(d['loop-cpu'] for d in parts if 'loop-cpu' in d):.0f}) / -")
        print(f"{shown:<44} {size:>10,} {c} {1000 * statistics.median(warm):9.1f}{split}")


def browser(srv: Served, client: httpx.Client, repeat: int, shots: Path | None) -> None:
    from playwright.sync_api import sync_playwright

    leaf = client.get("/v1/dashboard/map").json()["leaves"][0]["leaf"]
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        ctx = b.new_context(viewport={"width": 1400, "height": 900})
        ctx.add_init_script(f"sessionStorage.setItem('kant-token', {srv.token!r})")
        page = ctx.new_page()
        print(f"{'page':<28} {'load to render ms':>18} {'DOM elements':>13} {'JS heap MiB':>12}")
        for name, route in [("cluster (by leaf)", "cluster"), ("one leaf", f"cluster/leaf/{leaf}"),
                            ("queue (100 rows)", "queue"), ("tenants", "tenants"), ("charts", "charts")]:
            times = []
            for _ in range(repeat):
                page.goto("about:blank")
                t0 = time.perf_counter()
                page.goto(f"{srv.url}/#/{route}")
                page.wait_for_selector(f"#view[data-ready='{route.split('/')[0]}']", timeout=120_000)
                times.append(time.perf_counter() - t0)
            if shots is not None and route == "cluster":
                page.screenshot(path=str(shots / "dashboard-10k-leaves.png"), full_page=False)
            dom = page.evaluate("document.getElementsByTagName('*').length")
            heap = page.evaluate("performance.memory ? performance.memory.usedJSHeapSize : 0") / 2**20
            print(f"{name:<28} {1000 * statistics.median(times):18.0f} {dom:>13,} {heap:12.1f}")
        # update cost: a running job is cancelled; until the open cluster page has rendered the new state
        page.goto(f"{srv.url}/#/cluster")
        page.wait_for_selector("#view[data-ready='cluster']", timeout=120_000)
        running = client.get("/v1/jobs", params={"state": "running", "limit": repeat}).json()["items"]  # oldest
        updates = []
        in_page = []
        for job in running:
            before = int(page.get_attribute("#view", "data-renders") or "0")
            t0 = time.perf_counter()
            client.post(f"/v1/jobs/{job['id']}/cancel").raise_for_status()
            page.wait_for_function(f"+document.querySelector('#view').dataset.renders > {before}", timeout=120_000)
            updates.append(time.perf_counter() - t0)
            in_page.append(float(page.get_attribute("#view", "data-update-ms") or "nan"))
        print(f"update: a job cancelled -> cluster page re-rendered: median {1000 * statistics.median(updates):.0f} "
              "ms, "
              f"of which the page's refresh (the stream's 'state' to rendered: /v1/cluster, the map, drawing) "
              f"{statistics.median(in_page):.0f} ms")
        b.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--screenshots", type=Path, default=None, help="write the cluster page's screenshot here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cluster = f"{args.nodes}x8:H100,leaf=32,spine=8"
        srv = Served(f"sqlite:///{Path(tmp) / 'kant.db'}", Path(tmp), cluster=cluster,
                     extra=("--clock", "manual", "--clock-start", "0", "--no-predict"))
        try:
            load = os.getloadavg()
            print(f"kant serve on {cluster}: ready in {srv.ready_s:.1f} s; {os.cpu_count()} CPUs, load average "
                  f"{load[0]:.1f} (figures on a busy machine are slower)")
            with httpx.Client(base_url=srv.url, headers=srv.headers, timeout=600) as client:
                fill(srv, client, args.nodes, args.pending)
                routes(client, args.repeat)
                if not args.no_browser:
                    browser(srv, client, args.repeat, args.screenshots)
                print(f"service resident memory: {srv.rss_mib():.0f} MiB; load average now {os.getloadavg()[0]:.1f}")
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
