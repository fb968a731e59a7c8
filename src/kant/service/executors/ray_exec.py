"""The Ray executor: jobs run for real on a Ray cluster (``kant serve --executor ray``).

kant decides where each worker goes; Ray runs it there. Every worker of a started job is one Ray
task (:func:`~kant.service.executors.ray_worker.run_worker`) with a hard node affinity to the node
kant chose (``NodeAffinitySchedulingStrategy(soft=False)``) and ``num_gpus`` = the GPUs kant gave
it, so Ray picks which GPU ids (and sets ``CUDA_VISIBLE_DEVICES``) and never gives one GPU to two
tasks. A gang starts all or nothing: once every worker holds its GPUs, the executor writes the
gang's go signal (rank 0's address and a free port) to Ray's key-value store and each worker starts
the command with ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``,
``NODE_RANK``, ``KANT_JOB_ID`` and ``KANT_CHECKPOINT_DIR``; if one worker does not hold its GPUs
within ``start_timeout`` s, every worker is cancelled and the run is reported ``bind_failed``.

The cluster's nodes are Ray's alive nodes (:func:`node_specs`); a watcher lists them every
``node_poll_s`` s and reports joins and losses as :class:`NodeEvent`. A worker that ends with
code 0 on every rank finishes the job; a non-zero code fails it (with the last lines of that
worker's output); a worker lost with its node reports the run ``lost`` (requeued).

All Ray calls run on one thread with an asyncio loop (``kant-ray``); the scheduling loop's calls
(:meth:`RayExecutor.start`, :meth:`RayExecutor.stop`, ...) only hand work to it and return.
"""

from __future__ import annotations

import asyncio
import json
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

__all__ = ["RayExecutor", "RaySettings", "node_specs", "NAME_LABEL", "LEAF_LABEL", "SPINE_LABEL", "GPU_TYPE_LABEL",
           "DEFAULT_LEAF", "DEFAULT_SPINE", "DEFAULT_GPU_TYPE"]

log = logging.getLogger("kant.serve.ray")

NAME_LABEL = "kant.node"
LEAF_LABEL = "kant.leaf"
SPINE_LABEL = "kant.spine"
GPU_TYPE_LABEL = "kant.gpu-type"
DEFAULT_LEAF = "ray"
DEFAULT_SPINE = "ray"
DEFAULT_GPU_TYPE = "GPU"
_ACCELERATOR = "accelerator_type:"
_TAIL_LINES = 5


def _gpu_type(info: Mapping[str, Any]) -> str:
    labels = info.get("Labels") or {}
    if labels.get(GPU_TYPE_LABEL):
        return str(labels[GPU_TYPE_LABEL])
    for key in sorted(info.get("Resources") or {}):
        if key.startswith(_ACCELERATOR):
            return str(key[len(_ACCELERATOR):])
    return str(labels.get("ray.io/accelerator-type") or DEFAULT_GPU_TYPE)


