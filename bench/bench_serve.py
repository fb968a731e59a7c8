"""The live service's speed: sustained submits, submit-to-start latency, restart time, memory.

    python bench/bench_serve.py                         # every figure on SQLite and PostgreSQL
    python bench/bench_serve.py --db sqlite --only submit --seconds 20
    python bench/bench_serve.py --pg postgresql://postgres@127.0.0.1:5432/test

Each figure runs a real ``kant serve`` process on 127.0.0.1 (wall clock, simulated executor), pinned
to one core (``taskset -c 0`` when available); the load generator runs in this process, pinned to
the other cores. Figures are printed, never asserted.

* **submit**: ``--clients`` (32) concurrent HTTP connections submit 1-GPU jobs (each a new job, no
  batch endpoint) for ``--seconds`` after a warm-up; the rate of acknowledged submits (201: committed
  to the database). The load comes from ``wrk`` (Debian package ``wrk``) when it is installed: a
  Python client cannot load one core of server (it saturates its own core near 200 requests/s; that
  fallback is used, and labelled, without wrk). The cluster (10,000 nodes x 8 GPUs) starts the jobs
  as they come.
* **latency**: on an idle cluster, one client submits ``--latency-jobs`` jobs one at a time, 20 ms
  apart; latency = the wall time the service recorded the job's start (its ``started`` event) minus
  the wall time the client sent the submit. P50 / P99.
* **restart**: a database holding ``--restart-jobs`` (100,000) pending jobs, started
  ``--restart-repeat`` (3) times: wall time from starting the process until ``/readyz`` answers 200
  (migrations, loading, rebuilding the queue, restoring), and the CPU time the process used until then.
* **memory**: resident memory of the ready service (``VmRSS``) over a database with ``--history``
  (1,000,000) finished jobs, next to an empty one: finished jobs are not loaded.

The SQLite database is a file in a temporary folder on disk (``synchronous=FULL``: every commit
waits for the disk); PostgreSQL is a fresh database on the given server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
CLUSTER = "10000x8:H100"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pin(cpus: str) -> list[str]:
    return ["taskset", "-c", cpus] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else []


class Served:
    def __init__(self, db_url: str, workdir: Path, cluster: str = CLUSTER, extra: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = f"kant_bench_{secrets.token_hex(16)}"
        self.log = workdir / f"serve-{self.port}.log"
        args = [*pin("0"), sys.executable, "-m", "kant.cli.main", "serve", "--db", db_url, "--port", str(self.port),
                "--cluster", cluster, "--log-level", "warning", *extra]
        env = {**os.environ, "KANT_ADMIN_TOKEN": self.token}
        self.t0 = time.perf_counter()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(args, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.ready_s = self._wait()
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def _wait(self, timeout: float = 600.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"kant serve exited:\n{self.log.read_text()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return time.perf_counter() - self.t0
            time.sleep(0.02)
        raise SystemExit(f"kant serve not ready:\n{self.log.read_text()}")

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def cpu_s(self) -> float:
        """CPU seconds (user and system, every thread) the process used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@contextlib.contextmanager
def database(kind: str, pg_admin: str, workdir: Path) -> Iterator[str]:
    if kind == "sqlite":
        folder = Path(tempfile.mkdtemp(dir=workdir))
        yield f"sqlite:///{folder / 'kant.db'}"
        return
    import psycopg
    from sqlalchemy.engine import make_url

    admin = make_url(pg_admin).set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"kant_bench_{secrets.token_hex(4)}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(pg_admin).set(drivername="postgresql+psycopg", database=name).render_as_string(
            hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def tenant(s: Served, name: str = "bench") -> None:
    r = httpx.post(f"{s.url}/v1/tenants", json={"name": name}, headers=s.headers)
    if r.status_code not in (201, 409):
        raise SystemExit(r.text)


