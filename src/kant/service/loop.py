"""The scheduling loop: the one writer of the live service's in-memory scheduler.

API handlers never touch the :class:`~kant.scheduler.Scheduler`. They write to the database (a
submit is acknowledged once committed) and hand the loop a command through its inbox; reads of live
state (why a job waits, its place in the queue) are commands too, answered from the loop's thread.
Each turn of the loop:

1. takes every command waiting in the inbox and the executor's events that are due;
2. applies them to the scheduler (arrivals, ends, cancels, node changes);
3. runs one scheduling cycle if anything changed and jobs wait (the instant rule of
   :mod:`kant.instant`, the simulator's too); the commit hands every start and eviction to the live
   state (the scheduler's :class:`~kant.framework.statement.Binder`);
4. writes every change of this turn to the database in one transaction (fenced by the leader
   epoch), and only then starts and stops work on the executor, publishes events, and answers the
   commands that wait for it.

This module keeps the turn: the thread, the inbox and its commands, the instants, persistence then
action. What a turn works on and the operations on it are rooms of :mod:`kant.service.live`: the live
state and a job's transitions, this turn's changes, node operations, scaling, compaction, the
published view and the API's reads.

The database is the truth after a crash: :meth:`ServiceLoop.load` rebuilds the scheduler from it
(pending jobs queued again, running jobs placed where they run, node states), as Slurm's state save
or Kubernetes' informers do. Finished jobs leave memory: once they outnumber the active ones the
scheduler is rebuilt on a store of the active jobs only (:meth:`ServiceLoop.compact`).

With the manual clock (:class:`~kant.service.clock.ManualClock`) the loop runs cycles only when the
clock is advanced, and processes every instant in between as the simulator does (the events due at
it, then one cycle): a trace driven through the service then gives the simulator's results.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from kant.config.policy import Policy
from kant.errors import KantError
from kant.model.cluster import Cluster, NodeSpec
from kant.model.deps import Outcome
from kant.model.store import JobStore
from kant.scheduler import RunningRecord, Scheduler, SchedulerSnapshot
from kant.service.clock import Clock, ManualClock, WallClock
from kant.service.commands import AddNode, Advance, Arrivals, Call, Cancel, Command, NodeOp, Reload, Scale, Stop
from kant.service.db.database import Database
from kant.service.db.jobs import JobRow
from kant.service.db.nodes import NodeRow
from kant.service.errors import DatabaseError, Fenced, Invalid, TurnLost
from kant.service.executors.base import Executor
from kant.service.live.compaction import compact
from kant.service.live.controls import JobControls
from kant.service.live.deps import LiveDeps, outcome_of_state
from kant.service.live.nodes import NodeOps, flags_of, register
from kant.service.live.reads import Reads
from kant.service.live.scaling import scale
from kant.service.live.state import Active, ArrayBook, Arrival, LiveState
from kant.service.live.view import LiveView, NodeView, publish
from kant.service.serving.endpoints import Endpoints
from kant.service.serving.replicas import ServingRoom
from kant.service.serving.signals import LoadSignals
from kant.twin.snapshot import TwinSnapshot

__all__ = ["ServiceLoop", "CLOCK_KEY", "Command", "Arrivals", "Cancel", "NodeOp", "AddNode", "Reload", "Scale",
           "Advance", "Call", "Stop"]

#: meta key of the last time of a manual or accelerated clock (where a restart resumes)
CLOCK_KEY = "clock_now"
#: meta key of the plugins' saved state (fair share's decayed usage: kant.framework.plugin.Plugin.saved_state),
#: written every PLUGIN_STATE_EVERY_S wall seconds, at every move of a manual clock and on a clean stop
PLUGIN_STATE_KEY = "plugin_state"
PLUGIN_STATE_EVERY_S = 30.0

log = logging.getLogger("kant.serve")


class ServiceLoop:
    """The live scheduler's turn, run on one thread (see the module docstring)."""

    def __init__(self, db: Database, policy: Policy, clock: Clock, executor: Executor, *, epoch: int | None = None,
                 default_estimate: float = 86400.0, seed: int = 0,
                 on_events: Callable[[], None] | None = None, metrics: Any = None,
                 compact_min: int = 10_000, ratio_history: int = 2000, history: Any = None,
                 endpoints: Endpoints | None = None, signals: Callable[[], LoadSignals | None] | None = None,
                 in_flight: Callable[[int, int], int] | None = None) -> None:
        self.db = db
        self.clock = clock
        self.executor = executor
        self.epoch = epoch
        self.seed = seed
        self.on_events = on_events
        self.metrics = metrics
        self.history = history  # the dashboard's time series (kant.service.dashboard.History): views and waits
        self.compact_min = compact_min
        self.inbox: queue.SimpleQueue[Command] = queue.SimpleQueue()
        #: Arrivals commands put in the inbox by the submit writer (before it acknowledges them), and those
        #: of them the loop has taken (on its thread): see queue_stamp
        self.arrivals_posted = 0
        self.arrivals_taken = 0
        self._thread: threading.Thread | None = None
        self._running = False
        self.failed: BaseException | None = None
        #: the live scheduler and the books beside it (filled by load())
        self.live = LiveState(policy, seed=seed, default_estimate=default_estimate, metrics=metrics,
                              history=history, ratio_history=ratio_history)
        self.changes = self.live.changes
        self.live.deps.lookup = self._dep_lookup
        self.instant = self.live.instant
        self.node_ops = NodeOps(self.live, db)
        self.controls = JobControls(self.live)  # a user's hold, release, update, requeue
        self.reads = Reads(self.live)
        #: the services' live replicas (kant.service.serving.replicas): endpoints, probes, replacement,
        #: rolling updates, the autoscaler
        self.serving = ServingRoom(db, self.live, executor, endpoints if endpoints is not None else Endpoints(),
                                   metrics=metrics, signals=signals, in_flight=in_flight)
        self.serving.wake = self.wake
        self.view: LiveView | None = None
        self._clock_saved = 0.0
        self._state_saved = time.monotonic()
        self._state_written = True  # (until a save finds nothing: an old state is then cleared)
        self.turns = 0
        #: service seconds each of the last turns took (moving clocks): the prediction band's resolution
        self.turn_lags: deque[float] = deque(maxlen=200)
        self._next_reconcile = time.monotonic() + executor.reconcile_every
        executor.set_waker(self.wake)

    # --- what other code reads (on the loop's thread, through call(), or between turns) ---------------
    @property
    def sched(self) -> Scheduler:
        return self.live.sched

    @property
    def active(self) -> dict[int, Active]:
        """Job id -> bookkeeping of the pending and running jobs."""
        return self.live.active

    @property
    def ids(self) -> list[int]:
        """Store row -> job id."""
        return self.live.ids

    @property
    def nodes(self) -> dict[str, NodeRow]:
        """Node name -> its row, the nodes the scheduler runs on."""
        return self.live.nodes

    @property
    def state_version(self) -> int:
        """Bumped by every change of state: the twin's staleness test."""
        return self.live.state_version

    def queue_stamp(self, *, read: bool = False) -> tuple[int, int, int, int]:
        """A copy of the queue is fresh while its stamp equals this one: :meth:`Reads.queue_stamp
        <kant.service.live.reads.Reads.queue_stamp>` and the arrivals posted to the inbox, so that a
        submit acknowledged but not yet taken by the loop already makes a copy stale (a read after it
        goes to the loop's thread, behind the arrivals in the inbox). ``read``: the stamp of a copy
        read now, on the loop's thread: with the arrivals it has taken (one posted but still in the
        inbox is not in the copy, so the copy is stale until it is). Plain reads of counters."""
        return (*self.reads.queue_stamp(), self.arrivals_taken if read else self.arrivals_posted)

    # --- loading ------------------------------------------------------------------------------
    def load(self, cluster_if_empty: Cluster | None = None) -> None:
        """Build the scheduler from the database (the truth after a restart)."""
        now = self.clock.now()
        live = self.live
        if live.ratios_from is None:  # the run-time history starts here (a restart forgets the earlier ends)
            live.ratios_from = now
        rows = [n for n in self.db.nodes.list() if n.state != "removed"]
        if not rows:
            if cluster_if_empty is None:
                raise KantError("the database has no nodes: give --cluster on the first start")
            rows = register(self.db, cluster_if_empty)
        live.nodes = {n.name: n for n in rows}
        live.tenants = {t.name: t for t in self.db.tenants.list()}
        store = JobStore(tenant_names=sorted(live.tenants))
        t0 = time.perf_counter()
        jobs = self.db.jobs.load_active()
        # jobs that may wait for their dependencies join after the others (kant.service.live.deps)
        live.deps = LiveDeps()
        live.deps.lookup = self._dep_lookup
        # (and the pending tasks of throttled arrays, which take the places their running tasks leave)
        live.arrays, live.array_of = {}, {}

        def later(j: JobRow) -> bool:
            return j.state == "pending" and j.held is None and (
                (bool(j.dependency) and j.first_start_time is None) or j.array_throttle is not None)

        deferred = [Arrival(j.id, j, j.submit_time) for j in jobs if later(j)]
        if deferred:
            jobs = [j for j in jobs if not later(j)]
        t1 = time.perf_counter()
        live.ids = []
        live.active = {}
        live.deadlines = []
        running: dict[int, RunningRecord] = {}
        pending: list[int] = []
        job_rows = live.add_all_to_store(store, jobs)
        for job, row in zip(jobs, job_rows, strict=True):
            info = live.active[job.id]
            info.runs, info.first_start, info.start = job.runs, job.first_start_time, job.start_time
            if job.state == "running" and job.placement:
                start = float(job.start_time if job.start_time is not None else now)
                info.planned = min(float(store.estimate[row]), float(store.time_limit[row]))
                running[row] = RunningRecord(tuple(job.placement), job.gpus_per_worker, job.cpu_milli,
                                             job.memory_mib, start, start + info.planned)
                live.keep_deadline(info, start)
            elif job.held is not None:  # held by a user (kant hold): out of the queue until released
                info.held = job.held
            else:
                pending.append(row)
        flags = {n.name: flags_of(n.state) for n in rows if flags_of(n.state)}
        snap = SchedulerSnapshot(now=now, pending=tuple(pending), running=running, node_flags=flags,
                                 plugin_state=self._saved_plugin_state())
        t2 = time.perf_counter()
        live.sched = Scheduler.from_snapshot(live.policy(), live.cluster(), store, snap, seed=self.seed)
        live.sched.binder = live
        live.count_all()
        self.executor.restore([self.serving.prepare(live.launch_of(live.ids[row], rec.nodes, rec.start))
                               for row, rec in running.items()])
        self.instant.changed = bool(pending)
        for job in jobs:  # the running tasks of throttled arrays hold their places
            if job.array_throttle is not None and job.array_position is not None:
                array_id = job.id - job.array_position
                live.arrays.setdefault(array_id, ArrayBook(job.array_throttle)).active.add(job.id)
                live.array_of[job.id] = array_id
        if deferred:
            live.arrive(deferred, now, submitted=False)
            for a in deferred:  # (a requeued task keeps its runs)
                if (task := live.active.get(a.id)) is not None and isinstance(a.job, JobRow):
                    task.runs, task.first_start = a.job.runs, a.job.first_start_time
        self._publish_view()
        t3 = time.perf_counter()
        log.info("loaded %d nodes, %d tenants, %d pending and %d running jobs in %.2f s (reading the jobs %.2f s, "
                 "the job store %.2f s, the scheduler %.2f s)", len(rows), len(live.tenants), len(pending),
                 len(running), t3 - t0, t1 - t0, t2 - t1, t3 - t2)

    def _saved_plugin_state(self) -> dict[str, Any]:
        """The plugins' state the last leader saved (:data:`PLUGIN_STATE_KEY`), or none."""
        raw = self.db.meta.get(PLUGIN_STATE_KEY)
        if raw is None:
            return {}
        try:
            data = json.loads(raw)
            return dict(data["plugins"])
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("the saved plugin state is not readable (%s): fair share starts from no usage", exc)
            return {}

    def save_plugin_state(self) -> None:
        """Keep the plugins' state (:meth:`Scheduler.plugin_states`) in the database, where a restart
        takes it back (:meth:`load`). Nothing is written while no plugin has any."""
        self._state_saved = time.monotonic()
        now = self.clock.now()
        states = self.live.sched.plugin_states(now)
        if states or self._state_written:
            self.db.meta.set(PLUGIN_STATE_KEY, json.dumps({"now": now, "plugins": states}))
            self._state_written = bool(states)

    # --- the thread ---------------------------------------------------------------------------
    def start(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._run, name="kant-loop", daemon=True)
        self._thread.start()
        self.serving.start()

    def stop(self, timeout: float = 10.0) -> None:
        self.serving.close()
        if self._thread is None:
            return
        self.inbox.put(Stop())
        self._thread.join(timeout)
        self._thread = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.failed is None

    def wake(self) -> None:
        self.inbox.put(Call(lambda loop: None))

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

    def _next_time(self) -> float:
        """The service time of the next executor event or wake-up (+inf if none)."""
        return min(self.executor.next_time(), self.instant.next_wakeup(), self.live.next_deadline())

    def _wait_s(self) -> float | None:
        """Wall seconds until the next executor event or wake-up (None: until a command; 0 when a
        cycle is owed now, as after loading pending jobs)."""
        if self.clock.manual:
            return None
        if self.instant.changed:
            return 0.0
        nxt = self._next_time()
        if nxt == float("inf"):
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
    def turn(self, commands: Sequence[Command]) -> None:
        """Apply ``commands`` and the due executor events, cycle, persist, then act."""
        self.turns += 1
        if self.metrics is not None:
            self.metrics.loop_turns.inc()
        manual = isinstance(self.clock, ManualClock)
        if not manual:
            t_turn = self.clock.now()
            self._fire_due(t_turn)
        self._reconcile()
        for cmd in commands:
            if isinstance(cmd, Stop):
                self._running = False
                continue
            try:
                if isinstance(cmd, Advance) and manual:
                    self._advance(cmd.to, cmd.hold)
                    self.db.meta.set(CLOCK_KEY, repr(self.clock.now()))  # a restart resumes here
                    self.save_plugin_state()
                    result: Any = self.clock.now()
                else:
                    result = self._apply(cmd)
            except (Fenced, TurnLost):
                raise  # the turn cannot be written: the loop stops (_run), whatever command was running
            except KantError as exc:
                self.changes.reply(cmd.reply, exc)
                continue
            self.changes.reply(cmd.reply, result)
        if not manual:
            self.serving.tend(self.clock.now())
            self._cycle(self.clock.now())
        self._flush()
        self.compact()
        if not self._running or (not manual and time.monotonic() - self._state_saved > PLUGIN_STATE_EVERY_S):
            self.save_plugin_state()  # (on a clean stop too)
        if not manual:
            self.turn_lags.append(self.clock.now() - t_turn)
        if not manual and not isinstance(self.clock, WallClock) and time.monotonic() - self._clock_saved > 1.0:
            self._clock_saved = time.monotonic()
            self.db.meta.set(CLOCK_KEY, repr(self.clock.now()))  # an accelerated clock resumes about here

    def _apply(self, cmd: Command) -> Any:
        now = self.clock.now()
        if isinstance(cmd, Arrivals):
            if cmd.posted:
                self.arrivals_taken += 1
            return self.live.arrive(cmd.arrivals, now)
        if isinstance(cmd, Cancel):
            return self.live.cancel(cmd.job_id, cmd.tenant, cmd.by, now)
        if isinstance(cmd, NodeOp):
            return self.node_ops.apply(cmd.name, cmd.op, now, reason=cmd.reason, force=cmd.force)
        if isinstance(cmd, AddNode):
            return self.node_ops.add(cmd.spec, now)
        if isinstance(cmd, Reload):
            return self.live.reload_tenants(self.db.tenants.list(), now)
        if isinstance(cmd, Scale):
            if self.serving.scale(cmd.service_id, cmd.replicas, now):  # (replicas it runs: drained, not cancelled)
                return cmd.replicas
            return scale(self.live, self.db, cmd.service_id, cmd.replicas, now)
        if isinstance(cmd, Advance):
            raise Invalid("the clock is not manual: it cannot be moved")
        if isinstance(cmd, Call):
            return cmd.fn(self)
        raise AssertionError(f"unknown command {cmd!r}")

    # --- instants (kant.instant: what is due, then at most one cycle) --------------------------
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
            nxt = self._next_time()
            if nxt > to:
                break
            clock.set(nxt)
            self._fire_due(nxt)
            if nxt < to:
                self._cycle(nxt)
                self._flush()  # the executor hears of this instant's starts before the next instant
        clock.set(to)
        if not hold:
            while self.instant.changed and len(self.sched.queue):
                self._cycle(to)
                self._flush()
                self._fire_due(to)  # zero-length runs end at once

    def _fire_due(self, now: float) -> None:
        """What is due at ``now``, in this order: the executor's node events, the wake-ups, the
        executor's job events (ends, failures, lost runs), the time limits reached."""
        for node_ev in self.executor.node_events():
            self.node_ops.executor_event(node_ev, now)
        self.instant.due(now)
        for ev in self.executor.poll(now):
            self.serving.exec_event(ev)
            self.live.executor_event(ev)
        self.live.time_out(now)

    def _cycle(self, now: float) -> None:
        """The instant's cycle, if one is owed; its starts and evictions go to the turn's changes."""
        t0 = time.perf_counter()
        if self.instant.cycle(self.sched, now) is None:
            return
        if self.metrics is not None:
            self.metrics.cycle_seconds.observe(time.perf_counter() - t0)
        self.live.carry_out_binds(now)

    def _reconcile(self) -> None:
        """Every ``executor.reconcile_every`` wall seconds: tell the executor which runs the loop thinks
        are running (it stops others and reports the ones it lost)."""
        if time.monotonic() < self._next_reconcile:
            return
        self._next_reconcile = time.monotonic() + self.executor.reconcile_every
        self.executor.reconcile(self.live.running_runs())

    # --- persistence, then action -------------------------------------------------------------
    def _flush(self) -> None:
        """Write this turn's changes in one transaction, then act on them and answer the callers."""
        changes = self.changes
        writes = changes.take_writes()
        if writes is not None:
            self.live.state_version += 1
            try:
                ended = self.db.apply(*writes, epoch=self.epoch)
            except Fenced:
                raise
            except DatabaseError as exc:
                raise TurnLost(f"this turn's changes could not be written: {exc}") from exc
            if self.metrics is not None:
                self.metrics.commits.labels("loop").inc()
                for run in ended:
                    self.metrics.tenant_gpu_seconds.labels(run.tenant).inc(run.gpu_seconds)
        self.live.deps.flushed()
        stops, launches = changes.take_actions()
        self.serving.stopping(stops)
        for job_id, why in stops:
            self.executor.stop(job_id, why)
        running = self.sched.running
        for launch in launches:
            info = self.live.active.get(launch.job_id)
            # (a start the same cycle undid, or a job that ended since, is not launched)
            if info is not None and info.runs == launch.run and info.row in running:
                self.executor.start(self.serving.prepare(launch))
        self._publish_view()
        for fut, result in changes.take_replies():
            if fut.done():
                continue
            if isinstance(result, BaseException):
                fut.set_exception(result)
            else:
                fut.set_result(result)
        if writes is not None and writes[1] and self.on_events is not None:
            self.on_events()

    def _dep_lookup(self, job_ids: list[int]) -> dict[int, Outcome]:
        """The outcomes of stored jobs the loop no longer holds (a dependency on a job that ended)."""
        out = {}
        for job_id in job_ids:
            row = self.db.jobs.get(job_id)
            if row is not None:
                out[job_id] = outcome_of_state(row.state, row.first_start_time is not None)
        return out

    def _publish_view(self) -> None:
        self.view = publish(self.live, self.clock.now())

    def compact(self, force: bool = False) -> bool:
        """Rebuild on a store of the active jobs once finished ones dominate (see
        :mod:`kant.service.live.compaction`)."""
        return compact(self.live, self.clock.now(), minimum=self.compact_min, force=force)

    # --- reads for the API (run on the loop's thread through call()) ---------------------------
    def why(self, job_id: int) -> dict[str, Any]:
        return self.reads.why(job_id, self.clock.now())

    def reasons(self, job_ids: Sequence[int]) -> dict[int, str]:
        return self.reads.reasons(job_ids, self.clock.now())

    def twin_snapshot(self) -> TwinSnapshot:
        """The live state for the digital twin (run on the loop's thread through :meth:`call`)."""
        return self.reads.twin_snapshot(self.clock.now(), self.resolution_s())

    def resolution_s(self) -> float:
        """How late on the service clock a start can come after its instant: the longest of the
        last turns (an accelerated clock moves ``speed`` x the turn's wall time during it), at least
        one second. A predicted band is at least this wide (docs/whatif.md)."""
        return max(1.0, max(self.turn_lags, default=0.0))

    def node_views(self) -> list[NodeView]:
        return self.reads.node_views()

    # --- commands from other threads ----------------------------------------------------------
    def submit_arrivals(self, arrivals: Sequence[Arrival]) -> None:
        """From the submit writer's thread (its one caller), before the submits are acknowledged."""
        self.arrivals_posted += 1
        self.inbox.put(Arrivals(arrivals, posted=True))

    def _ask(self, cmd: Command, timeout: float) -> Any:
        fut: Future[Any] = Future()
        cmd.reply = fut
        if not self.alive:
            raise KantError("the scheduling loop is not running")
        self.inbox.put(cmd)
        return fut.result(timeout)

    def cancel(self, job_id: int, tenant: str | None, by: str, timeout: float = 30.0) -> str:
        return str(self._ask(Cancel(job_id, tenant, by), timeout))

    def node_op(self, name: str, op: str, *, reason: str | None = None, force: bool = False,
                timeout: float = 60.0) -> str:
        return str(self._ask(NodeOp(name, op, reason, force), timeout))

    def add_node(self, spec: NodeSpec, timeout: float = 60.0) -> str:
        return str(self._ask(AddNode(spec), timeout))

    def reload(self, timeout: float = 60.0) -> str:
        return str(self._ask(Reload(), timeout))

    def scale(self, service_id: int, replicas: int, timeout: float = 60.0) -> int:
        return int(self._ask(Scale(service_id, replicas), timeout))

    def advance(self, to: float, *, hold: bool = False, timeout: float = 300.0) -> float:
        return float(self._ask(Advance(to, hold), timeout))

    def call(self, fn: Callable[[ServiceLoop], Any], timeout: float = 30.0) -> Any:
        return self._ask(Call(fn), timeout)
