"""SJF queue order: shortest job first by *true* duration (an oracle baseline, not a real policy).

key(job) = duration(job) in seconds; lower first, so the job with the least work goes first (ties:
submit time, then job row). A scheduler never knows true durations: use this line as the upper
bound that QSSF (``qssf``, with a runtime estimator) and backfill are compared against. It reads the
simulated workload's durations (``env.trace``), so a live scheduler refuses it.
"""

from __future__ import annotations

from kant.framework.context import SchedulerEnv
from kant.framework.plugin import QueueSort
from kant.framework.registry import register_plugin

NAME = "sjf"


@register_plugin
class Sjf(QueueSort):
    NAME = NAME

    def setup(self, env: SchedulerEnv) -> None:
        self._duration = env.require_trace(NAME, "it orders jobs by their true run times").duration

    def key(self, env: SchedulerEnv, job: int, now: float) -> float:
        return float(self._duration[job])
