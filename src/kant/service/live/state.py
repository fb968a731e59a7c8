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
from kant.model.deps import Outcome
from kant.model.elastic import ElasticBounds
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
from kant.service.live.arrival import Arrival
from kant.service.live.changes import TurnChanges
from kant.service.live.deps import HeldJob, LiveDeps
from kant.text import format_duration

__all__ = ["Arrival", "Active", "LiveState", "gang_bucket", "describe_nodes", "ARRIVAL_HISTORY"]

#: submitted jobs the twin's arrival model learns from (the last ones; kant.twin.arrivals uses a week of them)
ARRIVAL_HISTORY = 20_000


def gang_bucket(total_gpus: int) -> str:
    """The gang-size bucket of docs/metrics.md a job of ``total_gpus`` GPUs falls in."""
    return BUCKETS[int(bucket_index(total_gpus))]


def describe_nodes(nodes: Sequence[str]) -> str:
    """``"a, b x2"``: the nodes of a placement, one worker per entry."""
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n] = counts.get(n, 0) + 1
    return ", ".join(n if c == 1 else f"{n} x{c}" for n, c in counts.items())


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
    held: str | None = None  # who holds it out of the queue (kant hold); None: not held
    array: tuple[int, int] | None = None  # a job array's task: (the array's id, its index)


def elastic_bounds(job: NewJob) -> ElasticBounds | None:
    """A submitted job's elastic bounds (validated by the API), or None for a rigid job."""
    if job.min_workers is None or job.max_workers is None or job.min_workers == job.max_workers:
        return None
    return ElasticBounds(job.min_workers, job.max_workers, job.workers)


@dataclass(slots=True)
class ArrayBook:
    """A throttled job array (``%N``): its tasks in the queue or running, and those waiting for a place."""

    throttle: int
    active: set[int] = field(default_factory=set)
    parked: dict[int, Arrival] = field(default_factory=dict)  # in submit order

    def reason(self, array_id: int) -> str:
        return f"JobArrayTaskLimit: at most {self.throttle} task(s) of array {array_id} at once"


