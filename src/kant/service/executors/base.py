"""The interface between the scheduling loop and where work runs (Kubernetes' Binding API and kubelet
status, Slurm's slurmctld/slurmd split): the loop starts a job's workers on the nodes a commit chose,
stops them, and hears back when they end, fail or cannot start.

Every call comes from the loop's thread, except :meth:`Executor.read_logs` (any thread). An executor
that learns of events on its own threads (a real engine) queues them and calls the waker it was
given, so the loop polls without delay. An engine with its own view of the nodes (Ray) reports
nodes joining and leaving as :class:`NodeEvent` (the loop adds, repairs or fails them), and is told
periodically which runs the loop thinks are running (:meth:`Executor.reconcile`).

An executor's settings are a model (:class:`ExecutorSettings`): each field is one ``kant serve``
option (:class:`Option`), and the class says whether its engine has nodes of its own
(:class:`ExecutorClass`); :data:`kant.service.executors.EXECUTORS` lists the executors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from kant.model.cluster import NodeSpec

__all__ = ["ExecEvent", "Executor", "ExecutorClass", "ExecutorSettings", "Launch", "EventKind", "NodeEvent",
           "LogChunk", "NODE_LOST_PREFIX", "Option", "StopWhy", "LOCAL_HOST"]

#: the reason of a node the executor reported lost starts with this (the loop repairs such a node,
#: and only such a node, when the executor reports it back)
NODE_LOST_PREFIX = "executor: "

#: ``finished``: exit code 0; ``failed``: another exit code; ``bind_failed``: it could not start where
#: it was placed (the job goes back to the queue); ``lost``: it died with its node (requeued)
EventKind = Literal["finished", "failed", "bind_failed", "lost"]

#: why a run is stopped (:meth:`Executor.stop`): ``cancel`` (a user, a deleted service, a scale down):
#: SIGTERM, a grace period, SIGKILL; ``preempt`` (an eviction: preemption, or a reclaim of GPUs lent
#: to training): the checkpoint signal first (SIGUSR1), then as ``cancel``, so the job can save its
#: state in ``KANT_CHECKPOINT_DIR`` and resume; ``timeout``: past the job's time limit, as ``cancel``
StopWhy = Literal["cancel", "preempt", "timeout"]

#: the address of an executor's processes that run on this machine (the simulated executor's)
LOCAL_HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class Launch:
    """One run of a job: where its workers go and what they run."""

    job_id: int
    run: int  # 1 for the first run; a requeued job starts again with the next number
    nodes: tuple[str, ...]  # worker k runs on nodes[k]
    gpus_per_worker: int
    start: float  # service time of the start
    command: str | None = None
    duration_s: float | None = None  # how long the simulated executor runs it (None: until stopped)
    labels: Mapping[str, str] = field(default_factory=dict)
    gpu_milli: int = 1000  # thousandths of one GPU per 1-GPU worker (under 1000: a shared GPU)
    env: Mapping[str, str] = field(default_factory=dict)  # set by kant for this run, over the job's own
    service: str | None = None  # the service's name when this run is one of its replicas
    cwd: str | None = None  # the job's working directory (None: the engine's own)
    job_env: Mapping[str, str] | None = None  # the job's environment (--export; None: the node's own)


@dataclass(frozen=True, slots=True)
class ExecEvent:
    kind: EventKind
    job_id: int
    run: int
    time: float  # service time it happened
    exit_code: int | None = None
    reason: str = ""
    runtime: float | None = None  # how long the run worked, when the executor knows (None: end - start)


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """A node joined (``up``, with its spec) or left (``lost``) the executor's cluster."""

    kind: Literal["up", "lost"]
    name: str
    spec: NodeSpec | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class LogChunk:
    """Bytes ``offset`` to ``next_offset`` of one worker's output (stdout and stderr) in one run."""

    job_id: int
    run: int  # 0: the job never ran here
    worker: int
    workers: int  # workers with output in this run
    offset: int
    next_offset: int
    size: int  # bytes kept so far
    text: str


class Executor(Protocol):
    name: str

    def set_waker(self, wake: Callable[[], None]) -> None:
        """``wake()`` asks the loop to poll soon (call it from any thread)."""
        ...

    def start(self, launch: Launch) -> None:
        """Start every worker of the run, or report ``bind_failed`` (all or nothing)."""
        ...

    def stop(self, job_id: int, why: StopWhy = "cancel") -> None:
        """Stop every worker of the job's current run (cancel, preemption, time limit; see
        :data:`StopWhy`); no event follows."""
        ...

    def host(self, node: str) -> str:
        """The address at which a process of a run placed on ``node`` is reached (a replica's)."""
        ...

    def restore(self, launches: Sequence[Launch]) -> None:
        """After a restart: the runs the database says are running (reattach, or report them lost)."""
        ...

    def next_time(self) -> float:
        """Service time of the next event this executor will report by itself (inf: none known)."""
        ...

    def poll(self, now: float) -> list[ExecEvent]:
        """Events due by ``now``, oldest first."""
        ...

    def discover_nodes(self) -> list[NodeSpec]:
        """The engine's nodes now (the cluster of a first start without ``--cluster``; empty: none)."""
        ...

    def node_events(self) -> list[NodeEvent]:
        """Nodes that joined or left since the last call (an engine without its own nodes: none)."""
        ...

    #: wall seconds between two :meth:`reconcile` calls (inf: never)
    reconcile_every: float

    def reconcile(self, running: Mapping[int, int]) -> None:
        """The loop's view, job -> run number of every running job: stop what runs for jobs not in
        it, report ``lost`` for runs in it that the engine no longer runs."""
        ...

    def read_logs(self, job_id: int, worker: int = 0, *, run: int | None = None, offset: int = 0,
                  limit: int = 1 << 20) -> LogChunk | None:
        """Output of one worker (``run`` None: the latest); None when this executor keeps none.
        Called from any thread."""
        ...

    def close(self) -> None: ...


class ExecutorClass(Protocol):
    """What a line of :data:`kant.service.executors.EXECUTORS` names: an executor class."""

    #: whether the engine has nodes of its own (:meth:`Executor.discover_nodes`): ``kant serve``
    #: without ``--cluster`` then takes them; an executor without (the simulated one) gets philly's
    discovers_nodes: bool

    def from_settings(self, settings: Any) -> Executor:
        """The executor with these settings (an instance of the line's settings model)."""
        ...


@dataclass(frozen=True, slots=True)
class Option:
    """How a setting is written on ``kant serve``'s command line: the flag (unique among every
    executor's), the metavar its help shows (default: the type's), and, for a path, whether it is a
    folder (an existing file is refused)."""

    flag: str
    metavar: str | None = None
    folder: bool = False


class ExecutorSettings(BaseModel):
    """An executor's settings, one field each: its type and default, its bounds (pydantic's ``Field``:
    ``gt``, ``ge``, ``lt``, ``le``), its help text (the field's ``description``) and its command-line
    :class:`Option` (in the field's ``Annotated`` metadata), e.g.::

        start_timeout: Annotated[float, Option("--ray-start-timeout")] = Field(
            60.0, gt=0, le=86400, description="seconds a gang's workers have to start ...")

    ``kant serve`` makes each field an option whose help starts "With --executor NAME:", with the
    same bounds; the model checks them again when built. An executor without settings uses this
    class as it is."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
