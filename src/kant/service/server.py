"""The process of ``kant serve``: its database, leader election, scheduling loop, submit writer,
event hub, metrics and twin, started and stopped (:class:`Service`). It knows nothing of HTTP: the
API (:mod:`kant.service.api`) and the dashboard read its handles, and :mod:`kant.service.serve`
puts the three together on uvicorn.

Several services may share one PostgreSQL database: they elect a leader with an advisory lock
(:class:`~kant.service.db.LeaderLock`); only the leader schedules and accepts writes, the others
stand by (``/readyz`` answers 503, writes are refused with the leader's address) and poll the lock.
When the leader dies its connection closes, PostgreSQL frees the lock and a standby takes over: it
bumps the leader epoch (writes of an older leader are then refused: fencing) and rebuilds the
scheduler from the database. A leader that loses the lock stops at once (the process exits) rather
than schedule next to another leader. SQLite allows one service per file (a file lock).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import threading
import time
from pathlib import Path

from kant.config.policy import load_policy
from kant.errors import KantError
from kant.inference.services import ServicesConfig
from kant.model.cluster import Cluster
from kant.model.store import JobStore
from kant.scheduler import Scheduler
from kant.service import queries
from kant.service.auth import Authenticator
from kant.service.clock import make_clock
from kant.service.config import ServeConfig
from kant.service.db.database import Database
from kant.service.db.leader import LeaderLock
from kant.service.demo import UNIFIED, Demo, DemoTraffic, UnifiedDemo, unified_services
from kant.service.errors import DatabaseError, NotLeader
from kant.service.events import EventHub
from kant.service.executors import make_executor
from kant.service.history import History
from kant.service.loop import CLOCK_KEY, ServiceLoop
from kant.service.metrics import ServiceMetrics
from kant.service.queues_config import QueuesConfig
from kant.service.serving.endpoints import Endpoints
from kant.service.serving.measure import Traffic
from kant.service.serving.signals import LoadSignals
from kant.service.tenants import Tenants
from kant.service.tokenfile import TokenFile
from kant.service.twin import Twin, WhatIfGate, default_predict_workers
from kant.service.writer import SubmitWriter

__all__ = ["Service", "is_loopback"]

log = logging.getLogger("kant.serve")


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
    """The process of ``kant serve``: it prepares the database, stands for leader, runs the scheduling
    loop while it leads, and stops; it owns the handles the API and the dashboard read (``db``,
    ``loop``, ``writer``, ``hub``, ``twin``, ``tenants``, ...). What a request does with them is
    in the use-case modules (:mod:`.admission`, :mod:`.queries`, :mod:`.whatif`); the HTTP of it
    in :mod:`kant.service.api`; the three are put together by :mod:`kant.service.serve`."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        #: the tree of queues in force (kant serve --queues FILE, or an admin's through the API)
        self.queues = QueuesConfig(load_policy(config.policy), None if config.queues is None else str(config.queues))
        self.policy = self.queues.policy()
        self.policy_name = self.policy.name
        #: tenants' quotas apply under every policy (a quota plugin is added where the policy has none:
        #: kant.service.live.state.LiveState.policy)
        self.quota_enforced = True
        self.db = Database(config.db_url)
        self.metrics = ServiceMetrics()
        self.history = History()  # the dashboard's time series, fed by the loop
        self.auth = Authenticator(self.db)
        self.loop: ServiceLoop | None = None
        self.clock = make_clock("wall")
        self.writer = SubmitWriter(self.db, self.clock, lambda: self.loop, metrics=self.metrics)
        self.hub: EventHub | None = None
        self.lock = LeaderLock(self.db)
        self.tenants = Tenants(self.db, lambda: self.loop)
        self._leader_url: tuple[float, str | None] = (0.0, None)
        self._stop = threading.Event()
        self._closed = False
        self._lead_thread: threading.Thread | None = None
        self._cluster: Cluster | None = None  # --cluster, registered if the database has no nodes
        #: --demo unified: a training replay, a service with real replicas and its traffic (kant.service.demo)
        self.unified = UnifiedDemo() if config.demo == UNIFIED else None
        u = self.unified
        self.demo = (Demo(u.trace, config.demo_limit or u.limit, u.start_s) if u is not None
                     else Demo(config.demo, config.demo_limit, config.demo_start, config.estimate_noise,
                               config.estimate_noise_seed) if config.demo is not None else None)
        self.twin = Twin(lambda: queries.twin_snapshot(self.loop), version=lambda: queries.state_version(self.loop),
                         runs=config.predict_runs, min_interval_s=config.predict_every, predict_on=config.predict,
                         metrics=self.metrics, workers=config.predict_workers or default_predict_workers())
        self.whatif_gate = WhatIfGate(config.whatif_budget, config.whatif_queue,
                                      shown=self.metrics.whatif_requests)
        self.endpoints = Endpoints()  # where services' replicas listen (the replicas write, the request route reads)
        self.token_file: TokenFile | None = None  # the admin token file this service writes when ready
        self.traffic = Traffic(self.metrics)  # what the request route measures
        #: what the live autoscaler reads: the route's measurements (a test may give its own)
        self.signals: LoadSignals = self.traffic

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
            self.db.tokens.add_hash(cfg.admin_token, role="admin", name="operator")
        if not is_loopback(cfg.host) and self.db.tokens.count() == 0:
            raise KantError(f"refusing to listen on {cfg.host}, a non-loopback address, without tokens: give "
                            "KANT_ADMIN_TOKEN or --admin-token-file")
        if self.db.tokens.count() == 0:  # an admin token is made and written once the service is ready
            self.token_file = TokenFile(cfg.token_out or Path("kant-admin.token"))
            self.token_file.claim()
        self.tenants.load()
        # a policy a live scheduler cannot run (an oracle, a quota derived from a trace) fails here
        Scheduler(self.policy, self._cluster or Cluster.uniform(1, 1), JobStore(tenant_names=self.tenants.names()))
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

    def ready(self) -> None:
        """The API listens: write the admin token file, if this service makes one (:meth:`prepare`)."""
        if self.token_file is not None and self.db.tokens.count() == 0:
            token, _ = self.db.tokens.create(role="admin", name="generated")
            self.token_file.write(token)
            log.warning("no token was configured: an admin token was written to %s (mode 600)", self.token_file.path)

    def start(self) -> None:
        """Begin leader election in the background (the API answers meanwhile)."""
        self._lead_thread = threading.Thread(target=self._lead, name="kant-leader", daemon=True)
        self._lead_thread.start()

    def close(self) -> None:
        """Stop everything (the replicas' processes too); a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self.twin.close()
        if self.loop is not None:
            self.loop.stop()
            self.loop.executor.close()
        self.writer.stop()
        if self.hub is not None:
            self.hub.close()
        self.lock.release()
        if self.token_file is not None:
            self.token_file.release()
        self.db.close()

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
                except Exception as exc:
                    if self._stop.is_set():  # stopped (SIGTERM) while loading: the database was closed under it
                        log.info("stopped while starting as leader")
                        return
                    if isinstance(exc, KantError):
                        log.error("cannot start as leader: %s", exc)
                        os._exit(2)
                    log.exception("cannot start as leader")  # pragma: no cover - a bug: say so and stop
                    os._exit(3)
                if self._stop.is_set():
                    return
                log.info("leader after %.2f s", time.monotonic() - t0)
                self._watch()
                return
            self._stop.wait(self.config.standby_poll_s)

    def _become_leader(self, epoch: int) -> None:
        cfg = self.config
        url = cfg.advertise_url or f"http://{cfg.host}:{cfg.port}"
        self.db.meta.set("leader_url", url)
        self.clock = make_clock(cfg.clock, speed=cfg.speed, start=self._clock_start())
        self.writer.clock = self.clock
        self.queues.load(self.db)  # (the tree an admin set through the API wins over --queues FILE)
        self.policy = self.queues.policy()
        executor = make_executor(cfg.executor, cfg.executor_settings)
        found = executor.discover_nodes()  # (Ray's nodes: the cluster when --cluster is not given)
        assert self.hub is not None
        loop = ServiceLoop(self.db, self.policy, self.clock, executor, epoch=epoch,
                           default_estimate=cfg.default_estimate, seed=cfg.seed, on_events=self.hub.notify,
                           metrics=self.metrics, history=self.history, endpoints=self.endpoints,
                           signals=lambda: self.signals, in_flight=self.traffic.at)
        loop.load(self._cluster if self._cluster is not None or not found else Cluster.from_nodes(found))
        if self._stop.is_set():  # closed while loading: start nothing
            executor.close()
            return
        loop.start()
        self.loop = loop
        if cfg.services is not None:
            from kant.inference.services import load_services

            self._declare(load_services(cfg.services), loop)
        if self.unified is not None:
            self._declare(unified_services(self.unified), loop)
        self.twin.start()
        log.info("leader (epoch %d) with policy %s, %s clock, %s executor", epoch, self.policy_name, cfg.clock,
                 cfg.executor)
        demo = self.demo
        if demo is not None:
            threading.Thread(target=demo.replay, args=(self.tenants, self.writer, self.clock, self._stop),
                             name="kant-demo", daemon=True).start()
        if self.unified is not None:
            host = "127.0.0.1" if cfg.host in ("", "0.0.0.0", "::") else cfg.host
            traffic = DemoTraffic(self.unified, f"http://{'[' + host + ']' if ':' in host else host}:{cfg.port}")
            threading.Thread(target=traffic.run, args=(self.db, self.endpoints, self._stop), name="kant-demo-traffic",
                             daemon=True).start()

    def _declare(self, config: ServicesConfig, loop: ServiceLoop) -> None:
        """Create or update the services of ``--services`` or the demo (:mod:`kant.service.declared`)."""
        from kant.service.declared import apply_services

        config.check_cluster(loop.live.cluster())
        for line in apply_services(config, self.db, self.tenants, loop):
            log.info("%s: %s", config.source, line)

    def _clock_start(self) -> float:
        cfg = self.config
        if cfg.clock == "wall":
            return 0.0
        if cfg.clock_start is not None:
            return cfg.clock_start
        known = [t for t in (self.db.events.last_time(), _float(self.db.meta.get(CLOCK_KEY))) if t is not None]
        if known:
            return max(known)
        if self.demo is not None:
            return self.demo.first_submit()
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
                url = self.db.meta.get("leader_url")
            except KantError:
                url = None
            self._leader_url = (time.monotonic(), url)
        return url

    def leading(self) -> ServiceLoop:
        """The scheduling loop, when this service leads; on a standby :class:`NotLeader`, which says
        where the leader is (when known) and to try again in a second."""
        loop = self.loop
        if loop is None or not loop.alive:
            where = self.leader_url()
            raise NotLeader("this service is a standby, not the leader" + (f"; the leader is {where}" if where else ""),
                            where, retry_after=1.0)
        return loop
