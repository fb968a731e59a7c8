"""The scheduling loop: the one writer of the live service's in-memory scheduler.

API handlers never touch the :class:`~kant.scheduler.Scheduler`. They write to the database (a
submit is acknowledged once committed) and hand the loop a command through its inbox; reads of live
state (why a job waits, its place in the queue) are commands too, answered from the loop's thread.
Each turn of the loop:

1. takes every command waiting in the inbox and the executor's events that are due;
2. applies them to the scheduler (arrivals, ends, cancels, node changes);
3. runs one scheduling cycle if anything changed and jobs wait; the commit hands every start and
   eviction to the loop (the scheduler's :class:`~kant.framework.statement.Binder`);
4. writes every change of this turn to the database in one transaction (fenced by the leader
   epoch), and only then starts and stops work on the executor, publishes events, and answers the
   commands that wait for it.

The database is the truth after a crash: :meth:`ServiceLoop.load` rebuilds the scheduler from it
(pending jobs queued again, running jobs placed where they run, node states), as Slurm's state save
or Kubernetes' informers do. Finished jobs leave memory: once they outnumber the active ones the
scheduler is rebuilt on a store of the active jobs only (:meth:`ServiceLoop.compact`).

With the manual clock (:class:`~kant.service.clock.ManualClock`) the loop runs cycles only when the
clock is advanced, and processes every instant in between as the simulator does (the events due at
it, then one cycle): a trace driven through the service then gives the simulator's results.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from kant.config.policy import Policy
from kant.errors import KantError
from kant.framework.status import Status
from kant.metrics.summary import BUCKETS
from kant.metrics.summary import gang_bucket as bucket_index
from kant.model.cluster import Cluster, NodeSpec
from kant.model.job import JobKind
from kant.model.state import Placement
from kant.model.store import JobStore
from kant.plugins.quota import Quota, with_tenant_quotas
from kant.scheduler import CORDONED, DOWN, RunningRecord, Scheduler, SchedulerSnapshot
from kant.service.clock import Clock, ManualClock, WallClock
from kant.service.db.database import Database
from kant.service.db.events import NewEvent
from kant.service.db.jobs import JobUpdate, NewJob
from kant.service.db.nodes import NodeRow, NodeUpdate
from kant.service.db.schema import UNSET
from kant.service.db.tenants import TenantRow
from kant.service.errors import Conflict, DatabaseError, Fenced, Invalid, NotFound
from kant.service.executors.base import NODE_LOST_PREFIX, ExecEvent, Executor, Launch, NodeEvent
from kant.stamp import Stamped
from kant.twin.snapshot import TwinSnapshot

__all__ = ["ServiceLoop", "Arrival", "LiveView", "NodeView", "gang_bucket", "CLOCK_KEY"]

#: meta key of the last time of a manual or accelerated clock (where a restart resumes)
CLOCK_KEY = "clock_now"

log = logging.getLogger("kant.serve")

def gang_bucket(total_gpus: int) -> str:
    """The gang-size bucket of docs/metrics.md a job of ``total_gpus`` GPUs falls in."""
    return BUCKETS[int(bucket_index(total_gpus))]


@dataclass(frozen=True, slots=True)
class Arrival:
    """A job the database has accepted: its id, what was submitted, and its submit time."""

    id: int
    job: NewJob
    submit_time: float


@dataclass(slots=True)
class _Active:
    """What the loop keeps of a pending or running job beyond the scheduler's store."""

    id: int
    row: int
    tenant: str
    submit_time: float
    total_gpus: int
    runs: int = 0
    first_start: float | None = None
    start: float | None = None
    planned: float = math.nan  # the run time its current run was planned with (env.estimate at start)
    duration_s: float | None = None
    command: str | None = None
    labels: Mapping[str, Any] = field(default_factory=dict)
    service_id: int | None = None
    requeued: str | None = None  # why its last run ended and it waits again (until it starts)
    queued_cycle: int = 0  # the scheduler's cycle count when it (re)joined the queue


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    gpu_type: str
    gpus: int
    used_gpus: int
    state: str  # up, cordoned, draining, drained, down
    leaf: str
    spine: str
    cpu_milli: int
    memory_mib: int


@dataclass(frozen=True)
class LiveView:
    """What the loop publishes after each turn, for readers on other threads (immutable)."""

    now: float
    total_gpus: int
    allocated_gpus: int
    down_gpus: int  # GPUs of failed nodes
    cordoned_gpus: int  # idle GPUs of cordoned or draining nodes (schedulable capacity they withhold)
    gar: float | None
    sor: float | None
    gfr_nodes: float | None
    gfr_gpus: float | None
    queue_len: int
    pending_gpus: int
    running_jobs: int
    cycles: int
    pending_by_tenant: Mapping[str, int]
    running_gpus_by_tenant: Mapping[str, int]
    gpu_types: tuple[str, ...]
    max_gpus_per_node: int
    leader: bool = True


# --- commands ---------------------------------------------------------------------------------------
@dataclass
class _Command:
    reply: Future[Any] | None = field(default=None, kw_only=True)


@dataclass
class _Arrivals(_Command):
    arrivals: Sequence[Arrival]


@dataclass
class _Cancel(_Command):
    job_id: int
    tenant: str | None  # the caller's tenant (None: admin)
    by: str