def node_specs(infos: Iterable[Mapping[str, Any]], names: dict[str, str]) -> dict[str, NodeSpec]:
    """kant's view of Ray's alive nodes (``ray.nodes()``), Ray node id -> spec.

    A node's name is its ``kant.node`` label, else Ray's node name (its IP or ``--node-name``); a
    name another node already holds gets the node id's first 8 characters appended. ``names``
    (node id -> name) keeps the names given so far, so a name never moves to another node. GPUs:
    Ray's ``GPU`` resource (whole GPUs); type: the ``kant.gpu-type`` label, else Ray's
    ``accelerator_type:X`` resource, else ``GPU``; leaf and spine: the ``kant.leaf`` and
    ``kant.spine`` labels, else ``ray`` (every unlabelled node under one switch).
    """
    out: dict[str, NodeSpec] = {}
    for info in sorted(infos, key=lambda i: str(i.get("NodeID"))):
        if not info.get("Alive"):
            continue
        node_id = str(info["NodeID"])
        labels = info.get("Labels") or {}
        res = info.get("Resources") or {}
        if node_id not in names:
            want = str(labels.get(NAME_LABEL) or info.get("NodeName") or node_id[:12])
            taken = set(names.values())
            names[node_id] = want if want not in taken else f"{want}-{node_id[:8]}"
        out[node_id] = NodeSpec(names[node_id], _gpu_type(info), int(res.get("GPU", 0)),
                                int(res.get("CPU", 0) * 1000), int(res.get("memory", 0) // (1 << 20)),
                                str(labels.get(LEAF_LABEL) or DEFAULT_LEAF),
                                str(labels.get(SPINE_LABEL) or DEFAULT_SPINE))
    return out


@dataclass
class _Run:
    """One run of a job on Ray: its workers' tasks and what they reported (the ``kant-ray`` thread's)."""

    launch: Launch
    gens: list[Any] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    codes: dict[int, int] = field(default_factory=dict)
    ended: bool = False

    @property
    def go_key(self) -> str:
        return f"go/{self.launch.job_id}/{self.launch.run}"


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


class RayExecutor:
    """Runs kant's starts on a Ray cluster (see the module docstring)."""

    name = "ray"
    discovers_nodes = True  # Ray's alive nodes: the cluster when --cluster is not given

    @classmethod
    def from_settings(cls, settings: RaySettings) -> RayExecutor:
        return cls(settings.address, log_dir=settings.log_dir, checkpoint_dir=settings.checkpoint_dir,
                   start_timeout=settings.start_timeout)

    def __init__(self, address: str = "auto", *, log_dir: Path, checkpoint_dir: Path, start_timeout: float = 60.0,
                 node_poll_s: float = 1.0, reconcile_every: float = 10.0, stop_grace_s: float = 5.0,
                 node_death_wait_s: float = 40.0) -> None:
        import ray

        self.address = address
        self.logs = LogStore(log_dir)
        self.checkpoint_dir = Path(checkpoint_dir).absolute()
        self.start_timeout = start_timeout
        self.node_poll_s = node_poll_s
        self.reconcile_every = reconcile_every
        self.stop_grace_s = stop_grace_s
        self.node_death_wait_s = node_death_wait_s  # (Ray's default health check declares a node dead in 15 s)
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            _check_reachable(address)
            try:
                ray.init(address=address, namespace=ray_worker.KV_NAMESPACE, logging_level=logging.ERROR,
                         log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise KantError(f"--ray-address {address}: cannot connect to Ray ({first})") from None
        ray.cloudpickle.register_pickle_by_value(ray_worker)  # type: ignore[no-untyped-call]  # nodes need Ray, not kant
        self._remote = ray.remote(num_cpus=0, max_calls=0, max_retries=0)(ray_worker.run_worker)
        self._wake: Callable[[], None] = lambda: None
        self._events: deque[tuple[EventKind, int, int, int | None, str]] = deque()
        self._node_events: deque[NodeEvent] = deque()
        self._runs: dict[int, _Run] = {}  # job -> its current run (kant-ray thread only)
        self._names: dict[str, str] = {}  # Ray node id -> kant name
        self._alive: dict[str, NodeSpec] = {}  # Ray node id -> spec, as last listed
        self._ids: dict[str, str] = {}  # kant name -> Ray node id of the alive node
        self._hosts: dict[str, str] = {}  # kant name -> the alive node's address (NodeManagerAddress)
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
        """List Ray's nodes; report the ones that joined or left since the last listing."""
        import ray

        infos = await asyncio.to_thread(ray.nodes)
        now = node_specs(infos, self._names)
        changed = False
        for node_id, spec in now.items():
            if node_id not in self._alive and self._alive:
                self._node_events.append(NodeEvent("up", spec.name, spec, "joined the Ray cluster"))
                changed = True
        for node_id in [i for i in self._alive if i not in now]:
            self._node_gone(node_id)
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
            self._ids.pop(spec.name, None)
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
        from ray.experimental import internal_kv
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
        for k, node in enumerate(launch.nodes):
            node_rank.setdefault(node, len(node_rank))
            local = per_node.get(node, 0)
            per_node[node] = local + 1
            spec = {"command": self._command(launch), "rank": k, "go_key": run.go_key,
                    "start_timeout": self.start_timeout + 5.0, "stop_grace_s": self.stop_grace_s,
                    "env": self._env(launch, k, node, local, node_rank[node])}
            strategy = NodeAffinitySchedulingStrategy(self._ids[node], soft=False)
            run.gens.append(self._remote.options(num_gpus=num_gpus, scheduling_strategy=strategy,
                                                 name=f"kant-job-{launch.job_id}-run-{launch.run}-w{k}").remote(spec))
        firsts = [asyncio.ensure_future(self._first(g)) for g in run.gens]
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
        go = json.dumps({"addr": infos[0]["ip"], "port": int(infos[0]["port"])})
        await asyncio.to_thread(internal_kv._internal_kv_put, run.go_key, go, True, namespace=ray_worker.KV_NAMESPACE)
        if run.ended:
            return
        run.tasks = [self._aio.create_task(self._follow(run, k, g)) for k, g in enumerate(run.gens)]

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
    async def _first(gen: Any) -> dict[str, Any]:
        ref = await gen.__anext__()
        item = await ref
        if item[0] != "ready":
            raise KantError(f"the worker said {item[0]!r} before it was ready")
        info: dict[str, Any] = item[1]
        return info

    async def _follow(self, run: _Run, k: int, gen: Any) -> None:
        launch = run.launch
        try:
            async for ref in gen:
                item = await ref
                if item[0] == "out":
                    self.logs.append(launch.job_id, launch.run, k, item[1])
                elif item[0] == "exit":
                    self.logs.append(launch.job_id, launch.run, k, item[2].encode())
                    self._exited(run, k, int(item[1]))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not run.ended:
                await self._died(run, k, exc)

    def _exited(self, run: _Run, k: int, code: int) -> None:
        run.codes[k] = code
        if run.ended:
            return
        launch = run.launch
        if code != 0:
            tail = self.logs.tail(launch.job_id, launch.run, k, _TAIL_LINES)
            self._end(run, "failed", code, f"worker {k} on {launch.nodes[k]} exited with code {code}"
                                           + (f"; last output:\n{tail}" if tail else ""))
        elif len(run.codes) == len(launch.nodes):
            self._end(run, "finished", 0)

    async def _died(self, run: _Run, k: int, exc: BaseException) -> None:
        import ray

        node = run.launch.nodes[k]
        node_id = self._ids.get(node)
        # A worker's process can be seen gone before Ray's health check declares its node dead: unless
        # the task itself raised, give the node that long to be declared dead before calling it a failure.
        crashed = not isinstance(exc, ray.exceptions.RayTaskError)
        deadline = time.monotonic() + (self.node_death_wait_s if crashed else 0.0)
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

    def _end(self, run: _Run, kind: EventKind | None = None, exit_code: int | None = None, reason: str = "") -> None:
        """The run is over (``kind``: report it; None: kant stopped it): cancel what still runs."""
        import ray

        if run.ended:
            return
        run.ended = True
        launch = run.launch
        if self._runs.get(launch.job_id) is run:
            del self._runs[launch.job_id]
        for k, gen in enumerate(run.gens):
            if k not in run.codes:
                try:
                    ray.cancel(gen)
                except Exception as exc:  # already gone
                    log.debug("cancel of job %d worker %d: %s", launch.job_id, k, exc)
        if run.gens:
            self._aio.create_task(self._reap(run))
        if kind is not None:
            self._emit(kind, run, exit_code, reason)

    async def _reap(self, run: _Run) -> None:
        """Delete the go signal; force-kill workers that a cancel did not end within the grace period."""
        import ray
        from ray.experimental import internal_kv

        await asyncio.to_thread(internal_kv._internal_kv_del, run.go_key, namespace=ray_worker.KV_NAMESPACE)
        if run.tasks:
            _, pending = await asyncio.wait(run.tasks, timeout=self.stop_grace_s + 5.0)
            for task in pending:
                k = run.tasks.index(task)
                log.warning("job %d worker %d did not stop after a cancel: killing its Ray worker",
                            run.launch.job_id, k)
                try:
                    ray.cancel(run.gens[k], force=True)
                except Exception as exc:
                    log.debug("force cancel: %s", exc)
                task.cancel()
        self.logs.forget(run.launch.job_id, run.launch.run)

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

    def _command(self, launch: Launch) -> str:
        if launch.command:
            return launch.command
        d = launch.duration_s
        hold = f"sleep {d:.3f}" if d is not None and math.isfinite(d) and d >= 0 else "sleep infinity"
        say = shlex.quote(f"kant: job {launch.job_id} has no command: holding its GPUs")
        return f'echo {say} "($CUDA_VISIBLE_DEVICES), pid $$"; exec {hold}'

    def _env(self, launch: Launch, rank: int, node: str, local: int, node_rank: int) -> dict[str, str]:
        on_node = sum(1 for n in launch.nodes if n == node)
        return {"WORLD_SIZE": str(len(launch.nodes)), "RANK": str(rank), "LOCAL_RANK": str(local),
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
                self._end(run)

        self._later(stop)

    def restore(self, launches: Sequence[Launch]) -> None:
        """Runs of an earlier ``kant serve`` died with it (Ray ends a driver's tasks when the driver
        goes): each is reported lost, and goes back to the queue (to resume from its checkpoint)."""
        for launch in launches:
            self._events.append(("lost", launch.job_id, launch.run, None,
                                 "kant serve restarted: Ray ended its workers with the old service"))

    def next_time(self) -> float:
        return math.inf  # events come when Ray says so; the waker tells the loop

    def poll(self, now: float) -> list[ExecEvent]:
        out = []
        while self._events:
            kind, job, run, code, reason = self._events.popleft()
            out.append(ExecEvent(kind, job, run, now, code, reason))
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
        import ray

        async def stop_all() -> None:
            for run in list(self._runs.values()):
                self._end(run)
            await asyncio.sleep(0)  # let the cancels go out
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.wait(others, timeout=5.0) if others else None

        try:
            self._submit(stop_all()).result(30.0)
        except Exception as exc:  # closing anyway
            log.warning("stopping the Ray workers: %s", exc)
        self._aio.call_soon_threadsafe(self._aio.stop)
        self._thread.join(10.0)
        if self._owns_ray:
            ray.shutdown()


def _check_reachable(address: str) -> None:
    """A clear error when nothing listens at HOST:PORT (``ray.init`` would retry for minutes), or for
    a Ray Client address."""
    if address in ("auto", "local"):
        return
    if address.startswith("ray://"):
        raise KantError(f"--ray-address {address}: Ray Client (ray://) is not supported: the executor follows its "
                        "workers as streaming generators, which Ray Client cannot return; run kant serve where it "
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
