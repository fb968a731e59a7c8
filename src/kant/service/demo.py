"""``kant serve --demo TRACE``: a trace replayed into the service. Its jobs are submitted at their
submit times on the service clock, through the same writer as the API's submits, each with the
idempotency key ``demo-<row>``, so a restarted service resumes where the last one stopped.

``kant serve --demo unified`` (:data:`UNIFIED`) is one cluster for training and inference on one
machine: a busy slice of the Philly trace (:class:`Demo` with ``start_s``) replayed under the
``unified`` policy, the inference service of :func:`unified_services` whose replicas are the
example model server (``python -m kant.model_server``, real local processes), and its traffic
(:class:`DemoTraffic`): the Azure conversation trace's requests replayed through the service's
request route by :mod:`kant.service.serving.replay` (the code of ``kant load``), over and over,
until the service stops. The autoscaler sizes the service from that traffic; training runs on the
GPUs its replicas do not hold and is reclaimed when it scales up (docs/inference.md).
"""

from __future__ import annotations

import contextlib
import logging
import math
import shlex
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kant.errors import KantError
from kant.inference.services import ServicesConfig, parse_services
from kant.model.job import JobTable
from kant.service.clock import Clock
from kant.service.db.database import Database
from kant.service.db.jobs import NewJob
from kant.service.serving.endpoints import Endpoints
from kant.service.tenants import Tenants
from kant.service.writer import SubmitWriter

__all__ = ["UNIFIED", "Demo", "DemoTraffic", "UnifiedDemo", "unified_services"]

log = logging.getLogger("kant.serve")

#: the Azure LLM inference trace 2023, conversations (``azure:conv``), as shipped in the package
BUNDLED_AZURE_CONV = Path(__file__).resolve().parents[1] / "traces" / "data" / "azure-conv.csv.gz"

#: ``--demo unified``: training and inference on one cluster (not a trace name)
UNIFIED = "unified"


@dataclass(frozen=True)
class UnifiedDemo:
    """What ``kant serve --demo unified`` runs (the command line's defaults for it)."""

    trace: str = "philly"  # the training replay
    start_s: float = 40 * 86400.0 + 6600.0  # day 40, 1 h 50 min in: a burst (~300 GPUs asked in the next hour)
    limit: int = 600  # its first jobs from there
    cluster: str = "2x8:V100"  # 16 GPUs: the service's pool (max 6 replicas x 2 GPUs) is 12 of them
    policy: str = "unified"
    speed: float = 60.0  # training: a trace hour per wall minute
    #: the service's requests: one hour of Azure LLM conversations (azure:conv, bundled with the package)
    traffic: str = str(BUNDLED_AZURE_CONV)
    traffic_speed: float = 1.5  # trace seconds per wall second: about 8 requests/s
    tenant: str = "inference"
    service: str = "chat"


def unified_services(demo: UnifiedDemo = UnifiedDemo(), python: str = sys.executable) -> ServicesConfig:
    """The demo's service, as a services file would give it: replicas of 2 GPUs running the example
    model server (with ``python``), 1 to 6 of them, 3 requests/s each, an SLO of 2 s, autoscaled
    every 5 wall seconds."""
    return parse_services({
        "autoscaler": {"period_s": 5, "target_utilization": 0.7, "metric_window_s": 15,
                       "scale_down": {"stabilization_window_s": 30,
                                      "policies": [{"type": "Pods", "value": 1, "period_s": 10}]}},
        "services": [{
            "name": demo.service, "tenant": demo.tenant, "gpus_per_replica": 2, "min_replicas": 1,
            "max_replicas": 6, "capacity_rps": 3, "concurrency": 8, "slo_ms": 2000, "priority": 100,
            "traffic": {"trace": demo.traffic},
            "command": f"{shlex.quote(python)} -m kant.model_server --ms-per-token 0.02",
            "ready_timeout_s": 60,
        }],
    }, "--demo unified")


