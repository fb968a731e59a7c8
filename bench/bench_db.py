"""Job insert throughput of the service database: 20,000 jobs in batches of 50 (one transaction each).

    python bench/bench_db.py [--jobs 20000] [--batch 50] [--active 100000]
                             [--pg postgresql+psycopg://postgres@127.0.0.1:5432/test]

Runs on a SQLite file in a temporary folder (WAL, synchronous=FULL: one fsync per batch) and on a
fresh PostgreSQL database created next to the one ``--pg`` names (dropped afterwards; ``--pg ''``
skips it). Every job has an idempotency key, so each batch also runs the key lookup. Then tops the
table up to ``--active`` pending jobs (batches of 5,000, no keys) and times ``db.jobs.load_active``
over them, and one ``db.apply`` of 500 updates and 500 events. Prints figures, never asserts.
"""

from __future__ import annotations

import argparse
import secrets
import tempfile
import time
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

from kant.service.db.database import Database
from kant.service.db.events import NewEvent
from kant.service.db.jobs import JobUpdate, NewJob


def run(db: Database, n_jobs: int, batch: int, n_active: int) -> None:
    """Insert ``n_jobs`` jobs in batches and print the rates."""
    db.migrate()
    db.tenants.create("bench")
    jobs = [
        NewJob(tenant="bench", user="u", name=f"job-{i}", workers=1 + i % 4, labels={"team": "a"},
               idempotency_key=f"k{i}")
        for i in range(n_jobs)
    ]
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    for i in range(0, n_jobs, batch):
        db.jobs.insert(jobs[i:i + batch], now_time=float(i), now_wall=time.time())
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    print(f"  jobs.insert: {n_jobs} jobs in batches of {batch}: {wall:.2f} s, {n_jobs / wall:,.0f} jobs/s "
          f"({cpu:.2f} s CPU in this process)")
    t0 = time.perf_counter()
    for i in range(n_jobs, n_active, 5000):
        db.jobs.insert([NewJob(tenant="bench", user="u", name=f"job-{k}", labels={"team": "a"})
                        for k in range(i, min(i + 5000, n_active))], now_time=float(i), now_wall=time.time())
    if n_active > n_jobs:
        print(f"  jobs.insert: {n_active - n_jobs} more jobs in batches of 5,000: {time.perf_counter() - t0:.2f} s")
    t0 = time.perf_counter()
    active = db.jobs.load_active()
    print(f"  jobs.load_active: {len(active)} jobs in {time.perf_counter() - t0:.3f} s")
    updates = [JobUpdate(j.id, state="running", start_time=1.0, placement=["n1"], runs=1) for j in active[:500]]
    evs = [NewEvent(1.0, time.time(), "started", job_id=u.id, tenant="bench") for u in updates]
    t0 = time.perf_counter()
    db.apply(updates, evs)
    print(f"  apply: {len(updates)} updates + {len(evs)} events in {time.perf_counter() - t0:.3f} s")


def main() -> None:
    """Parse arguments and run the benchmark on each backend."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--active", type=int, default=100_000)
    ap.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        print(f"SQLite ({path})")
        db = Database(f"sqlite:///{path}")
        try:
            run(db, args.jobs, args.batch, args.active)
        finally:
            db.close()

    if args.pg:
        admin = make_url(args.pg).set(drivername="postgresql")
        name = f"kant_bench_{secrets.token_hex(4)}"
        with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        try:
            url = make_url(args.pg).set(drivername="postgresql+psycopg", database=name)
            print(f"PostgreSQL ({url.render_as_string(hide_password=True)})")
            db = Database(url.render_as_string(hide_password=False))
            try:
                run(db, args.jobs, args.batch, args.active)
            finally:
                db.close()
        finally:
            with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
