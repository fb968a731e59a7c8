"""``kant serve --demo TRACE``: a trace replayed into the service. Its jobs are submitted at their
submit times on the service clock, through the same writer as the API's submits, each with the
idempotency key ``demo-<row>``, so a restarted service resumes where the last one stopped."""

from __future__ import annotations

import contextlib
import logging
import math
import threading

import numpy as np

from kant.errors import KantError
from kant.model.job import JobTable
from kant.service.clock import Clock
from kant.service.db.jobs import NewJob
from kant.service.tenants import Tenants
from kant.service.writer import SubmitWriter

__all__ = ["Demo"]

log = logging.getLogger("kant.serve")


class Demo:
    """The replay of ``trace`` (its first ``limit`` jobs, when given)."""

    def __init__(self, trace: str, limit: int | None = None) -> None:
        self.trace = trace
        self.limit = limit
        self._jobs: JobTable | None = None

    def jobs(self) -> JobTable:
        """The trace's jobs in submit order (read once)."""
        if self._jobs is None:
            from kant.traces.registry import load_trace

            jobs = load_trace(self.trace).sorted_by_submit()
            if self.limit is not None:
                jobs = jobs.take(np.arange(min(self.limit, len(jobs))))
            self._jobs = jobs
        return self._jobs

    def first_submit(self) -> float:
        """Where an accelerated clock starts when nothing else says."""
        return float(self.jobs().submit.min())

    def replay(self, tenants: Tenants, writer: SubmitWriter, clock: Clock, stop: threading.Event) -> None:
        """Create the trace's tenants, then submit its jobs as ``clock`` reaches their times, until
        the last one or ``stop``."""
        jobs = self.jobs()
        for name in jobs.tenant_names:
            if not tenants.exists(name):
                with contextlib.suppress(KantError):  # another service made it meanwhile
                    tenants.db.tenants.create(name)
        tenants.changed()
        submit = jobs.submit.tolist()
        i, n = 0, len(jobs)
        log.info("demo: replaying %d jobs of %s", n, self.trace)
        while i < n and not stop.is_set():
            now = clock.now()
            batch: list[NewJob] = []
            while i < n and submit[i] <= now and len(batch) < 1000:
                batch.append(_new_job(jobs, i))
                i += 1
            if batch:
                try:
                    writer.submit_sync(batch)
                except KantError as exc:
                    log.warning("demo: a submit failed: %s", exc)
                continue
            delay = clock.wall_delay(submit[i]) if i < n else 0.0
            stop.wait(min(max(delay, 0.001), 1.0))
        log.info("demo: every job of the trace was submitted")


def _new_job(jobs: JobTable, i: int) -> NewJob:
    est = float(jobs.estimate[i])
    dur = float(jobs.duration[i])
    return NewJob(
        tenant=jobs.tenant_names[int(jobs.tenant[i])], user=jobs.user_names[int(jobs.user[i])],
        name=jobs.names[i], workers=int(jobs.workers[i]), gpus_per_worker=int(jobs.gpus_per_worker[i]),
        gpu_milli=int(jobs.gpu_milli[i]), gpu_type=jobs.gpu_type_name(i),
        cpu_milli=int(jobs.cpu_milli[i]), memory_mib=int(jobs.memory_mib[i]),
        priority=int(jobs.priority[i]), estimate_s=est if math.isfinite(est) else
        (dur if math.isfinite(dur) and dur > 0 else None),
        duration_s=dur if math.isfinite(dur) else None, idempotency_key=f"demo-{i}")