@dataclass
class _NodeOp(_Command):
    name: str
    op: str  # cordon, uncordon, drain, fail, repair, remove
    reason: str | None = None
    force: bool = False


@dataclass
class _AddNode(_Command):
    spec: NodeSpec


@dataclass
class _Reload(_Command):
    """Tenants or their quotas changed in the database: rebuild the policy."""


@dataclass
class _Scale(_Command):
    service_id: int
    replicas: int


@dataclass
class _Advance(_Command):
    to: float
    hold: bool = False


@dataclass
class _Call(_Command):
    fn: Callable[[ServiceLoop], Any]


@dataclass
class _Stop(_Command):
    pass


class ServiceLoop:
    """The live scheduler and its bookkeeping, run on one thread (see the module docstring)."""

    def __init__(self, db: Database, policy: Policy, clock: Clock, executor: Executor, *, epoch: int | None = None,
                 default_estimate: float = 86400.0, seed: int = 0,
                 on_events: Callable[[], None] | None = None, metrics: Any = None,
                 compact_min: int = 10_000, ratio_history: int = 2000, history: Any = None) -> None:
        self.db = db
        self.base_policy = policy
        self.clock = clock
        self.executor = executor
        self.epoch = epoch
        self.default_estimate = default_estimate
        self.seed = seed
        self.on_events = on_events
        self.metrics = metrics
        self.history = history  # the dashboard's time series (kant.service.dashboard.History): views and waits
        self.compact_min = compact_min
        self.inbox: queue.SimpleQueue[_Command] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._running = False
        self.failed: BaseException | None = None
        # filled by load()
        self.sched: Scheduler
        self.nodes: dict[str, NodeRow] = {}
        self.tenants: dict[str, TenantRow] = {}
        self.ids: list[int] = []  # store row -> job id
        self.active: dict[int, _Active] = {}  # job id -> bookkeeping, pending and running jobs
        self.view: LiveView | None = None
        self.quota_enforced = any(issubclass(p.cls, Quota) for p in policy.plugins)
        # this turn's changes, written in one transaction
        self._updates: list[JobUpdate] = []
        self._events: list[NewEvent] = []
        self._node_updates: list[NodeUpdate] = []
        self._launch: list[Launch] = []
        self._stops: list[int] = []
        self._replies: list[tuple[Future[Any], Any]] = []
        self._binds: list[tuple[bool, int, Placement]] = []
        self._wakeups: list[float] = []
        self._dirty = False
        self._pending_by_tenant: dict[str, int] = {}
        self._running_gpus_by_tenant: dict[str, int] = {}
        self._clock_saved = 0.0
        self.turns = 0
        #: (planned run time, actual / planned) of the last finished jobs (the twin's error distribution)
        self.ratios: deque[tuple[float, float]] = deque(maxlen=ratio_history)
        #: bumped by every change of state (arrivals, and every turn that writes a job or node change):
        #: the twin's staleness test
        self.state_version = 0
        self._head: Stamped[int | None] = Stamped(None)  # the first pending job (see head)
        self._next_reconcile = time.monotonic() + executor.reconcile_every
        executor.set_waker(self.wake)

    # --- loading ------------------------------------------------------------------------------
    def load(self, cluster_if_empty: Cluster | None = None) -> None:
        """Build the scheduler from the database (the truth after a restart)."""
        now = self.clock.now()
        rows = [n for n in self.db.nodes.list() if n.state != "removed"]
        if not rows:
            if cluster_if_empty is None:
                raise KantError("the database has no nodes: give --cluster on the first start")
            rows = self._register(cluster_if_empty)
        self.nodes = {n.name: n for n in rows}
        self.tenants = {t.name: t for t in self.db.tenants.list()}
        store = JobStore(tenant_names=sorted(self.tenants))
        jobs = self.db.jobs.load_active()
        self.ids = []
        self.active = {}
        running: dict[int, RunningRecord] = {}
        pending: list[int] = []
        with store.batch():
            job_rows = [self._add_to_store(store, job.id, job, job.submit_time) for job in jobs]
        for job, row in zip(jobs, job_rows, strict=True):
            info = self.active[job.id]
            info.runs, info.first_start, info.start = job.runs, job.first_start_time, job.start_time
            if job.state == "running" and job.placement:
                start = float(job.start_time if job.start_time is not None else now)
                info.planned = float(store.estimate[row])
                running[row] = RunningRecord(tuple(job.placement), job.gpus_per_worker, job.cpu_milli,
                                             job.memory_mib, start, start + float(store.estimate[row]))
            else:
                pending.append(row)
        flags = {n.name: _flags_of(n.state) for n in rows if _flags_of(n.state)}
        snap = SchedulerSnapshot(now=now, pending=tuple(pending), running=running, node_flags=flags)
        self.sched = Scheduler.from_snapshot(self._policy(), self._cluster(), store, snap, seed=self.seed)
        self.sched.binder = self
        self._count_all()
        self.executor.restore([self._launch_of(self.ids[row], rec.nodes, rec.start) for row, rec in running.items()])
        self._dirty = bool(pending)
        self._publish_view()
        log.info("loaded %d nodes, %d tenants, %d pending and %d running jobs", len(rows), len(self.tenants),
                 len(pending), len(running))

    def _register(self, cluster: Cluster) -> list[NodeRow]:
        wall = time.time()
        rows = [NodeRow(name, i, cluster.gpu_type_names[int(cluster.gpu_type[i])], int(cluster.gpus[i]),
                        int(cluster.cpu_milli[i]), int(cluster.memory_mib[i]), cluster.leaf_names[int(cluster.leaf[i])],
                        cluster.spine_names[int(cluster.spine[i])], "up", None, wall)
                for i, name in enumerate(cluster.names)]
        self.db.nodes.upsert(rows)
        return self.db.nodes.list()

    def _cluster(self) -> Cluster:
        rows = sorted(self.nodes.values(), key=lambda n: n.position)
        return Cluster.from_nodes([NodeSpec(n.name, n.gpu_type, n.gpus, n.cpu_milli, n.memory_mib, n.leaf, n.spine)
                                   for n in rows])

    def _policy(self) -> Policy:
        """The policy with the database's tenant quotas in its quota plugin (if it has one)."""
        if not self.quota_enforced:
            return self.base_policy
        return with_tenant_quotas(self.base_policy, {
            t.name: (t.guaranteed_gpus, t.max_gpus) for t in self.tenants.values()
            if t.guaranteed_gpus is not None or t.max_gpus is not None})

    def _add_to_store(self, store: JobStore, job_id: int, job: NewJob, submit_time: float) -> int:
        row = store.add(job.name, submit=submit_time, workers=job.workers, gpus_per_worker=job.gpus_per_worker,
                        gpu_milli=job.gpu_milli, cpu_milli=job.cpu_milli, memory_mib=job.memory_mib,
                        gpu_type=job.gpu_type, priority=job.priority, tenant=job.tenant, user=job.user,
                        estimate=job.estimate_s, default_estimate=self.default_estimate, kind=JobKind(job.kind))
        assert row == len(self.ids)
        self.ids.append(job_id)
        self.active[job_id] = _Active(job_id, row, job.tenant, submit_time, job.workers * job.gpus_per_worker,
                                      duration_s=job.duration_s, command=job.command, labels=dict(job.labels),
                                      service_id=job.service_id)
        return row

    def _count_all(self) -> None:
        self._pending_by_tenant = {}
        self._running_gpus_by_tenant = {}
        for info in self.active.values():
            if info.row in self.sched.running:
                self._running_gpus_by_tenant[info.tenant] = (self._running_gpus_by_tenant.get(info.tenant, 0)
                                                             + info.total_gpus)
            else:
                self._pending_by_tenant[info.tenant] = self._pending_by_tenant.get(info.tenant, 0) + 1

    # --- the thread ---------------------------------------------------------------------------
    def start(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._run, name="kant-loop", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread is None:
            return
        self.inbox.put(_Stop())
        self._thread.join(timeout)
        self._thread = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.failed is None

    def wake(self) -> None:
        self.inbox.put(_Call(lambda loop: None))

    def _run(self) -> None:
        try:
            while self._running:
                timeout = self._wait_s()
                try:
                    first = self.inbox.get(timeout=timeout) if timeout is None or timeout > 0 else None
                except queue.Empty:
                    first = None
                commands = [] if first is None else [first]
                while True:
                    try:
                        commands.append(self.inbox.get_nowait())
                    except queue.Empty:
                        break
                self.turn(commands)
        except Fenced as exc:
            log.error("another service took over as leader; this one stops scheduling: %s", exc)
            self.failed = exc
        except DatabaseError as exc:  # not a bug: the turn's changes could not be written (disk full, no server)
            log.error("the database failed; this service stops scheduling (a restart rebuilds from the "
                      "database): %s", exc)
            self.failed = exc
        except BaseException as exc:  # pragma: no cover - a bug: say so loudly, stop scheduling
            log.exception("the scheduling loop failed")
            self.failed = exc
        finally:
            self._running = False
            self._fail_waiting()

    def _wait_s(self) -> float | None:
        """Wall seconds until the next executor event or wake-up (None: until a command; 0 when a
        cycle is owed now, as after loading pending jobs)."""
        if self.clock.manual:
            return None
        if self._dirty:
            return 0.0
        nxt = min(self.executor.next_time(), min(self._wakeups, default=math.inf))
        if nxt == math.inf:
            return None
        return min(self.clock.wall_delay(nxt), 3600.0)

    def _fail_waiting(self) -> None:
        err = self.failed or KantError("the scheduling loop stopped")
        while True:
            try:
                cmd = self.inbox.get_nowait()
            except queue.Empty:
                return
            if cmd.reply is not None and not cmd.reply.done():
                cmd.reply.set_exception(err)

    # --- one turn -----------------------------------------------------------------------------
    def turn(self, commands: Sequence[_Command]) -> None:
        """Apply ``commands`` and the due executor events, cycle, persist, then act."""
        self.turns += 1
        if self.metrics is not None:
            self.metrics.loop_turns.inc()
        manual = isinstance(self.clock, ManualClock)
        if not manual:
            self._fire_due(self.clock.now())
        self._reconcile()
        for cmd in commands:
            if isinstance(cmd, _Stop):
                self._running = False
                continue
            try:
                if isinstance(cmd, _Advance) and manual:
                    self._advance(cmd.to, cmd.hold)
                    self.db.meta.set(CLOCK_KEY, repr(self.clock.now()))  # a restart resumes here
                    result: Any = self.clock.now()
                else:
                    result = self._apply(cmd)
            except KantError as exc:
                if cmd.reply is not None:
                    self._replies.append((cmd.reply, exc))
                continue
            self._answer(cmd, result)
        if not manual:
            self._cycle(self.clock.now())
        self._flush()
        self.compact()
        if not manual and not isinstance(self.clock, WallClock) and time.monotonic() - self._clock_saved > 1.0:
            self._clock_saved = time.monotonic()
            self.db.meta.set(CLOCK_KEY, repr(self.clock.now()))  # an accelerated clock resumes about here

    def _answer(self, cmd: _Command, result: Any) -> None:
        if cmd.reply is not None:
            self._replies.append((cmd.reply, result))

    def _apply(self, cmd: _Command) -> Any:
        now = self.clock.now()
        if isinstance(cmd, _Arrivals):
            return self._arrive(cmd.arrivals, now)
        if isinstance(cmd, _Cancel):
            return self._cancel(cmd.job_id, cmd.tenant, cmd.by, now)
        if isinstance(cmd, _NodeOp):
            return self._node_op(cmd, now)
        if isinstance(cmd, _AddNode):
            return self._add_node(cmd.spec, now)
        if isinstance(cmd, _Reload):
            return self._reload(now)
        if isinstance(cmd, _Scale):
            return self._scale(cmd.service_id, cmd.replicas, now)
        if isinstance(cmd, _Advance):
            raise Invalid("the clock is not manual: it cannot be moved")
        if isinstance(cmd, _Call):
            return cmd.fn(self)
        raise AssertionError(f"unknown command {cmd!r}")

    def _advance(self, to: float, hold: bool = False) -> None:
        """Manual clock: finish the current instant (its cycle), then every instant up to ``to`` (its
        events, then its cycle). With ``hold``, ``to`` itself gets its events but not yet its cycle:
        arrivals at ``to`` may still come (a replay submits them next), and the next advance runs it."""
        clock = self.clock
        assert isinstance(clock, ManualClock)
        if to < clock.now():
            raise Invalid(f"the clock cannot go back: {to} < {clock.now()}")
        self._cycle(clock.now())
        self._flush()
        while True:
            nxt = min(self.executor.next_time(), min(self._wakeups, default=math.inf))
            if nxt > to:
                break
            clock.set(nxt)
            self._fire_due(nxt)
            if nxt < to:
                self._cycle(nxt)
                self._flush()  # the executor hears of this instant's starts before the next instant
        clock.set(to)
        if not hold:
            while self._dirty and len(self.sched.queue):
                self._cycle(to)
                self._flush()
                self._fire_due(to)  # zero-length runs end at once

    def _reconcile(self) -> None:
        """Every ``executor.reconcile_every`` wall seconds: tell the executor which runs the loop thinks
        are running (it stops others and reports the ones it lost)."""
        if time.monotonic() < self._next_reconcile:
            return
        self._next_reconcile = time.monotonic() + self.executor.reconcile_every
        running = self.sched.running
        self.executor.reconcile({a.id: a.runs for a in self.active.values() if a.row in running})

    def _node_event(self, ev: NodeEvent, now: float) -> None:
        """A node joined or left the executor's cluster: add a new node, repair one the executor had
        reported lost, fail one it lost (its jobs go back to the queue)."""
        row = self.nodes.get(ev.name)
        try:
            if ev.kind == "up":
                if row is None and ev.spec is not None:
                    self._add_node(ev.spec, now)
                elif row is not None and row.state == "down" and (row.reason or "").startswith(NODE_LOST_PREFIX):
                    self._node_op(_NodeOp(ev.name, "repair", f"{NODE_LOST_PREFIX}{ev.reason or 'back'}"), now)
            elif row is not None and row.state != "down":
                self._node_op(_NodeOp(ev.name, "fail", ev.reason or f"{NODE_LOST_PREFIX}lost"), now)
        except KantError as exc:
            log.warning("node %s (%s from the executor): %s", ev.name, ev.kind, exc)

    def _fire_due(self, now: float) -> None:
        for node_ev in self.executor.node_events():
            self._node_event(node_ev, now)
        if self._wakeups:
            due = [w for w in self._wakeups if w <= now]
            if due:
                self._wakeups = [w for w in self._wakeups if w > now]
                self._dirty = True
        for ev in self.executor.poll(now):
            self._exec_event(ev)

    # --- arrivals, ends, cancels --------------------------------------------------------------
    def _arrive(self, arrivals: Iterable[Arrival], now: float) -> int:
        sched = self.sched
        new = [a for a in arrivals if a.id not in self.active]  # (a retried submit is here already)
        with sched.jobs.batch():
            rows = [self._add_to_store(sched.jobs, a.id, a.job, a.submit_time) for a in new]
        n = 0
        for a, row in zip(new, rows, strict=True):
            status = sched.submit(row, a.submit_time)
            self.active[a.id].queued_cycle = sched.cycles
            if status.ok:
                self._dirty = True
                self._pending_by_tenant[a.job.tenant] = self._pending_by_tenant.get(a.job.tenant, 0) + 1
            else:
                del self.active[a.id]
                self._end(a.id, a.job.tenant, "unschedulable", now, reason=str(status))
            n += 1
        if new:
            self.state_version += 1  # (the writer logged the submits: this turn may write nothing)
        if self.metrics is not None:
            self.metrics.submitted.inc(n)
        return n

    def _end(self, job_id: int, tenant: str, state: str, now: float, *, reason: str | None = None,
             exit_code: int | None = None, node: str | None = None) -> None:
        self._updates.append(JobUpdate(job_id, state=state, reason=reason, end_time=now,
                                       exit_code=exit_code if exit_code is not None else UNSET))
        self._events.append(NewEvent(now, time.time(), state, job_id, node, tenant, reason or state))

    def _exec_event(self, ev: ExecEvent) -> None:
        info = self.active.get(ev.job_id)
        if info is None or info.runs != ev.run or info.row not in self.sched.running:
            return  # an event of an earlier run, or of a job that ended meanwhile
        sched, t = self.sched, ev.time
        self._ran(info)
        if ev.kind == "finished":
            runtime = ev.runtime if ev.runtime is not None else t - (info.start or t)
            sched.finish(info.row, t, runtime=runtime)
            if runtime > 0 and 0 < info.planned < math.inf:
                self.ratios.append((info.planned, runtime / info.planned))
            del self.active[ev.job_id]
            self._end(ev.job_id, info.tenant, "finished", t, exit_code=0)
            if self.metrics is not None:
                self.metrics.finished.inc()
        elif ev.kind == "failed":
            sched.cancel(info.row, t)
            del self.active[ev.job_id]
            self._end(ev.job_id, info.tenant, "failed", t, reason=ev.reason or f"exit code {ev.exit_code}",
                      exit_code=ev.exit_code)
            if self.metrics is not None:
                self.metrics.failed.inc()
        else:
            if ev.kind == "bind_failed":
                sched.bind_failed(info.row, t, ev.reason)
                why = f"could not start: {ev.reason}"
            else:
                sched.interrupt(info.row, t)
                why = f"lost: {ev.reason}"
            self._requeued(info, t, why, ev.kind)
        self._dirty = True

    def _ran(self, info: _Active) -> None:
        """A running job stops holding GPUs (counters)."""
        self._running_gpus_by_tenant[info.tenant] = self._running_gpus_by_tenant.get(info.tenant, 0) - info.total_gpus

    def _requeued(self, info: _Active, now: float, why: str, kind: str, node: str | None = None) -> None:
        info.requeued = why
        info.queued_cycle = self.sched.cycles
        self._pending_by_tenant[info.tenant] = self._pending_by_tenant.get(info.tenant, 0) + 1
        self._updates.append(JobUpdate(info.id, state="pending", reason=why))
        self._events.append(NewEvent(now, time.time(), kind, info.id, node, info.tenant, why))
        if self.metrics is not None:
            self.metrics.requeued.labels(kind).inc()

    def _cancel(self, job_id: int, tenant: str | None, by: str, now: float) -> str:
        info = self.active.get(job_id)
        if info is None or (tenant is not None and info.tenant != tenant):
            raise NotFound(f"job {job_id} is not pending or running")
        row = info.row
        was_running = row in self.sched.running
        self.sched.cancel(row, now)
        if was_running:
            self._ran(info)
            self._stops.append(job_id)
        else:
            self._pending_by_tenant[info.tenant] -= 1
        del self.active[job_id]
        self._end(job_id, info.tenant, "cancelled", now, reason=f"cancelled by {by}")
        self._dirty = True
        return "cancelled"

    # --- the cycle and its binds --------------------------------------------------------------
    def bind(self, job: int, placement: Placement) -> None:
        self._binds.append((True, job, placement))

    def evict(self, job: int, placement: Placement) -> None:
        self._binds.append((False, job, placement))

    def _cycle(self, now: float) -> None:
        sched = self.sched
        if not self._dirty or not len(sched.queue):
            self._dirty = False
            return
        self._dirty = False
        t0 = time.perf_counter()
        result = sched.cycle(now)
        if self.metrics is not None:
            self.metrics.cycle_seconds.observe(time.perf_counter() - t0)
        for when in result.wakeups:
            if when not in self._wakeups:
                self._wakeups.append(when)
        names = sched.cluster.names
        for started, row, placement in self._binds:
            job_id = self.ids[row]
            info = self.active[job_id]
            nodes = tuple(names[n] for n in placement.nodes)
            if started:
                self._pending_by_tenant[info.tenant] -= 1
                self._running_gpus_by_tenant[info.tenant] = (self._running_gpus_by_tenant.get(info.tenant, 0)
                                                             + info.total_gpus)
                info.runs += 1
                info.start = now
                info.planned = sched.env.estimate(row)
                info.requeued = None
                first = info.first_start is None
                if first:
                    info.first_start = now
                    if self.metrics is not None:
                        self.metrics.wait_seconds.labels(gang_bucket(info.total_gpus)).observe(now - info.submit_time)
                    if self.history is not None:
                        self.history.wait(now - info.submit_time)
                self._updates.append(JobUpdate(job_id, state="running", reason=None, start_time=now,
                                               first_start_time=now if first else UNSET, placement=list(nodes),
                                               runs=info.runs))
                self._events.append(NewEvent(now, time.time(), "started", job_id, nodes[0], info.tenant,
                                             f"run {info.runs} on {_describe_nodes(nodes)}"))
                self._launch.append(self._launch_of(job_id, nodes, now))
                if self.metrics is not None:
                    self.metrics.started.inc()
            else:
                self._ran(info)
                self._stops.append(job_id)
                self._requeued(info, now, "preempted", "preempted", nodes[0])
        self._binds.clear()

    def _launch_of(self, job_id: int, nodes: Sequence[str], start: float) -> Launch:
        info = self.active[job_id]
        return Launch(job_id, info.runs, tuple(nodes), int(self.sched.jobs.gpus_per_worker[info.row]), start,
                      info.command, info.duration_s, {str(k): str(v) for k, v in info.labels.items()},
                      int(self.sched.jobs.gpu_milli[info.row]))

    # --- persistence, then action -------------------------------------------------------------
    def _flush(self) -> None:
        """Write this turn's changes in one transaction, then act on them and answer the callers."""
        if self._updates or self._events or self._node_updates:
            self.state_version += 1
            self.db.apply(self._updates, self._events, self._node_updates, epoch=self.epoch)
            if self.metrics is not None:
                self.metrics.commits.labels("loop").inc()
        events = bool(self._events)
        self._updates, self._events, self._node_updates = [], [], []
        for job_id in self._stops:
            self.executor.stop(job_id)
        running = self.sched.running
        for launch in self._launch:
            info = self.active.get(launch.job_id)
            # (a start the same cycle undid, or a job that ended since, is not launched)
            if info is not None and info.runs == launch.run and info.row in running:
                self.executor.start(launch)
        self._stops, self._launch = [], []
        self._publish_view()
        for fut, result in self._replies:
            if fut.done():
                continue
            if isinstance(result, BaseException):
                fut.set_exception(result)
            else:
                fut.set_result(result)
        self._replies = []
        if events and self.on_events is not None:
            self.on_events()

    def _publish_view(self) -> None:
        state = self.sched.state
        cluster = self.sched.cluster
        total = cluster.total_gpus
        capacity = total - state.down_gpus
        demand = state.allocated_gpus + self.sched.queue.pending_gpus
        up_nodes = cluster.n_gpu_nodes - int(np.count_nonzero(~state.up & (cluster.gpus > 0)))
        free = total - state.allocated_gpus - state.down_gpus
        failed = sum(int(cluster.gpus[n]) for n, f in self.sched.flagged_nodes().items() if f & DOWN)
        view = LiveView(
            now=self.clock.now(), total_gpus=total, allocated_gpus=state.allocated_gpus, down_gpus=failed,
            cordoned_gpus=state.down_gpus - failed,
            gar=state.allocated_gpus / total if total else None,
            sor=state.allocated_gpus / min(capacity, demand) if min(capacity, demand) > 0 else None,
            gfr_nodes=state.partial_nodes / up_nodes if up_nodes > 0 else None,
            gfr_gpus=state.free_on_partial / free if free > 0 else None,
            queue_len=len(self.sched.queue), pending_gpus=self.sched.queue.pending_gpus,
            running_jobs=len(self.sched.running), cycles=self.sched.cycles,
            pending_by_tenant={t: n for t, n in self._pending_by_tenant.items() if n},
            running_gpus_by_tenant={t: n for t, n in self._running_gpus_by_tenant.items() if n},
            gpu_types=cluster.gpu_type_names, max_gpus_per_node=cluster.max_gpus_per_node,
        )
        self.view = view
        if self.metrics is not None:
            self.metrics.observe_view(view)
        if self.history is not None:
            self.history.observe(view)

    # --- nodes --------------------------------------------------------------------------------
    def _node_index(self, name: str) -> int:
        try:
            return self.sched.cluster.names.index(name)
        except ValueError:
            raise NotFound(f"no node {name!r}") from None

    def _node_state(self, name: str, state: str, reason: str | None, now: float, kind: str) -> None:
        self.nodes[name] = replace(self.nodes[name], state=state, reason=reason)
        self._node_updates.append(NodeUpdate(name, state, reason))
        self._events.append(NewEvent(now, time.time(), kind, None, name, None, reason or kind))

    def _node_op(self, cmd: _NodeOp, now: float) -> str:
        sched = self.sched
        node = self._node_index(cmd.name)
        state = self.nodes[cmd.name].state
        op = cmd.op
        if op == "cordon":
            sched.cordon(node)
            new = "cordoned" if state != "down" else state
        elif op == "drain":
            sched.cordon(node)
            new = "draining" if state != "down" else state
        elif op == "uncordon":
            sched.uncordon(node)
            new = "up" if state != "down" else state
        elif op == "fail":
            for row, _ in sched.fail_node(node, now):
                info = self.active[self.ids[row]]
                self._ran(info)
                self._stops.append(info.id)
                self._requeued(info, now, f"node {cmd.name} failed", "requeued", cmd.name)
            new = "down"
        elif op == "repair":
            sched.uncordon(node)
            sched.repair_node(node)
            new = "up"
        elif op == "remove":
            return self._remove_node(cmd, node, now)
        else:
            raise Invalid(f"unknown node operation {op!r}")
        self._node_state(cmd.name, new, cmd.reason, now, f"node-{op}")
        self._dirty = True
        return new

    def _remove_node(self, cmd: _NodeOp, node: int, now: float) -> str:
        if self.sched.state.jobs_on(node):
            if not cmd.force:
                raise Invalid(f"node {cmd.name} still runs jobs: drain it first, or remove with force")
            self._node_op(_NodeOp(cmd.name, "fail", "removed"), now)
        self._node_state(cmd.name, "removed", cmd.reason, now, "node-remove")
        del self.nodes[cmd.name]
        self._rebuild(now)
        return "removed"

    def _add_node(self, spec: NodeSpec, now: float) -> str:
        if spec.name in self.nodes:
            raise Conflict(f"node {spec.name!r} exists")
        position = max((n.position for n in self.db.nodes.list()), default=-1) + 1
        existing = self.db.nodes.get(spec.name)
        if existing is not None:
            position = existing.position
        row = NodeRow(spec.name, position, spec.gpu_type, spec.gpus, spec.cpu_milli, spec.memory_mib, spec.leaf,
                      spec.spine, "up", None, time.time())
        self.db.nodes.upsert([row])
        self.nodes[spec.name] = row
        self._events.append(NewEvent(now, time.time(), "node-add", None, spec.name, None,
                                     f"{spec.gpus} x {spec.gpu_type}"))
        try:
            self._rebuild(now)
        except KantError:
            del self.nodes[spec.name]
            self.db.nodes.upsert([replace(row, state="removed")])
            raise
        return "up"

    def _rebuild(self, now: float) -> None:
        """A new scheduler on the current nodes and policy, with every job and flag (a snapshot)."""
        self.sched = self.sched.rebuilt(self._cluster(), now, policy=self._policy())
        self._dirty = True

    def _reload(self, now: float) -> str:
        self.tenants = {t.name: t for t in self.db.tenants.list()}
        for name in sorted(self.tenants):
            self.sched.jobs.code("tenant", name)
        if self.quota_enforced:
            self._rebuild(now)
        return "reloaded"

    # --- inference services -------------------------------------------------------------------
    def _scale(self, service_id: int, replicas: int, now: float) -> int:
        svc = self.db.services.get(service_id)
        if svc is None or svc.state != "active":
            raise NotFound(f"no active service {service_id}")
        mine = sorted(i for i, a in self.active.items() if a.service_id == service_id)
        if replicas > len(mine):
            new = [NewJob(tenant=svc.tenant, user=svc.tenant, name=f"{svc.name}/replica-{k}",
                          kind=int(JobKind.INFERENCE), service_id=service_id, gpus_per_worker=svc.gpus_per_replica,
                          gpu_type=svc.gpu_type, priority=svc.priority)
                   for k in range(len(mine), replicas)]
            ids = self.db.jobs.insert(new, now_time=now, now_wall=time.time())
            self._arrive([Arrival(i, j, now) for (i, _), j in zip(ids, new, strict=True)], now)
        else:
            # pending replicas go first, then the newest running ones
            running = self.sched.running
            victims = sorted(mine, key=lambda i: (self.active[i].row in running, -i))[: len(mine) - replicas]
            for job_id in victims:
                self._cancel(job_id, None, f"scale of service {svc.name} to {replicas}", now)
        if svc.replicas != replicas:
            self.db.services.update(service_id, replicas=replicas)
        return replicas

    # --- compaction ---------------------------------------------------------------------------
    def compact(self, force: bool = False) -> bool:
        """Rebuild on a store of the active jobs once finished ones dominate (memory stays bounded by
        the active jobs, however long the history). Rows keep their relative order, so the queue
        order and every tie-break are unchanged."""
        store = self.sched.jobs
        if not force and len(store) < max(self.compact_min, 2 * len(self.active) + 1):
            return False
        now = self.clock.now()
        old = self.sched
        snap = old.snapshot(now)
        keep = sorted(self.active.values(), key=lambda a: a.row)
        new_row = {a.row: k for k, a in enumerate(keep)}
        new_store = JobStore(gpu_type_names=store.gpu_type_names, tenant_names=store.tenant_names,
                             user_names=store.user_names)
        old_rows = np.asarray([a.row for a in keep], dtype=np.int64)
        new_store.extend([store.names[r] for r in old_rows.tolist()], planning=store.estimate[old_rows],
                         user_estimate=store.user_estimate[old_rows],
                         **{c: getattr(store, c)[old_rows] for c in ("submit", "workers", "gpus_per_worker",
                                                                     "gpu_milli", "cpu_milli", "memory_mib",
                                                                     "gpu_type", "priority", "tenant", "user",
                                                                     "kind")})
        snap = SchedulerSnapshot(
            now=now, pending=tuple(new_row[r] for r in snap.pending),
            running={new_row[r]: rec for r, rec in snap.running.items()}, node_flags=snap.node_flags,
            bind_failures={new_row[r]: w for r, w in snap.bind_failures.items() if r in new_row})
        new = Scheduler.from_snapshot(old.policy, old.cluster, new_store, snap, seed=self.seed)
        new.binder = self
        new.cycles = old.cycles
        self.sched = new
        self.ids = [a.id for a in keep]
        for a in keep:
            a.row = new_row[a.row]
        log.info("compacted the job store: %d rows -> %d", len(store), len(new_store))
        return True

    # --- reads for the API (run on the loop's thread through call()) ---------------------------
    def _why_pending(self, info: _Active) -> str:
        sched = self.sched
        if sched.cycles <= info.queued_cycle:  # a reason of its shape would be older than the job
            why = "waiting for the next scheduling cycle"
        elif (sched.pending_status(info.row) is None and (head := self._first_pending()) is not None
                and head != info.row):
            # the policy's walk stopped before it (a blocking head, a backfill depth): say behind what
            status = sched.pending_status(head)
            why = (f"not looked at in the last cycle: it is behind job {self.ids[head]}, first in the queue, "
                   f"which waits ({status if status is not None else 'not yet considered'})")
        else:
            why = sched.why_pending(info.row)
        return why if info.requeued is None else f"{why}; back in the queue after: {info.requeued}"

    def _first_pending(self) -> int | None:
        """The first pending job in queue order, remembered until the state changes (a page of
        reasons asks for it once per job)."""
        sched = self.sched
        stamp = (self.state_version, sched.cycles, len(sched.queue))  # (a rebuild makes a new sched)
        head = self._head
        if not head.fresh(sched, stamp):
            head.keep(sched, stamp, sched.queue.head(sched.framework.dynamic_key(self.clock.now())))
        return head.value

    def why(self, job_id: int) -> dict[str, Any]:
        info = self.active.get(job_id)
        if info is None:
            raise NotFound(f"job {job_id} is not pending or running")
        sched = self.sched
        if info.row in sched.running:
            names = sched.cluster.names
            nodes = _describe_nodes([names[n] for n in sched.state.allocations[info.row].nodes])
            return {"state": "running", "reason": f"running since {info.start:g} on {nodes}", "position": None}
        status: Status | None = sched.pending_status(info.row)
        return {
            "state": "pending",
            "reason": self._why_pending(info),
            "plugin": status.plugin if status is not None else None,
            "position": sched.queue.position(info.row, sched.framework.dynamic_key(self.clock.now())),
            "queue_len": len(sched.queue),
        }

    def twin_snapshot(self) -> TwinSnapshot:
        """The live state for the digital twin (run on the loop's thread through :meth:`call`)."""
        return TwinSnapshot.capture(self.sched, self.clock.now(), ids=self.ids, ratios=[r for _, r in self.ratios],
                                    planned=[p for p, _ in self.ratios],
                                    info={"state_version": self.state_version})

    def reasons(self, job_ids: Sequence[int]) -> dict[int, str]:
        out = {}
        for job_id in job_ids:
            info = self.active.get(job_id)
            if info is not None and info.row in self.sched.queue:
                out[job_id] = self._why_pending(info)
        return out

    def node_views(self) -> list[NodeView]:
        sched = self.sched
        cluster = sched.cluster
        used = sched.state.used_gpus().tolist()
        out = []
        for i, name in enumerate(cluster.names):
            row = self.nodes[name]
            st = "drained" if row.state == "draining" and used[i] == 0 else row.state
            out.append(NodeView(name, row.gpu_type, int(cluster.gpus[i]), used[i], st,
                                cluster.leaf_names[int(cluster.leaf[i])], cluster.spine_names[int(cluster.spine[i])],
                                int(cluster.cpu_milli[i]), int(cluster.memory_mib[i])))
        return out

    # --- commands from other threads ----------------------------------------------------------
    def submit_arrivals(self, arrivals: Sequence[Arrival]) -> None:
        self.inbox.put(_Arrivals(arrivals))

    def _ask(self, cmd: _Command, timeout: float) -> Any:
        fut: Future[Any] = Future()
        cmd.reply = fut
        if not self.alive:
            raise KantError("the scheduling loop is not running")
        self.inbox.put(cmd)
        return fut.result(timeout)

    def cancel(self, job_id: int, tenant: str | None, by: str, timeout: float = 30.0) -> str:
        return str(self._ask(_Cancel(job_id, tenant, by), timeout))

    def node_op(self, name: str, op: str, *, reason: str | None = None, force: bool = False,
                timeout: float = 60.0) -> str:
        return str(self._ask(_NodeOp(name, op, reason, force), timeout))

    def add_node(self, spec: NodeSpec, timeout: float = 60.0) -> str:
        return str(self._ask(_AddNode(spec), timeout))

    def reload(self, timeout: float = 60.0) -> str:
        return str(self._ask(_Reload(), timeout))

    def scale(self, service_id: int, replicas: int, timeout: float = 60.0) -> int:
        return int(self._ask(_Scale(service_id, replicas), timeout))

    def advance(self, to: float, *, hold: bool = False, timeout: float = 300.0) -> float:
        return float(self._ask(_Advance(to, hold), timeout))

    def call(self, fn: Callable[[ServiceLoop], Any], timeout: float = 30.0) -> Any:
        return self._ask(_Call(fn), timeout)


def _flags_of(state: str) -> int:
    return {"cordoned": CORDONED, "draining": CORDONED, "down": DOWN}.get(state, 0)


def _describe_nodes(nodes: Sequence[str]) -> str:
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n] = counts.get(n, 0) + 1
    return ", ".join(n if c == 1 else f"{n} x{c}" for n, c in counts.items())


