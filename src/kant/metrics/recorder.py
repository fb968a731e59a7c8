"""Append-only recording on the simulator's hot path; everything else is computed afterwards.

The recorder keeps one row per job (start, end, status, GPU-seconds held, topology span) and one
sample of the cluster per distinct event time (taken after that instant's scheduling cycle). A
sample holds from its time until the next sample's time: the series are step functions. The number of
down GPU nodes is recorded apart, at each change (node failures and repairs are rare; a scan of the
nodes at every sample would not be cheap).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from enum import IntEnum
from struct import Struct
from typing import Any

import numpy as np
import numpy.typing as npt

from kant.metrics.occupancy import down_nodes
from kant.model.cluster import Cluster
from kant.model.job import JobTable
from kant.model.scalars import ScalarView, scalar_view
from kant.model.state import ClusterState, Placement

__all__ = ["Closed", "JobStatus", "Recorder", "SimResult", "SERIES"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class JobStatus(IntEnum):
    PENDING = 0  # still waiting when the run ended (should not happen when a run drains)
    FINISHED = 1
    UNSCHEDULABLE = 2  # can never run on this cluster under this policy; see reasons
    RUNNING = 3  # still running when the run ended (inference services, or a time limit)
    STOPPED = 4  # withdrawn by its owner (an inference replica scaled down), neither finished nor preempted


_RUNNING, _FINISHED, _PENDING = int(JobStatus.RUNNING), int(JobStatus.FINISHED), int(JobStatus.PENDING)
#: the recorder's per-job arrays written at each start and stop (see Recorder._mv)
_PER_JOB = ("first_start", "last_start", "end", "status", "runs", "gpu_seconds", "run_seconds", "span_nodes",
            "span_leaves", "span_spines")

#: cluster time-series columns, one value per sample
SERIES = (
    "allocated_gpus",  # GPUs held by jobs
    "down_gpus",  # GPUs on failed nodes
    "partial_nodes",  # up GPU nodes with 0 < allocated < capacity
    "free_on_partial",  # free GPUs on those nodes
    "empty_nodes",  # up GPU nodes with nothing allocated
    "queue_len",  # jobs waiting
    "pending_gpus",  # GPUs those jobs ask for
    "running_jobs",
)
#: one sample's values as the bytes ``Recorder._values`` holds (native ``q``, as the array's items):
#: appended with one ``frombytes``, not one array item write per value
_pack_sample = Struct(f"{len(SERIES)}q").pack


@dataclass(frozen=True, slots=True)
class Closed:
    """What :meth:`Recorder.close` gives a run's result: per job, as of the run's end."""

    gpu_seconds: FloatArray
    run_seconds: FloatArray
    status: IntArray


@dataclass
class Recorder:
    n_jobs: int
    first_start: FloatArray = field(init=False)
    last_start: FloatArray = field(init=False)
    end: FloatArray = field(init=False)
    status: IntArray = field(init=False)
    runs: IntArray = field(init=False)
    preemptions: IntArray = field(init=False)
    resizes: IntArray = field(init=False)  # elastic jobs: resizes of a running job (kant.actions.elastic)
    gpu_seconds: FloatArray = field(init=False)
    run_seconds: FloatArray = field(init=False)
    span_nodes: IntArray = field(init=False)
    span_leaves: IntArray = field(init=False)
    span_spines: IntArray = field(init=False)
    reasons: dict[int, str] = field(default_factory=dict)
    # samples, packed: 8 bytes per time and per value (a Python list would hold an object per value)
    _times: array = field(default_factory=lambda: array("d"))  # type: ignore[type-arg]
    _values: array = field(default_factory=lambda: array("q"))  # type: ignore[type-arg]  # len(SERIES) per sample
    # down GPU nodes from each time on (a change of node states), packed as the samples are
    _down_times: array = field(default_factory=lambda: array("d"))  # type: ignore[type-arg]
    _down_nodes: array = field(default_factory=lambda: array("q"))  # type: ignore[type-arg]

    def __post_init__(self) -> None:
        n = self.n_jobs
        self.first_start = np.full(n, np.nan)
        self.last_start = np.full(n, np.nan)
        self.end = np.full(n, np.nan)
        self.status = np.zeros(n, dtype=np.int64)
        self.runs = np.zeros(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.resizes = np.zeros(n, dtype=np.int64)
        self.gpu_seconds = np.zeros(n, dtype=np.float64)
        self.run_seconds = np.zeros(n, dtype=np.float64)
        self.span_nodes = np.zeros(n, dtype=np.int64)
        self.span_leaves = np.zeros(n, dtype=np.int64)
        self.span_spines = np.zeros(n, dtype=np.int64)
        # memoryviews of the per-job arrays (the same buffers): a scalar read or write through one
        # costs a third of the array's own, and each start and stop makes several
        self._mv: dict[str, ScalarView[Any]] = {name: scalar_view(getattr(self, name), object) for name in _PER_JOB}
        #: ``runs`` as a memoryview (the same buffer; for a driver's one-job reads)
        self.runs_view: ScalarView[int] = scalar_view(self.runs, int)

    # --- job events --------------------------------------------------------------------------
    def job_started(self, job: int, now: float, placement: Placement, cluster: Cluster) -> None:
        mv = self._mv
        runs = mv["runs"][job]
        if runs == 0:
            mv["first_start"][job] = now
            if len(placement.per_node) != 1:  # one node spans (1, 1, 1)
                nodes, leaves, spines = placement.span(cluster)
            else:
                nodes = leaves = spines = 1
            mv["span_nodes"][job] = nodes
            mv["span_leaves"][job] = leaves
            mv["span_spines"][job] = spines
        mv["last_start"][job] = now
        mv["runs"][job] = runs + 1
        mv["status"][job] = _RUNNING

    def job_stopped(self, job: int, now: float, placement: Placement, *, finished: bool) -> None:
        """A run ends: finished, or interrupted (preempted / node failure) and back in the queue."""
        mv = self._mv
        ran = now - mv["last_start"][job]
        gpu_seconds, run_seconds = mv["gpu_seconds"], mv["run_seconds"]
        gpu_seconds[job] = gpu_seconds[job] + ran * placement.total_gpus
        run_seconds[job] = run_seconds[job] + ran
        if finished:
            mv["end"][job] = now
            mv["status"][job] = _FINISHED
        else:
            self.preemptions[job] += 1
            mv["status"][job] = _PENDING

    def job_resized(self, job: int, now: float, before: Placement) -> None:
        """A running elastic job changed size: its GPU-seconds so far count at the old size, and its
        run goes on from ``now`` (neither a new run nor a preemption)."""
        ran = now - self.last_start.item(job)
        self.gpu_seconds[job] = self.gpu_seconds.item(job) + ran * before.total_gpus
        self.run_seconds[job] = self.run_seconds.item(job) + ran
        self.last_start[job] = now
        self.resizes[job] += 1

    def job_withdrawn(self, job: int, now: float, placement: Placement | None) -> None:
        """The driver withdrew the job (``Simulator.stop``): its run, if any, ends without finishing
        and without counting as a preemption."""
        if placement is not None:
            self.gpu_seconds[job] += (now - self.last_start[job]) * placement.total_gpus
            self.run_seconds[job] += now - self.last_start[job]
        self.status[job] = JobStatus.STOPPED

    def job_unschedulable(self, job: int, reason: str) -> None:
        self.status[job] = JobStatus.UNSCHEDULABLE
        self.reasons[job] = reason

    # --- cluster samples ---------------------------------------------------------------------
    def sample(self, now: float, state: ClusterState, queue_len: int, pending_gpus: int) -> None:
        times = self._times
        values = self._values
        if times and times[-1] == now:  # a later sample of the same instant replaces the earlier one
            times.pop()
            del values[-len(SERIES):]
        times.append(now)
        values.frombytes(_pack_sample(state.allocated_gpus, state.down_gpus, state.partial_nodes,
                                      state.free_on_partial, state.empty_nodes, queue_len, pending_gpus,
                                      len(state.allocations)))

    def nodes_down(self, now: float, state: ClusterState) -> None:
        """Node states changed at ``now`` (a failure, a repair): record how many GPU nodes are down from
        then on (a later change at the same instant replaces the earlier one)."""
        times = self._down_times
        if times and times[-1] == now:
            times.pop()
            self._down_nodes.pop()
        times.append(now)
        self._down_nodes.append(down_nodes(state))

    def close(self, now: float, state: ClusterState) -> Closed:
        """End of a run at ``now``: the GPU-seconds, run seconds and status of every job as of then
        (copies; jobs still running accrued to ``now`` and marked RUNNING). The recorder itself is
        left as it was, so a later ``Simulator.run`` goes on from here without counting twice."""
        gpu_seconds, run_seconds, status = self.gpu_seconds.copy(), self.run_seconds.copy(), self.status.copy()
        for job, placement in state.allocations.items():
            gpu_seconds[job] += (now - self.last_start[job]) * placement.total_gpus
            run_seconds[job] += now - self.last_start[job]
            status[job] = JobStatus.RUNNING
        return Closed(gpu_seconds, run_seconds, status)

    def times(self) -> FloatArray:
        return np.frombuffer(self._times, dtype=np.float64).copy() if self._times else np.zeros(0)

    def series(self) -> dict[str, IntArray]:
        if not self._times:
            return {name: np.zeros(0, dtype=np.int64) for name in SERIES}
        table = np.frombuffer(self._values, dtype=np.int64).reshape(-1, len(SERIES))
        return {name: table[:, k].copy() for k, name in enumerate(SERIES)}

    def down_node_changes(self) -> tuple[FloatArray, IntArray]:
        """(times, down GPU nodes from each time on) of the node state changes recorded."""
        return (np.asarray(self._down_times, dtype=np.float64).reshape(-1),
                np.asarray(self._down_nodes, dtype=np.int64).reshape(-1))


@dataclass
class SimResult:
    """Everything a run produced: inputs, per-job outcomes, and the cluster time series.

    ``times[k]`` is the k-th sample time; ``series[name][k]`` holds on ``[times[k], times[k+1])``,
    and the last sample holds until ``end_time``. ``down_nodes[i]`` GPU nodes are down from
    ``down_node_times[i]`` until the next change (none before the first).
    """

    policy: str
    cluster: Cluster
    jobs: JobTable
    first_start: FloatArray
    end: FloatArray
    status: IntArray
    runs: IntArray
    preemptions: IntArray
    gpu_seconds: FloatArray
    span_nodes: IntArray
    span_leaves: IntArray
    span_spines: IntArray
    reasons: dict[int, str]
    times: FloatArray
    series: dict[str, IntArray]
    end_time: float
    wall_seconds: float = 0.0
    events: int = 0
    cycles: int = 0
    seed: int = 0
    info: dict[str, object] = field(default_factory=dict)
    #: per job: seconds it held its placement over all runs (interrupted ones included); None when
    #: the producer did not record it (then derived from ``gpu_seconds`` where the job has GPUs)
    run_seconds: FloatArray | None = None
    #: times the number of down GPU nodes changed, and that number from each time on (none: no node was down)
    down_node_times: FloatArray = field(default_factory=lambda: np.zeros(0))
    down_nodes: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: per job: resizes of its running elastic gang (kant.actions.elastic); None when not recorded
    resizes: IntArray | None = None

    @classmethod
    def from_recorder(
        cls, rec: Recorder, closed: Closed, *, policy: str, cluster: Cluster, jobs: JobTable, end_time: float,
        **extra: object
    ) -> SimResult:
        """The result of a run that ended at ``end_time`` (``closed``: :meth:`Recorder.close`'s figures
        then); its arrays are copies, so a run that goes on later does not change it."""
        down_times, down = rec.down_node_changes()
        return cls(
            policy=policy,
            cluster=cluster,
            jobs=jobs,
            first_start=rec.first_start.copy(),
            end=rec.end.copy(),
            status=closed.status,
            runs=rec.runs.copy(),
            preemptions=rec.preemptions.copy(),
            resizes=rec.resizes.copy(),
            gpu_seconds=closed.gpu_seconds,
            run_seconds=closed.run_seconds,
            span_nodes=rec.span_nodes.copy(),
            span_leaves=rec.span_leaves.copy(),
            span_spines=rec.span_spines.copy(),
            reasons=dict(rec.reasons),
            times=rec.times(),
            series=rec.series(),
            down_node_times=down_times,
            down_nodes=down,
            end_time=end_time,
            **extra,  # type: ignore[arg-type]
        )
