"""One instant of a driver's clock: everything due, then at most one scheduling cycle.

The simulator (:class:`kant.sim.Simulator`) and the live service's loop
(:class:`kant.service.loop.ServiceLoop`) drive the same :class:`~kant.scheduler.Scheduler` by one rule,
written here once:

1. at an instant, everything due at it happens first, in the driver's order (the simulator: finishes,
   node failures and repairs, processes, then the trace's arrivals; the live loop: the executor's node
   events, its job events, then the turn's commands), and each change marks the instant
   :attr:`Instant.changed`; a wake-up due at the instant marks it too;
2. then at most one cycle runs (:meth:`Instant.cycle`), if anything changed and jobs wait (or, for a
   policy with an action that accounts at every event, ``Action.EVERY_EVENT``, if anything changed);
3. the wake-ups that cycle asks for (a reservation's start, a time slice's end) are kept
   (:meth:`Instant.wake`), and each makes its own instant one with a cycle, even if nothing else happens
   then.

What is due, and what a cycle's starts and evictions do (run a simulated job; launch a live one), stay
the driver's. This module knows nothing about either driver.
"""

from __future__ import annotations

import heapq
import math

from kant.scheduler import CycleResult, Scheduler

__all__ = ["Instant"]


class Instant:
    """The instant rule's state: whether the instant changed, and the wake-ups kept (see the module)."""

    __slots__ = ("_kept", "changed", "wakeups")

    def __init__(self) -> None:
        #: something happened at this instant that a cycle should see (an arrival, an end, a node change)
        self.changed = False
        #: the kept wake-up times, a heap: ``wakeups[0]`` is the next (a driver's loop may read it)
        self.wakeups: list[float] = []
        self._kept: set[float] = set()

    def next_wakeup(self) -> float:
        """The next kept wake-up time (+inf if none)."""
        return self.wakeups[0] if self.wakeups else math.inf

    def wake(self, when: float) -> None:
        """Give the instant at ``when`` a cycle (asked once however often: one wake-up per time)."""
        if when not in self._kept:
            self._kept.add(when)
            heapq.heappush(self.wakeups, when)

    def due(self, now: float) -> None:
        """The wake-ups due by ``now`` are spent; if there was one, the instant changed."""
        wakeups = self.wakeups
        if wakeups and wakeups[0] <= now:
            kept = self._kept
            while wakeups and wakeups[0] <= now:
                kept.discard(heapq.heappop(wakeups))
            self.changed = True

    def cycle(self, scheduler: Scheduler, now: float, more: bool = True) -> CycleResult | None:
        """The instant's cycle: one if anything changed and jobs wait (else None); after it nothing has
        changed. The wake-ups it asks for are kept while something can still happen: a job runs, or
        ``more`` (the driver has more to come: a trace with arrivals left; a live service, always). A
        policy that asks for cycles with nothing running and nothing to come does not loop forever."""
        if not self.changed or (not scheduler.queue.queued and not scheduler.every_event):
            self.changed = False
            return None
        self.changed = False
        result = scheduler.cycle(now)
        if result.wakeups and (more or scheduler.running):
            for when in result.wakeups:
                self.wake(when)
        return result
