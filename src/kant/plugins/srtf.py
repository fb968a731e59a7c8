"""SRTF queue order: shortest remaining time first by *true* duration (an oracle baseline).

key(job) = duration(job) - attained(job), where attained is the wall-clock time the job has run so
far, summed over all its runs (tracked as a job listener: start to stop of every run). Lower first.

The key only changes while a job runs, and a job re-enters the queue only after its stop has been
recorded (preemption, node failure), so the key computed when it is queued stays right while it
waits: the order is kept incrementally (``DYNAMIC = False``). This plugin only orders the queue;
*preemptive* SRTF also needs a preempt action that evicts a running job with more remaining time.
With checkpointing the simulator may redo lost work; attained time counts time run, not progress kept.
It reads the simulated workload's durations (``env.trace``), so a live scheduler refuses it.
"""

from __future__ import annotations

import numpy as np

from kant.framework.context import SchedulerEnv
from kant.framework.plugin import JobListener, QueueSort
from kant.framework.registry import register_plugin
from kant.model.state import Placement

NAME = "srtf"


@register_plugin
class Srtf(QueueSort, JobListener):
    NAME = NAME

    def setup(self, env: SchedulerEnv) -> None:
        self._duration = env.require_trace(NAME, "it orders jobs by their true remaining run times").duration
        n = len(env.jobs)
        self.attained = np.zeros(n)
        self._since = np.full(n, np.nan)

    def job_started(self, env: SchedulerEnv, job: int, now: float, placement: Placement) -> None:
        self._since[job] = now

    def job_stopped(self, env: SchedulerEnv, job: int, now: float, placement: Placement, finished: bool) -> None:
        since = self._since[job]
        if since == since:
            self.attained[job] += now - since
            self._since[job] = np.nan

    def key(self, env: SchedulerEnv, job: int, now: float) -> float:
        return float(self._duration[job]) - float(self.attained[job])
