"""Best-fit (``best-fit``, a Score plugin): the classic best-fit baseline, prefer the node left with
the fewest free GPUs after placement.

score(node) = MAX_SCORE x (C - free_after) / C, with free_after = free - request and C the largest
node GPU capacity in the cluster (0 for a cluster without GPUs: then every score is 0). The node with
the smallest ``free_after`` wins; ties go to the lowest node index.

How it differs from ``binpack`` (Kubernetes MostAllocated): binpack scores the *fraction* of the node
allocated after placement, ``(capacity - free_after) / capacity``; best-fit scores the *absolute*
GPUs left over. On a homogeneous cluster they rank nodes the same. On heterogeneous nodes they
differ: for a 2-GPU request, a 16-GPU node with 4 free ends with 2 free (binpack 87.5, fraction
14/16) and a 4-GPU node with 3 free ends with 1 free (binpack 75, fraction 3/4); binpack picks the
big node, best-fit the small one (least leftover).
"""

from __future__ import annotations

import numpy as np

from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import MAX_SCORE, ClassScore, FloatArray, IntArray
from kant.framework.registry import register_plugin

__all__ = ["BestFit", "best_fit"]

NAME = "best-fit"


def best_fit(free: IntArray, request: int, max_capacity: int) -> FloatArray:
    """Pure scoring function: MAX_SCORE x (max_capacity - (free - request)) / max_capacity."""
    if max_capacity <= 0:
        return np.zeros(len(free), dtype=np.float64)
    result: FloatArray = MAX_SCORE * (max_capacity - (free - request)) / max_capacity
    return result


@register_plugin
class BestFit(ClassScore):
    NAME = NAME
    _max_capacity: int = -1  # set by setup(); -1 = not yet known
    #: the score depends only on the node's free GPUs (see docs/architecture.md)

    def setup(self, env: SchedulerEnv) -> None:
        self._max_capacity = int(env.cluster.gpus.max())

    def score_classes(self, env: SchedulerEnv, gpus: int, capacity: IntArray, free: IntArray) -> FloatArray:
        """The score of nodes with these capacities and free GPUs, for a worker of ``gpus`` GPUs."""
        if self._max_capacity < 0:
            self.setup(env)
        return best_fit(free, gpus, self._max_capacity)

    def score(self, ctx: CycleContext, job: int, nodes: IntArray) -> FloatArray:
        if self._max_capacity < 0:
            self.setup(ctx.env)
        g = int(ctx.env.jobs.gpus_per_worker[job])
        return best_fit(ctx.state.free[nodes], g, self._max_capacity)
