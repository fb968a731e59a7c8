"""Runtime estimator: predict a job's run time from the jobs that have already finished (Helios QSSF).

Installs itself as ``env.estimator``, so everything that asks ``env.estimate(job)`` (backfill
reservations, the ``qssf`` queue order, the scheduler's ``expected_end``) gets its prediction instead
of the trace's estimate column.

Rule: the prediction for job ``j`` is the first of these ``levels`` (in the configured order) that
has an answer:

* ``user-gpus``: the ``statistic`` (median or mean) of the run times of the last ``history`` finished
  jobs of ``j``'s user with the same total GPU count, if there are at least ``min_samples``;
* ``user``: the same over the user's finished jobs of any size;
* ``tenant-gpus`` / ``tenant``: the same for ``j``'s tenant;
* ``estimate``: ``j``'s own estimate column, if it has one (user-supplied, job-specific);
* ``global``: the same statistic over the last ``history`` finished jobs of anyone;

and ``default_s`` when none has. The default order puts the job's own estimate after the user's
history and before the tenant and global averages. A job's run time is learned when it finishes
(``job_stopped`` with ``finished=True``), so a prediction made at time ``t`` only uses jobs that had
finished by ``t``: no future leakage. Run times are what the driver reports when a job finishes
(the store's ``runtime``: the simulator reports the job's work at full speed).

``estimates_used(sim)`` returns, per job, the prediction in force when the job first started (NaN if
it never started), for ``summarize(result, estimates=...)``'s JTTED.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from kant.framework.context import SchedulerEnv
from kant.framework.plugin import JobListener, PluginLookup
from kant.framework.registry import register_plugin
from kant.model.state import Placement
from kant.model.store import grow

__all__ = ["RuntimeEstimator", "RuntimeEstimatorArgs", "estimates_used"]

NAME = "runtime-estimator"

Level = Literal["user-gpus", "user", "tenant-gpus", "tenant", "estimate", "global"]
_HISTORY_LEVELS = ("user-gpus", "user", "tenant-gpus", "tenant", "global")


class RuntimeEstimatorArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    history: int = Field(default=10, ge=1)
    statistic: Literal["median", "mean"] = "median"
    min_samples: int = Field(default=1, ge=1)
    levels: tuple[Level, ...] = Field(default=("user-gpus", "user", "estimate", "tenant", "global"), min_length=1)
    default_s: float = Field(default=3600.0, ge=0, allow_inf_nan=False)


class _History:
    """The last ``size`` run times under one key and their statistic, kept up to date on insert."""

    __slots__ = ("stat", "values")

    def __init__(self, size: int) -> None:
        self.values: deque[float] = deque(maxlen=size)
        self.stat = math.nan

    def add(self, value: float, median: bool) -> None:
        self.values.append(value)
        if median:
            ordered = sorted(self.values)
            n = len(ordered)
            mid = n // 2
            self.stat = ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2
        else:
            self.stat = math.fsum(self.values) / len(self.values)


@register_plugin
class RuntimeEstimator(JobListener):
    NAME = NAME
    Args = RuntimeEstimatorArgs

    def setup(self, env: SchedulerEnv) -> None:
        args = self.args
        assert isinstance(args, RuntimeEstimatorArgs)
        jobs = env.jobs
        self._args = args
        self._median = args.statistic == "median"
        self._user = jobs.list_of("user")
        self._tenant = jobs.list_of("tenant")
        self._gpus = jobs.list_of("total_gpus")
        self._estimate = jobs.list_of("user_estimate")
        self._runtime = jobs.list_of("runtime")
        self._tables: dict[str, dict[object, _History]] = {level: {} for level in _HISTORY_LEVELS}
        self._at_start = np.full(len(jobs), np.nan)
        self._n = len(jobs)
        env.estimator = self.predict

    def jobs_added(self, env: SchedulerEnv, start: int) -> None:
        self._n = len(env.jobs)
        self._at_start = grow(self._at_start, self._n, np.nan)

    @property
    def at_start(self) -> npt.NDArray[np.float64]:
        """Per job: the prediction when it first started (NaN: never started)."""
        return self._at_start[: self._n]

    def _key(self, level: str, job: int) -> object:
        if level == "user-gpus":
            return (self._user[job], self._gpus[job])
        if level == "user":
            return self._user[job]
        if level == "tenant-gpus":
            return (self._tenant[job], self._gpus[job])
        if level == "tenant":
            return self._tenant[job]
        return None  # global

    def predict(self, job: int) -> float:
        """The run-time prediction for ``job`` from the history learned so far."""
        args = self._args
        for level in args.levels:
            if level == "estimate":
                est = self._estimate[job]
                if est == est:
                    return float(est)
                continue
            hist = self._tables[level].get(self._key(level, job))
            if hist is not None and len(hist.values) >= args.min_samples:
                return float(hist.stat)
        return args.default_s

    def job_started(self, env: SchedulerEnv, job: int, now: float, placement: Placement) -> None:
        if self._at_start[job] != self._at_start[job]:
            self._at_start[job] = self.predict(job)

    def job_stopped(self, env: SchedulerEnv, job: int, now: float, placement: Placement, finished: bool) -> None:
        if not finished:
            return
        value = self._runtime[job]
        if not math.isfinite(value):
            return
        size = self._args.history
        for level in _HISTORY_LEVELS:
            table = self._tables[level]
            key = self._key(level, job)
            hist = table.get(key)
            if hist is None:
                hist = table[key] = _History(size)
            hist.add(value, self._median)


def estimates_used(obj: PluginLookup) -> npt.NDArray[np.float64]:
    """Per job, the runtime prediction in force at its first start (NaN: never started), from a
    finished Simulator or Scheduler whose policy lists ``runtime-estimator``. Pass it to
    ``summarize(result, estimates=...)`` to get the estimator's JTTED."""
    plugin = obj.plugin(RuntimeEstimator)
    if plugin is not None:
        return plugin.at_start.copy()
    raise ValueError("the policy has no runtime-estimator plugin")
