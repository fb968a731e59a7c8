"""The Ray executor: jobs run for real on a Ray cluster (``kant serve --executor ray``).

kant decides where each worker goes; Ray runs it there. Every worker of a started job is owned by a
*detached named Ray actor* (:class:`~kant.service.executors.ray_worker.WorkerHost`, named
``kant-JOB-RUN-WORKER`` in the ``kant`` namespace) with a hard node affinity to the node kant chose
(``NodeAffinitySchedulingStrategy(soft=False)``) and ``num_gpus`` = the GPUs kant gave it, so Ray
picks which GPU ids (and sets ``CUDA_VISIBLE_DEVICES``) and never gives one GPU to two workers. A
gang starts all or nothing: once every actor holds its GPUs, the executor tells each to go (rank 0's
address and a free port) and each starts the command with ``MASTER_ADDR``, ``MASTER_PORT``,
``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``NODE_RANK``, ``KANT_JOB_ID`` and ``KANT_CHECKPOINT_DIR``
(over ``Launch.env`` and the job's environment, in the job's folder); if one worker does not hold
its GPUs within ``start_timeout`` s, every actor is killed and the run is reported ``bind_failed``.

The actors outlive the service: :meth:`RayExecutor.restore` finds a restarted (or newly elected)
service's running runs by name and follows them again; a reported end's actors are killed once the
loop recorded it (the next :meth:`RayExecutor.poll`). :meth:`RayExecutor.stop` signals every
process of each worker (``why``: SIGUSR1 first for a preemption; SIGTERM, the grace, SIGKILL).

The cluster's nodes are Ray's alive nodes, a node being its name (:func:`node_specs`); a watcher
lists them every ``node_poll_s`` s and reports losses, then joins, as :class:`NodeEvent`. A worker
that ends with code 0 on every rank finishes the job; a non-zero code fails it (with how it ended
and the last lines of that worker's output); a worker lost with its node reports the run ``lost``
(requeued).

All Ray calls run on one thread with an asyncio loop (``kant-ray``); the scheduling loop's calls
(:meth:`RayExecutor.start`, :meth:`RayExecutor.stop`, ...) only hand work to it and return.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import shlex
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from kant.errors import KantError
from kant.model.cluster import NodeSpec
from kant.service.executors import ray_worker
from kant.service.executors.base import (
    NODE_LOST_PREFIX,
    EventKind,
    ExecEvent,
    ExecutorSettings,
    Launch,
    LogChunk,
    NodeEvent,
    Option,
    StopWhy,
)
from kant.service.executors.logstore import LogStore
from kant.service.executors.ray_nodes import (
    DEFAULT_GPU_TYPE,
    DEFAULT_LEAF,
    DEFAULT_SPINE,
    GPU_TYPE_LABEL,
    LEAF_LABEL,
    NAME_LABEL,
    SPINE_LABEL,
    node_specs,
)

__all__ = ["RayExecutor", "RaySettings", "node_specs", "NAME_LABEL", "LEAF_LABEL", "SPINE_LABEL", "GPU_TYPE_LABEL",
           "DEFAULT_LEAF", "DEFAULT_SPINE", "DEFAULT_GPU_TYPE"]

log = logging.getLogger("kant.serve.ray")

_TAIL_LINES = 5


@dataclass
class _Run:
    """One run of a job on Ray: its workers' actors and what they reported (the ``kant-ray`` thread's)."""

    launch: Launch
    actors: list[Any] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    codes: dict[int, int] = field(default_factory=dict)
    ended: bool = False
    went: bool = False  # the go signal was sent: commands may run


class RaySettings(ExecutorSettings):
    """``kant serve --executor ray``'s settings (docs/ray.md)."""

    address: Annotated[str, Option("--ray-address", metavar="auto|HOST:PORT")] = Field(
        "auto", description="the Ray cluster (its nodes are the cluster when --cluster is not given).")
    log_dir: Annotated[Path, Option("--log-dir", folder=True)] = Field(
        Path("kant-logs"), description="where workers' output is kept (kant logs).")
    checkpoint_dir: Annotated[Path, Option("--checkpoint-dir", folder=True)] = Field(
        Path("kant-checkpoints"), description="KANT_CHECKPOINT_DIR of job N is DIR/job-N (storage every node sees).")
    start_timeout: Annotated[float, Option("--ray-start-timeout")] = Field(
        60.0, gt=0, le=86400, description="seconds a gang's workers have to start, or it goes back to the queue.")
    stop_grace: Annotated[float, Option("--stop-grace")] = Field(
        10.0, ge=0, le=3600, description="seconds between SIGTERM and SIGKILL when a job is stopped (cancel, time "
                                         "limit, preemption after its checkpoint grace).")
    checkpoint_grace: Annotated[float, Option("--checkpoint-grace")] = Field(
        30.0, ge=0, le=3600, description="seconds a preempted job has after SIGUSR1 to save its checkpoint, before "
                                         "SIGTERM.")


