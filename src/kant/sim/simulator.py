"""Trace-driven simulation: arrivals, starts, finishes and node failures drive the same
:class:`~kant.scheduler.Scheduler` a live deployment uses.

The loop advances to the next instant with anything due (a finish or failure event from the kernel,
an arrival from the trace, which is merged in submit order rather than pushed onto the heap, or a
wake-up a cycle asked for), fires everything due at that instant (finishes first, then failures and
repairs, then processes, then arrivals), runs one scheduling cycle if anything changed, and records
one sample of the cluster: the instant rule of :mod:`kant.instant`, which the live service's loop
follows too.

Processes (:meth:`Simulator.add_process`) let a driver change the workload while the run goes on (an
autoscaler adding and removing inference replicas): a process is a callback called at the times it
asks for, which may :meth:`~Simulator.submit` rows listed as ``held`` (the trace merge skips them)
and :meth:`~Simulator.stop` jobs (a withdrawal: neither a finish nor a preemption).
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from kant.config.policy import Policy
from kant.errors import KantError, SchedulingError
from kant.framework.action import Action
from kant.framework.plugin import Plugin
from kant.framework.status import Status
from kant.instant import Instant
from kant.metrics.recorder import JobStatus, Recorder, SimResult
from kant.model.cluster import Cluster
from kant.model.deps import DependencyGate, Outcome
from kant.model.job import JobTable
from kant.model.scalars import scalar_view
from kant.model.state import Placement
from kant.model.store import JobStore
from kant.scheduler import Scheduler, SchedulerSnapshot
from kant.sim.execution import ExecutionModel
from kant.sim.kernel import EventKernel

__all__ = ["Simulator", "NodeFailure", "simulate"]

_FINISH = 0
_NODE = 1
_PROC = 2

Progress = Callable[[int, int], None]
P = TypeVar("P", bound=Plugin)
A = TypeVar("A", bound=Action)
#: ``callback(sim, now)`` -> the next time to call it, or None to stop
Process = Callable[["Simulator", float], "float | None"]


@dataclass(frozen=True)
class NodeFailure:
    """Node ``node`` fails at ``time`` and is back ``repair_s`` seconds later."""

    time: float
    node: int
    repair_s: float


class Simulator:
    def __init__(
        self,
        cluster: Cluster,
        jobs: JobTable,
        policy: Policy,
        *,
        seed: int = 0,
        execution: ExecutionModel | None = None,
        failures: Sequence[NodeFailure] = (),
        check_every: int = 0,
        progress: Progress | None = None,
        held: Sequence[int] | npt.NDArray[np.int64] = (),
        incremental: bool = False,
    ) -> None:
        if len(jobs) and (np.any(np.isnan(jobs.submit)) or np.any(jobs.duration < 0)):
            raise KantError("job table has NaN submit times or negative durations")
        for f in failures:
            if not 0 <= f.node < cluster.n_nodes:
                raise KantError(f"node failure names node {f.node}, but the cluster has {cluster.n_nodes} nodes")
            if f.repair_s < 0 or f.time < 0:
                raise KantError("node failure time and repair_s must be >= 0")
        self.cluster = cluster
        self.jobs = jobs
        self.policy = policy
        self.seed = seed
        self.execution = execution or ExecutionModel()
        # a placement can slow a job down (else ExecutionModel.slowdown is 1.0 for every placement)
        self._penalised = bool(self.execution.cross_leaf_penalty or self.execution.cross_spine_penalty)
        self.failures = sorted(failures, key=lambda f: (f.time, f.node))
        self.check_every = check_every
        self.progress = progress
        # The scheduler sees the jobs' requests and estimates, never their durations (kept here).
        # incremental: its store starts empty and each job joins it when it arrives, as in a live
        # service (rows stay table rows: the table must be in submit order, with no held rows).
        self.incremental = incremental
        self._watch: npt.NDArray[np.bool_] | None = None  # run(watch=...): rows that end the run once started
        self._watch_left = 0
        self._arrived = 0  # arrivals submitted so far, in submit order: a later run() goes on from there
        if incremental and (len(held) or np.any(np.diff(jobs.submit) < 0)):
            raise KantError("an incremental simulation needs a table sorted by submit time and no held rows")
        store = JobStore.from_table(jobs, 0 if incremental else None)
        self.scheduler = Scheduler(policy, cluster, store, seed=seed, trace=jobs)
        self.kernel = EventKernel(start=float(jobs.submit.min()) if len(jobs) else 0.0)
        self.recorder = Recorder(len(jobs))
        n = len(jobs)
        self.remaining = jobs.duration.astype(np.float64).copy()  # work left, seconds at full speed
        self.generation = np.zeros(n, dtype=np.int64)
        # memoryviews of those arrays and of the durations (the same buffers: cheaper one job at a time)
        self._remaining_mv = scalar_view(self.remaining, float)
        self._generation_mv = scalar_view(self.generation, int)
        self._duration_mv = scalar_view(np.ascontiguousarray(jobs.duration, dtype=np.float64), float)
        self._slowdown: dict[int, float] = {}  # running jobs slowed by their placement (absent: 1.0)
        self._paid_restart: dict[int, float] = {}  # restart cost paid by a job's current run (absent: 0)
        # elastic jobs' bounds (kant.model.elastic), by row; empty when no job is elastic
        self._elastic = self.scheduler.jobs.elastic
        self.instant = Instant()  # whether this instant changed, and the wake-ups cycles asked for
        self.events = 0
        self.held = np.zeros(n, dtype=bool)  # rows only a process submits (never from the trace)
        held_rows = np.asarray(held, dtype=np.int64)
        if held_rows.size and (held_rows.min() < 0 or held_rows.max() >= n):
            raise KantError(f"held names a row outside the job table (0..{n - 1})")
        self.held[held_rows] = True
        # job dependencies (kant.model.deps): None when no job has one, and then nothing below costs
        self.gate: DependencyGate | None = None
        if jobs.deps is not None:
            try:
                self.gate = DependencyGate(jobs.names, jobs.deps)
            except ValueError as exc:
                raise KantError(f"{jobs.source or 'job table'}: {exc}") from None

    # --- event handlers ----------------------------------------------------------------------
    def _on_finish(self, payload: tuple[int, int]) -> None:
        job, gen = payload
        if gen != self._generation_mv[job]:
            return  # stale: the run was interrupted
        now = self.kernel.now
        placement = self.scheduler.finish(job, now, self._duration_mv[job])
        self.recorder.job_stopped(job, now, placement, finished=True)
        self._remaining_mv[job] = 0.0
        if self.gate is not None:
            self._dep_outcome(job, Outcome.OK, now)
        if self._slowdown:
            self._slowdown.pop(job, None)
        if self._paid_restart:
            self._paid_restart.pop(job, None)
        self.instant.changed = True
        self.events += 1

    def _on_node(self, payload: tuple[int, bool, float]) -> None:
        node, fail, repair_s = payload
        now = self.kernel.now
        if fail:
            for job, placement in self.scheduler.fail_node(node, now):
                self._interrupted(job, now, placement)
            self.kernel.schedule(now + repair_s, _NODE, self._on_node, (node, False, 0.0))
        else:
            self.scheduler.repair_node(node)
        self.recorder.nodes_down(now, self.scheduler.state)
        self.instant.changed = True
        self.events += 1

    def _on_process(self, payload: Process) -> None:
        now = self.kernel.now
        self.events += 1
        when = payload(self, now)
        if when is not None:
            self.kernel.schedule(max(float(when), now), _PROC, self._on_process, payload)

    # --- processes: a driver changing the workload during the run ----------------------------
    def add_process(self, callback: Process, first_time: float) -> None:
        """Call ``callback(sim, now)`` at ``first_time`` (or now, if that is earlier), then at every
        time it returns, until it returns None. Within an instant processes run after finishes and
        node events and before trace arrivals; a scheduling cycle follows if they changed anything."""
        self.kernel.schedule(max(float(first_time), self.kernel.now), _PROC, self._on_process, callback)

    def submit(self, job: int) -> Status:
        """Submit ``job`` now (from a process): it queues like a trace arrival. Returns why it can
        never run (it is then recorded unschedulable) or success."""
        sched = self.scheduler
        if job in sched.running or job in sched.queue:
            raise SchedulingError(f"job {job} is already queued or running")
        self.events += 1
        status = sched.submit(job, self.kernel.now)
        if status.ok:
            self.instant.changed = True
        else:
            self.recorder.job_unschedulable(job, str(status))
        return status

    def stop(self, job: int) -> bool:
        """Withdraw ``job`` now (from a process): a running job releases its resources, a queued job
        leaves the queue; recorded as STOPPED, not as a finish or a preemption. A stopped job may be
        submitted again; it then has the work left that it had when its stopped run began. Returns
        False if the job was neither running nor queued."""
        sched = self.scheduler
        if job not in sched.running and job not in sched.queue:
            return False
        now = self.kernel.now
        placement = sched.cancel(job, now)
        if placement is not None:
            self.generation[job] += 1  # its finish event, if any, is now stale
            self._slowdown.pop(job, None)
            self._paid_restart.pop(job, None)
        self.recorder.job_withdrawn(job, now, placement)
        self.instant.changed = True
        self.events += 1
        if self.gate is not None:
            self._dep_outcome(job, Outcome.NOTOK, now)
        return True

    # --- dependencies (only when the table has some) -----------------------------------------
    def _dep_outcome(self, job: int, outcome: Outcome, now: float) -> None:
        """``job`` got to ``outcome``: queue the jobs whose dependencies are now met, cancel those
        whose dependency can never be met and asked for it (each cancel and each refusal is itself an
        outcome, followed through)."""
        gate = self.gate
        assert gate is not None
        work = [(job, outcome)]
        queued = False
        while work:
            row, out = work.pop()
            to_queue, to_kill = gate.outcome(row, out)
            for dep in to_kill:
                self._dep_cancel(dep, now)
                work.append((dep, Outcome.NOTOK))
            for dep in to_queue:
                self.events += 1
                status = self.scheduler.submit(dep, now)
                if status.ok:
                    queued = True
                else:
                    self.recorder.job_unschedulable(dep, str(status))
                    work.append((dep, Outcome.NOTOK))
        if queued:
            # a cycle at this instant sees them (if this instant's cycle already ran: another one)
            self.instant.changed = True
            self.instant.wake(now)

    def _dep_cancel(self, job: int, now: float) -> None:
        gate = self.gate
        assert gate is not None
        self.recorder.job_withdrawn(job, now, None)
        self.recorder.reasons[job] = f"cancelled (kill_on_invalid_dep): {gate.never[job]}"

    def _interrupted(self, job: int, now: float, placement: Placement) -> None:
        self.generation[job] += 1
        run_for = now - float(self.recorder.last_start[job]) - self._paid_restart.pop(job, 0.0)
        done_now = max(run_for, 0.0) / self._slowdown.pop(job, 1.0)
        duration = float(self.jobs.duration[job])
        total_done = min(duration - float(self.remaining[job]) + done_now, duration)
        self.remaining[job] = duration - self.execution.kept_progress(total_done)
        self.recorder.job_stopped(job, now, placement, finished=False)

    def _started(self, job: int, now: float, placement: Placement) -> None:
        rec = self.recorder
        runs = rec.runs_view[job]  # runs before this one
        restart = self.execution.restart_cost_s if runs > 0 else 0.0
        if self._watch is not None and runs == 0 and self._watch[job]:
            self._watch_left -= 1
        rec.job_started(job, now, placement, self.cluster)
        if self.gate is not None and runs == 0:
            self._dep_outcome(job, Outcome.STARTED, now)
        slow = self.execution.slowdown(self.cluster, placement) if self._penalised else 1.0
        if self._elastic:
            bounds = self._elastic.get(job)
            if bounds is not None:  # the work is at the reference size: a size runs at its speed
                slow /= bounds.speed(len(placement.nodes))
        # only what differs from the defaults (full speed, no restart cost paid) is remembered
        # (an earlier run's entries went when it was interrupted or stopped)
        if slow != 1.0:
            self._slowdown[job] = slow
        if restart:
            self._paid_restart[job] = restart
        remaining = self._remaining_mv[job]
        if math.isfinite(remaining):
            self.kernel.schedule(now + restart + remaining * slow, _FINISH, self._on_finish,
                                 (job, self._generation_mv[job]))

    def _resized(self, job: int, now: float, before: Placement, after: Placement) -> None:
        """An elastic job was resized: it keeps all its work (a checkpoint at the resize), pays the
        execution model's ``resize_cost_s`` and runs on at the speed of its new size."""
        rec = self.recorder
        run_for = now - float(rec.last_start[job]) - self._paid_restart.pop(job, 0.0)
        done_now = max(run_for, 0.0) / self._slowdown.pop(job, 1.0)
        self.remaining[job] = max(float(self.remaining[job]) - done_now, 0.0)
        self.generation[job] += 1
        rec.job_resized(job, now, before)
        cost = self.execution.resize_cost_s
        slow = self.execution.slowdown(self.cluster, after) / self._elastic[job].speed(len(after.nodes))
        if slow != 1.0:
            self._slowdown[job] = slow
        if cost:
            self._paid_restart[job] = cost
        remaining = self.remaining.item(job)
        if math.isfinite(remaining):
            self.kernel.schedule(now + cost + remaining * slow, _FINISH, self._on_finish,
                                 (job, self.generation.item(job)))

    # --- starting from a live state ------------------------------------------------------------
    def resume(self, snap: SchedulerSnapshot) -> None:
        """Start this run from a scheduler's state instead of an empty cluster (a digital twin:
        :mod:`kant.twin`). The scheduler must be fresh; ``snap`` names this table's rows. Running
        jobs keep their nodes and start times and end at their start plus their duration (never
        before ``snap.now``); pending jobs are queued; the run starts at ``snap.now`` with a cycle.
        Rows the snapshot names should be ``held`` (they must not arrive again from the table)."""
        sched, rec, kernel = self.scheduler, self.recorder, self.kernel
        sched.restore(snap)
        now = kernel.now = snap.now
        allocations = sched.state.allocations
        for job, run in sorted(snap.running.items(), key=lambda item: item[1].start):
            rec.job_started(job, run.start, allocations[job], self.cluster)
            end = run.start + self.remaining.item(job)
            if math.isfinite(end):
                kernel.schedule(max(end, now), _FINISH, self._on_finish, (job, self.generation.item(job)))
        if snap.node_flags:
            rec.nodes_down(now, sched.state)
        self.instant.wake(now)

    # --- main loop ---------------------------------------------------------------------------
    def run(self, until: float | None = None, *,
            watch: Sequence[int] | npt.NDArray[np.int64] | None = None) -> SimResult:
        """Run until nothing more can happen, or ``until``; with ``watch`` (rows), also stop at the
        first cycle after which every one of them has started (the digital twin's predictions need
        no more: :mod:`kant.twin.forward`)."""
        wall0 = _time.perf_counter()
        if watch is not None:
            rows = np.asarray(watch, dtype=np.int64)
            self._watch = np.zeros(len(self.jobs), dtype=bool)
            self._watch[rows] = True
            self._watch_left = int(np.count_nonzero(self._watch & (self.recorder.runs == 0)))
        jobs, sched, rec, kernel = self.jobs, self.scheduler, self.recorder, self.kernel
        order = np.argsort(jobs.submit, kind="stable")
        if self.held.any():
            order = order[~self.held[order]]
        arrivals = jobs.submit[order]
        order_list = order.tolist()
        n = len(order_list)
        for f in self.failures:
            kernel.schedule(max(f.time, kernel.now), _NODE, self._on_node, (f.node, True, f.repair_s))
        ptr = self._arrived
        step = max(n // 200, 1)
        now = kernel.now
        arrival_times = arrivals.tolist()
        arrival_times.append(math.inf)  # sentinel: no arrival left
        queue, state, progress = sched.queue, sched.state, self.progress
        queued = queue.queued
        incremental, store = self.incremental, sched.jobs
        sample = rec.sample
        heap = kernel.heap
        instant = self.instant
        wakeups = instant.wakeups
        gate = self.gate
        inf = math.inf
        watched = False  # stopped because every watched row started
        # the instant rule (kant.instant): what is due, in this order, then at most one cycle
        while True:
            t_arrival = arrival_times[ptr]
            t_next = heap[0][0] if heap else inf
            if wakeups and wakeups[0] < t_next:
                t_next = wakeups[0]
            if t_arrival < t_next:
                t_next = t_arrival
            if t_next == inf or (until is not None and t_next > until):
                break
            now = t_next
            if heap and heap[0][0] <= now:
                kernel.run_due(now)
            else:
                kernel.now = now
            if wakeups:
                instant.due(now)
            while t_arrival <= now:
                job = order_list[ptr]
                ptr += 1
                t_arrival = arrival_times[ptr]
                self.events += 1
                if incremental:
                    store.append_table_rows(jobs, job + 1)
                if gate is not None and not gate.arrive(job):
                    if gate.kill_now(job):  # its dependency failed before it arrived
                        self._dep_cancel(job, now)
                        self._dep_outcome(job, Outcome.NOTOK, now)
                else:
                    status = sched.submit(job, now)
                    if status.ok:
                        instant.changed = True
                    else:
                        rec.job_unschedulable(job, str(status))
                        if gate is not None:
                            self._dep_outcome(job, Outcome.NOTOK, now)
                if progress is not None and ptr % step == 0:
                    progress(ptr, n)
            result = instant.cycle(sched, now, ptr < n)
            if result is not None:
                for job, placement in result.evicted:
                    self._interrupted(job, now, placement)
                for job, placement in result.started:
                    self._started(job, now, placement)
                for job, before, after in result.resized:
                    if job in sched.running:  # (one evicted after its resize is in result.evicted)
                        self._resized(job, now, before, after)
                if self.check_every and sched.cycles % self.check_every == 0:
                    state.check()
                if self._watch is not None and self._watch_left <= 0:
                    sample(now, state, len(queued), queue.pending_gpus)
                    watched = True
                    break
            sample(now, state, len(queued), queue.pending_gpus)
        self._arrived = ptr
        end_time = now if until is None else max(now, min(until, now) if math.isinf(until) else until)
        if until is None and not watched:
            # nothing more can happen: whatever still waits can never start
            for job in list(sched.queue):
                rec.job_unschedulable(job, f"never started; last reason: {sched.why_pending(job)}")
            if gate is not None:  # held by their dependencies to the end
                for job in gate.held():
                    rec.job_unschedulable(job, f"never started; {gate.why(job)}")
        # held rows no process ever submitted (spare inference replicas) did not wait for anything
        rec.status[self.held & (rec.status == JobStatus.PENDING) & (rec.runs == 0)] = JobStatus.STOPPED
        closed = rec.close(end_time, sched.state)
        if self.progress is not None:
            self.progress(n, n)
        return SimResult.from_recorder(
            rec,
            closed,
            policy=self.policy.name,
            cluster=self.cluster,
            jobs=jobs,
            end_time=end_time,
            wall_seconds=_time.perf_counter() - wall0,
            events=self.events,
            cycles=sched.cycles,
            seed=self.seed,
            info={"notes": self.notes()},
        )

    def plugin(self, kind: type[P], name: str | None = None) -> P | None:
        """The policy's plugin of this kind (``sim.plugin(Quota)``; see :meth:`Scheduler.plugin`)."""
        return self.scheduler.framework.plugin(kind, name)

    def action(self, kind: type[A]) -> A | None:
        """The policy's first action of this kind (``sim.action(Backfill)``), or None."""
        return self.scheduler.action(kind)

    def notes(self) -> list[str]:
        """Caveats about the run so far, one line each (``SimResult.info["notes"]``; the headline
        table prints them): what the policy's actions report (:meth:`Action.notes`), and interrupted
        runs restarted from scratch because the execution model keeps no checkpoints."""
        notes = [note for action in self.scheduler.actions for note in action.notes()]
        if self._elastic:
            resizes = int(self.recorder.resizes.sum())
            if resizes:
                notes.append(f"{resizes:,} resize(s) of running elastic jobs, each a restart from its checkpoint "
                             f"costing {self.execution.resize_cost_s:g} s (SimResult.resizes; docs/elastic.md)")
        interrupted = int(self.recorder.preemptions.sum())
        if interrupted and self.execution.checkpoint_interval_s is None:
            evicts = any(action.EVICTS for action in self.scheduler.actions)
            notes.append(
                f"{interrupted:,} interrupted run(s) ({'preempted or ' if evicts else ''}on a failed node) restarted "
                "from scratch: the execution model keeps no checkpoints, so their work was lost and run again "
                "(see 'Work executed / demanded'); set a checkpoint interval (ExecutionModel.checkpoint_interval_s, "
                "--checkpoint-interval)"
            )
        return notes


def simulate(
    cluster: Cluster, jobs: JobTable, policy: Policy, *, seed: int = 0, **kwargs: object
) -> SimResult:
    """Run one simulation to the end (see :class:`Simulator` for keyword arguments)."""
    return Simulator(cluster, jobs, policy, seed=seed, **kwargs).run()  # type: ignore[arg-type]
