"""The last EASY walk that changed nothing, kept to skip the next one when it would repeat it:
:class:`QuietWalk` (used by :class:`kant.actions.backfill.easy.EasyCycle`, typed here by what it reads
of it, :class:`QuietCycle`, so that this module does not import the walk back)."""

from __future__ import annotations

import math
from typing import Protocol

from kant.actions.backfill.leftover import LongBlocked
from kant.actions.backfill.reservation import EasyReservation
from kant.framework.context import CycleContext
from kant.framework.memo import FailedRequests

__all__ = ["QuietCycle", "QuietWalk"]


class _Books(Protocol):
    @property
    def failed(self) -> FailedRequests: ...
    @property
    def long_blocked(self) -> LongBlocked: ...


class QuietCycle(Protocol):
    """What :class:`QuietWalk` reads and calls of a walk (:class:`kant.actions.backfill.easy.EasyCycle`)."""

    @property
    def bf(self) -> _Books: ...
    @property
    def ctx(self) -> CycleContext: ...
    @property
    def planned(self) -> bool: ...
    @property
    def head(self) -> int: ...
    @property
    def res(self) -> EasyReservation | None: ...
    @property
    def max_short(self) -> float: ...
    @property
    def now(self) -> float: ...

    def prefetch(self, head: int) -> EasyReservation | None: ...


class QuietWalk:
    """The last EASY walk that changed nothing (it started no job and added nothing to the failure
    memo or to :class:`LongBlocked`), kept to tell when the next walk would repeat it exactly and can
    be skipped: the cycles that only arrivals trigger, behind a blocked head, on a long queue.

    Each verdict of such a walk came from the failure memo, from :class:`LongBlocked` or from whether
    a job ends by the shadow time, never from the free capacity itself (a look at the free capacity
    either starts the job or adds its request to one of the two). Another walk gives every job the
    same verdict, so looks at the same jobs in the same order and stops at the same place, while:

    * the memo and LongBlocked hold the same requests (their change counters);
    * the queue's jobs up to the last key the walk looked at are the same: no job left the queue and
      every job pushed since sorts after that key (``frontier``), which the walk stopped before
      reaching because it had looked at ``max_jobs`` jobs;
    * the head gets the same reservation object, unchanged (a job that starts changes it);
    * no job the walk found short has become long: ``now + max_short <= shadow`` (a long job stays
      long as time advances).

    Only for the static queue order, without admission plugins or a runtime estimator."""

    def __init__(self) -> None:
        self.valid = False
        self.memo_changes = -1
        self.long_changes = -1
        self.planned = False  # the walk asked for the head's reservation
        self.head = -1
        self.res: EasyReservation | None = None
        self.serial = -1
        self.frontier: tuple[float, ...] = ()
        self.max_short = -math.inf  # longest estimate of a job found short once the head was planned

    def remember(self, cycle: QuietCycle, frontier: tuple[float, ...]) -> None:
        """``cycle`` walked and changed nothing; the queue is marked from here."""
        bf = cycle.bf
        self.valid = True
        self.memo_changes = bf.failed.changes
        self.long_changes = bf.long_blocked.changes
        self.planned, self.head, self.res = cycle.planned, cycle.head, cycle.res
        self.serial = -1 if cycle.res is None else cycle.res.serial
        self.frontier = frontier
        self.max_short = cycle.max_short
        cycle.ctx.queue.mark()

    def repeats(self, cycle: QuietCycle) -> bool:
        """Would ``cycle`` (reset, not walked yet) repeat the remembered walk? May plan the head's
        reservation on the way (as the walk would, with the same state: nothing starts before)."""
        if not self.valid:
            return False
        bf = cycle.bf
        removed, lowest = cycle.ctx.queue.since_mark()
        if removed or (lowest is not None and lowest <= self.frontier) or bf.failed.changes != self.memo_changes:
            self.valid = False
            return False
        if self.planned:
            # the walk plans the head at its first look at a job not known to fail; nothing can start
            # before that (the jobs ahead are those of the remembered walk), so the state is this one
            res = cycle.prefetch(self.head)
            if res is not self.res or res is None or res.serial != self.serial:
                self.valid = False
                return False
            if cycle.now + self.max_short > res.shadow or cycle.now > res.shadow:
                self.valid = False
                return False
        if bf.long_blocked.changes != self.long_changes:
            self.valid = False
            return False
        return True
