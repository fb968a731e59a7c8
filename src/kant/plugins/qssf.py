"""QSSF queue order (Helios): quasi-shortest-service-first by *estimated* GPU time.

key(job) = env.estimate(job) x total GPUs(job): the predicted run time (the ``runtime-estimator``
plugin's prediction when the policy lists it; else the estimate column, else the true duration) times
the gang size. Lower first; a CPU-only job has key 0. The key is computed when the job is queued
(as Helios prioritises a job at submission, from the history known then) and not revised while it
waits.
"""

from __future__ import annotations

from kant.framework.context import SchedulerEnv
from kant.framework.plugin import QueueSort
from kant.framework.registry import register_plugin

NAME = "qssf"


@register_plugin
class Qssf(QueueSort):
    NAME = NAME

    def key(self, env: SchedulerEnv, job: int, now: float) -> float:
        return env.estimate(job) * float(env.jobs.total_gpus[job])
