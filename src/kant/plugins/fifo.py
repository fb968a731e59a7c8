"""FIFO queue order: earlier submit first (the runner's final tie-break is the job row)."""

from __future__ import annotations

import numpy as np

from kant.framework.context import SchedulerEnv
from kant.framework.plugin import FloatArray, IntArray, QueueSort
from kant.framework.registry import register_plugin

NAME = "fifo"


@register_plugin
class Fifo(QueueSort):
    NAME = NAME

    def key(self, env: SchedulerEnv, job: int, now: float) -> float:
        return float(env.jobs.submit.item(job))

    def keys(self, env: SchedulerEnv, jobs: IntArray, now: float) -> FloatArray:
        return env.jobs.submit[jobs].astype(np.float64)
