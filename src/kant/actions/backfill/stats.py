"""What the backfill action did in a finished run: :func:`backfill_stats`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from kant.actions.backfill.action import Backfill
    from kant.framework.action import ActionLookup

__all__ = ["BackfillStats", "backfill_action", "backfill_stats"]


@dataclass(frozen=True)
class BackfillStats:
    """What the backfill action did in one run (see :func:`backfill_stats`)."""

    backfilled: int  # jobs this action started
    reserved_jobs: int  # jobs that got a reservation as the head at least once
    delayed: int  # of those, jobs that started later than their first head shadow time
    max_delay_s: float  # largest such delay
    mean_delay_s: float  # mean over the delayed jobs (0 if none)
    reservations_computed: int  # shadow-time computations (EASY) or profiles built (conservative)
    #: reservations whose time had to be approximated: the placement search ran out of
    #: ``max_place_tries`` before it proved the earliest time (the reservation is later than it could be)
    approximated: int = 0


def backfill_action(obj: ActionLookup) -> Backfill:
    """The :class:`Backfill` action of a Simulator or Scheduler (through their typed ``action`` lookup)."""
    from kant.actions.backfill.action import Backfill

    action = obj.action(Backfill)
    if action is None:
        raise ValueError("the policy has no backfill action")
    return action


def backfill_stats(obj: ActionLookup, first_start: npt.ArrayLike) -> BackfillStats:
    """Reservations kept and broken in a finished run; ``first_start`` is ``SimResult.first_start``."""
    action = backfill_action(obj)
    start = np.asarray(first_start, dtype=np.float64)
    shadow = action.head_shadow
    reserved = np.isfinite(shadow)
    late = reserved & np.isfinite(start) & (start > shadow)
    delay = start[late] - shadow[late]
    return BackfillStats(
        backfilled=action.backfilled,
        reserved_jobs=int(reserved.sum()),
        delayed=int(late.sum()),
        max_delay_s=float(delay.max()) if delay.size else 0.0,
        mean_delay_s=float(delay.mean()) if delay.size else 0.0,
        reservations_computed=action.computed,
        approximated=action.approximated,
    )
