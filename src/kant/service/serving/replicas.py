"""The live replicas of inference services: what runs them, knows when they serve, replaces them,
rolls them to a new command, scales them, and measures how long a scale-up (and a reclaim) takes.

:class:`ServingRoom` is one room of the scheduling loop, used on the loop's thread, except its prober
(:mod:`.prober`), a thread of its own that asks each replica's readiness path and wakes the loop when
something needs acting on. The loop calls it at four points of a turn:

- :meth:`ServingRoom.exec_event`: an executor event, before the live state hears it (why a replica's
  run ended);
- :meth:`ServingRoom.tend`: once per turn on a moving clock, before the cycle: ended replicas leave
  the endpoints, replicas the prober gave up on are stopped, drained replicas are stopped, each
  autoscaler decides when its period is up, and each service is brought to its replica count
  (replacing what ended, with backoff; rolling to a new command; scaling down by draining);
- :meth:`ServingRoom.stopping`: the turn's stops, before the executor gets them (a stopped replica is
  drained at once; an eviction of a training job in the same turn makes the replicas launched with it
  reclaims);
- :meth:`ServingRoom.prepare`: a replica's launch, before the executor gets it: where it listens
  (``PORT``, ``KANT_PORT``, ``KANT_HOST``) and its endpoint registered, not ready.

Rules (docs/inference.md, "Live"):

- **Ready.** A replica serves once its ``ready_path`` answers 2xx; before that it gets no requests.
  One that is not ready within the service's ``ready_timeout_s``, or that fails
  :data:`FAILS_AFTER_READY` probes in a row after it was ready with no 2xx for ``ready_timeout_s``,
  is stopped (its job ends ``failed`` with the reason). A failed probe takes a ready replica out of
  the route at once; the time condition keeps a replica that is only slow (busy, CPUs contended)
  from being killed for it.
- **Replace with backoff.** A replica that ended (its process exited, it was stopped by a probe
  verdict) is a failure of the service: the next replica is started after a backoff of
  :data:`BACKOFF_FIRST_S` doubling to :data:`BACKOFF_MAX_S` (one at a time while failures last).
  After :data:`DEGRADED_AFTER` failures in a row the service is ``degraded`` with the last reason; a
  replica that becomes ready clears both.
- **Rolling update.** When the command changes, one new replica is started beside the old ones; once
  every new replica is ready, one old replica is drained and stopped; and so on. Ready replicas never
  drop below what they were, so never below ``min_replicas``.
- **Draining.** A replica kant takes away (scale down, rolling update) gets no new requests at once
  and is stopped once the requests it had are answered (no request at it, at least
  :data:`DRAIN_MIN_S` after the drain began), or ``drain_s`` after the drain began at the latest;
  one stopped by the scheduler (an eviction) or a user is drained as it stops.
"""

from __future__ import annotations

import dataclasses
import logging
import shlex
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kant.inference.replicas import scale_down_victims
from kant.service.db.database import Database
from kant.service.db.services import ServiceRow
from kant.service.executors.base import ExecEvent, Executor, Launch, StopWhy
from kant.service.live.scaling import add_replicas, replica_ids
from kant.service.live.state import LiveState
from kant.service.serving.autoscale import LiveAutoscaler
from kant.service.serving.endpoints import Endpoint, Endpoints
from kant.service.serving.ports import NoFreePort, PortBook
from kant.service.serving.prober import Probed, Prober
from kant.service.serving.signals import LoadSignals

__all__ = ["ServingRoom", "Replica", "BACKOFF_FIRST_S", "BACKOFF_MAX_S", "DEGRADED_AFTER", "DRAIN_MAX_S",
           "DRAIN_MIN_S", "FAILS_AFTER_READY", "backoff_s"]

BACKOFF_FIRST_S = 1.0  # the wait before the first replacement
BACKOFF_MAX_S = 60.0  # the longest wait
DEGRADED_AFTER = 3  # failures in a row that make the service degraded
FAILS_AFTER_READY = 3  # failed probes in a row that stop a replica that was ready
DRAIN_MIN_S = 0.5  # a drained replica is stopped once idle, but not sooner than this after the drain
DRAIN_MAX_S = 30.0  # nor later than this (Kubernetes' default termination grace period)
_REFRESH_S = 1.0  # wall seconds between two reads of the services table
_KEPT = 1000  # latencies kept per service

