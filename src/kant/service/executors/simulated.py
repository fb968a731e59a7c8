"""The simulated executor: a started job "runs" for its declared ``duration_s`` of service time and
then finishes (exit code 0, or the code in its label ``kant.io/sim-exit-code``: a test aid). Nothing
is executed. With an accelerated clock a trace replays into the live service (``kant serve --demo
philly --speed 3600``); with the manual clock it gives the simulator's results exactly.

After a restart the runs the database says are running continue: each ends at its start plus its
duration, as if the service had never stopped.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence

from kant.model.cluster import NodeSpec
from kant.service.executors.base import LOCAL_HOST, ExecEvent, ExecutorSettings, Launch, LogChunk, NodeEvent, StopWhy

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

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, int]] = []  # (end, seq, job, run)
        self._runs: dict[int, Launch] = {}  # job -> its current run
        self._seq = 0

    def set_waker(self, wake: Callable[[], None]) -> None:
        """Events come from the clock only: nothing to wake."""

    def start(self, launch: Launch) -> None:
        self._runs[launch.job_id] = launch
        d = launch.duration_s
        if d is not None and math.isfinite(d):
            heapq.heappush(self._heap, (launch.start + max(d, 0.0), self._seq, launch.job_id, launch.run))
            self._seq += 1

    def stop(self, job_id: int, why: StopWhy = "cancel") -> None:
        self._runs.pop(job_id, None)  # its heap entry goes stale

    def host(self, node: str) -> str:
        """Every simulated node is this machine."""
        return LOCAL_HOST

    def restore(self, launches: Sequence[Launch]) -> None:
        for launch in sorted(launches, key=lambda x: (x.start, x.job_id)):
            self.start(launch)

    def _valid(self, job: int, run: int) -> bool:
        cur = self._runs.get(job)
        return cur is not None and cur.run == run

    def next_time(self) -> float:
        heap = self._heap
        while heap and not self._valid(heap[0][2], heap[0][3]):
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def poll(self, now: float) -> list[ExecEvent]:
        out: list[ExecEvent] = []
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
        """Nothing runs, so there is no output."""
        return None

    def close(self) -> None:
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
