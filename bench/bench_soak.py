"""Load and soak of the live service: a large cluster with a long queue under a sustained submit
load, and a long run at a steady rate watching the memory. Figures are printed, never asserted;
docs/reliability.md quotes them.

    python bench/bench_soak.py load                 # 10,000 nodes x 8 GPUs, 100,000 pending, 10 minutes
    python bench/bench_soak.py load --nodes 1000 --pending 10000 --seconds 60     # a short version
    python bench/bench_soak.py soak                 # 1 hour at 50 submits/s, memory every 30 s
    python bench/bench_soak.py soak --seconds 300 --rate 20 --sample-every 10     # a short version
    (either with --db postgresql+psycopg://... for PostgreSQL; default a SQLite file)

* **load**: the database is filled first with ``--pending`` + nodes/2 gangs of 2 x 8 GPUs (so once
  the service has started it runs nodes/2 of them and ``--pending`` wait), then ``--clients``
  clients submit 1-GPU jobs as fast as the service answers for ``--seconds``: the acknowledged rate
  (the largest sustained rate with that many clients), the scheduling cycle time (mean of
  ``kant_cycle_seconds`` over the run) and the service's resident memory (VmRSS) at start and end.
* **soak**: a cluster with room (``--nodes`` x 8 GPUs), jobs of 1-8 GPUs that run 5-30 s, submitted
  at ``--rate`` per second for ``--seconds``; resident memory is sampled every ``--sample-every``
  seconds; printed: the samples and the slope of a line fitted to the second half (MiB per hour;
  zero means no growth). Finished jobs stay in the database but leave memory (compaction).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "src"))

from kant.service.db.database import Database  # noqa: E402
from kant.service.db.jobs import NewJob  # noqa: E402
from service.serve_proc import Server, start_server  # noqa: E402


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cycle_stats(srv: Server) -> tuple[float, float]:
    """(sum of cycle seconds, number of cycles) from /metrics."""
    total = count = 0.0
    for line in srv.admin.get("/metrics").text.splitlines():
        if line.startswith("kant_cycle_seconds_sum"):
            total = float(line.split()[-1])
        elif line.startswith("kant_cycle_seconds_count"):
            count = float(line.split()[-1])
    return total, count


class Clients:
    """``n`` threads submitting jobs; ``rate`` > 0 spreads that many submits per second over them."""

    def __init__(self, url: str, token: str, n: int, rate: float, body: dict[str, object]) -> None:
        self.acked = 0
        self.errors = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(url, token, n, rate, body, k), daemon=True)
                        for k in range(n)]
        for t in self.threads:
            t.start()

    def _run(self, url: str, token: str, n: int, rate: float, body: dict[str, object], k: int) -> None:
        rng = np.random.default_rng(k)
        gap = n / rate if rate > 0 else 0.0
        nxt = time.monotonic() + rng.uniform(0, gap)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
            while not self.stop.is_set():
                if gap:
                    delay = nxt - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    nxt += gap
                job = dict(body)
                if "duration_s" not in job:
                    job["duration_s"] = float(rng.integers(5, 31))
                    job["gpus_per_worker"] = int(rng.choice([1, 2, 4, 8]))
                try:
                    ok = c.post("/v1/jobs", json=job).status_code == 201
                except httpx.HTTPError:
                    ok = False
                with self.lock:
                    self.acked += ok
                    self.errors += not ok

    def finish(self) -> tuple[int, int]:
        self.stop.set()
        for t in self.threads:
            t.join(60)
        return self.acked, self.errors


def _url(arg: str | None, work: Path) -> str:
    return arg or f"sqlite:///{work / 'kant.db'}"


def cmd_load(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        url = _url(args.db, work)
        cluster = f"{args.nodes}x8:H100"
        db = Database(url)
        db.migrate()
        db.tenants.create("fill")
        n = args.pending + args.nodes // 2
        t0 = time.monotonic()
        for start in range(0, n, 10_000):
            db.jobs.insert([NewJob(tenant="fill", user="u", name=f"f{i}", workers=2, gpus_per_worker=8,
                                   estimate_s=1e6, duration_s=1e6) for i in range(start, min(n, start + 10_000))],
                           now_time=time.time(), now_wall=time.time())
        db.close()
        print(f"load: {n} gangs written in {time.monotonic() - t0:.1f} s", flush=True)
        t0 = time.monotonic()
        srv = start_server(work, url, cluster=cluster, clock="wall", extra=["--no-predict"], wait=False)
        try:
            srv.wait_ready(timeout=1800.0)  # (the leader rebuilds the scheduler from every active job)
            queue = srv.admin.get("/v1/cluster").json()["queue_len"]
            print(f"load: ready in {time.monotonic() - t0:.1f} s; queue {queue}, RSS {rss_mib(srv.proc.pid):.0f} MiB",
                  flush=True)
            token = srv.tenant("load")
            s0, c0 = cycle_stats(srv)
            clients = Clients(srv.url, token, args.clients, 0.0, {"gpus_per_worker": 1, "duration_s": 60.0})
            t0 = time.monotonic()
            samples = []
            while time.monotonic() - t0 < args.seconds:
                time.sleep(min(args.sample_every, args.seconds))
                samples.append((time.monotonic() - t0, clients.acked, rss_mib(srv.proc.pid)))
                print(f"  t={samples[-1][0]:.0f} s acked {samples[-1][1]} RSS {samples[-1][2]:.0f} MiB", flush=True)
            acked, errors = clients.finish()
            took = time.monotonic() - t0
            s1, c1 = cycle_stats(srv)
            cluster_now = srv.admin.get("/v1/cluster").json()
            print(f"load: {args.nodes} nodes, {cluster_now['queue_len']} pending at the end, {args.clients} clients, "
                  f"{took:.0f} s: {acked / took:.0f} acknowledged submits/s ({acked} acked, {errors} errors), "
                  f"cycles {c1 - c0:.0f}, mean cycle {(s1 - s0) / max(c1 - c0, 1) * 1000:.1f} ms, "
                  f"RSS {samples[0][2]:.0f} -> {samples[-1][2]:.0f} MiB")
        finally:
            srv.stop()


def cmd_soak(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        srv = start_server(work, _url(args.db, work), cluster=f"{args.nodes}x8:H100", clock="wall",
                           extra=["--no-predict"])
        try:
            token = srv.tenant("soak")
            clients = Clients(srv.url, token, args.clients, args.rate, {})
            t0 = time.monotonic()
            samples: list[tuple[float, float]] = []
            while time.monotonic() - t0 < args.seconds:
                time.sleep(args.sample_every)
                samples.append((time.monotonic() - t0, rss_mib(srv.proc.pid)))
                c = srv.admin.get("/v1/cluster").json()
                print(f"  t={samples[-1][0]:.0f} s RSS {samples[-1][1]:.1f} MiB acked {clients.acked} "
                      f"running {c['running_jobs']} pending {c['queue_len']}", flush=True)
            acked, errors = clients.finish()
            took = time.monotonic() - t0
        finally:
            srv.stop()
        half = samples[len(samples) // 2:]
        slope = np.polyfit([t for t, _ in half], [m for _, m in half], 1)[0] * 3600 if len(half) >= 2 else float("nan")
        print(f"soak: {took:.0f} s at {acked / took:.1f} submits/s ({acked} acked, {errors} errors), RSS "
              f"{samples[0][1]:.1f} -> {samples[-1][1]:.1f} MiB (max {max(m for _, m in samples):.1f}); "
              f"second-half slope {slope:+.1f} MiB/hour")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    load = sub.add_parser("load")
    load.add_argument("--nodes", type=int, default=10_000)
    load.add_argument("--pending", type=int, default=100_000)
    load.add_argument("--seconds", type=float, default=600)
    load.add_argument("--clients", type=int, default=16)
    load.add_argument("--sample-every", type=float, default=30)
    load.add_argument("--db", default=None)
    soak = sub.add_parser("soak")
    soak.add_argument("--nodes", type=int, default=1000)
    soak.add_argument("--seconds", type=float, default=3600)
    soak.add_argument("--rate", type=float, default=50)
    soak.add_argument("--clients", type=int, default=8)
    soak.add_argument("--sample-every", type=float, default=30)
    soak.add_argument("--db", default=None)
    args = ap.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        {"load": cmd_load, "soak": cmd_soak}[args.cmd](args)


if __name__ == "__main__":
    main()