class LiveState:
    """The live scheduler and the loop's books (see the module docstring). One thread uses it."""

    def __init__(self, policy: Policy, *, seed: int, default_estimate: float, metrics: Any, history: Any,
                 ratio_history: int) -> None:
        self.base_policy = policy
        #: the configured policy has a quota plugin (else one is added once a tenant has a quota)
        self.quota_enforced = any(issubclass(p.cls, Quota) for p in policy.plugins)
        self._applied: dict[str, tuple[int | None, int | None]] = {}  # the quotas the scheduler has
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
        self._binds: list[tuple[bool | None, int, Placement]] = []  # (started; None: resized)
        #: (service time, job id, run) at which a running job reaches its time limit, a heap
        self.deadlines: list[tuple[float, int, int]] = []
        #: (planned run time, actual / planned, end time) of the last finished jobs (the twin's error
        #: distribution)
        self.ratios: deque[tuple[float, float, float]] = deque(maxlen=ratio_history)
        #: every job that finished after this time is in ``ratios`` (the loop's first load, then the newest
        #: end dropped from the full deque; None before the load): the twin's left truncation
        self.ratios_from: float | None = None
        #: the last submitted training jobs, as the twin's arrival model reads them (kant.twin.arrivals)
        self.arrival_log: deque[tuple[Any, ...]] = deque(maxlen=ARRIVAL_HISTORY)
        #: bumped by every change of state (arrivals, and every turn that writes a job or node change):
        #: the twin's staleness test
        self.state_version = 0
        #: jobs held for their dependencies (kant.service.live.deps), out of the scheduler until released
        self.deps = LiveDeps()
        self._dep_work: list[tuple[int, Outcome]] = []
        #: throttled job arrays by array id, and the array of each of their tasks in the queue or running
        self.arrays: dict[int, ArrayBook] = {}
        self.array_of: dict[int, int] = {}
        self._array_free: list[int] = []  # arrays with a place freed, to refill (no recursion)

    # --- the scheduler's inputs -------------------------------------------------------------------
    def policy(self) -> Policy:
        """The policy with the database's tenant quotas in force: in its quota plugin, or in one added
        when it has none (:func:`~kant.plugins.quota.with_tenant_quotas`); a job over its tenant's max
        waits with the quota's reason (an admin may raise the max). With no quota set anywhere, the
        policy as configured."""
        quotas = self._applied = self._quotas()
        if not quotas and not self.quota_enforced:
            return self.base_policy
        return with_tenant_quotas(self.base_policy, quotas, hold_over_max=True)

    def _quotas(self) -> dict[str, tuple[int | None, int | None]]:
        """(guaranteed, max) GPUs of each tenant that has either."""
        return {t.name: (t.guaranteed_gpus, t.max_gpus) for t in sorted(self.tenants.values(), key=lambda t: t.name)
                if t.guaranteed_gpus is not None or t.max_gpus is not None}

    def cluster(self) -> Cluster:
        """The cluster of the known nodes, in registration order."""
        rows = sorted(self.nodes.values(), key=lambda n: n.position)
        return Cluster.from_nodes([NodeSpec(n.name, n.gpu_type, n.gpus, n.cpu_milli, n.memory_mib, n.leaf, n.spine)
                                   for n in rows])

    def rebuild(self, now: float) -> None:
        """A new scheduler on the current nodes and policy, with every job and flag (a snapshot)."""
        self.sched = self.sched.rebuilt(self.cluster(), now, policy=self.policy())
        self.instant.changed = True

    def set_policy(self, policy: Policy, now: float) -> None:
        """Schedule under ``policy`` (the configured policy changed: an admin's tree of queues) from
        now on: the scheduler is rebuilt with every job. If the new policy cannot run here (its
        plugins' setup raises), nothing changes and the error is raised."""
        old = self.base_policy
        self.base_policy = policy
        self.quota_enforced = any(issubclass(p.cls, Quota) for p in policy.plugins)
        try:
            self.rebuild(now)
        except Exception:
            self.base_policy = old
            self.quota_enforced = any(issubclass(p.cls, Quota) for p in old.plugins)
            raise

    def reload_tenants(self, tenants: Iterable[TenantRow], now: float) -> str:
        """Tenants or their quotas changed in the database: new names coded, the policy rebuilt."""
        self.tenants = {t.name: t for t in tenants}
        for name in sorted(self.tenants):
            self.sched.jobs.code("tenant", name)
        quotas = self._quotas()
        if quotas != self._applied or self.quota_enforced:  # (quotas apply under every policy)
            self.rebuild(now)
        return "reloaded"

    # --- the books ----------------------------------------------------------------------------------
    def add_to_store(self, store: JobStore, job_id: int, job: NewJob, submit_time: float) -> int:
        """``job`` becomes the store's next row and an active job; returns its row."""
        row = store.add(job.name, submit=submit_time, workers=job.workers, gpus_per_worker=job.gpus_per_worker,
                        gpu_milli=job.gpu_milli, cpu_milli=job.cpu_milli, memory_mib=job.memory_mib,
                        gpu_type=job.gpu_type, priority=job.priority, tenant=job.tenant, user=job.user,
                        estimate=job.estimate_s, default_estimate=self.default_estimate, kind=JobKind(job.kind),
                        time_limit=job.time_limit_s, elastic=elastic_bounds(job))
        assert row == len(self.ids)
        self.ids.append(job_id)
        info = self.active[job_id] = Active(job_id, row, job.tenant, submit_time, job.workers * job.gpus_per_worker,
                                            duration_s=job.duration_s, command=job.command, labels=dict(job.labels),
                                            service_id=job.service_id, chdir=job.chdir,
                                            environment=job.environment, time_limit_s=job.time_limit_s)
        if job.array_task_id is not None and job.array_position is not None:
            info.array = (job_id - job.array_position, job.array_task_id)
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
        for row, j in zip(rows, jobs, strict=True):
            bounds = elastic_bounds(j)
            if bounds is not None:
                store.elastic[row] = bounds
        self.ids.extend(j.id for j in jobs)
        active = self.active
        for row, j in zip(rows, jobs, strict=True):
            # (an elastic job that runs holds the GPUs of its placement, not of its requested size)
            gpus = len(j.placement) * j.gpus_per_worker if j.placement and row in store.elastic else \
                j.workers * j.gpus_per_worker
            active[j.id] = Active(j.id, row, j.tenant, j.submit_time, gpus,
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
        env = {} if info.array is None else {"KANT_ARRAY_JOB_ID": str(info.array[0]),
                                              "KANT_ARRAY_TASK_ID": str(info.array[1])}
        bounds = jobs.elastic.get(info.row) if jobs.elastic else None
        if bounds is not None:  # an elastic gang: its bounds, and which restart this is (as torchrun's elastic
            # agent tells its workers; WORLD_SIZE and the ranks, of this run's size, are the executor's)
            env = {**env, "KANT_MIN_WORKERS": str(bounds.min_workers), "KANT_MAX_WORKERS": str(bounds.max_workers),
                   "TORCHELASTIC_RUN_ID": f"kant-{job_id}", "TORCHELASTIC_RESTART_COUNT": str(info.runs - 1)}
        return Launch(job_id, info.runs, tuple(nodes), int(jobs.gpus_per_worker[info.row]), start,
                      info.command, info.duration_s, {str(k): str(v) for k, v in info.labels.items()},
                      int(jobs.gpu_milli[info.row]), env=env, cwd=info.chdir, job_env=info.environment)

    # --- transitions --------------------------------------------------------------------------------
    def arrive(self, arrivals: Iterable[Arrival], now: float, *, submitted: bool = True) -> int:
        """Jobs the database accepted join the store and the queue (or end unschedulable); a job whose
        dependency is not met yet is held (:mod:`kant.service.live.deps`). ``submitted``: new submits
        (counted), not jobs a restart loads again."""
        held = self.deps.held
        new = [a for a in arrivals if a.id not in self.active and a.id not in held]  # (a retried submit is here)
        n = len(new)
        if any(a.job.dependency for a in new):
            new = [a for a in new if not a.job.dependency or not self._held(a, now)]
        self._queue(new, now)
        if submitted:
            self._log_arrivals(new)
        if n:
            self.state_version += 1  # (the writer logged the submits: this turn may write nothing)
        if self.metrics is not None and submitted:
            self.metrics.submitted.inc(n)
        return n

    def _log_arrivals(self, new: Sequence[Arrival]) -> None:
        """Keep the submitted training jobs for the twin's arrival model: columns of
        :data:`kant.twin.arrivals.ARRIVAL_COLUMNS` (``estimate``: the run time the scheduler plans
        with: the estimate, else the default, within the time limit)."""
        for a in new:
            job = a.job
            if job.service_id is not None or job.kind != int(JobKind.TRAINING):
                continue
            est = self.default_estimate if job.estimate_s is None else job.estimate_s
            if job.time_limit_s is not None:
                est = min(est, job.time_limit_s)
            if not math.isfinite(est) or est < 0:
                continue
            self.arrival_log.append((a.submit_time, job.tenant, job.user if job.user is not None else job.tenant,
                                     job.workers, job.gpus_per_worker, job.gpu_milli, job.cpu_milli, job.memory_mib,
                                     job.gpu_type, job.priority, int(job.kind), float(est)))

    def _queue(self, new: list[Arrival], now: float) -> None:
        """Arrived jobs (no dependency left to wait for) join the store and the queue, or end
        unschedulable; a task of a throttled array waits for a place (:meth:`_array_admit`)."""
        if any(a.job.array_throttle is not None for a in new):
            new = [a for a in new if a.job.array_throttle is None or self._array_admit(a)]
        sched = self.sched
        with sched.jobs.batch():
            rows = [self.add_to_store(sched.jobs, a.id, a.job, a.submit_time) for a in new]
        for a, row in zip(new, rows, strict=True):
            status = sched.submit(row, a.submit_time)
            self.active[a.id].queued_cycle = sched.cycles
            if status.ok:
                self.instant.changed = True
                self.pending_by_tenant[a.job.tenant] = self.pending_by_tenant.get(a.job.tenant, 0) + 1
            else:
                del self.active[a.id]
                self.end(a.id, a.job.tenant, "unschedulable", now, reason=str(status))
        if new:
            self.state_version += 1

    def end(self, job_id: int, tenant: str, state: str, now: float, *, reason: str | None = None,
            exit_code: int | None = None, node: str | None = None) -> None:
        """A job left the active ones (finished, failed, cancelled, unschedulable): its row and event."""
        self.changes.job(JobUpdate(job_id, state=state, reason=reason, end_time=now,
                                   exit_code=exit_code if exit_code is not None else UNSET))
        self.changes.event(now, state, job_id, node, tenant, reason or state)
        self.dep_outcome(job_id, Outcome.OK if state == "finished" else Outcome.NOTOK, now)
        if job_id in self.array_of:
            self._array_left(job_id, now)

    # --- job arrays ---------------------------------------------------------------------------------
    def _array_admit(self, a: Arrival) -> bool:
        """Whether the task ``a`` of a throttled array may be queued now (else it waits for a place)."""
        assert a.job.array_position is not None and a.job.array_throttle is not None
        array_id = a.id - a.job.array_position
        book = self.arrays.get(array_id)
        if book is None:
            book = self.arrays[array_id] = ArrayBook(a.job.array_throttle)
        if len(book.active) < book.throttle and not (book.parked and a.id not in book.parked
                                                      and a.id > next(iter(book.parked))):
            book.parked.pop(a.id, None)
            book.active.add(a.id)
            self.array_of[a.id] = array_id
            return True
        if a.id not in book.parked:
            book.parked[a.id] = a
            self.changes.job(JobUpdate(a.id, reason=book.reason(array_id)))
        return False

    def _array_left(self, job_id: int, now: float) -> None:
        """A task left the queue for good: the next waiting task of its array takes its place."""
        array_id = self.array_of.pop(job_id)
        book = self.arrays[array_id]
        book.active.discard(job_id)
        self._array_free.append(array_id)
        if len(self._array_free) > 1:
            return  # (an outer call is refilling)
        while self._array_free:
            aid = self._array_free[0]
            other = self.arrays.get(aid)
            if other is not None:
                if other.parked and len(other.active) < other.throttle:
                    nxt = next(iter(other.parked.values()))
                    self.changes.event(now, "released", nxt.id, None, nxt.job.tenant,
                                       f"a place in array {aid}: queued")
                    self._queue([nxt], now)  # (its end, if it is refused, refills again: appended)
                    continue
                if not other.active and not other.parked:
                    del self.arrays[aid]
            self._array_free.pop(0)

    def parked_task(self, job_id: int) -> tuple[int, ArrayBook] | None:
        """(array id, book) of a task waiting for a place in its array, or None."""
        for array_id, book in self.arrays.items():
            if job_id in book.parked:
                return array_id, book
        return None

    def cancel_array(self, array_id: int, tenant: str | None, by: str, now: float) -> int:
        """Cancel every pending or running task of the array ``array_id``; returns how many."""
        ids = [i for i, a in self.active.items() if a.array is not None and a.array[0] == array_id]
        book = self.arrays.get(array_id)
        if book is not None:
            ids += list(book.parked)
        ids += [i for i, h in self.deps.held.items()
                if h.arrival.job.array_position is not None and i - h.arrival.job.array_position == array_id]
        n = 0
        for job_id in sorted(set(ids)):
            try:
                self.cancel(job_id, tenant, by, now)
                n += 1
            except NotFound:
                continue
        if not n:
            raise NotFound(f"array {array_id} has no pending or running task")
        return n

    # --- dependencies -------------------------------------------------------------------------------
    def _held(self, a: Arrival, now: float) -> bool:
        """Hold ``a`` if its dependency is not met yet (True), cancel it if it never can be and it asked
        for that (True), else let it be queued (False)."""
        held = self.deps.hold(a, self._dep_current)
        if held is None:
            return False
        if held.never is not None and a.job.kill_on_invalid_dep:
            self.deps.cancel(a.id)
            self.end(a.id, a.job.tenant, "cancelled", now, reason=f"cancelled (kill_on_invalid_dep): {held.never}")
            return True
        self._held_reason(held, now, "held")
        return True

    def _held_reason(self, held: HeldJob, now: float, kind: str) -> None:
        a = held.arrival
        why = held.reason()
        self.changes.job(JobUpdate(a.id, reason=why))
        self.changes.event(now, kind, a.id, None, a.job.tenant, why)

    def _dep_current(self, job_id: int) -> Outcome | None:
        info = self.active.get(job_id)
        if info is not None:
            return Outcome.STARTED if info.first_start is not None else Outcome.WAITING
        if job_id in self.deps.held:
            return Outcome.WAITING
        return None

    def dep_outcome(self, job_id: int, outcome: Outcome, now: float) -> None:
        """``job_id`` started for the first time or ended: queue the held jobs now free to go, cancel the
        ones that asked for it (each cancel an outcome in turn: followed through in order, no recursion)."""
        work = self._dep_work
        work.append((job_id, outcome))
        if len(work) > 1:
            return  # (an outer call is working through the list)
        while work:
            j, out = work[0]
            to_queue, to_kill, changed = self.deps.outcome(j, out)
            for held in changed:
                self._held_reason(held, now, "dependency")
            for held in to_kill:
                a = held.arrival
                self.end(a.id, a.job.tenant, "cancelled", now, reason=f"cancelled (kill_on_invalid_dep): {held.never}")
            if to_queue:
                for held in to_queue:
                    self.changes.event(now, "released", held.arrival.id, None, held.arrival.job.tenant,
                                       "dependency met: queued")
                self._queue([h.arrival for h in to_queue], now)
            work.pop(0)

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
                if len(self.ratios) == self.ratios.maxlen and self.ratios:
                    dropped = self.ratios[0][2]
                    self.ratios_from = dropped if self.ratios_from is None else max(self.ratios_from, dropped)
                self.ratios.append((info.planned, runtime / info.planned, t))
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
        parked = self.parked_task(job_id) if info is None and self.arrays else None
        if parked is not None and (tenant is None or parked[1].parked[job_id].job.tenant == tenant):
            a = parked[1].parked.pop(job_id)
            self.end(job_id, a.job.tenant, "cancelled", now, reason=f"cancelled by {by}")
            return "cancelled"
        held = self.deps.held.get(job_id) if info is None else None
        if held is not None and (tenant is None or held.arrival.job.tenant == tenant):
            self.deps.cancel(job_id)
            self.end(job_id, held.arrival.job.tenant, "cancelled", now, reason=f"cancelled by {by}")
            return "cancelled"
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

    def resize(self, job: int, before: Placement, after: Placement) -> None:
        """An elastic job's new size (kant.actions.elastic): a restart from its checkpoint."""
        self._binds.append((None, job, after))

    def carry_out_binds(self, now: float) -> None:
        """The starts and evictions the cycle at ``now`` committed, in order: rows, events, launches
        and stops into the turn's changes."""
        sched = self.sched
        names = sched.cluster.names
        elastic = sched.jobs.elastic
        for started, row, placement in self._binds:
            job_id = self.ids[row]
            info = self.active[job_id]
            nodes = tuple(names[n] for n in placement.nodes)
            if started is None:
                self._resized(info, nodes, placement.total_gpus, now)
            elif started:
                if elastic and row in elastic:  # an elastic job may start at another size than it asked for
                    info.total_gpus = placement.total_gpus
                self._started(info, nodes, now)
            else:
                self.ran(info)
                self.changes.stop(job_id, "preempt")
                self.requeue(info, now, "preempted", "preempted", nodes[0])
        self._binds.clear()

    def _resized(self, info: Active, nodes: tuple[str, ...], gpus: int, now: float) -> None:
        """A running elastic job changes size: its run stops (the checkpoint signal first, as a
        preemption) and a new run starts on ``nodes`` at once, with the new world size in its
        environment (``WORLD_SIZE``, ranks: the executor's, from the placement)."""
        before = info.total_gpus  # GPUs of the old run
        self.changes.stop(info.id, "preempt")
        self.changes.job(JobUpdate(info.id, state="pending", reason="resized"))
        self.changes.event(now, "resized", info.id, nodes[0], info.tenant,
                           f"run {info.runs}: {before} -> {gpus} GPU(s), restarting from its checkpoint")
        self.running_gpus_by_tenant[info.tenant] = self.running_gpus_by_tenant.get(info.tenant, 0) - before + gpus
        info.total_gpus = gpus
        info.runs += 1
        info.start = now
        info.planned = self.sched.env.estimate(info.row)
        self.changes.job(JobUpdate(info.id, state="running", reason=None, start_time=now, placement=list(nodes),
                                   runs=info.runs))
        self.changes.event(now, "started", info.id, nodes[0], info.tenant,
                           f"run {info.runs} on {describe_nodes(nodes)} (resized)")
        self.changes.launch(self.launch_of(info.id, nodes, now))

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
        if first:
            self.dep_outcome(info.id, Outcome.STARTED, now)
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
