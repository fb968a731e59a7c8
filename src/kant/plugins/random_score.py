"""Random (``random``, a Score plugin): a baseline that ranks candidate nodes at random.

score(node) = MAX_SCORE x u, with u drawn uniformly from [0, 1) for every candidate node on every
call, from the run's seeded generator ``env.rng`` (so a run is reproducible with its seed). Ties
(probability zero) go to the lowest node index, as for every score. Alone in a policy this is a
random-fit placement: each worker goes to a uniformly random node among those where it fits.
"""

from __future__ import annotations

from kant.framework.context import CycleContext
from kant.framework.plugin import MAX_SCORE, FloatArray, IntArray, Score
from kant.framework.registry import register_plugin

__all__ = ["RandomScore"]

NAME = "random"


@register_plugin
class RandomScore(Score):
    NAME = NAME

    def score(self, ctx: CycleContext, job: int, nodes: IntArray) -> FloatArray:
        result: FloatArray = MAX_SCORE * ctx.env.rng.random(len(nodes))
        return result