class RayExecutor:
    """Runs kant's starts on a Ray cluster (see the module docstring)."""

    name = "ray"
    discovers_nodes = True  # Ray's alive nodes: the cluster when --cluster is not given

    @classmethod
    def from_settings(cls, settings: RaySettings) -> RayExecutor:
        return cls(settings.address, log_dir=settings.log_dir, checkpoint_dir=settings.checkpoint_dir,
                   start_timeout=settings.start_timeout, stop_grace_s=settings.stop_grace,
                   checkpoint_grace_s=settings.checkpoint_grace)

    def __init__(self, address: str = "auto", *, log_dir: Path, checkpoint_dir: Path, start_timeout: float = 60.0,
                 node_poll_s: float = 1.0, reconcile_every: float = 10.0, stop_grace_s: float = 10.0,
                 checkpoint_grace_s: float = 30.0, node_death_wait_s: float = 40.0) -> None:
        import ray

        self.address = address
        self.logs = LogStore(log_dir)
        self.checkpoint_dir = Path(checkpoint_dir).absolute()
        self.start_timeout = start_timeout
        self.node_poll_s = node_poll_s
        self.reconcile_every = reconcile_every
        self.stop_grace_s = stop_grace_s
        self.checkpoint_grace_s = checkpoint_grace_s
        self.node_death_wait_s = node_death_wait_s  # (Ray's default health check declares a node dead in 15 s)
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            _check_reachable(address)
            _ray_logs_to_file(Path(log_dir))
            try:
                ray.init(address=address, namespace=ray_worker.KV_NAMESPACE, logging_level=logging.ERROR,
                         log_to_driver=False, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise KantError(f"--ray-address {address}: cannot connect to Ray ({first})") from None
        ray.cloudpickle.register_pickle_by_value(ray_worker)  # type: ignore[no-untyped-call]  # nodes need Ray, not kant
        self._actor = ray.remote(ray_worker.WorkerHost)
        self._wake: Callable[[], None] = lambda: None
        self._events: deque[tuple[EventKind, int, int, int | None, str]] = deque()
        self._node_events: deque[NodeEvent] = deque()
        self._runs: dict[int, _Run] = {}  # job -> its current run (kant-ray thread only)
        self._names: dict[str, str] = {}  # Ray node id -> kant name, of the alive nodes
        self._refused: dict[str, str] = {}  # Ray node id -> why its name is refused
        self._alive: dict[str, NodeSpec] = {}  # Ray node id -> spec, as last listed
        self._ids: dict[str, str] = {}  # kant name -> Ray node id of the alive node
        self._hosts: dict[str, str] = {}  # kant name -> the alive node's address (NodeManagerAddress)
        #: actors of runs whose end was reported: killed at the next poll (the loop recorded the end)
        self._reported: list[list[Any]] = []
        self._aio = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._aio.run_forever, name="kant-ray", daemon=True)
        self._thread.start()
        self._submit(self._scan()).result(60.0)
        for spec in sorted(self._alive.values(), key=lambda s: s.name):
            self._node_events.append(NodeEvent("up", spec.name, spec))
        self._watcher = self._submit(self._watch())

    # --- the kant-ray thread ----------------------------------------------------------------------
    def _submit(self, coro: Any) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self._aio)

    def _later(self, fn: Callable[..., Any], *args: Any) -> None:
        self._aio.call_soon_threadsafe(fn, *args)

    def _emit(self, kind: EventKind, run: _Run, exit_code: int | None = None, reason: str = "") -> None:
        self._events.append((kind, run.launch.job_id, run.launch.run, exit_code, reason))
        self._wake()

    async def _scan(self) -> None:
        """List Ray's nodes; report the ones that left, then the ones that joined, since the last listing."""
        import ray

        infos = await asyncio.to_thread(ray.nodes)
        now = node_specs(infos, self._names, self._refused)
        changed = False
        for node_id in [i for i in self._alive if i not in now]:
            self._node_gone(node_id)
            changed = True
        for node_id, spec in now.items():
            if node_id not in self._alive and self._alive:
                self._node_events.append(NodeEvent("up", spec.name, spec, "joined the Ray cluster"))
                changed = True
        self._alive = now
        self._ids = {spec.name: node_id for node_id, spec in now.items()}
        address = {str(i.get("NodeID")): str(i.get("NodeManagerAddress") or "") for i in infos}
        self._hosts = {spec.name: address.get(node_id, "") for node_id, spec in now.items()}
        if changed:
            self._wake()

    def _node_gone(self, node_id: str | None) -> None:
        """Report a node lost now, ahead of the next listing (which then finds it gone already)."""
        spec = self._alive.pop(node_id, None) if node_id is not None else None
        if spec is not None:
            if self._ids.get(spec.name) == node_id:
                del self._ids[spec.name]
            self._node_events.append(NodeEvent("lost", spec.name, None,
                                               f"{NODE_LOST_PREFIX}{spec.name} left the Ray cluster"))

    async def _watch(self) -> None:
        next_wake = time.monotonic() + self.reconcile_every
        while True:
            await asyncio.sleep(self.node_poll_s)
            try:
                await self._scan()
            except Exception as exc:  # the GCS did not answer this time: try again next tick
                log.warning("listing Ray's nodes failed: %s", exc)
            if time.monotonic() >= next_wake:  # the loop reconciles on its next turn
                next_wake = time.monotonic() + self.reconcile_every
                self._wake()

    def _begin(self, launch: Launch) -> None:
        old = self._runs.get(launch.job_id)
        if old is not None:
            self._end(old)
        run = _Run(launch)
        self._runs[launch.job_id] = run
        self._aio.create_task(self._start(run))

    async def _start(self, run: _Run) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        launch = run.launch
        missing = [n for n in launch.nodes if n not in self._ids]
        if missing:  # (a node of the database that Ray does not have: fail it, or kant places there again)
            why = f"node {missing[0]} is not in the Ray cluster"
            self._node_events.append(NodeEvent("lost", missing[0], None, f"{NODE_LOST_PREFIX}{why}"))
            self._end(run, "bind_failed", reason=why)
            return
        per_node: dict[str, int] = {}
        node_rank: dict[str, int] = {}
        num_gpus = launch.gpu_milli / 1000 if launch.gpus_per_worker == 1 and launch.gpu_milli < 1000 \
            else launch.gpus_per_worker
        try:
            for k, node in enumerate(launch.nodes):
                node_rank.setdefault(node, len(node_rank))
                local = per_node.get(node, 0)
                per_node[node] = local + 1
                spec = {"command": self._command(launch), "rank": k, "cwd": launch.cwd,
                        "job_env": None if launch.job_env is None else dict(launch.job_env),
                        "env": self._env(launch, k, node, local, node_rank[node])}
                strategy = NodeAffinitySchedulingStrategy(self._ids[node], soft=False)
                run.actors.append(self._actor.options(
                    name=ray_worker.actor_name(launch.job_id, launch.run, k), namespace=ray_worker.KV_NAMESPACE,
                    lifetime="detached", num_cpus=0, num_gpus=num_gpus, scheduling_strategy=strategy,
                    max_restarts=0, max_concurrency=4).remote(spec))
        except ValueError as exc:  # a name taken (an actor of this run left from an earlier service)
            self._end(run, "bind_failed", reason=f"its Ray actors could not be created: {_first_line(exc)}")
            return
        firsts = [asyncio.ensure_future(self._ready(a)) for a in run.actors]
        _, pending = await asyncio.wait(firsts, timeout=self.start_timeout)
        for f in pending:
            f.cancel()
        if run.ended:  # stopped meanwhile
            return
        problem = self._start_problem(launch, firsts)
        if problem:
            self._end(run, "bind_failed", reason=problem)
            return
        infos = [f.result() for f in firsts]
        run.went = True
        try:
            notes = await asyncio.gather(*(a.go.remote(str(infos[0]["ip"]), int(infos[0]["port"]))
                                           for a in run.actors))
        except Exception as exc:
            if not run.ended:
                self._end(run, "bind_failed", reason=f"the gang could not be started: {_first_line(exc)}")
            return
        if run.ended:
            return
        bad = next((k for k, note in enumerate(notes) if note), None)
        if bad is not None:
            self._end(run, "failed", 127, f"worker {bad} on {launch.nodes[bad]} could not start: {notes[bad]}")
            return
        self._follow_all(run)

    def _follow_all(self, run: _Run) -> None:
        launch = run.launch
        run.tasks = [self._aio.create_task(self._follow(run, k, a, self.logs.size(launch.job_id, launch.run, k)))
                     for k, a in enumerate(run.actors)]

    def _start_problem(self, launch: Launch, firsts: Sequence[asyncio.Future[dict[str, Any]]]) -> str:
        """Why the gang did not start ('' when every worker holds its GPUs)."""
        for k, f in enumerate(firsts):
            if f.cancelled() or not f.done():
                return (f"worker {k} on node {launch.nodes[k]} did not start within {self.start_timeout:g} s "
                        f"(Ray could not give it {launch.gpus_per_worker} GPU(s) there)")
            exc = f.exception()
            if exc is not None:
                return f"worker {k} on node {launch.nodes[k]} could not start: {_first_line(exc)}"
        return ""

    @staticmethod
    async def _ready(actor: Any) -> dict[str, Any]:
        info: dict[str, Any] = await actor.ready.remote()
        return info

    async def _follow(self, run: _Run, k: int, actor: Any, offset: int) -> None:
        """Collect worker ``k``'s output from byte ``offset`` on, until its exit code."""
        launch = run.launch
        try:
            while not run.ended:
                data, code, oom = await actor.poll.remote(offset, 2.0)
                if data:
                    self.logs.append(launch.job_id, launch.run, k, data)
                    offset += len(data)
                if code is not None:
                    self._exited(run, k, int(code), bool(oom))
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not run.ended:
                await self._died(run, k, exc)

    def _exited(self, run: _Run, k: int, code: int, oom: bool = False) -> None:
        run.codes[k] = code
        if run.ended:
            return
        launch = run.launch
        if code != 0:
            tail = self.logs.tail(launch.job_id, launch.run, k, _TAIL_LINES)
            what = ray_worker.exit_reason(code, oom)
            self._end(run, "failed", code if code >= 0 else 128 - code,
                      f"worker {k} on {launch.nodes[k]} {what}" + (f"; last output:\n{tail}" if tail else ""))
        elif len(run.codes) == len(launch.nodes):
            self._end(run, "finished", 0)

    async def _died(self, run: _Run, k: int, exc: BaseException) -> None:
        import ray

        node = run.launch.nodes[k]
        node_id = self._ids.get(node)
        # An actor's process can be seen gone before Ray's health check declares its node dead: give the
        # node that long to be declared dead before calling it a failure.
        deadline = time.monotonic() + self.node_death_wait_s
        while True:
            infos = await asyncio.to_thread(ray.nodes)
            alive = any(i.get("NodeID") == node_id and i.get("Alive") for i in infos)
            if not alive or run.ended or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.5)
        if run.ended:
            return
        if not alive or isinstance(exc, ray.exceptions.NodeDiedError):
            self._node_gone(node_id)  # before the run's end: the loop must not place it there again
            self._end(run, "lost", reason=f"node {node} left the Ray cluster")
        else:
            self._end(run, "failed", None, f"worker {k} on {node} died: {_first_line(exc)}")

    def _end(self, run: _Run, kind: EventKind | None = None, exit_code: int | None = None, reason: str = "",
             why: StopWhy = "cancel") -> None:
        """The run is over (``kind``: report it; None: kant stopped it, ``why``): stop what still runs.
        The actors of a reported end are killed once the loop recorded it (the next :meth:`poll`)."""
        if run.ended:
            return
        run.ended = True
        launch = run.launch
        if self._runs.get(launch.job_id) is run:
            del self._runs[launch.job_id]
        for task in run.tasks:
            task.cancel()
        if kind == "bind_failed" and not run.went:
            # no command ran: kill the actors now. Asking them to stop would wait for their creation, and
            # an actor still waiting for its GPUs would get them before the job's next run does.
            _kill(run.actors)
            self.logs.forget(launch.job_id, launch.run)
        else:
            self._aio.create_task(self._stop_actors(run, why, kill=kind is None or kind in ("bind_failed", "lost")))
        if kind is not None:
            self._emit(kind, run, exit_code, reason)

    async def _stop_actors(self, run: _Run, why: StopWhy, *, kill: bool) -> None:
        """Stop every process of the run's workers (``why``'s signals); kill the actors when ``kill``,
        else keep them until the end is recorded."""

        launch = run.launch
        stops = []
        for k, actor in enumerate(run.actors):
            if k not in run.codes:
                stops.append(actor.stop.remote(why, self.stop_grace_s, self.checkpoint_grace_s))
        if stops:
            timeout = self.stop_grace_s + (self.checkpoint_grace_s if why == "preempt" else 0.0) + 15.0
            done, _ = await asyncio.wait([asyncio.ensure_future(self._settle(r)) for r in stops], timeout=timeout)
            if len(done) < len(stops):
                log.warning("job %d run %d: a worker did not stop within %g s: killing its actor", launch.job_id,
                            launch.run, timeout)
            for k, actor in enumerate(run.actors):  # what the workers wrote while they stopped
                if k not in run.codes:
                    with contextlib.suppress(Exception):
                        data, _, _ = await actor.poll.remote(self.logs.size(launch.job_id, launch.run, k), 0.0)
                        self.logs.append(launch.job_id, launch.run, k, data)
        if kill:
            _kill(run.actors)
        else:
            self._reported.append(run.actors)
            self._wake()
        self.logs.forget(launch.job_id, launch.run)

    @staticmethod
    async def _settle(ref: Any) -> None:
        with contextlib.suppress(Exception):  # an actor already gone
            await ref

    def _reconcile(self, running: Mapping[int, int]) -> None:
        for job, run in list(self._runs.items()):
            if running.get(job) != run.launch.run:
                log.warning("reconcile: job %d run %d runs on Ray but not in kant's view: stopping it", job,
                            run.launch.run)
                self._end(run)
        for job, number in running.items():
            cur = self._runs.get(job)
            if cur is None or cur.launch.run != number:
                self._events.append(("lost", job, number, None, "reconciled: Ray runs no worker of this run"))
                self._wake()

    async def _restore(self, launches: Sequence[Launch]) -> None:
        """Find each run's actors by name and follow them again; stop actors of runs not in ``launches``."""
        import ray

        wanted = {(la.job_id, la.run) for la in launches}
        named = await asyncio.to_thread(ray.util.list_named_actors, all_namespaces=True)
        for entry in named:
            if entry.get("namespace") != ray_worker.KV_NAMESPACE:
                continue
            key = ray_worker.parse_actor_name(str(entry.get("name")))
            if key is not None and key[:2] not in wanted:
                log.warning("restore: actor %s belongs to no running run of the database: stopping it", entry["name"])
                actor = await asyncio.to_thread(_actor_or_none, str(entry["name"]))
                if actor is not None:
                    self._aio.create_task(self._stop_actors(_Run(Launch(key[0], key[1], (), 0, 0.0), [actor]),
                                                            "cancel", kill=True))
        for launch in launches:
            run = _Run(launch)
            self._runs[launch.job_id] = run
            run.actors = [await asyncio.to_thread(_actor_or_none, ray_worker.actor_name(launch.job_id, launch.run, k))
                          for k in range(len(launch.nodes))]
            found = [a for a in run.actors if a is not None]
            states: list[Any] = []
            if len(found) == len(run.actors):
                try:
                    states = await asyncio.gather(*(a.state.remote() for a in found))
                except Exception as exc:
                    log.warning("restore: job %d run %d: %s", launch.job_id, launch.run, _first_line(exc))
                    states = []
            if len(states) == len(run.actors) and all(s["started"] for s in states):
                log.info("restore: job %d run %d reattached (%d workers)", launch.job_id, launch.run,
                         len(run.actors))
                self._follow_all(run)
                continue
            run.actors = found
            why = (f"the service stopped while run {launch.run} started" if len(states) == len(run.actors)
                   else f"{len(launch.nodes) - len(found)} of its {len(launch.nodes)} workers are gone from Ray")
            self._end(run, "lost", reason=f"after a restart of kant serve: {why}")

    # --- what runs on the nodes -------------------------------------------------------------------
    def _command(self, launch: Launch) -> str:
        if launch.command:
            return launch.command
        d = launch.duration_s
        hold = f"sleep {d:.3f}" if d is not None and math.isfinite(d) and d >= 0 else "sleep infinity"
        say = shlex.quote(f"kant: job {launch.job_id} has no command: holding its GPUs")
        return f'echo {say} "($CUDA_VISIBLE_DEVICES), pid $$"; exec {hold}'

    def _env(self, launch: Launch, rank: int, node: str, local: int, node_rank: int) -> dict[str, str]:
        """kant's variables of one worker: ``Launch.env``, then the gang's ranks (over the job's own)."""
        on_node = sum(1 for n in launch.nodes if n == node)
        return {**launch.env, "WORLD_SIZE": str(len(launch.nodes)), "RANK": str(rank), "LOCAL_RANK": str(local),
                "LOCAL_WORLD_SIZE": str(on_node), "NODE_RANK": str(node_rank),
                "KANT_JOB_ID": str(launch.job_id), "KANT_RUN": str(launch.run), "KANT_NODE": node,
                "KANT_CHECKPOINT_DIR": str(self.checkpoint_dir / f"job-{launch.job_id}"),
                "PYTHONUNBUFFERED": "1"}

    # --- the Executor interface (the scheduling loop's thread) -------------------------------------
    def set_waker(self, wake: Callable[[], None]) -> None:
        self._wake = wake

    def discover_nodes(self) -> list[NodeSpec]:
        """Ray's alive nodes now, in name order (the cluster of a first start without --cluster)."""
        return sorted(self._alive.values(), key=lambda s: s.name)

    def start(self, launch: Launch) -> None:
        self._later(self._begin, launch)

    def host(self, node: str) -> str:
        """The Ray node's address (its ``NodeManagerAddress``); "" for a node not alive now."""
        return self._hosts.get(node, "")

    def stop(self, job_id: int, why: StopWhy = "cancel") -> None:
        def stop() -> None:
            run = self._runs.get(job_id)
            if run is not None:
                self._end(run, why=why)

        self._later(stop)

    def restore(self, launches: Sequence[Launch]) -> None:
        """Runs of an earlier ``kant serve`` go on: each worker's actor is found by name and followed
        again (its output from where the log file ends; an exit code it kept while no service was up
        is reported now). A run with a worker gone is reported lost (it goes back to the queue)."""
        self._submit(self._restore(list(launches))).result(120.0)

    def next_time(self) -> float:
        return math.inf  # events come when Ray says so; the waker tells the loop

    def poll(self, now: float) -> list[ExecEvent]:
        if self._reported:  # the ends reported by the last poll are recorded: their actors can go
            done, self._reported = self._reported, []
            self._later(_kill_all, done)
        out = []
        while self._events:
            kind, job, run, code, reason = self._events.popleft()
            out.append(ExecEvent(kind, job, run, now, code, reason))
        if out:
            self._wake()  # a next turn, after this one is written, lets the actors of these ends go
        return out

    def node_events(self) -> list[NodeEvent]:
        out = []
        while self._node_events:
            out.append(self._node_events.popleft())
        return out

    def reconcile(self, running: Mapping[int, int]) -> None:
        self._later(self._reconcile, dict(running))

    def read_logs(self, job_id: int, worker: int = 0, *, run: int | None = None, offset: int = 0,
                  limit: int = 1 << 20) -> LogChunk | None:
        return self.logs.read(job_id, worker, run=run, offset=offset, limit=limit)

    def running_jobs(self) -> dict[int, int]:
        """Job -> run number of what runs on Ray now (tests, benches)."""
        return self._submit(self._copy_runs()).result(30.0)  # type: ignore[no-any-return]

    async def _copy_runs(self) -> dict[int, int]:
        return {job: run.launch.run for job, run in self._runs.items()}

    def close(self) -> None:
        """Leave: the runs go on in their actors (a next service reattaches); only this process's
        followers stop."""
        import ray

        async def detach() -> None:
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.wait(others, timeout=5.0) if others else None

        try:
            self._submit(detach()).result(30.0)
        except Exception as exc:  # closing anyway
            log.warning("detaching from the Ray workers: %s", exc)
        self._aio.call_soon_threadsafe(self._aio.stop)
        self._thread.join(10.0)
        if self._owns_ray:
            ray.shutdown()


