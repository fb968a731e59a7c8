"""The accuracy bench's Philly slice and its replay into a live loop, shared by ``bench_whatif.py``
and ``whatif_ratios.py`` (each imports this module; neither imports the other at its top)."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from kant.config import load_policy
from kant.model.job import JobTable
from kant.service.clock import ManualClock
from kant.service.db.database import Database
from kant.service.db.jobs import NewJob
from kant.service.executors import SimulatedExecutor
from kant.service.live.state import Arrival
from kant.service.loop import Advance, Arrivals, ServiceLoop
from kant.traces import load_cluster, read_philly
from kant.twin import TwinSnapshot

HOUR = 3600.0


def philly_slice(start_day: float, n: int) -> JobTable:
    jobs = read_philly()
    i0 = int(np.searchsorted(jobs.submit, start_day * 86400.0))
    return jobs.take(np.arange(i0, min(i0 + n, len(jobs)))).sorted_by_submit()


def noisy_estimates(jobs: JobTable, sigma: float, seed: int) -> np.ndarray:
    """The true run time times a lognormal factor (median 1) per job, the same for every policy."""
    factor = np.exp(np.random.default_rng(seed).normal(0.0, sigma, len(jobs)))
    return np.asarray(jobs.duration, dtype=np.float64) * factor


def fast_folder() -> str | None:
    """A folder in memory when there is one (this bench is about decisions, not durability)."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def table(lines: Sequence[Sequence[str]]) -> None:
    """A Markdown table: the first line is the header; the first two columns left-aligned."""
    widths = [max(len(line[k]) for line in lines) for k in range(len(lines[0]))]
    for j, line in enumerate(lines):
        print("| " + " | ".join(c.ljust(w) if k < 2 else c.rjust(w) for k, (c, w) in enumerate(zip(line, widths,
                                                                                                      strict=True)))
              + " |")
        if j == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


@contextmanager
def slice_loop(jobs: JobTable, policy: str, cluster: str, prefix: str) -> Iterator[tuple[Database, ServiceLoop]]:
    """A live loop (SQLite in a temporary folder, the manual clock at the slice's first submit, the
    simulated executor) with the slice's tenants and ``cluster`` loaded; the database is closed after."""
    with tempfile.TemporaryDirectory(prefix=prefix, dir=fast_folder()) as tmp:
        db = Database(f"sqlite:///{tmp}/whatif.db")
        db.migrate()
        for tenant in jobs.tenant_names:
            db.tenants.create(tenant)
        loop = ServiceLoop(db, load_policy(policy), ManualClock(float(jobs.submit[0])), SimulatedExecutor())
        loop.load(load_cluster(cluster))
        try:
            yield db, loop
        finally:
            db.close()


def submit_instant(db: Database, loop: ServiceLoop, jobs: JobTable, estimates: Sequence[float],
                   submit: Sequence[float], i: int) -> tuple[int, list[tuple[int, int]]]:
    """Submit the slice's jobs of the instant ``submit[i]`` as the service does (the clock moved there
    with ``hold``, the jobs inserted, then handed to the loop: the instant's cycle runs at the next
    move); returns the next row and (service job id, slice row) of each job submitted."""
    t = submit[i]
    n = len(submit)
    loop.turn([Advance(t, hold=True)])  # the instant's events; its cycle after its arrivals
    batch, rows = [], []
    while i < n and submit[i] == t:
        e = float(estimates[i])
        tenant = jobs.tenant_names[int(jobs.tenant[i])]
        batch.append(NewJob(tenant=tenant, user=tenant, name=str(i), workers=int(jobs.workers[i]),
                            gpus_per_worker=int(jobs.gpus_per_worker[i]), estimate_s=e if e > 0 else None,
                            duration_s=float(jobs.duration[i])))
        rows.append(i)
        i += 1
    ids = db.jobs.insert(batch, now_time=t, now_wall=time.time())
    loop.turn([Arrivals([Arrival(job_id, job, t) for (job_id, _), job in zip(ids, batch, strict=True)])])
    return i, [(job_id, row) for (job_id, _), row in zip(ids, rows, strict=True)]


def snapshot_after(jobs: JobTable, estimates: np.ndarray, policy: str, cluster: str, at: float
                   ) -> tuple[TwinSnapshot, dict[int, int]]:
    """The live loop's twin snapshot once the slice's jobs up to ``at`` have been replayed into it (as
    :func:`replay` submits them), and service job id -> slice row."""
    submit = jobs.submit.tolist()
    est = estimates.tolist()
    row_of: dict[int, int] = {}
    with slice_loop(jobs, policy, cluster, "kant-whatif-cap-") as (db, loop):
        i, n = 0, len(jobs)
        while i < n and submit[i] <= at:
            i, got = submit_instant(db, loop, jobs, est, submit, i)
            row_of.update(got)
        loop.turn([Advance(at)])
        snap = loop.twin_snapshot()
    return snap, row_of
