"""Tiresias 2D-LAS: least attained service first, discretised into priority queues.

After Tiresias (Gu et al., NSDI 2019), "Discretized 2D-LAS". A job's *attained service* is
``GPUs x seconds it has run`` summed over all its runs (the "2D" of 2D-LAS: spatial x temporal).
The thresholds ``thresholds_gpu_s = [T1, T2, ...]`` (increasing) cut service into queues:

    level(job) = number of thresholds <= service(job)      (queue 0 = least service = highest priority)

Queue order (``key``): lower level first; within a level the runner's tie-break (submit time, then
job row) makes it FIFO, as in Tiresias. The key is ``DYNAMIC`` (a job's level changes as it runs and
by promotion).

Starvation prevention (Tiresias' ``PromoteKnob``): a pending job that has already run and has waited
since its last run for at least ``starvation_factor x`` its total run time (seconds) is promoted to
queue 0. When a promoted job starts again its service count restarts from zero (``service = attained
- attained at promotion``), so it must earn the thresholds again before it is demoted; the
attained-service total is kept for reports. ``starvation_factor: null`` turns promotion off.

Preemption (jobs in lower-priority queues preempted by waiting jobs in higher queues at round
boundaries) is done by the ``preempt`` action with ``rank_by: tiresias-las`` and ``round_s``: it asks
this plugin for :meth:`TiresiasLas.rank` (``-level``, running jobs' service counted up to now) and
never preempts for a job of the same or a lower queue.

Defaults: ``thresholds_gpu_s = [3600, 7200, 18000]`` (the multi-queue example in the Tiresias
simulator's documentation), ``starvation_factor = 8`` (kant's choice; Tiresias leaves the knob to
the operator).
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, field_validator

from kant.framework.context import SchedulerEnv
from kant.framework.plugin import JobListener, QueueSort, Rank
from kant.framework.registry import register_plugin
from kant.model.scalars import scalar_view
from kant.model.state import Placement
from kant.model.store import grow

__all__ = ["NAME", "TiresiasArgs", "TiresiasLas"]

NAME = "tiresias-las"

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class TiresiasArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    thresholds_gpu_s: list[float] = Field(default_factory=lambda: [3600.0, 7200.0, 18000.0], min_length=1)
    starvation_factor: float | None = Field(default=8.0, gt=0.0)

    @field_validator("thresholds_gpu_s")
    @classmethod
    def _increasing(cls, v: list[float]) -> list[float]:
        if any(x <= 0 for x in v) or any(b <= a for a, b in itertools.pairwise(v)):
            raise ValueError("thresholds must be positive and strictly increasing")
        return v


@register_plugin
class TiresiasLas(QueueSort, JobListener, Rank):
    NAME = NAME
    Args = TiresiasArgs
    DYNAMIC = True
    WAITING_KEYS = True
    RANK_IS_MINUS_KEY = True  # rank() is -levels(), key() the level (the same rule, see key)

    def setup(self, env: SchedulerEnv) -> None:
        args = self.args
        assert isinstance(args, TiresiasArgs)
        n = len(env.jobs)
        self.thresholds = np.asarray(args.thresholds_gpu_s, dtype=np.float64)
        # the same values as Python floats: bisect_right of one value is searchsorted(side="right")
        self._thresholds: list[float] = self.thresholds.tolist()
        self.factor = args.starvation_factor
        self.attained = np.zeros(n, dtype=np.float64)  # GPU-seconds over finished runs
        self.executed = np.zeros(n, dtype=np.float64)  # seconds run, over finished runs
        self.offset = np.zeros(n, dtype=np.float64)  # attained service at the last promotion
        self.run_start = np.full(n, np.nan)  # start of the current run (NaN: not running)
        self.run_gpus = np.zeros(n, dtype=np.float64)
        self.last_stop = env.jobs.submit.astype(np.float64).copy()  # end of the last run, or submit
        # the LAS queue of a job while it waits (before promotion): its service, attained - offset,
        # is fixed from its last stop (or arrival) to its next start, so it is counted there
        self.waiting_level = np.zeros(n, dtype=np.int64)
        self.promotions = 0
        self._take_views()

    def _take_views(self) -> None:
        """Memoryviews of the per-job arrays (:mod:`kant.model.scalars`) for the one-job reads and
        writes of each start, stop and key; taken again whenever the arrays are replaced."""
        self._attained = scalar_view(self.attained, float)
        self._executed = scalar_view(self.executed, float)
        self._offset = scalar_view(self.offset, float)
        self._run_start = scalar_view(self.run_start, float)
        self._run_gpus = scalar_view(self.run_gpus, float)
        self._last_stop = scalar_view(self.last_stop, float)
        self._waiting_level = scalar_view(self.waiting_level, int)

    def jobs_added(self, env: SchedulerEnv, start: int) -> None:
        n = len(env.jobs)
        for name, fill in (("attained", 0.0), ("executed", 0.0), ("offset", 0.0), ("run_start", np.nan),
                           ("run_gpus", 0.0), ("last_stop", 0.0)):
            setattr(self, name, grow(getattr(self, name), n, fill))
        self.waiting_level = grow(self.waiting_level, n, 0)
        self.last_stop[start:n] = env.jobs.submit[start:]
        self._take_views()

    # --- listening -----------------------------------------------------------------------------
    def job_started(self, env: SchedulerEnv, job: int, now: float, placement: Placement) -> None:
        ex = self._executed[job]  # _starving for one job, in Python floats (the same IEEE operations)
        if self.factor is not None and ex > 0 and now - self._last_stop[job] >= self.factor * ex:
            self._offset[job] = self._attained[job]
            self.promotions += 1
        self._run_start[job] = now
        self._run_gpus[job] = float(placement.total_gpus)

    def job_stopped(self, env: SchedulerEnv, job: int, now: float, placement: Placement, finished: bool) -> None:
        ran = now - self._run_start[job]  # in Python floats: the same IEEE operations
        attained = self._attained[job] + ran * placement.total_gpus
        self._attained[job] = attained
        executed = self._executed
        executed[job] = executed[job] + ran
        self._last_stop[job] = now
        self._run_start[job] = math.nan
        self._run_gpus[job] = 0.0
        # service() of a job not running: attained + 0.0 - offset, the same value
        self._waiting_level[job] = bisect_right(self._thresholds, attained - self._offset[job])

    # --- levels --------------------------------------------------------------------------------
    def _starving(self, jobs: IntArray, now: float) -> npt.NDArray[np.bool_]:
        if self.factor is None:
            return np.zeros(len(jobs), dtype=bool)
        ex = self.executed[jobs]
        return (ex > 0) & (now - self.last_stop[jobs] >= self.factor * ex)

    def service(self, jobs: IntArray, now: float) -> FloatArray:
        """Service counted for the queue level: attained GPU-seconds (including the current run of a
        running job) minus the attained service at the job's last promotion."""
        ran = now - self.run_start[jobs]
        ran[np.isnan(ran)] = 0.0  # not running (what nan_to_num does, without its generic checks)
        return self.attained[jobs] + ran * self.run_gpus[jobs] - self.offset[jobs]

    def levels(self, jobs: IntArray, now: float) -> IntArray:
        """LAS queue of each job (0 = highest priority); pending starving jobs are in queue 0."""
        pending = np.isnan(self.run_start[jobs])
        if pending.all():  # the queue's jobs (the queue order sorts them every cycle)
            return np.where(self._starving(jobs, now), 0, self.waiting_level[jobs])
        level = self.thresholds.searchsorted(self.service(jobs, now), side="right").astype(np.int64)
        if not pending.any():  # the running jobs (a preemption round's pool): none can starve
            return level
        return np.where(pending & self._starving(jobs, now), 0, level)

    def key(self, env: SchedulerEnv, job: int, now: float) -> float:
        start = self._run_start[job]
        running = start == start  # not NaN
        executed = self._executed[job]
        if (not running and self.factor is not None and executed > 0
                and now - self._last_stop[job] >= self.factor * executed):
            return 0.0
        service = self._attained[job] - self._offset[job]
        if running:
            service += (now - start) * self._run_gpus[job]
        return float(bisect_right(self._thresholds, service))

    def waiting_key(self, env: SchedulerEnv, job: int, now: float) -> tuple[float, float]:
        """A waiting job's level (:meth:`key`) is its ``waiting_level`` until it starves, then 0 for
        as long as it waits (the starvation test only turns true as time goes on). The time given is
        a little before the one the test turns true at (the key is asked again then)."""
        executed = self._executed[job]
        if self.factor is None or executed <= 0:
            return float(self._waiting_level[job]), math.inf
        last, limit = self._last_stop[job], self.factor * executed
        if now - last >= limit:
            return 0.0, math.inf
        at = last + limit
        return float(self._waiting_level[job]), at - 1e-9 * max(1.0, abs(at))

    def keys(self, env: SchedulerEnv, jobs: IntArray, now: float) -> FloatArray:
        return self.levels(jobs, now).astype(np.float64)

    def rank(self, env: SchedulerEnv, jobs: IntArray, now: float) -> FloatArray:
        """Preemption rank for the ``preempt`` action: higher = more important (``-level``)."""
        return -self.levels(jobs, now).astype(np.float64)

    def lowest(self) -> float:
        """The last queue's rank: no level is above the number of thresholds."""
        return -float(len(self._thresholds))