# --- figures ---------------------------------------------------------------------------------------
async def _submit_load(s: Served, clients: int, seconds: float, warmup: float) -> dict[str, Any]:
    done: list[float] = []
    errors: dict[int, int] = {}
    stop_at = time.perf_counter() + warmup + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=s.url, headers=s.headers, limits=limits, timeout=30) as client:
        async def one_client(k: int) -> None:
            body = {"tenant": "bench", "gpus_per_worker": 1, "duration_s": 3600.0, "estimate_s": 3600.0}
            while time.perf_counter() < stop_at:
                r = await client.post("/v1/jobs", json=body)
                if r.status_code == 201:
                    done.append(time.perf_counter())
                else:
                    errors[r.status_code] = errors.get(r.status_code, 0) + 1

        t0 = time.perf_counter()
        await asyncio.gather(*(one_client(k) for k in range(clients)))
    lo = t0 + warmup
    counted = [t for t in done if t >= lo]
    span = max(counted) - lo if counted else 0.0
    return {"accepted": len(done), "rate_per_s": len(counted) / span if span > 0 else 0.0, "errors": errors}


def _wrk_load(s: Served, clients: int, seconds: float, warmup: float, work: Path) -> dict[str, Any]:
    """The submit load from ``wrk`` (one thread, ``clients`` connections), which a Python client on one
    core cannot match; the rate is the 2xx responses per second after a warm-up run."""
    script = work / "submit.lua"
    body = json.dumps({"tenant": "bench", "gpus_per_worker": 1, "duration_s": 3600.0, "estimate_s": 3600.0})
    script.write_text(f"wrk.method = 'POST'\nwrk.body = '{body}'\n"
                      "wrk.headers['Content-Type'] = 'application/json'\n"
                      f"wrk.headers['Authorization'] = 'Bearer {s.token}'\n"
                      "done = function(summary, latency, requests)\n"
                      "  io.write(string.format('JSON {\"requests\": %d, \"non2xx\": %d, \"p50_ms\": %.2f, "
                      "\"p99_ms\": %.2f}\\n', summary.requests, summary.errors.status, "
                      "latency:percentile(50) / 1000, latency:percentile(99) / 1000))\nend\n")
    cmd = [*pin(",".join(str(c) for c in range(1, os.cpu_count() or 2))), "wrk", "-t1", f"-c{clients}",
           "-s", str(script), f"{s.url}/v1/jobs"]
    subprocess.run([*cmd[:-1], f"-d{max(int(warmup), 1)}s", cmd[-1]], capture_output=True, check=True)
    run = subprocess.run([*cmd[:-1], f"-d{int(seconds)}s", cmd[-1]], capture_output=True, text=True, check=True)
    line = next(x for x in run.stdout.splitlines() if x.startswith("JSON "))
    stats = json.loads(line[5:])
    ok = stats["requests"] - stats["non2xx"]
    return {"client": "wrk", "accepted": ok, "rate_per_s": round(ok / int(seconds), 1), "non2xx": stats["non2xx"],
            "latency_p50_ms": stats["p50_ms"], "latency_p99_ms": stats["p99_ms"]}


