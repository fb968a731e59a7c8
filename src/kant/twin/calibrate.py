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
        pairs = sorted(self._done)
        leads = np.asarray([p[0] for p in pairs], dtype=np.float64)
        res = np.asarray([p[1] for p in pairs], dtype=np.float64)
        k = min(NEAREST, len(pairs))
        for job in jobs:
            p50 = job.get("p50")
            if p50 is None:
                continue
            i = int(np.searchsorted(leads, p50 - as_of))
            lo = min(max(i - k // 2, 0), len(pairs) - k)
            near = res[lo:lo + k]
            q10, q90 = float(np.percentile(near, 10)), float(np.percentile(near, 90))
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