def _actor_or_none(name: str) -> Any:
    import ray

    try:
        return ray.get_actor(name, namespace=ray_worker.KV_NAMESPACE)
    except ValueError:
        return None


def _kill(actors: Iterable[Any]) -> None:
    import ray

    for actor in actors:
        with contextlib.suppress(Exception):  # already gone
            ray.kill(actor, no_restart=True)


def _kill_all(groups: Iterable[Iterable[Any]]) -> None:
    for actors in groups:
        _kill(actors)


def _ray_logs_to_file(log_dir: Path) -> None:
    """Ray's own Python logging goes to LOG_DIR/ray.log, not to the service's log."""
    ray_log = logging.getLogger("ray")
    if any(getattr(h, "_kant", False) for h in ray_log.handlers):
        return
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.FileHandler(log_dir / "ray.log")
    except OSError as exc:
        log.warning("cannot write Ray's log to %s: %s", log_dir / "ray.log", exc)
        return
    handler._kant = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    ray_log.addHandler(handler)
    ray_log.propagate = False


def _check_reachable(address: str) -> None:
    """A clear error when nothing listens at HOST:PORT (``ray.init`` would retry for minutes), or for
    a Ray Client address."""
    if address in ("auto", "local"):
        return
    if address.startswith("ray://"):
        raise KantError(f"--ray-address {address}: Ray Client (ray://) is not supported: the executor follows its "
                        "workers' actors with long polls, not tested through Ray Client; run kant serve where it "
                        "reaches the cluster's GCS (--ray-address HOST:6379, or auto on a node of the cluster)")
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=5.0):
            pass
    except ValueError:
        raise KantError(f"--ray-address {address}: not auto, HOST:PORT or ray://HOST:PORT") from None
    except OSError as exc:
        raise KantError(f"--ray-address {address}: cannot connect to Ray ({exc.strerror or exc})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}".rstrip(": ")
