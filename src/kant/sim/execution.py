"""How long a job runs where it is placed, and what an interruption costs.

A gang whose workers span more than one leaf switch (or spine) communicates over slower links; the
model stretches its run time by ``1 + cross_leaf_penalty`` (or ``1 + cross_spine_penalty``) —
defaults 0, so placement does not change run time unless configured. A job that is interrupted
(preempted, or its node fails) keeps the work up to its last checkpoint (every
``checkpoint_interval_s`` of progress; ``None`` = no checkpoints: it restarts from scratch) and pays
``restart_cost_s`` when it starts again.

An elastic job (:mod:`kant.model.elastic`) resized by the scheduler (:mod:`kant.actions.elastic`)
checkpoints and restarts on its new workers: it keeps all its work and pays ``resize_cost_s``
(default 30 s) before it runs again, then runs at the speed of its new size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kant.model.cluster import Cluster
from kant.model.state import Placement

__all__ = ["ExecutionModel"]


@dataclass(frozen=True)
class ExecutionModel:
    cross_leaf_penalty: float = 0.0
    cross_spine_penalty: float = 0.0
    restart_cost_s: float = 0.0
    checkpoint_interval_s: float | None = None
    resize_cost_s: float = 30.0

    def __post_init__(self) -> None:
        if self.cross_leaf_penalty < 0 or self.cross_spine_penalty < 0 or self.restart_cost_s < 0:
            raise ValueError("penalties and restart cost must be >= 0")
        if not (self.resize_cost_s >= 0 and math.isfinite(self.resize_cost_s)):
            raise ValueError("resize_cost_s must be a number >= 0")
        if self.checkpoint_interval_s is not None and self.checkpoint_interval_s <= 0:
            raise ValueError("checkpoint_interval_s must be positive or None")

    def slowdown(self, cluster: Cluster, placement: Placement) -> float:
        """Run-time factor for a placement (1.0 = full speed)."""
        if len(placement.per_node) <= 1 or (self.cross_leaf_penalty == 0 and self.cross_spine_penalty == 0):
            return 1.0
        _, leaves, spines = placement.span(cluster)
        if spines > 1:
            return 1.0 + self.cross_spine_penalty
        if leaves > 1:
            return 1.0 + self.cross_leaf_penalty
        return 1.0

    def kept_progress(self, progress_s: float) -> float:
        """Work (seconds at full speed) that survives an interruption after ``progress_s`` of work."""
        if self.checkpoint_interval_s is None:
            return 0.0
        if math.isinf(progress_s):
            return progress_s
        return math.floor(progress_s / self.checkpoint_interval_s) * self.checkpoint_interval_s
