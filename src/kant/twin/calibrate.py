"""The band calibrated on the twin's own past errors (split conformal prediction).

The forward runs draw every job's run time independently. Real run times are not independent: a
user's sweep of similar jobs is long or short together, so the sums that decide when a queue drains
vary more than independent draws say, and a band from the runs alone is too narrow (on the Philly
replay it held 20 to 35 % of actual starts for a nominal 73 %, docs/whatif.md). Modelling every such
dependence is guesswork; the service can instead measure how wrong its own predictions were.

:class:`Calibration` keeps, for each pending job, the predictions made for it (``as_of``, P50).
When the job is seen running (a later snapshot), each of those predictions becomes a residual
``actual start - P50`` with its lead ``P50 - as_of``. A new prediction with lead ``L`` gets the 10th
and 90th percentiles of the residuals of the :data:`NEAREST` past predictions whose lead was nearest
``L`` (errors grow with the lead), added to its P50; the band is the union of that and the runs' own
band. With fewer than :data:`MIN_RESIDUALS` residuals there is no calibration (the runs' band only).
The P50 itself is left as the runs give it. Deterministic: the same predictions and starts give the
same bands.

The residuals known at a given time are biased: a job that starts early gives its residual early,
one that starts late is still waiting. So the predictions of jobs still waiting count too, as
right-censored residuals (their residual is at least ``now - P50``), and the percentiles are the
Kaplan-Meier estimate's: without them the band missed late starts (on the Philly replay a third
of actual starts fell after P90, docs/whatif.md).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from kant.twin.snapshot import TwinSnapshot

__all__ = ["Calibration", "MIN_RESIDUALS", "NEAREST"]

#: residuals needed before bands are calibrated
MIN_RESIDUALS = 50
#: past predictions nearest in lead time that a band's quantiles come from
NEAREST = 200
#: residuals kept (the newest)
KEPT = 5000
#: predictions kept per pending job (every other one is dropped when full: the whole wait stays covered)
PER_JOB = 32


class Calibration:
    """Past predictions and their errors (see the module docstring). One thread uses it."""

    def __init__(self) -> None:
        self._open: dict[int, list[tuple[float, float]]] = {}  # job id -> (as_of, p50) of its predictions
        self._done: deque[tuple[float, float]] = deque(maxlen=KEPT)  # (lead, residual)

    def __len__(self) -> int:
        return len(self._done)

    def started(self, starts: Mapping[int, float], pending: Iterable[int]) -> None:
        """Jobs seen running since (id -> start): their predictions become residuals. Jobs neither
        running nor ``pending`` any more (cancelled, finished unseen) are forgotten."""
        waiting = set(pending)
        for job_id in list(self._open):
            start = starts.get(job_id)
            if start is not None:
                for as_of, p50 in self._open.pop(job_id):
                    self._done.append((p50 - as_of, start - p50))
            elif job_id not in waiting:
                del self._open[job_id]

    def observe(self, as_of: float, jobs: Iterable[Mapping[str, Any]]) -> None:
        """Remember the P50 of each prediction made at ``as_of``."""
        for job in jobs:
            p50 = job.get("p50")
            if p50 is None:
                continue
            kept = self._open.setdefault(int(job["id"]), [])
            kept.append((as_of, float(p50)))
            if len(kept) > PER_JOB:
                del kept[1::2]

    def apply(self, as_of: float, jobs: list[dict[str, Any]]) -> bool:
        """Widen each job's band (``p10``, ``p90``) to its calibrated one, in place; False when there
        are too few residuals yet (nothing changed)."""
        if len(self._done) < MIN_RESIDUALS:
            return False
        # observed residuals, and the predictions of jobs still waiting: censored (their residual is
        # more than as_of - P50 already; leaving them out would keep only the early starters)
        pool = [(lead, r, True) for lead, r in self._done]
        pool += [(p50 - t, as_of - p50, False) for kept in self._open.values() for t, p50 in kept]
        pool.sort(key=lambda x: x[0])
        leads = np.asarray([x[0] for x in pool], dtype=np.float64)
        k = min(NEAREST, len(pool))
        cache: dict[int, tuple[float, float] | None] = {}
        for job in jobs:
            p50 = job.get("p50")
            if p50 is None:
                continue
            i = int(np.searchsorted(leads, p50 - as_of))
            lo = min(max(i - k // 2, 0), len(pool) - k)
            if lo not in cache:
                cache[lo] = _km_band(pool[lo:lo + k])
            band = cache[lo]
            if band is None:
                continue
            q10, q90 = band
            if job.get("p10") is not None:
                job["p10"] = min(float(job["p10"]), p50 + q10)
            if job.get("p90") is not None:
                job["p90"] = max(float(job["p90"]), p50 + q90)
        return True

    def calibrate(self, snap: TwinSnapshot, jobs: list[dict[str, Any]]) -> bool:
        """One refresh on ``snap``: the starts it shows (its running jobs), then ``jobs``' bands
        widened (its pending jobs' predictions, :meth:`Prediction.pending`), then their P50s kept."""
        ids = snap.ids
        self.started({ids[row]: run.start for row, run in snap.sched.running.items()},
                     (ids[row] for row in snap.sched.pending))
        done = self.apply(snap.now, jobs)
        self.observe(snap.now, jobs)
        return done

    def covers(self, covers: str) -> str:
        """What a calibrated band covers, given what the runs' band covers."""
        if len(self._done) < MIN_RESIDUALS:
            return covers
        return f"{covers}, widened to the twin's own errors on {len(self._done):,} past predictions"


def _km_band(pool: list[tuple[float, float, bool]]) -> tuple[float, float] | None:
    """The 10th and 90th percentiles of residuals, some right-censored (``False``: only known to be
    above the value), by the Kaplan-Meier estimate; a percentile the estimate does not reach is the
    largest value seen (a lower bound). None: nothing observed."""
    values = sorted(pool, key=lambda x: (x[1], not x[2]))  # (an event before a censoring at the same value)
    if not any(v[2] for v in values):
        return None
    n = len(values)
    surv = 1.0
    q: dict[float, float] = {}
    for idx, (_, value, seen) in enumerate(values):
        if seen:
            surv *= 1.0 - 1.0 / (n - idx)
            for level in (0.1, 0.9):
                if level not in q and 1.0 - surv >= level:
                    q[level] = value
    top = values[-1][1]
    return q.get(0.1, top), q.get(0.9, top)
