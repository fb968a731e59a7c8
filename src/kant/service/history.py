"""The dashboard's time series of the live cluster: GAR, SOR, both GFR forms, the queue and the wait
percentiles, one sample per scheduling-loop turn at most every ``min_gap_s`` wall seconds.

The values are the loop's published :class:`~kant.service.live.view.LiveView` (the same numbers as
``/v1/cluster`` and ``/metrics``, docs/metrics.md at one instant). The wait percentiles are JWTD
(``first start - submit``) of the jobs whose first start fell in the sample's interval, summarised
with :meth:`kant.metrics.summary.Dist.of` (NumPy's linear interpolation, as the simulator's report).
Turns closer than ``min_gap_s`` to the last sample fold into it (its values become the newest; the
waits add up), so a busy loop costs one sample per ``min_gap_s``. At most ``maxlen`` samples are kept.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kant.metrics.summary import Dist

if TYPE_CHECKING:
    from kant.service.live.view import LiveView

__all__ = ["History"]


#: the fields of the loop's view a sample shows, besides every live metric (LiveView.metrics)
_FIELDS = ("queue_len", "pending_gpus", "allocated_gpus")


@dataclass(slots=True)
class _Sample:
    id: int  # the sample's number (kept when a turn folds into it)
    seq: int  # its version: the history's change count when it was last written
    view: LiveView  # the loop's published view (immutable)
    waits: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = Dist.of(self.waits)
        return {"id": self.id, "seq": self.seq, "t": self.view.now, **self.view.metrics,
                **{f: getattr(self.view, f) for f in _FIELDS},
                "wait": {"count": d.count, "p50": d.p50, "p90": d.p90, "p99": d.p99}}


class History:
    """Samples of the live view; written by the loop's thread, read by the API's (one lock)."""

    def __init__(self, maxlen: int = 3600, min_gap_s: float = 0.5) -> None:
        self.min_gap_s = min_gap_s
        self._samples: deque[_Sample] = deque(maxlen=maxlen)
        self._pending_waits: list[float] = []
        self._lock = threading.Lock()
        self._seq = 0
        self._last_wall = -float("inf")

    def wait(self, seconds: float) -> None:
        """A job's first start after ``seconds`` of waiting (the loop calls this as it starts one)."""
        with self._lock:
            self._pending_waits.append(seconds)

    def observe(self, view: LiveView) -> None:
        """The view the loop just published."""
        wall = time.monotonic()
        with self._lock:
            waits, self._pending_waits = self._pending_waits, []
            last = self._samples[-1] if self._samples else None
            if last is not None and (wall - self._last_wall < self.min_gap_s or last.view.now == view.now):
                waits = last.waits + waits
                self._samples.pop()
                sample_id = last.id
            else:
                self._last_wall = wall
                sample_id = last.id + 1 if last is not None else 1
            self._seq += 1
            self._samples.append(_Sample(sample_id, self._seq, view, waits))

    @property
    def seq(self) -> int:
        """The sequence number of the newest sample (0: none yet); it grows with every change."""
        return self._seq

    def since(self, after: int = 0) -> list[dict[str, Any]]:
        """Samples with ``seq > after``, oldest first (a sample that turns folded into comes again, with
        its ``id`` and a new ``seq``: a reader replaces the sample of that id)."""
        with self._lock:
            picked = [s for s in self._samples if s.seq > after]
            return [s.to_dict() for s in picked]
