"""Priority queue order: higher ``priority`` first (Kubernetes PrioritySort, Volcano priority)."""

from __future__ import annotations

import numpy as np

from kant.framework.context import SchedulerEnv
from kant.framework.plugin import FloatArray, IntArray, QueueSort
from kant.framework.registry import register_plugin

NAME = "priority"


@register_plugin
class Priority(QueueSort):
    NAME = NAME

    def key(self, env: SchedulerEnv, job: int, now: float) -> float:
        return -float(env.jobs.priority.item(job))

    def keys(self, env: SchedulerEnv, jobs: IntArray, now: float) -> FloatArray:
        return -env.jobs.priority[jobs].astype(np.float64)
