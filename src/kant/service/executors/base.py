"""The interface between the scheduling loop and where work runs (Kubernetes' Binding API and kubelet
status, Slurm's slurmctld/slurmd split): the loop starts a job's workers on the nodes a commit chose,
stops them, and hears back when they end, fail or cannot start.

Every call comes from the loop's thread. An executor that learns of events on its own threads (a
real engine) queues them and calls the waker it was given, so the loop polls without delay.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

__all__ = ["ExecEvent", "Executor", "Launch", "EventKind"]

#: ``finished``: exit code 0; ``failed``: another exit code; ``bind_failed``: it could not start where
#: it was placed (the job goes back to the queue); ``lost``: it died with its node (requeued)
EventKind = Literal["finished", "failed", "bind_failed", "lost"]


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


@dataclass(frozen=True, slots=True)
class ExecEvent:
    kind: EventKind
    job_id: int
    run: int
    time: float  # service time it happened
    exit_code: int | None = None
    reason: str = ""
    runtime: float | None = None  # how long the run worked, when the executor knows (None: end - start)


class Executor(Protocol):
    name: str

    def set_waker(self, wake: Callable[[], None]) -> None:
        """``wake()`` asks the loop to poll soon (call it from any thread)."""
        ...

    def start(self, launch: Launch) -> None:
        """Start every worker of the run, or report ``bind_failed`` (all or nothing)."""
        ...

    def stop(self, job_id: int) -> None:
        """Stop every worker of the job's current run (cancel, preemption); no event follows."""
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

    def close(self) -> None: ...