log = logging.getLogger("kant.serve")


def backoff_s(failures: int) -> float:
    """The wait before the next replica after ``failures`` failures in a row (0: none)."""
    if failures <= 0:
        return 0.0
    return min(BACKOFF_FIRST_S * 2.0 ** (failures - 1), BACKOFF_MAX_S)


@dataclass
class Replica:
    """One launched run of a replica, as the room and its prober know it."""

    service_id: int
    service: str
    job_id: int
    run: int
    node: str
    host: str
    port: int
    booked: bool  # the port is the room's (port 0): released when the run ends
    ready_path: str
    ready_timeout_s: float
    launched: float  # monotonic
    decided: float  # monotonic time of the scale decision that asked for it
    reclaim: bool  # started in a turn that evicted training (GPUs taken back)
    ready_at: float | None = None  # monotonic, first 2xx
    last_ok: float = 0.0  # monotonic, last 2xx
    fails: int = 0  # failed probes in a row after it was ready
    verdict: str | None = None  # the prober's: why it must be stopped
    ended: str | None = None  # why its run ended (the executor's report)
    counted: bool = False  # its becoming ready was taken into account (tend)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.ready_path}"


@dataclass
class _Book:
    """What the room keeps of one service between turns."""

    failures: int = 0  # replicas that failed in a row
    next_try: float = 0.0  # monotonic: no replacement before
    degraded: str | None = None
    reason: str | None = None  # the last failure's
    decided: dict[int, float] = field(default_factory=dict)  # replica job -> monotonic time it was asked for
    stopping: dict[int, tuple[float, str]] = field(default_factory=dict)  # job -> (drain began, why)
    autoscaler: LiveAutoscaler | None = None
    bad_autoscaler: tuple[str | None, int, int] | None = None  # settings found not valid (not tried again)
    reclaims: int = 0
    reclaim_s: deque[float] = field(default_factory=lambda: deque(maxlen=_KEPT))
    scale_up_s: deque[float] = field(default_factory=lambda: deque(maxlen=_KEPT))


