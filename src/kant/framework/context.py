"""What plugins and actions see: the run-wide environment and the per-cycle context."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt

from kant.errors import ConfigError
from kant.framework.queue import PendingQueue
from kant.framework.replay import ReleaseReplay
from kant.framework.statement import Statement
from kant.framework.status import Status
from kant.model.cluster import Cluster
from kant.model.job import JobTable
from kant.model.state import ClusterState, Placement
from kant.model.store import JobStore

__all__ = ["SchedulerEnv", "CycleContext", "RunningJob"]

BoolArray = npt.NDArray[np.bool_]


class SchedulerEnv:
    """Run-wide, read-mostly inputs: cluster, jobs, a seeded RNG, and cached per-type node masks.

    ``jobs`` is the :class:`~kant.model.store.JobStore` (a :class:`JobTable` is turned into one with
    :meth:`JobStore.from_table`). ``estimate(job)`` gives the run time that reservations use
    (backfill): a runtime estimator's prediction when a policy installs one, else the store's
    ``estimate`` column. ``trace`` is the whole workload when a simulator drives the scheduler (for
    oracle baselines and quotas derived from a trace); a live scheduler has none.
    """

    def __init__(self, cluster: Cluster, jobs: JobStore | JobTable, seed: int = 0,
                 trace: JobTable | None = None) -> None:
        if isinstance(jobs, JobTable):
            trace = jobs if trace is None else trace
            jobs = JobStore.from_table(jobs)
        self.cluster = cluster
        self.jobs: JobStore = jobs
        self.trace = trace
        self.seed = seed
        if seed < 0:  # what numpy's generator refuses, refused here and not at a first draw
            raise ValueError(f"seed must be a non-negative integer, got {seed}")
        self.estimator: Callable[[int], float] | None = None
        self._type_masks: dict[int, BoolArray] = {}
        self._type_codes: dict[int, list[int]] = {}
        # the store's columns as its Python lists (they grow with it): estimate reads one job's
        self._estimates: list[float] = jobs.list_of("estimate")
        self._time_limits: list[float] = jobs.list_of("time_limit")
        self.cpu_unmodelled = cluster.cpu_milli == 0
        self.mem_unmodelled = cluster.memory_mib == 0
        #: the release log's returns per request kind, replayed once for every failure memo of the run
        self.release_replay = ReleaseReplay()

    @cached_property
    def rng(self) -> np.random.Generator:
        """The run's seeded generator, made at its first use (a run that draws nothing does not
        import numpy.random)."""
        return np.random.default_rng(self.seed)

    def nodes_of_type(self, type_code: int) -> BoolArray:
        """Mask of nodes a job with ``gpu_type`` code may use. A job-side type name may list
        several allowed types separated by ``|`` (e.g. ``V100M16|V100M32``)."""
        mask = self._type_masks.get(type_code)
        if mask is None:
            mask = np.isin(self.cluster.gpu_type, self.cluster_types_of(type_code))
            mask.setflags(write=False)
            self._type_masks[type_code] = mask
        return mask

    def cluster_types_of(self, type_code: int) -> list[int]:
        """Cluster GPU-type codes a job-side type code allows (empty if no node has them)."""
        codes = self._type_codes.get(type_code)
        if codes is None:
            allowed = self.jobs.gpu_type_names[type_code].split("|")
            codes = sorted({c for c in (self.cluster.gpu_type_code(t.strip()) for t in allowed) if c >= 0})
            self._type_codes[type_code] = codes
        return codes

    def default_estimates(self) -> list[float]:
        """Every job's :meth:`estimate` without an estimator (the store's ``estimate`` column), as the
        store's own list: for callers that read many."""
        return self.jobs.list_of("estimate")

    def estimate(self, job: int) -> float:
        """The run time to plan ``job`` with: the estimator's or the store's estimate, never more than
        the job's time limit (it is stopped there)."""
        est = self.estimator(job) if self.estimator is not None else self._estimates[job]
        return min(est, self._time_limits[job])

    def require_trace(self, who: str, why: str) -> JobTable:
        """The simulated workload, for ``who`` (a plugin) that needs it for ``why``; a clear error
        in a live scheduler, which knows no future and no true run times."""
        if self.trace is None:
            raise ConfigError(f"{who} plugin", "", f"{why}, which only a simulation knows; not usable live")
        return self.trace


@dataclass(slots=True)
class RunningJob:
    start: float  # start of the current run
    expected_end: float  # start + estimated remaining run time (what reservations use)


@dataclass(slots=True)
class CycleContext:
    """One scheduling cycle: the state to change (through ``statement``), the queue, the time."""

    env: SchedulerEnv
    state: ClusterState
    queue: PendingQueue
    now: float
    running: dict[int, RunningJob]
    statement: Statement
    started: list[tuple[int, Placement]] = field(default_factory=list)
    evicted: list[tuple[int, Placement]] = field(default_factory=list)
    #: running elastic jobs resized in this cycle: (job, placement before, placement after)
    resized: list[tuple[int, Placement, Placement]] = field(default_factory=list)
    reasons: dict[int, Status] = field(default_factory=dict)  # shape id -> last failure
    wakeups: list[float] = field(default_factory=list)

    def on(self, state: ClusterState) -> CycleContext:
        """This cycle as if its cluster state were ``state`` (a planning copy): every other field the
        same object (``dataclasses.replace(self, state=state)``, through the constructor: a fifth of
        its cost)."""
        return CycleContext(self.env, state, self.queue, self.now, self.running, self.statement, self.started,
                            self.evicted, self.resized, self.reasons, self.wakeups)

    def wake_at(self, time: float) -> None:
        """Ask the driver for another cycle at ``time`` even if nothing else happens by then
        (round-based policies, a reservation that needs re-checking)."""
        if time > self.now:
            self.wakeups.append(time)
