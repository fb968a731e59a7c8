"""Binpack: prefer the most allocated node (Kubernetes MostAllocated, Volcano binpack).

score(node) = MAX_SCORE x (capacity - free_after) / capacity, with free_after = free - request:
the fuller the node after placing the worker, the higher. A node that the worker fills exactly
scores MAX_SCORE.
"""

from __future__ import annotations

import numpy as np

from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import MAX_SCORE, ClassScore, FloatArray, IntArray
from kant.framework.registry import register_plugin

NAME = "binpack"


def most_allocated(capacity: IntArray, free: IntArray, request: int) -> FloatArray:
    """Pure scoring function: MAX_SCORE x (capacity - (free - request)) / capacity."""
    cap = np.maximum(capacity, 1)
    return MAX_SCORE * (capacity - (free - request)) / cap


@register_plugin
class Binpack(ClassScore):
    NAME = NAME
    #: the score depends only on the node's GPU capacity and free GPUs (see docs/architecture.md)

    def score_classes(self, env: SchedulerEnv, gpus: int, capacity: IntArray, free: IntArray) -> FloatArray:
        """The score of nodes with these capacities and free GPUs, for a worker of ``gpus`` GPUs."""
        return most_allocated(capacity, free, gpus)

    def score(self, ctx: CycleContext, job: int, nodes: IntArray) -> FloatArray:
        g = int(ctx.env.jobs.gpus_per_worker[job])
        return most_allocated(ctx.env.cluster.gpus[nodes], ctx.state.free[nodes], g)
