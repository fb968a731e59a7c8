"""The accuracy bench's Philly slice and its replay into a live loop, shared by ``bench_whatif.py``
and ``whatif_ratios.py`` (each imports this module; neither imports the other at its top)."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
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


def snapshot_after(jobs: JobTable, estimates: np.ndarray, policy: str, cluster: str, at: float
                   ) -> tuple[TwinSnapshot, dict[int, int]]:
    """The live loop's twin snapshot once the slice's jobs up to ``at`` have been replayed into it (as
    :func:`replay` submits them), and service job id -> slice row."""
    submit = jobs.submit.tolist()
    with tempfile.TemporaryDirectory(prefix="kant-whatif-cap-", dir=fast_folder()) as tmp:
        db = Database(f"sqlite:///{tmp}/whatif.db")
        db.migrate()
        for tenant in jobs.tenant_names:
            db.tenants.create(tenant)
        loop = ServiceLoop(db, load_policy(policy), ManualClock(submit[0]), SimulatedExecutor())
        loop.load(load_cluster(cluster))
        row_of: dict[int, int] = {}
        i, n = 0, len(jobs)
        while i < n and submit[i] <= at:
            t = submit[i]
            loop.turn([Advance(t, hold=True)])
            batch, rows = [], []
            while i < n and submit[i] == t:
                e = float(estimates[i])
                batch.append(NewJob(tenant=jobs.tenant_names[int(jobs.tenant[i])],
                                    user=jobs.tenant_names[int(jobs.tenant[i])], name=str(i),
                                    workers=int(jobs.workers[i]), gpus_per_worker=int(jobs.gpus_per_worker[i]),
                                    estimate_s=e if e > 0 else None, duration_s=float(jobs.duration[i])))
                rows.append(i)
                i += 1
            ids = db.jobs.insert(batch, now_time=t, now_wall=time.time())
            for (job_id, _), row in zip(ids, rows, strict=True):
                row_of[job_id] = row
            loop.turn([Arrivals([Arrival(job_id, job, t) for (job_id, _), job in zip(ids, batch, strict=True)])])
        loop.turn([Advance(at)])
        snap = loop.twin_snapshot()
        db.close()
    return snap, row_of