class ServingRoom:
    """The live replicas (see the module docstring). ``in_flight(service, job)`` is the number of
    requests at a replica now (the request route's count); without it a drained replica is stopped
    ``drain_s`` after its drain began."""

    def __init__(self, db: Database, live: LiveState, executor: Executor, endpoints: Endpoints, *,
                 metrics: Any = None, signals: Callable[[], LoadSignals | None] | None = None,
                 in_flight: Callable[[int, int], int] | None = None,
                 drain_s: float = DRAIN_MAX_S, probe_every_s: float = 0.5) -> None:
        self.db = db
        self.live = live
        self.executor = executor
        self.endpoints = endpoints
        self.metrics = metrics
        self.signals = signals or (lambda: None)
        self.in_flight = in_flight
        self.drain_s = drain_s
        self.ports = PortBook()
        self.wake: Callable[[], None] = lambda: None  # set by the loop
        self._lock = threading.Lock()  # guards the replicas (the prober writes probe results)
        self._replicas: dict[int, Replica] = {}  # job -> its launched run
        self._books: dict[int, _Book] = {}
        self._rows: dict[int, ServiceRow] = {}
        self._rows_at = -float("inf")
        self._preempted = False  # this turn's stops evicted a training job
        self.prober = Prober(self, probe_every_s)

    # --- the thread -----------------------------------------------------------------------------------
    def start(self) -> None:
        self.prober.start()

    def close(self) -> None:
        self.prober.stop()

    # --- read by the prober (its thread) --------------------------------------------------------------
    def to_probe(self) -> list[Replica]:
        with self._lock:
            return [r for r in self._replicas.values() if r.verdict is None and r.ended is None]

    def probed(self, replica: Probed, ok: bool, now: float) -> bool:
        """A probe's result; True when the loop must act (ready now, or a verdict)."""
        assert isinstance(replica, Replica)
        with self._lock:
            if self._replicas.get(replica.job_id) is not replica or replica.verdict is not None:
                return False
            if ok:
                replica.fails = 0
                replica.last_ok = now
                first = replica.ready_at is None
                if first:
                    replica.ready_at = now
                self.endpoints.set_ready(replica.service_id, replica.job_id, True)
                return first
            if replica.ready_at is None:
                if now - replica.launched > replica.ready_timeout_s:
                    replica.verdict = (f"readiness path {replica.ready_path} did not answer 2xx within "
                                       f"{replica.ready_timeout_s:g} s")
                    return True
                return False
            replica.fails += 1
            self.endpoints.set_ready(replica.service_id, replica.job_id, False)
            if replica.fails >= FAILS_AFTER_READY and now - replica.last_ok >= replica.ready_timeout_s:
                replica.verdict = (f"readiness path {replica.ready_path} stopped answering 2xx "
                                   f"({replica.fails} probes in a row)")
                return True
            return False

    def busy(self) -> bool:
        """Whether the loop should turn soon (replicas, timers, autoscalers)."""
        try:
            return bool(self._replicas or any(b.stopping or b.autoscaler is not None or b.failures
                                              for b in list(self._books.values())))
        except RuntimeError:  # (the loop changed the books meanwhile)
            return True

    # --- the loop's hooks ------------------------------------------------------------------------------
    def exec_event(self, ev: ExecEvent) -> None:
        """An executor event (before the live state applies it): why a replica's run ended."""
        with self._lock:
            r = self._replicas.get(ev.job_id)
            if r is None or r.run != ev.run:
                return
            if ev.kind in ("finished", "failed"):
                code = "" if ev.exit_code is None else f" with code {ev.exit_code}"
                reason = ev.reason or f"exited{code}"
                r.ended = f"replica {reason}" if reason.startswith("exited") else f"replica: {reason}"
            else:
                r.ended = ""  # lost, or could not start where placed: requeued, not the service's failure

    def stopping(self, stops: Sequence[tuple[int, StopWhy]]) -> None:
        """The turn's stops, before the executor gets them."""
        active = self.live.active
        self._preempted = False
        for job_id, why in stops:
            r = self._replicas.get(job_id)
            if r is not None:
                self.endpoints.drain(r.service_id, job_id)
            info = active.get(job_id)
            if why == "preempt" and r is None and (info is None or info.service_id is None):
                self._preempted = True

    def prepare(self, launch: Launch) -> Launch:
        """A launch with where a replica listens (a service's replica with a command; others as they are)."""
        info = self.live.active.get(launch.job_id)
        if info is None or info.service_id is None:
            return launch
        row = self._row(info.service_id)
        if row is None or row.command is None:
            return launch
        node = launch.nodes[0]
        host = self.executor.host(node)
        booked = row.port == 0
        command = launch.command
        try:
            port = self.ports.pick(node, host) if booked else row.port
        except NoFreePort as exc:  # the run fails at once; the service's failure rules (backoff, degraded) follow
            port, booked = 0, False
            command = f"echo {shlex.quote(f'kant: {exc}')} >&2; exit 1"
        env = {**launch.env, "PORT": str(port), "KANT_PORT": str(port), "KANT_HOST": host}
        book = self._book(row.id)
        now = time.monotonic()
        replica = Replica(row.id, row.name, launch.job_id, launch.run, node, host, port, booked, row.ready_path,
                          row.ready_timeout_s, now, book.decided.pop(launch.job_id, now), self._preempted)
        with self._lock:
            old = self._replicas.get(launch.job_id)
            if old is not None and old.booked:
                self.ports.release(old.host, old.port)
            self._replicas[launch.job_id] = replica
        self.endpoints.add(Endpoint(row.id, launch.job_id, launch.run, host, port))
        if replica.reclaim:
            book.reclaims += 1
            if self.metrics is not None:
                self.metrics.service_reclaims.labels(str(row.id)).inc()
        return dataclasses.replace(launch, env=env, service=row.name, command=command)

    def tend(self, now: float) -> None:
        """Once per turn on a moving clock (see the module docstring); ``now`` is the service time."""
        mono = time.monotonic()
        self._refresh(mono)
        self._settle(now, mono)
        for book_id, book in list(self._books.items()):
            row = self._rows.get(book_id)
            for job_id, (began, why) in list(book.stopping.items()):
                if row is None or self._drained(book_id, job_id, mono - began):
                    del book.stopping[job_id]
                    if job_id in self.live.active:
                        self.live.cancel(job_id, None, why, now)
            if row is None:
                continue
            if book.autoscaler is not None:
                row = self._autoscale(row, book, mono)
            if row.command is not None or row.autoscaler is not None:
                self._reconcile(row, book, now, mono)

    def _drained(self, service_id: int, job_id: int, draining_s: float) -> bool:
        """Whether a draining replica may be stopped now (see the module docstring). The minimum
        covers a request the route picked the replica for just before the drain, on its own thread."""
        if draining_s >= self.drain_s:
            return True
        if self.in_flight is None or draining_s < DRAIN_MIN_S:
            return False
        return self.in_flight(service_id, job_id) == 0

    def scale(self, service_id: int, replicas: int, now: float) -> bool:
        """A user's scale of a service whose replicas the room runs (a command or an autoscaler): the
        count stored and the service brought to it at once, extra replicas drained as a scale down
        drains them. False (nothing done) for a service the room does not run."""
        row = self.db.services.get(service_id)
        if row is None or row.state != "active" or (row.command is None and row.autoscaler is None):
            return False
        if row.replicas != replicas:
            row = self.db.services.update(service_id, replicas=replicas)
        self._rows[service_id] = row  # (the cached row would undo the scale until the next refresh)
        self._reconcile(row, self._book(service_id), now, time.monotonic())
        return True

    # --- reads (any thread) ------------------------------------------------------------------------------
    def stats(self, service_id: int) -> dict[str, Any]:
        """The service's replicas now and its scale-up and reclaim latencies (the API's)."""
        book = self._books.get(service_id, _Book())
        with self._lock:  # (the loop appends latencies under it)
            starting = sum(1 for r in self._replicas.values() if r.service_id == service_id and r.ready_at is None)
            reclaim_s, scale_up_s = list(book.reclaim_s), list(book.scale_up_s)
        return {
            "ready_replicas": len(self.endpoints.ready(service_id)),
            "starting_replicas": starting,
            "failures": book.failures,
            "degraded": book.degraded,
            "last_failure": book.reason,
            "reclaims": book.reclaims,
            "reclaim_p50_s": _pct(reclaim_s, 50),
            "reclaim_p99_s": _pct(reclaim_s, 99),
            "scale_up_p50_s": _pct(scale_up_s, 50),
            "scale_up_p99_s": _pct(scale_up_s, 99),
            "load": None if book.autoscaler is None else book.autoscaler.last_load,
        }

    # --- inside -------------------------------------------------------------------------------------------
    def _book(self, service_id: int) -> _Book:
        return self._books.setdefault(service_id, _Book())

    def _row(self, service_id: int) -> ServiceRow | None:
        row = self._rows.get(service_id)
        if row is None:
            row = self.db.services.get(service_id)
            if row is not None and row.state == "active":
                self._rows[service_id] = row
        return row

    def changed(self) -> None:
        """A service was created or changed: read the table again at the next turn."""
        self._rows_at = -float("inf")

    def _refresh(self, mono: float) -> None:
        if mono - self._rows_at < _REFRESH_S:
            return
        self._rows_at = mono
        self._rows = {r.id: r for r in self.db.services.list()}
        for sid, row in self._rows.items():
            book = self._books.get(sid)
            if row.degraded is not None and book is None:  # (after a restart)
                book = self._book(sid)
                book.degraded = book.reason = row.degraded
            if row.autoscaler is None:
                if book is not None:
                    book.autoscaler = None
                continue
            book = self._book(sid)
            key = LiveAutoscaler.key_of(row)
            if (book.autoscaler is None or book.autoscaler.key != key) and book.bad_autoscaler != key:
                try:
                    book.autoscaler = LiveAutoscaler(row, mono)
                except ValueError as exc:  # (the API validated it; a row written otherwise is skipped, said once)
                    log.error("service %s: its autoscaler settings are not valid, it is not autoscaled: %s",
                              row.name, " ".join(str(exc).split()))
                    book.autoscaler, book.bad_autoscaler = None, key

    def _settle(self, now: float, mono: float) -> None:
        """Ended runs leave; verdicts stop their replicas; replicas that became ready count."""
        live, running = self.live, self.live.sched.running
        with self._lock:
            replicas = list(self._replicas.values())
        for r in replicas:
            info = live.active.get(r.job_id)
            alive = info is not None and info.runs == r.run and info.row in running
            book = self._book(r.service_id)
            if alive and r.verdict is not None:
                live.fail(r.job_id, r.verdict, now)
                self._failed(r.service_id, book, r.verdict, mono)
                alive = False
            elif not alive and r.ended and r.job_id not in book.stopping:
                self._failed(r.service_id, book, r.ended, mono)
            if not alive:
                with self._lock:
                    self._replicas.pop(r.job_id, None)
                self.endpoints.remove(r.service_id, r.job_id)
                if r.booked:
                    self.ports.release(r.host, r.port)
                continue
            if r.ready_at is not None and not r.counted:
                r.counted = True
                self._ready(r, book)

    def _ready(self, r: Replica, book: _Book) -> None:
        assert r.ready_at is not None
        took = r.ready_at - r.decided
        with self._lock:
            book.scale_up_s.append(took)
            if r.reclaim:
                book.reclaim_s.append(took)
        if r.reclaim and self.metrics is not None:
            self.metrics.service_reclaim_seconds.labels(str(r.service_id)).observe(took)
        if book.failures or book.degraded is not None:
            book.failures, book.next_try = 0, 0.0
            if book.degraded is not None:
                book.degraded = None
                self.db.services.update(r.service_id, degraded=None)

    def _failed(self, service_id: int, book: _Book, reason: str, mono: float) -> None:
        book.failures += 1
        book.reason = reason
        book.next_try = mono + backoff_s(book.failures)
        if book.failures >= DEGRADED_AFTER and book.degraded != reason:
            book.degraded = reason
            self.db.services.update(service_id, degraded=reason[:2000])
        if self.metrics is not None:
            self.metrics.service_replica_failures.labels(str(service_id)).inc()

    def _autoscale(self, row: ServiceRow, book: _Book, mono: float) -> ServiceRow:
        """The autoscaler's decision, when its period is up, stored as the replica count; the row now."""
        assert book.autoscaler is not None
        desired = book.autoscaler.tick(mono, row, self.signals())
        if desired is None or desired == row.replicas:
            return row
        row = self._rows[row.id] = self.db.services.update(row.id, replicas=desired)
        return row

    def _reconcile(self, row: ServiceRow, book: _Book, now: float, mono: float) -> None:
        """Bring the service to its replica count: replace, roll, scale down (see the module docstring)."""
        live = self.live
        mine = [j for j in replica_ids(live, row.id) if j not in book.stopping]
        for j in mine:  # a replica asked for since the last turn (here, or by a user's scale): its decision
            if j not in book.decided and j not in self._replicas:
                book.decided[j] = mono
        if len(book.decided) > len(mine):  # (replicas cancelled before they started)
            keep = set(mine)
            book.decided = {j: t for j, t in book.decided.items() if j in keep}
        target = row.replicas
        old = [j for j in mine if live.active[j].command != row.command]
        want = target + 1 if old and target > 0 else target
        if old and not book.stopping and len(mine) > target:
            new = [j for j in mine if j not in old]
            ready = {e.job_id for e in self.endpoints.ready(row.id)}
            if all(j in ready for j in new):  # the surge is ready: one old replica goes
                self._take_away([old[0]], row, book, now, mono, f"rolling update of service {row.name}")
                return
        if len(mine) < want and mono >= book.next_try and not (old and book.stopping):
            count = 1 if (book.failures or old) else want - len(mine)
            for job_id in add_replicas(live, self.db, row, count, now):
                book.decided[job_id] = mono
        elif len(mine) > want:
            running = live.sched.running
            starts = [running[live.active[j].row].start if live.active[j].row in running else None for j in mine]
            victims = [mine[k] for k in scale_down_victims(starts, len(mine) - want)]
            self._take_away(victims, row, book, now, mono, f"scale of service {row.name} to {target}")

    def _take_away(self, jobs: Sequence[int], row: ServiceRow, book: _Book, now: float, mono: float,
                   why: str) -> None:
        """Drain running replicas (stopped once idle, see :meth:`_drained`); cancel queued ones at once."""
        running = self.live.sched.running
        for job_id in jobs:
            info = self.live.active[job_id]
            book.decided.pop(job_id, None)
            if info.row in running and self.endpoints.get(row.id, job_id) is not None:
                self.endpoints.drain(row.id, job_id)
                book.stopping[job_id] = (mono, why)
            else:
                self.live.cancel(job_id, None, why, now)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))

