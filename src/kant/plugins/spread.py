"""Spread: prefer the least allocated node (Kubernetes LeastAllocated, the default scheduler's
NodeResourcesFit strategy).

score(node) = MAX_SCORE x free_after / capacity, with free_after = free - request.
"""

from __future__ import annotations

import numpy as np

from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import MAX_SCORE, ClassScore, FloatArray, IntArray
from kant.framework.registry import register_plugin

NAME = "spread"


def least_allocated(capacity: IntArray, free: IntArray, request: int) -> FloatArray:
    """Pure scoring function: MAX_SCORE x (free - request) / capacity."""
    cap = np.maximum(capacity, 1)
    return MAX_SCORE * (free - request) / cap


@register_plugin
class Spread(ClassScore):
    NAME = NAME
    #: the score depends only on the node's GPU capacity and free GPUs (see docs/architecture.md)

    def score_classes(self, env: SchedulerEnv, gpus: int, capacity: IntArray, free: IntArray) -> FloatArray:
        """The score of nodes with these capacities and free GPUs, for a worker of ``gpus`` GPUs."""
        return least_allocated(capacity, free, gpus)

    def score(self, ctx: CycleContext, job: int, nodes: IntArray) -> FloatArray:
        g = int(ctx.env.jobs.gpus_per_worker[job])
        return least_allocated(ctx.env.cluster.gpus[nodes], ctx.state.free[nodes], g)
