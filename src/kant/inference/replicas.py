"""Which replicas go first when an inference service scales down: one order for the simulated driver
(:mod:`kant.inference.unified`) and the live service's loop (:mod:`kant.service.live.scaling`).

Queued replicas go first (the newest first: they never served), then running ones, the most recently
started first (ties: the newest first), so the replicas that have been ready longest stay.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["scale_down_victims"]


def scale_down_victims(starts: Sequence[float | None], count: int) -> list[int]:
    """Positions of the ``count`` replicas to remove, first victim first. ``starts`` lists a service's
    replicas in the order they were added (oldest first), each with the start time of its run, or None
    while it waits in the queue."""
    def key(k: int) -> tuple[bool, float, int]:
        start = starts[k]
        return start is not None, -(start if start is not None else 0.0), -k

    return sorted(range(len(starts)), key=key)[:max(count, 0)]
