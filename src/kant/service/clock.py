"""The service clock: what "now" is for the live scheduler, in seconds.

The scheduler takes time as an argument and never reads a clock (it is the same code a simulation
drives), so the service chooses:

* :class:`WallClock` (the default): POSIX seconds, for a real cluster.
* :class:`AcceleratedClock`: ``speed`` seconds pass per wall second, from ``start``: a demo replays a
  day of trace in minutes (``kant serve --demo philly --speed 3600``).
* :class:`ManualClock`: time moves only when told (``POST /v1/clock``). The loop then processes each
  instant as the simulator does (every event due at it, then one scheduling cycle), so a trace
  driven through the service gives the simulator's results exactly; for tests and replays.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = ["Clock", "WallClock", "AcceleratedClock", "ManualClock", "make_clock"]


class Clock(Protocol):
    #: True when time moves only through :meth:`ManualClock.set`
    manual: bool

    def now(self) -> float: ...

    def wall_delay(self, until: float) -> float:
        """Wall seconds from now until the clock reads ``until`` (inf: never on its own)."""
        ...


class WallClock:
    manual = False

    def now(self) -> float:
        return time.time()

    def wall_delay(self, until: float) -> float:
        return max(0.0, until - time.time())


class AcceleratedClock:
    """``now = start + speed x (wall seconds since this object was made)``."""

    manual = False

    def __init__(self, speed: float, start: float = 0.0) -> None:
        if not speed > 0:
            raise ValueError(f"speed must be positive, got {speed}")
        self.speed = float(speed)
        self.start = float(start)
        self._wall0 = time.monotonic()

    def now(self) -> float:
        return self.start + (time.monotonic() - self._wall0) * self.speed

    def wall_delay(self, until: float) -> float:
        return max(0.0, (until - self.now()) / self.speed)


class ManualClock:
    """Time stands still until :meth:`set` moves it forward."""

    manual = True

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._now

    def set(self, time_s: float) -> None:
        with self._lock:
            if time_s < self._now:
                raise ValueError(f"the clock cannot go back: {time_s} < {self._now}")
            self._now = float(time_s)

    def wall_delay(self, until: float) -> float:
        return 0.0 if until <= self._now else float("inf")


def make_clock(kind: str, *, speed: float = 1.0, start: float = 0.0) -> Clock:
    """``wall``, ``accelerated`` (``speed``, from ``start``) or ``manual`` (from ``start``)."""
    if kind == "wall":
        return WallClock()
    if kind == "accelerated":
        return AcceleratedClock(speed, start)
    if kind == "manual":
        return ManualClock(start)
    raise ValueError(f"unknown clock {kind!r}: wall, accelerated or manual")
