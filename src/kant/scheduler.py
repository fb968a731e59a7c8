"""One scheduler for simulated and live clusters.

:class:`Scheduler` owns the cluster state and the pending queue and knows nothing about whether time
is simulated: a driver (the simulator, or the live service) adds jobs to the store and calls
:meth:`submit` when one arrives, :meth:`finish` when one ends, and :meth:`cycle` with the current
time to get the jobs to start. A cycle runs the policy's actions in order on a
:class:`~kant.framework.statement.Statement` and commits it; the commit is where binds happen (a
driver that runs work sets :attr:`Scheduler.binder`).

What a live cluster adds is here too: jobs added at any time (the store grows; plugins hear
:meth:`~kant.framework.plugin.Plugin.jobs_added`), cancel, node cordon / fail / repair, a bind that
failed (the job returns to the queue with the reason), and a snapshot to restore from (after a
restart, or to rebuild on a changed cluster: running jobs keep their placements).

The scheduler never reads a job's true duration: it plans with the store's ``estimate`` column (or
a runtime estimator's prediction). Only oracle baselines read the simulated workload
(``env.trace``), and a live scheduler has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, TypeVar

from kant.config.policy import Policy
from kant.errors import SchedulingError
from kant.framework.action import Action
from kant.framework.context import CycleContext, RunningJob, SchedulerEnv
from kant.framework.plugin import Plugin
from kant.framework.queue import PendingQueue, ShapeIndex
from kant.framework.runner import Framework
from kant.framework.statement import Binder, Statement
from kant.framework.status import Status
from kant.model.cluster import Cluster
from kant.model.fit import FULL_GPU_MILLI, is_share
from kant.model.job import JobTable
from kant.model.state import ClusterState, Placement
from kant.model.store import JobStore
from kant.stamp import Stamped

__all__ = ["Scheduler", "CycleResult", "SchedulerSnapshot", "RunningRecord", "CORDONED", "DOWN"]

#: node flags (see :meth:`Scheduler.node_flags`): a node takes work only with no flag set
CORDONED = 1
DOWN = 2

P = TypeVar("P", bound=Plugin)
A = TypeVar("A", bound=Action)


@dataclass(slots=True)
class CycleResult:
    started: list[tuple[int, Placement]] = field(default_factory=list)
    evicted: list[tuple[int, Placement]] = field(default_factory=list)
    wakeups: list[float] = field(default_factory=list)
    #: running elastic jobs resized (job, placement before, after): a restart from their checkpoint
    resized: list[tuple[int, Placement, Placement]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RunningRecord:
    """A running job in a snapshot: its workers' nodes by name, per-worker request, run times."""

    nodes: tuple[str, ...]
    gpus: int
    cpu_milli: int
    memory_mib: int
    start: float
    expected_end: float


