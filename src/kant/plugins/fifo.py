"""FIFO queue order: earlier submit first (the runner's final tie-break is the job row)."""

from __future__ import annotations

from kant.framework.context import SchedulerEnv
from kant.framework.plugin import QueueSort
from kant.framework.registry import register_plugin

NAME = "fifo"


@register_plugin
class Fifo(QueueSort):
    NAME = NAME

    def key(self, env: SchedulerEnv, job: int, now: float) -> float:
        return float(env.jobs.submit[job])