def fig_submit(kind: str, url: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    s = Served(url, work)
    try:
        tenant(s)
        if shutil.which("wrk"):
            out = _wrk_load(s, args.clients, args.seconds, args.warmup, work)
        else:  # a Python client saturates its own core near 200 requests/s: install wrk for the figure
            out = {"client": "python", **asyncio.run(_submit_load(s, args.clients, args.seconds, args.warmup))}
        c = httpx.get(f"{s.url}/v1/cluster", headers=s.headers).json()
        out.update(running=c["running_jobs"], queued=c["queue_len"], rss_mib=round(s.rss_mib(), 1))
        return out
    finally:
        s.stop()


def fig_latency(kind: str, url: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    s = Served(url, work, cluster="64x8:H100")
    try:
        tenant(s)
        sent: dict[int, float] = {}
        with httpx.Client(base_url=s.url, headers=s.headers, timeout=30) as client:
            for _ in range(args.latency_jobs):
                t = time.time()
                r = client.post("/v1/jobs", json={"tenant": "bench", "gpus_per_worker": 1, "duration_s": 0.01})
                sent[r.json()["id"]] = t
                time.sleep(0.02)
            time.sleep(0.5)
            lat = []
            for job_id, t in sent.items():
                events = client.get(f"/v1/jobs/{job_id}").json()["events"]
                start = next((e["wall"] for e in events if e["kind"] == "started"), None)
                if start is not None:
                    lat.append((start - t) * 1000)
        lat.sort()
        q = statistics.quantiles(lat, n=100, method="inclusive")
        return {"jobs": len(lat), "p50_ms": round(statistics.median(lat), 2), "p99_ms": round(q[98], 2),
                "max_ms": round(lat[-1], 2)}
    finally:
        s.stop()


def _fill(url: str, n: int, *, finished: bool) -> float:
    """``n`` jobs straight into the database (pending, or finished with start and end)."""
    sys.path.insert(0, str(HERE.parent / "src"))
    from kant.service.db.database import Database
    from kant.service.db.jobs import JobUpdate, NewJob

    db = Database(url)
    db.migrate()
    with contextlib.suppress(Exception):
        db.tenants.create("bench")
    t0 = time.perf_counter()
    batch = 5000
    for k in range(0, n, batch):
        m = min(batch, n - k)
        jobs = [NewJob(tenant="bench", user="u", name=f"j{k + i}", gpus_per_worker=1 + (k + i) % 8,
                       duration_s=3600.0) for i in range(m)]
        ids = db.jobs.insert(jobs, now_time=float(k), now_wall=time.time())
        if finished:
            db.apply([JobUpdate(i, state="finished", first_start_time=float(k), start_time=float(k),
                                end_time=float(k) + 3600.0, placement=["h100-0"], runs=1, exit_code=0)
                      for i, _ in ids], [])
    db.close()
    return time.perf_counter() - t0


def fig_restart(kind: str, url: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``--restart-repeat`` starts of the same database: the wall time to ready of each, and the CPU
    time the process spent until then (what a busy machine does not change; the wall time it does)."""
    fill_s = _fill(url, args.restart_jobs, finished=False)
    ready: list[float] = []
    cpu: list[float] = []
    c: dict[str, Any] = {}
    rss = 0.0
    for _ in range(args.restart_repeat):
        s = Served(url, work, cluster="1000x8:H100")
        try:
            ready.append(round(s.ready_s, 2))
            cpu.append(round(s.cpu_s(), 2))
            c = httpx.get(f"{s.url}/v1/cluster", headers=s.headers).json()
            rss = s.rss_mib()
        finally:
            s.stop()
    return {"jobs": args.restart_jobs, "fill_s": round(fill_s, 1), "ready_s": ready, "ready_max_s": max(ready),
            "cpu_s": cpu, "queued": c["queue_len"], "running": c["running_jobs"], "rss_mib": round(rss, 1)}


def fig_memory(kind: str, url: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    empty = Served(url, work, cluster="1000x8:H100")
    base = empty.rss_mib()
    empty.stop()
    fill_s = _fill(url, args.history, finished=True)
    s = Served(url, work, cluster="1000x8:H100")
    try:
        return {"finished_jobs": args.history, "fill_s": round(fill_s, 1), "rss_empty_mib": round(base, 1),
                "rss_with_history_mib": round(s.rss_mib(), 1), "ready_s": round(s.ready_s, 2)}
    finally:
        s.stop()


FIGURES = {"submit": fig_submit, "latency": fig_latency, "restart": fig_restart, "memory": fig_memory}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", choices=["sqlite", "postgresql"], action="append")
    ap.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    ap.add_argument("--only", choices=list(FIGURES), action="append")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--latency-jobs", type=int, default=300)
    ap.add_argument("--restart-jobs", type=int, default=100_000)
    ap.add_argument("--restart-repeat", type=int, default=3, help="starts of the restart figure's database")
    ap.add_argument("--history", type=int, default=1_000_000)
    args = ap.parse_args()
    os.sched_setaffinity(0, set(range(1, os.cpu_count() or 2)) or {0}) if hasattr(os, "sched_setaffinity") and (
        os.cpu_count() or 1) > 1 else None
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="kant-bench-serve-", dir=os.environ.get("KANT_BENCH_DIR")) as tmp:
        work = Path(tmp)
        for kind in args.db or ["sqlite", "postgresql"]:
            for name in args.only or list(FIGURES):
                with database(kind, args.pg, work) as url:
                    t0 = time.perf_counter()
                    fig = FIGURES[name](kind, url, work, args)
                    fig["bench_s"] = round(time.perf_counter() - t0, 1)
                results[f"{kind}/{name}"] = fig
                print(f"{kind:10s} {name:8s} {json.dumps(fig)}", flush=True)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "serve.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
