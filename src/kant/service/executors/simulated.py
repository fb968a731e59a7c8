"""The simulated executor: a started job "runs" for its declared ``duration_s`` of service time and
then finishes (exit code 0, or the code in its label ``kant.io/sim-exit-code``: a test aid). Nothing
is executed. With an accelerated clock a trace replays into the live service (``kant serve --demo
philly --speed 3600``); with the manual clock it gives the simulator's results exactly.

After a restart the runs the database says are running continue: each ends at its start plus its
duration, as if the service had never stopped.

The replicas of an inference service with a command (a launch with ``service`` and ``command``)
are the exception: they run for real, as local processes (:class:`~kant.service.executors.local.LocalRuns`:
output under ``kant-logs/`` for ``kant logs``, exits reported as events, stops by signal), so a service
serves requests on this machine while the training jobs beside it stay simulated. After a restart
such a replica is reported lost (its process was this service's child) and is started again.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from kant.model.cluster import NodeSpec
from kant.service.executors.base import LOCAL_HOST, ExecEvent, ExecutorSettings, Launch, LogChunk, NodeEvent, StopWhy
from kant.service.executors.local import LocalRuns

__all__ = ["SimulatedExecutor", "EXIT_CODE_LABEL"]

EXIT_CODE_LABEL = "kant.io/sim-exit-code"


class SimulatedExecutor:
    name = "simulated"
    reconcile_every = math.inf  # its runs are its own bookkeeping: nothing to reconcile
    discovers_nodes = False  # the cluster is --cluster's (philly by default)

    @classmethod
    def from_settings(cls, settings: ExecutorSettings) -> SimulatedExecutor:
        """(It has no settings.)"""
        return cls()

    def __init__(self, log_dir: Path = Path("kant-logs"), checkpoint_dir: Path = Path("kant-checkpoints")) -> None:
        self._heap: list[tuple[float, int, int, int]] = []  # (end, seq, job, run)
        self._runs: dict[int, Launch] = {}  # job -> its current run
        self._seq = 0
        self._log_dir, self._checkpoint_dir = log_dir, checkpoint_dir
        self._local: LocalRuns | None = None  # the replicas' real processes (made at the first one)
        self._lost: list[ExecEvent] = []  # replicas found at a restart
        self._wake: Callable[[], None] = lambda: None

    @staticmethod
    def runs_for_real(launch: Launch) -> bool:
        """A replica of a service with a command runs as a local process; everything else is simulated."""
        return launch.service is not None and launch.command is not None

    @property
    def local(self) -> LocalRuns:
        if self._local is None:
            self._local = LocalRuns(self._log_dir, self._checkpoint_dir)
            self._local.set_waker(self._wake)
        return self._local

    def set_waker(self, wake: Callable[[], None]) -> None:
        """The clock's events need no waking; a replica's process ending does."""
        self._wake = wake
        if self._local is not None:
            self._local.set_waker(wake)

    def start(self, launch: Launch) -> None:
        if self.runs_for_real(launch):
            self.local.start(launch, launch.start)
            return
        self._runs[launch.job_id] = launch
        d = launch.duration_s
        if d is not None and math.isfinite(d):
            heapq.heappush(self._heap, (launch.start + max(d, 0.0), self._seq, launch.job_id, launch.run))
            self._seq += 1

    def stop(self, job_id: int, why: StopWhy = "cancel") -> None:
        if self._local is not None and self._local.owns(job_id):
            self._local.stop(job_id, why)
            return
        self._runs.pop(job_id, None)  # its heap entry goes stale

    def host(self, node: str) -> str:
        """Every simulated node is this machine."""
        return LOCAL_HOST

    def restore(self, launches: Sequence[Launch]) -> None:
        for launch in sorted(launches, key=lambda x: (x.start, x.job_id)):
            if self.runs_for_real(launch):  # its process died with the service that started it
                self._lost.append(ExecEvent("lost", launch.job_id, launch.run, launch.start, None,
                                            "the service restarted"))
                continue
            self.start(launch)
        if self._lost:
            self._wake()  # (the loop polls them at its next turn)

    def _valid(self, job: int, run: int) -> bool:
        cur = self._runs.get(job)
        return cur is not None and cur.run == run

    def next_time(self) -> float:
        heap = self._heap
        while heap and not self._valid(heap[0][2], heap[0][3]):
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def poll(self, now: float) -> list[ExecEvent]:
        out: list[ExecEvent] = [ExecEvent(e.kind, e.job_id, e.run, max(e.time, now), e.exit_code, e.reason)
                                for e in self._lost]
        self._lost.clear()
        if self._local is not None:
            out.extend(self._local.poll(now))
        heap = self._heap
        while heap and heap[0][0] <= now:
            end, _, job, run = heapq.heappop(heap)
            if not self._valid(job, run):
                continue
            launch = self._runs.pop(job)
            code = _exit_code(launch)
            if code == 0:
                out.append(ExecEvent("finished", job, run, end, 0, runtime=launch.duration_s))
            else:
                out.append(ExecEvent("failed", job, run, end, code, f"exited with code {code} (simulated)"))
        return out

    def running(self) -> list[int]:
        """Jobs with a current run (for reconciliation and tests)."""
        return sorted(self._runs)

    def discover_nodes(self) -> list[NodeSpec]:
        """Nodes come from --cluster or the database."""
        return []

    def node_events(self) -> list[NodeEvent]:
        """Nodes are the database's: none join or leave by themselves."""
        return []

    def reconcile(self, running: Mapping[int, int]) -> None:
        """Never called (``reconcile_every`` is inf)."""

    def read_logs(self, job_id: int, worker: int = 0, *, run: int | None = None, offset: int = 0,
                  limit: int = 1 << 20) -> LogChunk | None:
        """The output of a replica's process (the simulated runs have none)."""
        return None if self._local is None else self._local.read_logs(job_id, worker, run=run, offset=offset,
                                                                        limit=limit)

    def close(self) -> None:
        if self._local is not None:
            self._local.close()
        self._heap.clear()
        self._runs.clear()


def _exit_code(launch: Launch) -> int:
    raw = launch.labels.get(EXIT_CODE_LABEL)
    if raw is None:
        return 0
    try:
        return int(raw)
    except ValueError:
        return 0
