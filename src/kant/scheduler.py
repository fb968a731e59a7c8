"""One scheduler for simulated and live clusters.

:class:`Scheduler` owns the cluster state and the pending queue and knows nothing about whether time
is simulated: a driver (the simulator, or a live adapter) calls :meth:`submit` when a job arrives,
:meth:`finish` when one ends, and :meth:`cycle` with the current time to get the jobs to start. A
cycle runs the policy's actions in order on a :class:`~kant.framework.statement.Statement` and
commits it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kant.config.policy import Policy
from kant.framework.context import CycleContext, RunningJob, SchedulerEnv
from kant.framework.plugin import Action
from kant.framework.queue import PendingQueue, shape_ids
from kant.framework.runner import Framework
from kant.framework.statement import Statement
from kant.framework.status import Status
from kant.model.cluster import Cluster
from kant.model.job import JobTable
from kant.model.state import ClusterState, Placement

__all__ = ["Scheduler", "CycleResult"]


@dataclass(slots=True)
class CycleResult:
    started: list[tuple[int, Placement]] = field(default_factory=list)
    evicted: list[tuple[int, Placement]] = field(default_factory=list)
    wakeups: list[float] = field(default_factory=list)


class Scheduler:
    def __init__(self, policy: Policy, cluster: Cluster, jobs: JobTable, *, seed: int = 0) -> None:
        self.policy = policy
        self.env = SchedulerEnv(cluster, jobs, seed)
        self.framework = Framework(self.env, policy.build_plugins())
        self.actions = policy.build_actions()
        for action in self.actions:
            action.setup(self.env)
        self.state = ClusterState(cluster)
        fw = self.framework
        self.shapes, self.requests = shape_ids(jobs, by_tenant=bool(fw.admitters) or not fw.request_only)
        if not fw.request_only:
            # a filter or placer looks beyond the request: remember failures per shape instead
            self.requests = self.shapes
        self.queue = PendingQueue(jobs, self.shapes, self.framework.static_key, self.requests)
        self.running: dict[int, RunningJob] = {}
        self.cycles = 0
        self._reasons: dict[int, Status] = {}
        self._ctx: CycleContext | None = None
        # A policy with one action that has an idle test, no admission and a static order: after a
        # cycle, while only arrivals happen (the state's version is unchanged), a cycle may be the
        # action's cheaper idle test (see Action.idle); it still counts as a cycle.
        only = self.actions[0] if len(self.actions) == 1 else None
        self._idle_ok = (only is not None and type(only).idle is not Action.idle and not fw.admitters
                         and not fw.dynamic)
        self._version_after = -1  # the state's version at the end of the last cycle

    # --- driver calls ------------------------------------------------------------------------
    def submit(self, job: int, now: float) -> Status:
        """A job arrives. Returns why it can never run (and does not queue it), or success."""
        status = self.framework.feasible(job, self.queue.shape_of[job])
        if status.ok:
            self.queue.push(job)
        return status

    def finish(self, job: int, now: float) -> Placement:
        """A running job ended; its resources are free for the next cycle."""
        placement = self.state.release(job)
        del self.running[job]
        self.framework.job_stopped(job, now, placement, True)
        return placement

    def interrupt(self, job: int, now: float) -> Placement:
        """A running job was killed from outside (node failure); it goes back in the queue."""
        placement = self.state.release(job)
        del self.running[job]
        self.framework.job_stopped(job, now, placement, False)
        self.queue.push(job)
        return placement

    def withdraw(self, job: int, now: float) -> Placement | None:
        """The driver takes a job away (an inference replica scaled down): a running job releases its
        resources (listeners hear ``finished=True``: it does not come back on its own) and returns its
        placement; a queued job leaves the queue (returns None)."""
        if job in self.running:
            return self.finish(job, now)
        if job in self.queue:
            self.queue.remove(job)
        return None

    def cycle(self, now: float) -> CycleResult:
        """Run the policy's actions once and commit what they decided."""
        self.cycles += 1
        ctx = self._ctx
        if ctx is None:
            ctx = self._ctx = CycleContext(
                env=self.env,
                state=self.state,
                queue=self.queue,
                now=now,
                running=self.running,
                statement=Statement(self.state),
                reasons=self._reasons,
            )
        else:  # the same object each cycle (its fields are cheaper to reset than a new one to build)
            ctx.now = now
            ctx.state, ctx.queue, ctx.running, ctx.reasons = self.state, self.queue, self.running, self._reasons
            if self._idle_ok and self.state.version == self._version_after and self.actions[0].idle(ctx):
                return CycleResult()
            ctx.statement = Statement(self.state)
            ctx.started, ctx.evicted, ctx.wakeups = [], [], []  # fresh: an action may keep the last ones
        for action in self.actions:
            action.execute(ctx, self.framework)
        ctx.statement.commit()
        for job, _ in ctx.started:
            self.running[job] = RunningJob(now, now + self.env.estimate(job))
        self._version_after = self.state.version
        return CycleResult(started=ctx.started, evicted=ctx.evicted, wakeups=ctx.wakeups)

    # --- introspection -----------------------------------------------------------------------
    def why_pending(self, job: int) -> str:
        """The last reason a job of this shape could not start ("why is my job pending?")."""
        if job in self.running:
            return "running"
        if job not in self.queue:
            return "not queued"
        status = self._reasons.get(int(self.shapes[job]))
        return str(status) if status is not None else "not yet considered"
