"""The Ray executor's speed: how long a gang takes to start, what kant adds to each job, how many
jobs one ``kant serve --executor ray`` drives at once.

    python bench/bench_ray.py                      # every figure
    python bench/bench_ray.py --gangs 20 --jobs 100 --concurrent 48 --hold 120
    python bench/bench_ray.py --only concurrent
    python bench/bench_ray.py --only restart --restart-jobs 50        # kill -9 and failover under load

A local Ray cluster (Ray's ``cluster_utils``: one raylet per node on this machine, GPUs declared, no
real GPU) and a real ``kant serve --executor ray`` process on 127.0.0.1 (wall clock, SQLite). Every
worker runs ``date`` at its start and end, so the times below are the workers' own. Printed, never
asserted.

* **gang start**: ``--gangs`` times one after another, a 4-worker gang (4 x 1 GPU on 2 nodes of 2
  GPUs) of a command that reports its start: time from the client sending the submit to the last
  of its 4 workers starting the command. P50 / P90. The first gang is a warm-up (Ray starts its
  worker processes) and not counted.
* **overhead per job**: ``--jobs`` 1-GPU jobs of ``sleep 0.5``, one at a time: the time kant held the
  job's GPU (its start to its end, as the service recorded them) minus the time the command ran (its
  own report). P50 / P90.
* **concurrent**: ``--concurrent`` 1-GPU jobs of ``sleep HOLD`` (``--hold``, 90 s) on nodes of 16
  GPUs, submitted in one batch: how many were running at once (the workers' own start and end
  times) and the time from the submit until the last one started (Ray starts one worker process per
  concurrent task: on a small machine that start is what takes the time).
* **restart under load** (``--only restart``): ``--restart-jobs`` (50) 1-GPU jobs, each printing one
  numbered tick a second with its pid, all running; then ``kill -9`` of ``kant serve`` and a new one
  on the same SQLite database; and, on PostgreSQL (``--pg``), a leader and a standby on one database
  and ``kill -9`` of the leader. Printed: the time from the kill until the new service answers
  ``/readyz`` with every run reattached (its restore is part of becoming leader), runs restarted (jobs
  whose runs went above 1: target 0), jobs lost (not finished, or a job whose output misses a tick
  or shows two pids: target 0).
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPORT = 'echo "START $(date +%s.%N)"; {body}; echo "END $(date +%s.%N)"'
ENDED = ("finished", "failed", "cancelled", "unschedulable")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], p: float) -> float:
    xs = sorted(values)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


class Bench:
    """One Ray cluster of ``nodes`` nodes of ``gpus`` GPUs and one kant serve on it."""

    def __init__(self, nodes: int, gpus: int, work: Path, db: str | None = None) -> None:
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0,
                                                                     "include_dashboard": False})
        for i in range(nodes):
            self.cluster.add_node(num_cpus=1, num_gpus=gpus, labels={"kant.node": f"n{i}"})
        self.work = work
        port = free_port()
        self.db = db or f"sqlite:///{work / f'kant-{port}.db'}"
        self.token = f"kant_bench_{secrets.token_hex(16)}"
        self.proc, self.log = self.start_serve(port)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {self.token}"},
                                 timeout=60)
        self.wait_ready(self.http, self.proc, self.log)
        assert self.http.post("/v1/tenants", json={"name": "bench"}).status_code == 201

    def start_serve(self, port: int) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.work / f"serve-{port}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "kant.cli.main", "serve", "--db", self.db,
                 "--port", str(port), "--executor", "ray", "--ray-address", str(self.cluster.address), "--clock",
                 "wall", "--no-predict", "--log-dir", str(self.work / "logs"), "--checkpoint-dir",
                 str(self.work / "ckpt"), "--ray-start-timeout", "300", "--log-level", "warning"],
                cwd=self.work, env={**os.environ, "KANT_ADMIN_TOKEN": self.token}, stdout=out,
                stderr=subprocess.STDOUT)
        return proc, log

    @staticmethod
    def wait_ready(http: httpx.Client, proc: subprocess.Popen[bytes], log: Path, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if http.get("/readyz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"kant serve did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.05)

    def submit(self, **body: Any) -> int:
        r = self.http.post("/v1/jobs", json={"tenant": "bench", **body})
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def wait(self, job_id: int, timeout: float = 300.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            data: dict[str, Any] = self.http.get(f"/v1/jobs/{job_id}").json()
            if data["state"] in ENDED:
                if data["state"] != "finished":
                    raise SystemExit(f"job {job_id} {data['state']}: {data['reason']}")
                return data
            if time.monotonic() > deadline:
                raise SystemExit(f"job {job_id} still {data['state']} after {timeout} s")
            time.sleep(0.02)

    def times(self, job_id: int, worker: int = 0) -> tuple[float, float]:
        text = self.http.get(f"/v1/jobs/{job_id}/logs", params={"worker": worker}).json()["text"]
        words = dict(line.split()[:2] for line in text.splitlines() if line.startswith(("START", "END")))
        return float(words["START"]), float(words["END"])

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.http.close()
        self.cluster.shutdown()


def gang_start(b: Bench, n: int) -> list[float]:
    out = []
    for i in range(n + 1):
        t0 = time.time()
        job_id = b.submit(workers=4, gpus_per_worker=1, command=REPORT.format(body="true"))
        b.wait(job_id)
        if i:  # the first is a warm-up
            out.append(max(b.times(job_id, k)[0] for k in range(4)) - t0)
    return out


def overhead(b: Bench, n: int) -> list[float]:
    out = []
    for _ in range(n):
        job_id = b.submit(command=REPORT.format(body="sleep 0.5"))
        data = b.wait(job_id)
        start, end = b.times(job_id)
        out.append((data["end_time"] - data["start_time"]) - (end - start))
    return out


def concurrent(b: Bench, n: int, hold: float) -> tuple[int, float]:
    t0 = time.time()
    job = {"tenant": "bench", "command": REPORT.format(body=f"sleep {hold:g}")}
    r = b.http.post("/v1/jobs/batch", json={"jobs": [job] * n})
    assert r.status_code == 201, r.text
    ids = [j["id"] for j in r.json()["jobs"]]
    spans = [b.times(b.wait(i)["id"]) for i in ids]
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak, max(s for s, _ in spans) - t0


def start_figures(work: Path, gangs: int, jobs: int) -> None:
    b = Bench(2, 2, work)
    try:
        g = gang_start(b, gangs)
        print(f"gang start (4 workers x 1 GPU on 2 nodes, submit -> all 4 running), n={len(g)}: "
              f"P50 {statistics.median(g):.3f} s, P90 {pct(g, 90):.3f} s")
        o = overhead(b, jobs)
        print(f"overhead per job (GPU held by kant - command's run time, 1-GPU 'sleep 0.5'), n={len(o)}: "
              f"P50 {statistics.median(o):.3f} s, P90 {pct(o, 90):.3f} s")
    finally:
        b.close()


def concurrent_figure(work: Path, n: int, hold: float) -> None:
    nodes = -(-n // 16)
    b = Bench(nodes, 16, work)
    try:
        peak, spread = concurrent(b, n, hold)
        print(f"concurrent: {n} 1-GPU jobs of 'sleep {hold:g}' on {nodes} x 16 GPUs from one kant serve: "
              f"{peak} running at once; the last started {spread:.1f} s after the submit")
    finally:
        b.close()


TICKS = ("import os, sys, time\n"
         "for i in range(1, int(sys.argv[1]) + 1):\n"
         "    print('tick', i, os.getpid(), flush=True)\n"
         "    time.sleep(1)\n")


def restart_under_load(work: Path, n: int, hold: int, pg: str | None) -> None:
    """``n`` jobs running; kill -9 of the service; a new one (SQLite) or the standby (PostgreSQL)."""
    gpus = 16
    nodes = -(-n // gpus)
    work.mkdir(parents=True, exist_ok=True)
    b = Bench(nodes, gpus, work, db=pg)
    standby: tuple[subprocess.Popen[bytes], Path, httpx.Client] | None = None
    try:
        if pg is not None:  # a standby on the same database: it takes over when the leader dies
            port = free_port()
            proc, log = b.start_serve(port)
            standby = (proc, log, httpx.Client(base_url=f"http://127.0.0.1:{port}",
                                               headers={"Authorization": f"Bearer {b.token}"}, timeout=60))
        cmd = f"{sys.executable} -c \"{TICKS}\" {hold}"
        r = b.http.post("/v1/jobs/batch", json={"jobs": [{"tenant": "bench", "command": cmd}] * n})
        assert r.status_code == 201, r.text
        ids = [j["id"] for j in r.json()["jobs"]]
        t0 = time.monotonic()
        while True:  # every job running and its command started (it printed its first tick)
            started = sum(1 for i in ids if "tick 1 " in b.http.get(f"/v1/jobs/{i}/logs").json()["text"])
            if started == n:
                break
            if time.monotonic() - t0 > 600:
                raise SystemExit(f"only {started} of {n} jobs started in 600 s")
            time.sleep(1.0)
        print(f"restart: {n} jobs running after {time.monotonic() - t0:.1f} s ({nodes} nodes x {gpus} GPUs)")
        b.proc.kill()
        killed = time.monotonic()
        b.proc.wait()
        if standby is None:
            proc, log = b.start_serve(int(str(b.http.base_url).rsplit(":", 1)[1].rstrip("/")))
            http = b.http
            what = "kill -9 of kant serve, a new one on the same SQLite database"
        else:
            proc, log, http = standby
            what = "kill -9 of the leader, the standby on the same PostgreSQL database takes over"
        b.wait_ready(http, proc, log)
        ready = time.monotonic() - killed
        b.proc, b.http = proc, http
        deadline = time.monotonic() + hold + 300
        states: dict[int, dict[str, Any]] = {}
        for i in ids:
            while (d := http.get(f"/v1/jobs/{i}").json())["state"] not in ENDED and time.monotonic() < deadline:
                time.sleep(0.2)
            states[i] = d
        restarted = sum(1 for d in states.values() if d["runs"] > 1)
        lost = sum(1 for d in states.values() if d["state"] != "finished")
        for i in ids:
            ticks = [ln.split() for ln in http.get(f"/v1/jobs/{i}/logs").json()["text"].splitlines()
                     if ln.startswith("tick")]
            if states[i]["state"] == "finished" and ([int(t[1]) for t in ticks] != list(range(1, hold + 1))
                                                     or len({t[2] for t in ticks}) != 1):
                lost += 1  # it finished, but not as one uninterrupted run
        print(f"restart ({what}): reattached and ready {ready:.2f} s after the kill; runs restarted "
              f"{restarted} of {n}; jobs lost {lost} of {n}")
    finally:
        if standby is not None:
            standby[2].close()
        b.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gangs", type=int, default=10, help="4-worker gangs timed (after one warm-up)")
    ap.add_argument("--jobs", type=int, default=30, help="1-GPU jobs for the overhead")
    ap.add_argument("--concurrent", type=int, default=32, help="1-GPU jobs run at once")
    ap.add_argument("--hold", type=float, default=90.0, help="seconds each of the concurrent jobs runs")
    ap.add_argument("--restart-jobs", type=int, default=50, help="jobs running when the service is killed")
    ap.add_argument("--restart-hold", type=int, default=60, help="ticks (seconds) each of those jobs runs")
    ap.add_argument("--pg", default=None, metavar="URL",
                    help="with --only restart: a fresh PostgreSQL database (postgresql+psycopg://...) for the "
                         "failover figure")
    ap.add_argument("--only", choices=["start", "concurrent", "restart"], default=None,
                    help="only the gang start and overhead figures, the concurrent one, or restart under load")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} CPUs; other work may share them (figures are noisy)")
    with tempfile.TemporaryDirectory(prefix="kant-bench-ray-") as tmp:
        if args.only in (None, "start"):
            start_figures(Path(tmp), args.gangs, args.jobs)
        if args.only in (None, "concurrent"):
            concurrent_figure(Path(tmp), args.concurrent, args.hold)
        if args.only in (None, "restart"):
            restart_under_load(Path(tmp) / "sqlite", args.restart_jobs, args.restart_hold, None)
            if args.pg is not None:
                restart_under_load(Path(tmp) / "pg", args.restart_jobs, args.restart_hold, args.pg)


if __name__ == "__main__":
    main()
