"""``kant serve --demo unified`` as a user starts it (a real process on 127.0.0.1, simulated executor):
within a bounded time its service has ready replicas (real example model servers), requests are
answered through the route (the demo's own traffic), and training jobs run; SIGTERM stops the
replicas' processes and the traffic. Every wait polls with a deadline (no timed asserts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx

from service.serve_proc import Server, free_port
from service.serve_proc import eventually as poll

T = TypeVar("T")


def eventually(fn: Callable[[], T | None], what: str, srv: Server, timeout: float = 120.0) -> T:
    return poll(fn, what, timeout, every=0.2, detail=lambda: srv.log_text()[-3000:])


def children(pid: int) -> dict[int, str]:
    """The processes whose parent is ``pid``, with their command lines (Linux /proc)."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                out[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_demo_unified(tmp_path: Path) -> None:
    port = free_port()
    token = "kant_test_demo_unified_0123456789"
    args = [sys.executable, "-m", "kant.cli.main", "serve", "--demo", "unified", "--db",
            f"sqlite:///{tmp_path / 'kant.db'}", "--port", str(port), "--no-predict", "--log-level", "info"]
    log = tmp_path / "serve.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(args, cwd=tmp_path, env={**os.environ, "KANT_ADMIN_TOKEN": token,
                                                         "PYTHONUNBUFFERED": "1"}, stdout=out, stderr=subprocess.STDOUT)
    srv = Server(proc, port, token, log, args)
    try:
        srv.wait_ready(120)
        api = srv.admin

        def chat() -> dict[str, object] | None:
            rows = [x for x in api.get("/v1/dashboard/services").json()["services"] if x["name"] == "chat"]
            return rows[0] if rows and rows[0]["ready_replicas"] >= 1 else None

        row = eventually(chat, "the demo's service has a ready replica", srv)
        assert row["tenant"] == "inference" and row["state"] == "active"
        sid = row["id"]

        def answered() -> dict[str, object] | None:
            stats = api.get(f"/v1/services/{sid}/stats").json()
            return stats if stats["codes"].get("200", 0) >= 5 else None

        stats = eventually(answered, "requests answered 200 through the route", srv)
        assert stats["total_requests"] >= 5

        def training() -> list[dict[str, object]]:
            items = api.get("/v1/jobs", params={"state": "running", "limit": 500}).json()["items"]
            return [j for j in items if j["kind"] == "training"]

        eventually(training, "training jobs running", srv)
        cluster = api.get("/v1/cluster").json()
        assert cluster["policy"] == "unified"
        replicas = {p: c for p, c in children(proc.pid).items() if "kant.model_server" in c}
        assert replicas, children(proc.pid)
        # a user's request through the route, answered by a replica
        r = api.post(f"/v1/services/{sid}/serve/v1/completions", json={"max_tokens": 4})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4, r.text
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        srv.admin.close()
    # (uvicorn raises SIGTERM again after its graceful shutdown: the process ends by the signal)
    assert code in (0, -signal.SIGTERM) and "Application shutdown complete" in srv.log_text(), srv.log_text()[-3000:]
    # the replicas were stopped with the service (they were its children: nothing else stops them)
    deadline = time.monotonic() + 30
    while any(alive(p) for p in replicas) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in replicas if alive(p)], "replica processes outlived kant serve"
    assert "azure-conv.csv.gz at x1.5" in srv.log_text()  # the bundled trace: no shared traces folder needed
    try:
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2.0)
        raise AssertionError("kant serve still answers")
    except httpx.HTTPError:
        pass


def test_demo_unified_with_port_0_is_one_line(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "kant.cli.main", "serve", "--demo", "unified", "--port", "0", "--db",
                        f"sqlite:///{tmp_path / 'kant.db'}"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip() == ("error: --demo unified sends its traffic to --port: give one "
                                                      "other than 0"), r.stderr
