"""``kant serve``: the live service put together (database, leader election, scheduling loop, submit
writer, event hub, metrics, the API on uvicorn).

Several services may share one PostgreSQL database: they elect a leader with an advisory lock
(:class:`~kant.service.db.LeaderLock`); only the leader schedules and accepts writes, the others
stand by (``/readyz`` answers 503, writes are refused with the leader's address) and poll the lock.
When the leader dies its connection closes, PostgreSQL frees the lock and a standby takes over: it
bumps the leader epoch (writes of an older leader are then refused: fencing) and rebuilds the
scheduler from the database. A leader that loses the lock stops at once (the process exits) rather
than schedule next to another leader. SQLite allows one service per file (a file lock).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import math
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import HTTPException

import kant
from kant.config.policy import bundled_policies, load_policy, parse_policy
from kant.errors import ConfigError, KantError
from kant.model.cluster import Cluster
from kant.model.job import JobTable
from kant.model.store import JobStore
from kant.plugins.quota import Quota
from kant.scheduler import Scheduler
from kant.service.api import create_app
from kant.service.auth import Authenticator
from kant.service.clock import make_clock
from kant.service.dashboard import History
from kant.service.dashboard.routes import mount as mount_dashboard
from kant.service.db import Database, LeaderLock, NewJob
from kant.service.errors import Busy, DatabaseError, TooLong
from kant.service.events import EventHub
from kant.service.executors import make_executor
from kant.service.live.view import LiveView
from kant.service.loop import CLOCK_KEY, ServiceLoop
from kant.service.metrics import ServiceMetrics
from kant.service.schemas import JobSubmit, PredictionOut, WhatIfIn, WhyOut
from kant.service.twin import Twin, WhatIfGate, describe_prediction
from kant.service.writer import SubmitWriter
from kant.twin.snapshot import TwinSnapshot
from kant.twin.whatif import NodeTemplate, Scenario

__all__ = ["ServeConfig", "Service", "is_loopback"]

log = logging.getLogger("kant.serve")

DEFAULT_PORT = 8787


@dataclass
class ServeConfig:
    db_url: str = "sqlite:///kant.db"
    cluster: str | None = None
    policy: str = "kant"
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    executor: str = "simulated"
    ray_address: str = "auto"  # --executor ray: the Ray cluster to run on
    log_dir: Path = Path("kant-logs")  # --executor ray: workers' output, one file per job, run and worker
    checkpoint_dir: Path = Path("kant-checkpoints")  # --executor ray: KANT_CHECKPOINT_DIR/job-N (shared storage)
    start_timeout: float = 60.0  # --executor ray: seconds a gang's workers have to hold their GPUs
    clock: str = "wall"  # wall | accelerated | manual
    speed: float = 1.0
    clock_start: float | None = None
    admin_token: str | None = None
    token_out: Path | None = None  # where a generated admin token is written
    advertise_url: str | None = None
    default_estimate: float = 86400.0
    seed: int = 0
    demo: str | None = None  # a trace to replay into the service
    demo_limit: int | None = None
    max_body: int = 1 << 20
    standby_poll_s: float = 0.5
    log_level: str = "info"
    predict: bool = True  # keep predicted start times fresh (the digital twin)
    predict_runs: int = 10  # sampled runs per prediction
    predict_every: float = 5.0  # at most one prediction per this many wall seconds
    whatif_budget: float = 30.0  # wall seconds of simulation per what-if request (twice that: stopped)
    whatif_queue: int = 4  # what-if requests running or waiting at most (one per tenant or admin token)
    db_wait: float = 30.0  # at start, seconds to keep trying a database that cannot be reached (0: none)


def _float(text: str | None) -> float | None:
    try:
        return None if text is None else float(text)
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(ipaddress.ip_address(a[4][0]).is_loopback for a in socket.getaddrinfo(host, None))
        except OSError:
            return False


class Service:
    version = kant.__version__

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.policy = load_policy(config.policy)
        self.policy_name = self.policy.name
        self.quota_enforced = any(issubclass(p.cls, Quota) for p in self.policy.plugins)
        self.db = Database(config.db_url)
        self.metrics = ServiceMetrics()
        self.history = History()  # the dashboard's time series, fed by the loop
        self.auth = Authenticator(self.db)
        self.loop: ServiceLoop | None = None
        self.clock = make_clock("wall")
        self.writer = SubmitWriter(self.db, self.clock, lambda: self.loop, metrics=self.metrics)
        self.hub: EventHub | None = None
        self.lock = LeaderLock(self.db)
        self._tenants: set[str] = set()
        self._leader_url: tuple[float, str | None] = (0.0, None)
        self._stop = threading.Event()
        self._lead_thread: threading.Thread | None = None
        self._cluster: Cluster | None = None  # --cluster, registered if the database has no nodes
        self._demo_table: JobTable | None = None
        self.twin = Twin(self.twin_snapshot, version=self._state_version, runs=config.predict_runs,
                         min_interval_s=config.predict_every, predict_on=config.predict, metrics=self.metrics)
        self.whatif_gate = WhatIfGate(config.whatif_budget, config.whatif_queue)

    # --- start and stop ---------------------------------------------------------------------------
    def prepare(self) -> None:
        """Migrate the database, make sure an admin token exists, check the listen address."""
        cfg = self.config
        if cfg.cluster is not None:
            from kant.traces.registry import load_nodes

            self._cluster = load_nodes(cfg.cluster)
        self._wait_for_database()
        self.db.migrate()
        if cfg.admin_token:
            self.db.add_token_hash(cfg.admin_token, role="admin", name="operator")
        if not is_loopback(cfg.host) and self.db.count_tokens() == 0:
            raise KantError(f"refusing to listen on {cfg.host}, a non-loopback address, without tokens: give "
                            "KANT_ADMIN_TOKEN or --admin-token-file")
        if self.db.count_tokens() == 0:
            path = cfg.token_out or Path("kant-admin.token")
            token, _ = self.db.create_token(role="admin", name="generated")
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(token + "\n")
            log.warning("no token was configured: an admin token was written to %s (mode 600)", path)
        self._tenants = {t.name for t in self.db.list_tenants()}
        # a policy a live scheduler cannot run (an oracle, a quota derived from a trace) fails here
        Scheduler(self.policy, self._cluster or Cluster.uniform(1, 1), JobStore(tenant_names=sorted(self._tenants)))
        self.hub = EventHub(self.db)
        self.writer.start()

    def _wait_for_database(self) -> None:
        """A database that cannot be reached at start (a PostgreSQL server restarting, a pod started
        before its database) is tried again, waits doubling from 0.5 s to 2 s, for ``db_wait``
        seconds; then the last error is raised (the process exits 2). This is safe where retrying
        inside a running leader is not: nothing was loaded or scheduled yet. (A leader that loses
        its database exits 3; its supervisor starts it again, and it waits here.)"""
        deadline = time.monotonic() + self.config.db_wait
        delay = 0.5
        while True:
            try:
                self.db.ping()
                return
            except DatabaseError as exc:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                wait = min(delay, left)
                log.warning("%s; trying again in %.1f s (--db-wait: %.1f s left)", exc, wait, left)
                time.sleep(wait)
                delay = min(2 * delay, 2.0)

    def start(self) -> None:
        """Begin leader election in the background (the API answers meanwhile)."""
        self._lead_thread = threading.Thread(target=self._lead, name="kant-leader", daemon=True)
        self._lead_thread.start()

    def close(self) -> None:
        self._stop.set()
        self.twin.close()
        if self.loop is not None:
            self.loop.stop()
            self.loop.executor.close()
        self.writer.stop()
        if self.hub is not None:
            self.hub.close()
        self.lock.release()
        self.db.close()

    def run(self) -> None:
        """Serve until interrupted (uvicorn)."""
        import uvicorn

        self.prepare()
        self.start()
        app = create_app(self)
        mount_dashboard(app, self)
        config = uvicorn.Config(app, host=self.config.host, port=self.config.port, log_level=self.config.log_level,
                                access_log=False, server_header=False, timeout_graceful_shutdown=5)
        try:
            uvicorn.Server(config).run()
        finally:
            self.close()

    # --- leadership ------------------------------------------------------------------------------
    def _lead(self) -> None:
        t0 = time.monotonic()
        while not self._stop.is_set():
            try:
                epoch = self.lock.try_acquire()
            except KantError as exc:
                log.warning("leader election: %s", exc)
                epoch = None
            if epoch is not None:
                try:
                    self._become_leader(epoch)
                except KantError as exc:
                    log.error("cannot start as leader: %s", exc)
                    os._exit(2)
                except Exception:  # pragma: no cover - a bug: say so, with the traceback, and stop
                    log.exception("cannot start as leader")
                    os._exit(3)
                log.info("leader after %.2f s", time.monotonic() - t0)
                self._watch()
                return
            self._stop.wait(self.config.standby_poll_s)

    def _become_leader(self, epoch: int) -> None:
        cfg = self.config
        url = cfg.advertise_url or f"http://{cfg.host}:{cfg.port}"
        self.db.set_meta("leader_url", url)
        self.clock = make_clock(cfg.clock, speed=cfg.speed, start=self._clock_start())
        self.writer.clock = self.clock
        executor = make_executor(cfg.executor, ray_address=cfg.ray_address, log_dir=cfg.log_dir,
                                 checkpoint_dir=cfg.checkpoint_dir, start_timeout=cfg.start_timeout)
        found = executor.discover_nodes()  # (Ray's nodes: the cluster when --cluster is not given)
        assert self.hub is not None
        loop = ServiceLoop(self.db, self.policy, self.clock, executor, epoch=epoch,
                           default_estimate=cfg.default_estimate, seed=cfg.seed, on_events=self.hub.notify,
                           metrics=self.metrics, history=self.history)
        loop.load(self._cluster if self._cluster is not None or not found else Cluster.from_nodes(found))
        loop.start()
        self.loop = loop
        self.twin.start()
        log.info("leader (epoch %d) with policy %s, %s clock, %s executor", epoch, self.policy_name, cfg.clock,
                 cfg.executor)
        if cfg.demo is not None:
            threading.Thread(target=self._demo, name="kant-demo", daemon=True).start()

    def _clock_start(self) -> float:
        cfg = self.config
        if cfg.clock == "wall":
            return 0.0
        if cfg.clock_start is not None:
            return cfg.clock_start
        known = [t for t in (self.db.last_event_time(), _float(self.db.get_meta(CLOCK_KEY))) if t is not None]
        if known:
            return max(known)
        if cfg.demo is not None:
            return float(self._demo_jobs().submit.min())
        return 0.0

    def _watch(self) -> None:
        """Stop the process if the leadership is lost or the loop died (never two schedulers)."""
        while not self._stop.wait(0.5):
            loop = self.loop
            held = self.lock.still_held()
            if held and loop is not None and loop.alive:
                continue
            why = "the leader lock was lost" if not held else f"the scheduling loop stopped: {loop and loop.failed}"
            log.error("%s; exiting so that no second scheduler runs", why)
            os._exit(3)

    def leader_url(self) -> str | None:
        t, url = self._leader_url
        if time.monotonic() - t > 1.0:
            try:
                url = self.db.get_meta("leader_url")
            except KantError:
                url = None
            self._leader_url = (time.monotonic(), url)
        return url

    # --- helpers for the API ----------------------------------------------------------------------
    def view(self) -> LiveView | None:
        loop = self.loop
        return loop.view if loop is not None else None

    def tenant_exists(self, name: str) -> bool:
        if name in self._tenants:
            return True
        if self.db.get_tenant(name) is not None:
            self._tenants.add(name)
            return True
        return False

    def tenants_changed(self) -> None:
        self._tenants = {t.name for t in self.db.list_tenants()}
        loop = self.loop
        if loop is not None and loop.alive:
            loop.reload()

    def check_request(self, body: JobSubmit) -> None:
        """Refuse (422) a request no node of this cluster could ever hold; the policy's own rules
        (quotas, topology) are checked by the scheduler, which marks such a job unschedulable."""
        view = self.view()
        if view is None:
            return
        if body.gpu_type is not None:
            allowed = [t.strip() for t in body.gpu_type.split("|")]
            if not any(t in view.gpu_types for t in allowed):
                raise HTTPException(422, f"gpu_type: no node has GPU type {body.gpu_type}; the cluster has "
                                         f"{', '.join(view.gpu_types)}")
        if body.gpus_per_worker > view.max_gpus_per_node:
            raise HTTPException(422, f"gpus_per_worker: {body.gpus_per_worker} GPUs, but the largest node has "
                                     f"{view.max_gpus_per_node}")
        if body.workers * body.gpus_per_worker > view.total_gpus:
            raise HTTPException(422, f"workers: {body.workers} x {body.gpus_per_worker} GPUs is more than the "
                                     f"cluster's {view.total_gpus} GPUs")

    def pending_reasons(self, job_ids: list[int]) -> dict[int, str]:
        loop = self.loop
        if not job_ids or loop is None or not loop.alive:
            return {}
        result: dict[int, str] = loop.call(lambda lp: lp.reasons(job_ids))
        return result

    def why(self, job_id: int) -> WhyOut | None:
        loop = self.loop
        if loop is None or not loop.alive:
            return None
        try:
            data: dict[str, Any] = loop.call(lambda lp: lp.why(job_id))
        except KantError:
            return None
        why = WhyOut(id=job_id, **data)
        if why.state != "pending":
            return why
        summary = f"pending because {why.reason}"
        pred = self.twin.predicted(job_id)
        if pred is not None:
            why.prediction = PredictionOut(p50=pred.p50, p10=pred.p10, p90=pred.p90, as_of=pred.as_of, runs=pred.runs)
            why.prediction_text = describe_prediction(pred, self.clock.now())
            summary += f"; {why.prediction_text}"
        why.summary = summary
        return why

    # --- the digital twin -------------------------------------------------------------------------
    def twin_snapshot(self) -> TwinSnapshot | None:
        loop = self.loop
        if loop is None or not loop.alive:
            return None
        snap: TwinSnapshot = loop.call(lambda lp: lp.twin_snapshot(), timeout=60.0)
        return snap

    def _state_version(self) -> int | None:
        """What the twin compares to decide whether to predict again (None: nothing to predict: no
        leader, or no job waits, so no snapshot is taken)."""
        loop = self.loop
        if loop is None or not loop.alive or loop.view is None or not loop.view.queue_len:
            return None
        return loop.state_version

    def whatif(self, body: WhatIfIn, *, html: bool, who: str) -> dict[str, Any]:
        """Run the live state forward as it is and under ``body``'s scenarios (a worker process), for
        ``who`` (a tenant or an admin token: one request at a time each, :class:`WhatIfGate`)."""
        scenarios = []
        bundled = bundled_policies()
        for i, sc in enumerate(body.scenarios):
            where = f"scenarios.{i}"
            policy = None
            if isinstance(sc.policy, str):
                if sc.policy not in bundled:
                    raise HTTPException(422, f"{where}.policy: no bundled policy {sc.policy!r}; bundled: "
                                             f"{', '.join(sorted(bundled))}")
                policy = load_policy(sc.policy)
            elif sc.policy is not None:
                try:
                    policy = parse_policy(sc.policy, f"{where}.policy")
                except ConfigError as exc:
                    raise HTTPException(422, str(exc)) from None
            node = None if sc.node is None else NodeTemplate(sc.node.gpu_type, sc.node.gpus, sc.node.cpu_milli,
                                                             sc.node.memory_mib)
            scenarios.append(Scenario(sc.name, policy, sc.add_nodes, node, tuple(sc.drain),
                                      {t: (q.guaranteed, q.max) for t, q in sc.quotas.items()}))
        gate = self.whatif_gate
        try:
            with gate.enter(who), gate.turn():
                out = self.twin.whatif(scenarios, horizon_s=body.horizon_h * 3600.0, runs=body.runs, html=html,
                                       budget_s=gate.budget_s, hard_limit_s=gate.hard_limit_s())
        except Busy as exc:
            raise HTTPException(429, str(exc), headers={"Retry-After": str(math.ceil(exc.retry_after))}) from None
        except TooLong:
            log.warning("a what-if of %s was stopped after %g s without one run of each scenario", who,
                        gate.hard_limit_s())
            raise HTTPException(422, f"horizon_h, scenarios: not one run of each scenario finished within "
                                     f"{gate.hard_limit_s():g} s (twice this service's what-if budget of "
                                     f"{gate.budget_s:g} s, kant serve --whatif-budget): ask for a shorter "
                                     "horizon_h, fewer scenarios or fewer add_nodes") from None
        if "error" in out:
            raise HTTPException(422, str(out["error"]))
        return out

    # --- demo: replay a trace into the service ----------------------------------------------------
    def _demo_jobs(self) -> JobTable:
        if self._demo_table is None:
            from kant.traces.registry import load_trace

            jobs = load_trace(self.config.demo or "philly").sorted_by_submit()
            if self.config.demo_limit is not None:
                jobs = jobs.take(np.arange(min(self.config.demo_limit, len(jobs))))
            self._demo_table = jobs
        return self._demo_table

    def _demo(self) -> None:
        """Submit the trace's jobs at their times on the service clock (idempotent: a restart resumes)."""
        jobs = self._demo_jobs()
        for name in jobs.tenant_names:
            if not self.tenant_exists(name):
                with contextlib.suppress(KantError):  # another service made it meanwhile
                    self.db.create_tenant(name)
        self.tenants_changed()
        submit = jobs.submit.tolist()
        i, n = 0, len(jobs)
        log.info("demo: replaying %d jobs of %s", n, self.config.demo)
        while i < n and not self._stop.is_set():
            now = self.clock.now()
            batch: list[NewJob] = []
            while i < n and submit[i] <= now and len(batch) < 1000:
                est = float(jobs.estimate[i])
                dur = float(jobs.duration[i])
                batch.append(NewJob(
                    tenant=jobs.tenant_names[int(jobs.tenant[i])], user=jobs.user_names[int(jobs.user[i])],
                    name=jobs.names[i], workers=int(jobs.workers[i]), gpus_per_worker=int(jobs.gpus_per_worker[i]),
                    gpu_milli=int(jobs.gpu_milli[i]), gpu_type=jobs.gpu_type_name(i),
                    cpu_milli=int(jobs.cpu_milli[i]), memory_mib=int(jobs.memory_mib[i]),
                    priority=int(jobs.priority[i]), estimate_s=est if math.isfinite(est) else
                    (dur if math.isfinite(dur) and dur > 0 else None),
                    duration_s=dur if math.isfinite(dur) else None, idempotency_key=f"demo-{i}"))
                i += 1
            if batch:
                try:
                    self.writer.submit_sync(batch)
                except KantError as exc:
                    log.warning("demo: a submit failed: %s", exc)
                continue
            delay = self.clock.wall_delay(submit[i]) if i < n else 0.0
            self._stop.wait(min(max(delay, 0.001), 1.0))
        log.info("demo: every job of the trace was submitted")
