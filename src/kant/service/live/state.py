"""The live scheduler and the books the loop keeps beside it, and how a job moves through them.

:class:`LiveState` holds what every room of the loop works on, on the loop's one thread: the
:class:`~kant.scheduler.Scheduler` (replaced when it is rebuilt or compacted), the nodes and tenants it
runs for, the active (pending and running) jobs by id, counters by tenant, the instant's state
(:class:`~kant.instant.Instant`) and this turn's changes (:class:`~kant.service.live.changes.TurnChanges`).

A job's transitions are its methods: it arrives (:meth:`LiveState.arrive`), starts or is evicted when a
cycle commits (:meth:`LiveState.bind`, :meth:`LiveState.evict`, carried out by
:meth:`LiveState.carry_out_binds`), ends as the executor reports (:meth:`LiveState.executor_event`), goes
back to the queue (:meth:`LiveState.requeue`) or is cancelled (:meth:`LiveState.cancel`). Each writes its
database rows and events into the turn's changes and marks the instant changed.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kant.config.policy import Policy
from kant.instant import Instant
from kant.metrics.summary import BUCKETS
from kant.metrics.summary import gang_bucket as bucket_index
from kant.model.cluster import Cluster, NodeSpec
from kant.model.job import JobKind
from kant.model.state import Placement
from kant.model.store import JobStore
from kant.plugins.quota import Quota, with_tenant_quotas
from kant.scheduler import Scheduler
from kant.service.db.jobs import JobRow, JobUpdate, NewJob
from kant.service.db.nodes import NodeRow
from kant.service.db.schema import UNSET
from kant.service.db.tenants import TenantRow
from kant.service.errors import NotFound
from kant.service.executors.base import ExecEvent, Launch
from kant.service.live.changes import TurnChanges
from kant.text import format_duration

__all__ = ["Arrival", "Active", "LiveState", "gang_bucket", "describe_nodes"]


def gang_bucket(total_gpus: int) -> str:
    """The gang-size bucket of docs/metrics.md a job of ``total_gpus`` GPUs falls in."""
    return BUCKETS[int(bucket_index(total_gpus))]


def describe_nodes(nodes: Sequence[str]) -> str:
    """``"a, b x2"``: the nodes of a placement, one worker per entry."""
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n] = counts.get(n, 0) + 1
    return ", ".join(n if c == 1 else f"{n} x{c}" for n, c in counts.items())


@dataclass(frozen=True, slots=True)
class Arrival:
    """A job the database has accepted: its id, what was submitted, and its submit time."""

    id: int
    job: NewJob
    submit_time: float


@dataclass(slots=True)
class Active:
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
    chdir: str | None = None
    environment: Mapping[str, str] | None = None
    time_limit_s: float | None = None
    requeued: str | None = None  # why its last run ended and it waits again (until it starts)
    queued_cycle: int = 0  # the scheduler's cycle count when it (re)joined the queue


class LiveState:
    """The live scheduler and the loop's books (see the module docstring). One thread uses it."""

    def __init__(self, policy: Policy, *, seed: int, default_estimate: float, metrics: Any, history: Any,
                 ratio_history: int) -> None:
        self.base_policy = policy
        self.quota_enforced = any(issubclass(p.cls, Quota) for p in policy.plugins)
        self.seed = seed
        self.default_estimate = default_estimate
        self.metrics = metrics
        self.history = history  # the dashboard's time series (kant.service.dashboard.History): views and waits
        self.sched: Scheduler  # set by the loop's load, replaced by a rebuild or a compaction
        self.nodes: dict[str, NodeRow] = {}
        self.tenants: dict[str, TenantRow] = {}
        self.ids: list[int] = []  # store row -> job id
        self.active: dict[int, Active] = {}  # job id -> bookkeeping, pending and running jobs
        self.pending_by_tenant: dict[str, int] = {}
        self.running_gpus_by_tenant: dict[str, int] = {}
        self.instant = Instant()
        self.changes = TurnChanges()
        self._binds: list[tuple[bool, int, Placement]] = []
        #: (service time, job id, run) at which a running job reaches its time limit, a heap
        self.deadlines: list[tuple[float, int, int]] = []
        #: (planned run time, actual / planned) of the last finished jobs (the twin's error distribution)
        self.ratios: deque[tuple[float, float]] = deque(maxlen=ratio_history)
        #: bumped by every change of state (arrivals, and every turn that writes a job or node change):
        #: the twin's staleness test
        self.state_version = 0

    # --- the scheduler's inputs -------------------------------------------------------------------
    def policy(self) -> Policy:
        """The policy with the database's tenant quotas in its quota plugin (if it has one)."""
        if not self.quota_enforced:
            return self.base_policy
        return with_tenant_quotas(self.base_policy, {
            t.name: (t.guaranteed_gpus, t.max_gpus) for t in self.tenants.values()
            if t.guaranteed_gpus is not None or t.max_gpus is not None})

    def cluster(self) -> Cluster:
        """The cluster of the known nodes, in registration order."""
        rows = sorted(self.nodes.values(), key=lambda n: n.position)
        return Cluster.from_nodes([NodeSpec(n.name, n.gpu_type, n.gpus, n.cpu_milli, n.memory_mib, n.leaf, n.spine)
                                   for n in rows])

    def rebuild(self, now: float) -> None:
        """A new scheduler on the current nodes and policy, with every job and flag (a snapshot)."""
        self.sched = self.sched.rebuilt(self.cluster(), now, policy=self.policy())
        self.instant.changed = True

    def reload_tenants(self, tenants: Iterable[TenantRow], now: float) -> str:
        """Tenants or their quotas changed in the database: new names coded, the policy rebuilt."""
        self.tenants = {t.name: t for t in tenants}
        for name in sorted(self.tenants):
            self.sched.jobs.code("tenant", name)
        if self.quota_enforced:
            self.rebuild(now)
        return "reloaded"

    # --- the books ----------------------------------------------------------------------------------
    def add_to_store(self, store: JobStore, job_id: int, job: NewJob, submit_time: float) -> int:
        """``job`` becomes the store's next row and an active job; returns its row."""
        row = store.add(job.name, submit=submit_time, workers=job.workers, gpus_per_worker=job.gpus_per_worker,
                        gpu_milli=job.gpu_milli, cpu_milli=job.cpu_milli, memory_mib=job.memory_mib,
                        gpu_type=job.gpu_type, priority=job.priority, tenant=job.tenant, user=job.user,
                        estimate=job.estimate_s, default_estimate=self.default_estimate, kind=JobKind(job.kind),
                        time_limit=job.time_limit_s)
        assert row == len(self.ids)
        self.ids.append(job_id)
        self.active[job_id] = Active(job_id, row, job.tenant, submit_time, job.workers * job.gpus_per_worker,
                                     duration_s=job.duration_s, command=job.command, labels=dict(job.labels),
                                     service_id=job.service_id, chdir=job.chdir, environment=job.environment,
                                     time_limit_s=job.time_limit_s)
        return row

    def add_all_to_store(self, store: JobStore, jobs: Sequence[JobRow]) -> range:
        """Every job of ``jobs`` becomes a row of ``store`` and an active job, as :meth:`add_to_store`
        one by one makes them, but in whole columns (:meth:`JobStore.extend`): a start loads every
        pending and running job, 100,000 of them in a fraction of the time of 100,000 appends."""
        code = store.code
        est = [j.estimate_s for j in jobs]
        limit = [j.time_limit_s for j in jobs]
        default = self.default_estimate
        rows = store.extend(
            [j.name for j in jobs],
            planning=np.array([default if e is None else e for e in est], dtype=np.float64),
            user_estimate=np.array([math.nan if e is None else e for e in est], dtype=np.float64),
            time_limit=np.array([math.inf if t is None else t for t in limit], dtype=np.float64),
            submit=np.array([j.submit_time for j in jobs], dtype=np.float64),
            workers=np.array([j.workers for j in jobs], dtype=np.int64),
            gpus_per_worker=np.array([j.gpus_per_worker for j in jobs], dtype=np.int64),
            gpu_milli=np.array([j.gpu_milli for j in jobs], dtype=np.int64),
            cpu_milli=np.array([j.cpu_milli for j in jobs], dtype=np.int64),
            memory_mib=np.array([j.memory_mib for j in jobs], dtype=np.int64),
            gpu_type=np.array([-1 if j.gpu_type is None else code("gpu_type", j.gpu_type) for j in jobs],
                              dtype=np.int64),
            priority=np.array([j.priority for j in jobs], dtype=np.int64),
            tenant=np.array([code("tenant", j.tenant) for j in jobs], dtype=np.int64),
            user=np.array([code("user", j.user if j.user is not None else j.tenant) for j in jobs], dtype=np.int64),
            kind=np.array([int(j.kind) for j in jobs], dtype=np.int64),
        )
        assert rows.start == len(self.ids)
        self.ids.extend(j.id for j in jobs)
        active = self.active
        for row, j in zip(rows, jobs, strict=True):
            active[j.id] = Active(j.id, row, j.tenant, j.submit_time, j.workers * j.gpus_per_worker,
                                  duration_s=j.duration_s, command=j.command, labels=dict(j.labels),
                                  service_id=j.service_id, chdir=j.chdir, environment=j.environment,
                                  time_limit_s=j.time_limit_s)
        return rows

    def count_all(self) -> None:
        """The counters by tenant, from the active jobs (after a load)."""
        pending: dict[str, int] = {}
        running_gpus: dict[str, int] = {}
        running = self.sched.running
        for info in self.active.values():
            if info.row in running:
                running_gpus[info.tenant] = running_gpus.get(info.tenant, 0) + info.total_gpus
            else:
                pending[info.tenant] = pending.get(info.tenant, 0) + 1
        self.pending_by_tenant, self.running_gpus_by_tenant = pending, running_gpus

    def running_runs(self) -> dict[int, int]:
        """Job id -> run number of every running job (what the executor should be running)."""
        running = self.sched.running
        return {a.id: a.runs for a in self.active.values() if a.row in running}

    def launch_of(self, job_id: int, nodes: Sequence[str], start: float) -> Launch:
        """What the executor needs to start the current run of ``job_id`` on ``nodes``."""
        info = self.active[job_id]
        jobs = self.sched.jobs
        return Launch(job_id, info.runs, tuple(nodes), int(jobs.gpus_per_worker[info.row]), start,
                      info.command, info.duration_s, {str(k): str(v) for k, v in info.labels.items()},
                      int(jobs.gpu_milli[info.row]), cwd=info.chdir, job_env=info.environment)

    # --- transitions --------------------------------------------------------------------------------
    def arrive(self, arrivals: Iterable[Arrival], now: float) -> int:
        """Jobs the database accepted join the store and the queue (or end unschedulable)."""
        sched = self.sched
        new = [a for a in arrivals if a.id not in self.active]  # (a retried submit is here already)
        with sched.jobs.batch():
            rows = [self.add_to_store(sched.jobs, a.id, a.job, a.submit_time) for a in new]
        n = 0
        for a, row in zip(new, rows, strict=True):
            status = sched.submit(row, a.submit_time)
            self.active[a.id].queued_cycle = sched.cycles
            if status.ok:
                self.instant.changed = True
                self.pending_by_tenant[a.job.tenant] = self.pending_by_tenant.get(a.job.tenant, 0) + 1
            else:
                del self.active[a.id]
                self.end(a.id, a.job.tenant, "unschedulable", now, reason=str(status))
            n += 1
        if new:
            self.state_version += 1  # (the writer logged the submits: this turn may write nothing)
        if self.metrics is not None:
            self.metrics.submitted.inc(n)
        return n

    def end(self, job_id: int, tenant: str, state: str, now: float, *, reason: str | None = None,
            exit_code: int | None = None, node: str | None = None) -> None:
        """A job left the active ones (finished, failed, cancelled, unschedulable): its row and event."""
        self.changes.job(JobUpdate(job_id, state=state, reason=reason, end_time=now,
                                   exit_code=exit_code if exit_code is not None else UNSET))
        self.changes.event(now, state, job_id, node, tenant, reason or state)

    def executor_event(self, ev: ExecEvent) -> None:
        """A run finished, failed, could not start, or was lost (the executor's report)."""
        info = self.active.get(ev.job_id)
        if info is None or info.runs != ev.run or info.row not in self.sched.running:
            return  # an event of an earlier run, or of a job that ended meanwhile
        sched, t = self.sched, ev.time
        self.ran(info)
        if ev.kind == "finished":
            runtime = ev.runtime if ev.runtime is not None else t - (info.start or t)
            sched.finish(info.row, t, runtime=runtime)
            if runtime > 0 and 0 < info.planned < math.inf:
                self.ratios.append((info.planned, runtime / info.planned))
            del self.active[ev.job_id]
            self.end(ev.job_id, info.tenant, "finished", t, exit_code=0)
            if self.metrics is not None:
                self.metrics.finished.inc()
        elif ev.kind == "failed":
            sched.cancel(info.row, t)
            del self.active[ev.job_id]
            self.end(ev.job_id, info.tenant, "failed", t, reason=ev.reason or f"exit code {ev.exit_code}",
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
            self.requeue(info, t, why, ev.kind)
        self.instant.changed = True

    def ran(self, info: Active) -> None:
        """A running job stops holding GPUs (counters)."""
        self.running_gpus_by_tenant[info.tenant] = self.running_gpus_by_tenant.get(info.tenant, 0) - info.total_gpus

    def requeue(self, info: Active, now: float, why: str, kind: str, node: str | None = None) -> None:
        """A job whose run ended without finishing waits again (the scheduler has queued it)."""
        info.requeued = why
        info.queued_cycle = self.sched.cycles
        self.pending_by_tenant[info.tenant] = self.pending_by_tenant.get(info.tenant, 0) + 1
        self.changes.job(JobUpdate(info.id, state="pending", reason=why))
        self.changes.event(now, kind, info.id, node, info.tenant, why)
        if self.metrics is not None:
            self.metrics.requeued.labels(kind).inc()

    def cancel(self, job_id: int, tenant: str | None, by: str, now: float) -> str:
        """Take a pending or running job away (a user's cancel; ``tenant`` None: any tenant's)."""
        info = self.active.get(job_id)
        if info is None or (tenant is not None and info.tenant != tenant):
            raise NotFound(f"job {job_id} is not pending or running")
        row = info.row
        was_running = row in self.sched.running
        self.sched.cancel(row, now)
        if was_running:
            self.ran(info)
            self.changes.stop(job_id)
        else:
            self.pending_by_tenant[info.tenant] -= 1
        del self.active[job_id]
        self.end(job_id, info.tenant, "cancelled", now, reason=f"cancelled by {by}")
        self.instant.changed = True
        return "cancelled"

    def fail(self, job_id: int, reason: str, now: float) -> None:
        """Kant ends a running job as failed and stops its run (a service's replica that never became
        ready or stopped answering its readiness probe)."""
        info = self.active.get(job_id)
        if info is None or info.row not in self.sched.running:
            return
        self.sched.cancel(info.row, now)
        self.ran(info)
        self.changes.stop(job_id)
        del self.active[job_id]
        self.end(job_id, info.tenant, "failed", now, reason=reason)
        if self.metrics is not None:
            self.metrics.failed.inc()
        self.instant.changed = True

    # --- the cycle's binds (the scheduler's Binder) -------------------------------------------------
    def bind(self, job: int, placement: Placement) -> None:
        self._binds.append((True, job, placement))

    def evict(self, job: int, placement: Placement) -> None:
        self._binds.append((False, job, placement))

    def carry_out_binds(self, now: float) -> None:
        """The starts and evictions the cycle at ``now`` committed, in order: rows, events, launches
        and stops into the turn's changes."""
        sched = self.sched
        names = sched.cluster.names
        for started, row, placement in self._binds:
            job_id = self.ids[row]
            info = self.active[job_id]
            nodes = tuple(names[n] for n in placement.nodes)
            if started:
                self._started(info, nodes, now)
            else:
                self.ran(info)
                self.changes.stop(job_id, "preempt")
                self.requeue(info, now, "preempted", "preempted", nodes[0])
        self._binds.clear()

    def _started(self, info: Active, nodes: tuple[str, ...], now: float) -> None:
        self.pending_by_tenant[info.tenant] -= 1
        self.running_gpus_by_tenant[info.tenant] = self.running_gpus_by_tenant.get(info.tenant, 0) + info.total_gpus
        info.runs += 1
        info.start = now
        info.planned = self.sched.env.estimate(info.row)
        info.requeued = None
        first = info.first_start is None
        if first:
            info.first_start = now
            if self.metrics is not None:
                self.metrics.wait_seconds.labels(gang_bucket(info.total_gpus)).observe(now - info.submit_time)
            if self.history is not None:
                self.history.wait(now - info.submit_time)
        self.changes.job(JobUpdate(info.id, state="running", reason=None, start_time=now,
                                   first_start_time=now if first else UNSET, placement=list(nodes), runs=info.runs))
        self.changes.event(now, "started", info.id, nodes[0], info.tenant,
                           f"run {info.runs} on {describe_nodes(nodes)}")
        self.changes.launch(self.launch_of(info.id, nodes, now))
        self.keep_deadline(info, now)
        if self.metrics is not None:
            self.metrics.started.inc()

    # --- time limits --------------------------------------------------------------------------------
    def keep_deadline(self, info: Active, start: float) -> None:
        """The current run of ``info``, started at ``start``, ends 'timeout' at its time limit."""
        if info.time_limit_s is not None:
            heapq.heappush(self.deadlines, (start + info.time_limit_s, info.id, info.runs))

    def next_deadline(self) -> float:
        """The service time at which the next running job reaches its time limit (inf: none)."""
        heap = self.deadlines
        while heap and not self._over_limit(heap[0][1], heap[0][2]):
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def _over_limit(self, job_id: int, run: int) -> bool:
        info = self.active.get(job_id)
        return info is not None and info.runs == run and info.row in self.sched.running

    def time_out(self, now: float) -> None:
        """Every running job past its time limit at ``now`` is stopped (SIGTERM, a grace period,
        SIGKILL: the executor's) and ends 'timeout'."""
        heap = self.deadlines
        while heap and heap[0][0] <= now:
            _, job_id, run = heapq.heappop(heap)
            if not self._over_limit(job_id, run):
                continue
            info = self.active.pop(job_id)
            self.sched.cancel(info.row, now)
            self.ran(info)
            self.changes.stop(job_id, "timeout")
            self.end(job_id, info.tenant, "timeout", now,
                     reason=f"time limit of {format_duration(info.time_limit_s)} reached: stopped (SIGTERM, then "
                            "SIGKILL after the grace period)")
            self.instant.changed = True
