"""Long jobs of one shape that the EASY walk passed over, kept between cycles (:class:`LongRun`,
owned by :class:`kant.actions.backfill.easy.EasyCycle`)."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["LongRun"]


class LongRun:
    """Jobs of one shape the walk passed over as long, kept between cycles: the jobs at consecutive
    positions of the shape's list from ``start`` (see :meth:`PendingQueue.position_base`), their keys
    and their smallest estimate. While the positions hold the same jobs (the queue reports edits,
    :meth:`PendingQueue.watch_edits`) and ``now + min_est > shadow``, every one of them is still long,
    so the walk passes over those ahead of the next shape's key in one step instead of one by one.

    Only for static estimates (no runtime estimator): a job's estimate and key never change."""

    __slots__ = ("jobs", "keys", "min_est", "start")

    def __init__(self, start: int) -> None:
        self.start = start
        self.jobs: list[int] = []
        self.keys: list[tuple[float, ...]] = []
        self.min_est = math.inf

    def cut(self, low: int, estimate: Callable[[int], float]) -> None:
        """Positions from ``low`` on may hold other jobs now: forget them."""
        keep = max(0, low - self.start)
        if keep < len(self.jobs):
            del self.jobs[keep:], self.keys[keep:]
            self.min_est = min(map(estimate, self.jobs), default=math.inf)

    def cut_short(self, now: float, shadow: float, estimate: Callable[[int], float]) -> None:
        """Keep only the jobs before the first that is not long at ``now`` (``now + estimate <=
        shadow``)."""
        jobs = self.jobs
        for k, job in enumerate(jobs):
            if now + estimate(job) <= shadow:
                del jobs[k:], self.keys[k:]
                self.min_est = min(map(estimate, jobs), default=math.inf)
                return
