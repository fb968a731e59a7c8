"""The screenshots of docs/dashboard.md: runs ``kant serve --demo philly --speed SPEED`` as the docs say
(no ``--cluster``: the default, ``philly-80``, as ``kant simulate``'s), lets the replay run for
``--seconds``, then opens every page in Debian's Chromium (Playwright) at 1440x900 and the queue at
390x844 (a phone) and writes them to ``docs/img/``. Prints the cluster's size and the clock it shot at.

    PYTHONPATH=src python tools/dashboard-screenshots.py [--seconds 90] [--speed 3600] [--out docs/img]
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

CHROMIUM = os.environ.get("KANT_CHROMIUM", "/usr/bin/chromium")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=90.0, help="how long the demo replays before the shots")
    ap.add_argument("--speed", type=float, default=3600.0)
    ap.add_argument("--out", type=Path, default=Path("docs/img"))
    a = ap.parse_args()
    token = f"kant_{secrets.token_hex(16)}"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "kant.cli.main", "serve", "--demo", "philly", "--speed", str(a.speed),
               "--db", f"sqlite:///{tmp}/kant.db", "--port", str(port), "--log-level", "warning"]
        proc = subprocess.Popen(cmd, cwd=tmp, env={**os.environ, "KANT_ADMIN_TOKEN": token},
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
            for _ in range(600):
                try:
                    if api.get("/v1/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
            time.sleep(a.seconds)
            nodes = api.get("/v1/nodes").json()
            print(f"kant serve --demo philly: {len(nodes)} nodes, {sum(n['gpus'] for n in nodes)} GPUs")
            a.out.mkdir(parents=True, exist_ok=True)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
                shots = [("cluster", "dashboard-cluster", 1440, 900), ("queue", "dashboard-queue", 1440, 900),
                         ("tenants", "dashboard-tenants", 1440, 900), ("charts", "dashboard-charts", 1440, 900),
                         ("queue", "dashboard-phone-queue", 390, 844)]
                for route, name, w, h in shots:
                    ctx = browser.new_context(viewport={"width": w, "height": h})
                    page = ctx.new_page()
                    page.goto(f"{url}/#/{route}")
                    page.fill("#token", token)
                    page.click("#login-form button[type=submit]")
                    page.wait_for_selector(f"#view[data-ready='{route}']", timeout=30_000)
                    if route == "charts":
                        page.wait_for_selector("#chart-wait .uplot", timeout=30_000)
                    page.wait_for_timeout(300)
                    page.screenshot(path=str(a.out / f"{name}.png"), full_page=False)
                    ctx.close()
                browser.close()
            clock = api.get("/v1/clock").json()
            print(f"shot at service time {clock['now']:.0f} ({clock['kind']} clock) into {a.out}")
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