@dataclass(frozen=True)
class SchedulerSnapshot:
    """What a scheduler holds beyond its inputs, by job row and node name: enough to rebuild it (after
    a restart, or on a cluster with nodes added or removed). Plugin state that is not derived from
    the running jobs (a runtime estimator's history, attained service of finished runs) is not kept.
    """

    now: float
    pending: tuple[int, ...]
    running: Mapping[int, RunningRecord]
    node_flags: Mapping[str, int]  # nodes with a flag set (CORDONED, DOWN)
    bind_failures: Mapping[int, str] = field(default_factory=dict)
    #: per plugin name, the state it saves (:meth:`~kant.framework.plugin.Plugin.saved_state`)
    plugin_state: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (infinite expected ends become None)."""
        def end(x: float) -> float | None:
            return x if x != float("inf") else None

        return {
            "now": self.now,
            "pending": list(self.pending),
            "running": {str(j): {"nodes": list(r.nodes), "gpus": r.gpus, "cpu_milli": r.cpu_milli,
                                 "memory_mib": r.memory_mib, "start": r.start, "expected_end": end(r.expected_end)}
                        for j, r in self.running.items()},
            "node_flags": dict(self.node_flags),
            "bind_failures": {str(j): why for j, why in self.bind_failures.items()},
            "plugin_state": dict(self.plugin_state),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SchedulerSnapshot:
        def end(x: float | None) -> float:
            return float("inf") if x is None else float(x)

        return cls(
            now=float(data["now"]),
            pending=tuple(int(j) for j in data["pending"]),
            running={int(j): RunningRecord(tuple(r["nodes"]), int(r["gpus"]), int(r["cpu_milli"]),
                                           int(r["memory_mib"]), float(r["start"]), end(r["expected_end"]))
                     for j, r in data["running"].items()},
            node_flags={str(n): int(f) for n, f in data["node_flags"].items()},
            bind_failures={int(j): str(w) for j, w in data.get("bind_failures", {}).items()},
            plugin_state=dict(data.get("plugin_state", {})),
        )


class Scheduler:
    def __init__(self, policy: Policy, cluster: Cluster, jobs: JobStore | JobTable, *, seed: int = 0,
                 trace: JobTable | None = None) -> None:
        self.policy = policy
        self.seed = seed
        self.env = SchedulerEnv(cluster, jobs, seed, trace)
        self.jobs: JobStore = self.env.jobs
        self.framework = Framework(self.env, policy.build_plugins())
        self.actions = policy.build_actions()
        #: an action must see every changed instant, even with nothing waiting (kant.instant)
        self.every_event = any(a.EVERY_EVENT for a in self.actions)
        for action in self.actions:
            action.setup(self.env)
        for action in self.actions:
            action.attach(self.framework)
        self.state = ClusterState(cluster)
        fw = self.framework
        # a filter or placer that looks beyond the request: failures are remembered per shape
        self.index = ShapeIndex(by_tenant=bool(fw.admitters) or not fw.request_only, per_shape=not fw.request_only)
        self.index.extend(self.jobs)
        self.queue = PendingQueue(self.jobs, self.index, self.framework.static_key_function())
        self.running: dict[int, RunningJob] = {}
        self.cycles = 0
        #: told of every committed start and eviction (a live executor); None in a simulation
        self.binder: Binder | None = None
        self._reasons: dict[int, Status] = {}
        self._bind_failures: dict[int, str] = {}
        self._flags: dict[int, int] = {}  # node -> CORDONED | DOWN, nodes with a flag only
        self._ctx: CycleContext | None = None
        # A policy whose every action has an idle test, with no admission: after a cycle, while only
        # arrivals happen (the state's version is unchanged), a cycle may be the actions' cheaper
        # idle tests (see Action.idle); it still counts as a cycle.
        self._idle_ok = all(type(a).idle is not Action.idle for a in self.actions) and not fw.admitters
        # the last action's test first: a later action's (backfill: is the cluster full?) is the
        # cheaper and the more often false, and the answer is the same in any order
        self._idle_tests = [a.idle for a in reversed(self.actions)]
        self._after: Stamped[None] = Stamped(None)  # the state as the last cycle left it (its version)

    @property
    def cluster(self) -> Cluster:
        return self.env.cluster

    def plugin(self, kind: type[P], name: str | None = None) -> P | None:
        """The policy's plugin of this kind (see :meth:`Framework.plugin`), or None."""
        return self.framework.plugin(kind, name)

    def action(self, kind: type[A]) -> A | None:
        """The policy's first action of this kind (``sched.action(Backfill)``), or None."""
        for action in self.actions:
            if isinstance(action, kind):
                return action
        return None

    # --- jobs ----------------------------------------------------------------------------------
    def _sync_jobs(self) -> None:
        """Index the jobs added to the store since the last call; plugins and actions grow."""
        start = len(self.index)
        if start < len(self.jobs):
            self.index.extend(self.jobs)
            self.framework.jobs_added(start)
            for action in self.actions:
                action.jobs_added(self.env, start)

    def submit(self, job: int, now: float) -> Status:
        """A job (a row of the store) arrives. Returns why it can never run (and does not queue it),
        or success."""
        if job >= len(self.queue.shape_of):
            self._sync_jobs()
        status = self.framework.feasible(job, self.queue.shape_of[job])
        if status.ok:
            self.queue.push(job)
        return status

    def _stop(self, job: int, now: float, finished: bool) -> Placement:
        """A running job stops: its resources are free for the next cycle; listeners hear whether it
        is done (``finished``) or may come back."""
        placement = self.state.release(job)
        del self.running[job]
        if self.framework.listeners:
            self.framework.job_stopped(job, now, placement, finished)
        return placement

    def finish(self, job: int, now: float, runtime: float | None = None) -> Placement:
        """A running job ended. ``runtime``: how long it really ran (the simulator knows its work; a
        live driver measures it; None: since its last start), which a runtime estimator learns from."""
        self.jobs.set_runtime(job, now - self.running[job].start if runtime is None else runtime)
        return self._stop(job, now, True)

    def interrupt(self, job: int, now: float) -> Placement:
        """A running job was killed from outside (node failure, lost worker); it goes back in the queue."""
        placement = self._stop(job, now, False)
        self.queue.push(job)
        return placement

    def bind_failed(self, job: int, now: float, reason: str) -> Placement:
        """The executor could not start ``job`` where the last commit put it: the job returns to the
        queue, and :meth:`why_pending` tells the reason until it starts."""
        if job not in self.running:
            raise SchedulingError(f"job {job} is not running: no bind of it can fail")
        self._bind_failures[job] = reason
        return self.interrupt(job, now)

    def cancel(self, job: int, now: float) -> Placement | None:
        """The driver takes a job away (a user's cancel, an inference replica scaled down): a running
        job releases its resources (listeners hear ``finished=True``: it does not come back on its
        own) and returns its placement; a queued job leaves the queue (returns None)."""
        self._bind_failures.pop(job, None)
        if job in self.running:
            return self._stop(job, now, True)
        if job in self.queue:
            self.queue.remove(job)
        return None

    # --- nodes ---------------------------------------------------------------------------------
    def node_flags(self, node: int) -> int:
        """``CORDONED | DOWN`` bits of a node (0: it takes work)."""
        return self._flags.get(node, 0)

    def flagged_nodes(self) -> Mapping[int, int]:
        """Nodes with a flag set, and their flags (read only)."""
        return MappingProxyType(self._flags)

    def _set_flags(self, node: int, flags: int) -> None:
        if not 0 <= node < self.cluster.n_nodes:
            raise SchedulingError(f"no node {node}: the cluster has {self.cluster.n_nodes}")
        if flags:
            self._flags[node] = flags
            self.state.set_unschedulable(node)
        else:
            self._flags.pop(node, None)
            self.state.set_schedulable(node)

    def cordon(self, node: int) -> None:
        """No new work on ``node``; what runs there goes on (drain = cordon, then wait)."""
        self._set_flags(node, self.node_flags(node) | CORDONED)

    def uncordon(self, node: int) -> None:
        self._set_flags(node, self.node_flags(node) & ~CORDONED)

    def fail_node(self, node: int, now: float) -> list[tuple[int, Placement]]:
        """``node`` is lost: every job on it is interrupted (back to the queue) and it takes no work
        until :meth:`repair_node`. Returns the interrupted jobs with their placements."""
        hit = [(job, self.interrupt(job, now)) for job in self.state.jobs_on(node)]
        self._set_flags(node, self.node_flags(node) | DOWN)
        return hit

    def repair_node(self, node: int) -> None:
        self._set_flags(node, self.node_flags(node) & ~DOWN)

    # --- the cycle -----------------------------------------------------------------------------
    def _new_context(self, now: float) -> CycleContext:
        """The cycle context, made once (each later cycle resets its fields: cheaper than a new one)."""
        ctx = self._ctx = CycleContext(
            env=self.env,
            state=self.state,
            queue=self.queue,
            now=now,
            running=self.running,
            statement=Statement(self.state),
            reasons=self._reasons,
        )
        return ctx

    def _idle(self, ctx: CycleContext) -> bool:
        """Every action's idle test says so (see Action.idle), asked last action first."""
        for idle in self._idle_tests:  # noqa: SIM110 - a loop, not a generator, once per idle cycle
            if not idle(ctx):
                return False
        return True

    def cycle(self, now: float) -> CycleResult:
        """Run the policy's actions once and commit what they decided."""
        self.cycles += 1
        ctx = self._ctx
        if ctx is None:
            ctx = self._new_context(now)
        else:  # the same object each cycle (its fields are cheaper to reset than a new one to build)
            ctx.now = now
            ctx.state, ctx.queue, ctx.running, ctx.reasons = self.state, self.queue, self.running, self._reasons
            if self._idle_ok and self._after.fresh(self.state, self.state.version) and self._idle(ctx):
                return CycleResult([], [], [], [])
            if ctx.statement.operations or ctx.statement.state is not self.state:
                ctx.statement = Statement(self.state)  # (the last one was committed: empty, reused)
            ctx.started, ctx.evicted, ctx.wakeups, ctx.resized = [], [], [], []  # fresh: an action may keep
            # the last ones
        for action in self.actions:
            action.execute(ctx, self.framework)
        ctx.statement.commit(self.binder)
        estimate = self.env.estimate
        elastic = self.jobs.elastic
        for job, placement in ctx.started:
            bounds = elastic.get(job) if elastic else None
            if bounds is None:
                self.running[job] = RunningJob(now, now + estimate(job))
            else:  # the estimate is at the reference size: scaled to the size it starts with
                self.running[job] = RunningJob(now, now + estimate(job) / bounds.speed(len(placement.nodes)))
        if self._bind_failures:
            for job, _ in ctx.started:
                self._bind_failures.pop(job, None)
        self._after.keep(self.state, self.state.version, None)
        return CycleResult(ctx.started, ctx.evicted, ctx.wakeups, ctx.resized)

    def offer(self, job: int, now: float) -> Placement | Status:
        """Offer ``job`` (a row of the store, not queued) to placement once, at ``now``, outside any
        cycle: if the policy's placement (resource fit, its filters and scores, or its ``Place``
        plugin) finds room for the whole gang on the free capacity, the job is allocated and starts
        there (listeners hear it, the binder binds it, it runs until :meth:`finish` or
        :meth:`cancel`) and its placement is returned; otherwise nothing changes and the returned
        Status says why. No queue, no admission plugin, no action, no retry: for drivers that place
        each arrival once and drop what does not fit (the FGD experiment, as its artifact does)."""
        if job >= len(self.queue.shape_of):
            self._sync_jobs()
        ctx = self._ctx
        if ctx is None:
            ctx = self._new_context(now)
        else:
            ctx.now = now
            ctx.state, ctx.queue, ctx.running, ctx.reasons = self.state, self.queue, self.running, self._reasons
        result = self.framework.place(ctx, job)
        if isinstance(result, Placement):
            self.state.allocate(job, result)
            self.framework.job_started(job, now, result)
            self.running[job] = RunningJob(now, now + self.env.estimate(job))
            if self.binder is not None:
                self.binder.bind(job, result)
        return result

    # --- introspection -------------------------------------------------------------------------
    def why_pending(self, job: int) -> str:
        """The last reason a job of this shape could not start ("why is my job pending?")."""
        if job in self.running:
            return "running"
        if job not in self.queue:
            return "not queued"
        status = self._reasons.get(self.queue.shape_of[job])
        why = str(status) if status is not None else "not yet considered"
        failed = self._bind_failures.get(job)
        return why if failed is None else f"{why}; its last start failed: {failed}"

    def pending_status(self, job: int) -> Status | None:
        """The Status behind :meth:`why_pending` (None: not looked at since it was queued)."""
        return self._reasons.get(self.queue.shape_of[job]) if job in self.queue else None

    # --- snapshot and restore ------------------------------------------------------------------
    def snapshot(self, now: float) -> SchedulerSnapshot:
        """The scheduler's state by job row and node name (see :class:`SchedulerSnapshot`)."""
        names = self.cluster.names
        allocations = self.state.allocations
        running = {}
        for job, run in self.running.items():
            p = allocations[job]
            running[job] = RunningRecord(tuple(names[n] for n in p.nodes), p.gpus, p.cpu_milli, p.memory_mib,
                                         run.start, run.expected_end)
        return SchedulerSnapshot(
            now=now,
            pending=tuple(sorted(self.queue)),
            running=running,
            node_flags={names[n]: f for n, f in sorted(self._flags.items())},
            bind_failures=dict(self._bind_failures),
            plugin_state=self.plugin_states(now),
        )

    def plugin_states(self, now: float) -> dict[str, Any]:
        """Per plugin name, the state it keeps beyond the running jobs (:meth:`Plugin.saved_state`)."""
        out: dict[str, Any] = {}
        for p in self.framework.plugins:
            state = p.saved_state(now)
            if state is not None:
                out[p.NAME] = state
        return out

    def restore(self, snap: SchedulerSnapshot) -> None:
        """Load ``snap`` into this scheduler, which must be fresh (nothing queued or running, no
        cycle run). Running jobs get their placements back (node names are looked up in this
        cluster, which may have other nodes than the snapshot's), listeners hear them start again at
        their start times, in start order (ties in the snapshot's order: a live scheduler's snapshot
        lists its running jobs in the order it started them, which decides ties in backfill's release
        profile); then node flags are set and pending jobs queued.
        Raises :class:`SchedulingError` naming the job or node that does not fit."""
        if self.running or len(self.queue) or self.cycles:
            raise SchedulingError("restore needs a fresh scheduler")
        self._sync_jobs()
        if snap.plugin_state:
            for p in self.framework.plugins:
                if p.NAME in snap.plugin_state:
                    p.load_state(snap.plugin_state[p.NAME])
        index = {name: i for i, name in enumerate(self.cluster.names)}

        def node_of(name: str, what: str) -> int:
            node = index.get(name)
            if node is None:
                raise SchedulingError(f"{what}: node {name!r} is not in the cluster")
            return node

        n_jobs = len(self.jobs)
        for job, rec in sorted(snap.running.items(), key=lambda item: item[1].start):
            if not 0 <= job < n_jobs:
                raise SchedulingError(f"snapshot names job {job}, but the store has {n_jobs} jobs")
            milli = int(self.jobs.gpu_milli[job])  # a GPU share comes back as a share (docs/gpu-sharing.md)
            placement = Placement(tuple(node_of(n, f"running job {job}") for n in rec.nodes), rec.gpus,
                                  rec.cpu_milli, rec.memory_mib,
                                  milli if is_share(rec.gpus, milli) else FULL_GPU_MILLI)
            self.state.allocate(job, placement)
            self.running[job] = RunningJob(rec.start, rec.expected_end)
            self.framework.job_started(job, rec.start, placement)
        for name, flags in snap.node_flags.items():
            node = node_of(name, "node flags")
            if flags & DOWN and self.state.jobs_on(node):
                raise SchedulingError(f"node {name!r} is down but running jobs are placed on it")
            self._set_flags(node, flags)
        for job in snap.pending:
            if not 0 <= job < n_jobs:
                raise SchedulingError(f"snapshot names job {job}, but the store has {n_jobs} jobs")
            if job in self.running:
                raise SchedulingError(f"job {job} is both pending and running in the snapshot")
            status = self.submit(job, snap.now)
            if not status.ok:
                raise SchedulingError(f"pending job {job} can no longer run here: {status}")
        self._bind_failures.update(snap.bind_failures)

    @classmethod
    def from_snapshot(cls, policy: Policy, cluster: Cluster, jobs: JobStore, snap: SchedulerSnapshot, *,
                      seed: int = 0, trace: JobTable | None = None) -> Scheduler:
        """A new scheduler with ``snap`` restored (see :meth:`restore`)."""
        sched = cls(policy, cluster, jobs, seed=seed, trace=trace)
        sched.restore(snap)
        return sched

    def rebuilt(self, cluster: Cluster, now: float, *, policy: Policy | None = None) -> Scheduler:
        """This scheduler on another cluster (nodes added or removed, by name) or under another
        policy, with its jobs, placements, node flags (of the nodes still there), binder and cycle
        count: a snapshot restored into a new one. Jobs on nodes the new cluster lacks must have
        been interrupted or finished first."""
        snap = self.snapshot(now)
        names = set(cluster.names)
        snap = replace(snap, node_flags={n: f for n, f in snap.node_flags.items() if n in names})
        new = Scheduler.from_snapshot(policy or self.policy, cluster, self.jobs, snap, seed=self.seed,
                                      trace=self.env.trace)
        new.binder, new.cycles = self.binder, self.cycles
        return new

