"""A discrete-event kernel: a clock and a heap keyed by (time, priority, sequence).

It knows nothing about GPUs or jobs. Ties break deterministically: lower ``priority`` first, then
the order events were scheduled. Scheduling an event in the past is an error, loudly.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

__all__ = ["EventKernel"]

Handler = Callable[[Any], None]


class EventKernel:
    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self._heap: list[tuple[float, int, int, Handler, Any]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, time: float, priority: int, handler: Handler, payload: Any = None) -> None:
        if time < self.now:
            raise ValueError(f"cannot schedule an event at {time} before now ({self.now})")
        if math.isnan(time):
            raise ValueError("event time is NaN")
        heapq.heappush(self._heap, (time, priority, self._seq, handler, payload))
        self._seq += 1

    @property
    def heap(self) -> list[tuple[float, int, int, Handler, Any]]:
        """The pending events, a heap of ``(time, priority, sequence, handler, payload)`` (read only:
        a driver loop may look at ``heap[0][0]`` for the next event time without a call)."""
        return self._heap

    def peek_time(self) -> float:
        """Time of the next event, or +inf if none."""
        return self._heap[0][0] if self._heap else math.inf

    def run_due(self, time: float) -> int:
        """Advance the clock to ``time`` and fire every event due at it; returns how many fired."""
        if time < self.now:
            raise ValueError(f"time goes backwards: {time} < {self.now}")
        self.now = time
        heap = self._heap
        fired = 0
        while heap and heap[0][0] <= time:
            _, _, _, handler, payload = heapq.heappop(heap)
            handler(payload)
            fired += 1
        return fired