class Demo:
    """The replay of ``trace`` (its first ``limit`` jobs, when given)."""

    def __init__(self, trace: str, limit: int | None = None, start_s: float = 0.0, estimate_noise: float = 0.0,
                 noise_seed: int = 0) -> None:
        self.trace = trace
        self.limit = limit
        self.start_s = start_s  # replay from this far after the trace's first submit
        #: lognormal sigma of the estimates' error (0: each job's estimate is its true run time)
        self.estimate_noise = estimate_noise
        self.noise_seed = noise_seed
        self._jobs: JobTable | None = None
        self._estimates: list[float] | None = None

    def jobs(self) -> JobTable:
        """The trace's jobs in submit order (read once): from ``start_s``, the first ``limit``."""
        if self._jobs is None:
            from kant.traces.registry import load_trace

            jobs = load_trace(self.trace).sorted_by_submit()
            first = np.searchsorted(jobs.submit, float(jobs.submit.min()) + self.start_s) if self.start_s else 0
            last = len(jobs) if self.limit is None else min(first + self.limit, len(jobs))
            if (first, last) != (0, len(jobs)):
                jobs = jobs.take(np.arange(first, last))
            self._jobs = jobs
        return self._jobs

    def estimates(self) -> list[float]:
        """Each job's estimate as submitted: the trace's; where it has none, the true run time, times
        ``exp(N(0, estimate_noise))`` drawn once per job of the replay with ``noise_seed`` (median
        factor 1: a third of the jobs are off by 2.7 times or more at sigma 1, as users' estimates
        are; docs/whatif.md). NaN: none (the service's default applies)."""
        if self._estimates is None:
            jobs = self.jobs()
            est = np.asarray(jobs.estimate, dtype=np.float64)
            dur = np.asarray(jobs.duration, dtype=np.float64)
            base = np.where(np.isfinite(est), est, np.where(np.isfinite(dur) & (dur > 0), dur, np.nan))
            if self.estimate_noise > 0:
                base = dur * np.exp(np.random.default_rng(self.noise_seed).normal(0.0, self.estimate_noise, len(jobs)))
                base = np.where(np.isfinite(base) & (base > 0), base, np.nan)
            self._estimates = base.tolist()
        return self._estimates

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
        estimates = self.estimates()
        i, n = 0, len(jobs)
        noise = f" (estimates off by a lognormal factor, sigma {self.estimate_noise:g})" if self.estimate_noise else ""
        log.info("demo: replaying %d jobs of %s%s", n, self.trace, noise)
        while i < n and not stop.is_set():
            now = clock.now()
            batch: list[NewJob] = []
            while i < n and submit[i] <= now and len(batch) < 1000:
                batch.append(_new_job(jobs, i, estimates[i]))
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


def _new_job(jobs: JobTable, i: int, est: float) -> NewJob:
    dur = float(jobs.duration[i])
    return NewJob(
        tenant=jobs.tenant_names[int(jobs.tenant[i])], user=jobs.user_names[int(jobs.user[i])],
        name=jobs.names[i], workers=int(jobs.workers[i]), gpus_per_worker=int(jobs.gpus_per_worker[i]),
        gpu_milli=int(jobs.gpu_milli[i]), gpu_type=jobs.gpu_type_name(i),
        cpu_milli=int(jobs.cpu_milli[i]), memory_mib=int(jobs.memory_mib[i]),
        priority=int(jobs.priority[i]), estimate_s=est if math.isfinite(est) else None,
        duration_s=dur if math.isfinite(dur) else None, idempotency_key=f"demo-{i}")


class DemoTraffic:
    """The demo service's requests: the ``traffic`` trace replayed through the request route of the
    service at ``base_url`` (a tenant token of its tenant, made for it), again and again until
    ``stop``; each pass is logged with what :func:`~kant.service.serving.replay.summary` measured."""

    def __init__(self, demo: UnifiedDemo, base_url: str) -> None:
        self.demo = demo
        self.base_url = base_url
        self.passes = 0

    def run(self, db: Database, endpoints: Endpoints, stop: threading.Event) -> None:
        from kant.service.serving.replay import replay, summary, trace_requests

        d = self.demo
        row = next((r for r in db.services.list() if (r.tenant, r.name) == (d.tenant, d.service)), None)
        if row is None:  # pragma: no cover - created before this thread starts
            log.warning("demo: no service %s of tenant %s: no traffic", d.service, d.tenant)
            return
        while not stop.is_set() and not endpoints.ready(row.id):  # (no 503s while the first replica starts)
            stop.wait(0.5)
        if stop.is_set():
            return
        token, tok = db.tokens.create(role="tenant", tenant=d.tenant, name="demo traffic")
        url = f"{self.base_url}/v1/services/{row.id}/serve/v1/completions"
        headers = {"Authorization": f"Bearer {token}"}
        log.info("demo: replaying %s at x%g through %s", d.traffic, d.traffic_speed, url)
        try:
            while not stop.is_set():
                r = trace_requests(d.traffic, start=0.0, duration=86400.0, speed=d.traffic_speed,
                                   max_requests=100_000)
                wall = replay(r, url, headers, concurrency=64, timeout=30.0, stop=stop)
                self.passes += 1
                s: dict[str, Any] = summary(r, wall, row.slo_ms)
                sent = int(np.isfinite(r.sent).sum())  # (a pass cut short by the stop sent fewer than r holds)
                met = s["slo_attainment"] * len(r) / sent if s["slo_attainment"] is not None and sent else None
                log.info("demo: traffic pass %d: %d requests sent, %d answered 2xx, P99 %s ms, SLO attainment %s",
                         self.passes, sent, s["ok"], _fmt(s["ok_latency_ms"]["p99"]), _fmt(met))
        finally:
            with contextlib.suppress(KantError):
                db.tokens.revoke(tok.id, time.time())


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"
