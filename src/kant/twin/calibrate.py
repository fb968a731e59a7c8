"""The band calibrated on the twin's own past errors (split conformal prediction).

The forward runs draw every job's run time independently. Real run times are not independent: a
user's sweep of similar jobs is long or short together, so the sums that decide when a queue drains
vary more than independent draws say, and a band from the runs alone is too narrow (on the Philly
replay it held 20 to 35 % of actual starts for a nominal 73 %, docs/whatif.md). Modelling every such
dependence is guesswork; the service can instead measure how wrong its own predictions were.

:class:`Calibration` keeps, for each pending job, the predictions made for it (``as_of``, the runs'
P10, P50, P90). When the job is seen running (a later snapshot), each becomes a pair of scores,
normalised by the prediction's lead ``L = P50 - as_of`` plus :data:`SCALE_S` (errors grow with the
lead):

    lower = (start - P10) / (L + SCALE_S)        upper = (start - P90) / (L + SCALE_S)

A new prediction with lead ``L`` gets ``P10 + q_lo x (L + SCALE_S)`` and ``P90 + q_hi x (L +
SCALE_S)``, ``q_lo`` the 10th percentile of the lower scores and ``q_hi`` the 90th of the upper
ones (conformalised quantiles: on exchangeable predictions each side misses at most 10 %); the band
is the union of that and the runs' own. With fewer than :data:`MIN_RESIDUALS` residuals there is no
calibration (the runs' band only). The P50 itself is left as the runs give it. Deterministic: the
same predictions and starts give the same bands.

Two corrections to plain split conformal, both measured on the Philly replay (docs/whatif.md):

- **Jobs still waiting.** The residuals known at a given time are biased: a job that starts early
  gives its residual early, one that starts late is still waiting. So the predictions of jobs still
  waiting count too, as right-censored scores (their start is later than now), and the percentiles
  are the Kaplan-Meier estimate's (a percentile it does not reach is the largest value seen).
- **The queue changes.** Predictions are not exchangeable over time: one queueing episode is
  predicted well and the next badly (a burst, a sweep of long jobs), and the errors of a quiet
  morning say little about a busy evening. So each past prediction weighs ``2^(-age /``
  :data:`HALF_LIFE_S` ``)`` by the age of its ``as_of`` (a weighted Kaplan-Meier): the band follows
  the errors of the last hours, and the censored scores of jobs waiting now, far behind their
  predictions, widen it within hours of an episode going wrong.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kant.twin.survival import product_limit

if TYPE_CHECKING:
    from kant.twin.snapshot import TwinSnapshot

__all__ = ["Calibration", "HALF_LIFE_S", "MIN_RESIDUALS", "SCALE_S", "km_quantile"]

#: residuals needed before bands are calibrated
MIN_RESIDUALS = 50
#: added to a prediction's lead to normalise its errors (a prediction for "now" still errs by minutes)
SCALE_S = 1800.0
#: a past prediction's weight halves with each this much of its age
HALF_LIFE_S = 6 * 3600.0
#: residuals kept (the newest)
KEPT = 5000
#: predictions kept per pending job (every other one is dropped when full: the whole wait stays covered)
PER_JOB = 32
#: one prediction: (as_of, the runs' P10, P50, P90)
Kept = tuple[float, float, float, float]


class Calibration:
    """Past predictions and their errors (see the module docstring). One thread uses it."""

    def __init__(self) -> None:
        self._open: dict[int, list[Kept]] = {}  # job id -> its predictions
        self._done: deque[tuple[Kept, float]] = deque(maxlen=KEPT)  # (prediction, start)

    def __len__(self) -> int:
        return len(self._done)

    def started(self, starts: Mapping[int, float], pending: Iterable[int]) -> None:
        """Jobs seen running since (id -> start): their predictions become residuals. Jobs neither
        running nor ``pending`` any more (cancelled, finished unseen) are forgotten."""
        waiting = set(pending)
        for job_id in list(self._open):
            start = starts.get(job_id)
            if start is not None:
                for kept in self._open.pop(job_id):
                    self._done.append((kept, start))
            elif job_id not in waiting:
                del self._open[job_id]

    def observe(self, as_of: float, jobs: Iterable[Mapping[str, Any]]) -> None:
        """Remember each prediction made at ``as_of`` (its P50 and the runs' band; a missing bound is
        the P50)."""
        for job in jobs:
            p50 = job.get("p50")
            if p50 is None:
                continue
            lo, hi = job.get("p10"), job.get("p90")
            kept = self._open.setdefault(int(job["id"]), [])
            kept.append((as_of, float(p50 if lo is None else lo), float(p50), float(p50 if hi is None else hi)))
            if len(kept) > PER_JOB:
                del kept[1::2]

    def apply(self, as_of: float, jobs: list[dict[str, Any]]) -> bool:
        """Widen each job's band (``p10``, ``p90``) to its calibrated one, in place; False when there
        are too few residuals yet (nothing changed)."""
        if len(self._done) < MIN_RESIDUALS:
            return False
        # observed residuals, and the predictions of jobs still waiting: censored at as_of (their start
        # is later; leaving them out would keep only the early starters)
        rows = [(*kept, start) for kept, start in self._done]
        rows += [(*kept, as_of) for preds in self._open.values() for kept in preds]
        seen = np.zeros(len(rows), dtype=bool)
        seen[:len(self._done)] = True
        when, p10, p50, p90, start = np.asarray(rows, dtype=np.float64).reshape(-1, 5).T
        scale = np.maximum(p50 - when, 0.0) + SCALE_S
        weight = np.exp2(-np.maximum(as_of - when, 0.0) / HALF_LIFE_S)
        q_lo = km_quantile((start - p10) / scale, seen, weight, 0.1)
        q_hi = km_quantile((start - p90) / scale, seen, weight, 0.9)
        if q_lo is None or q_hi is None:
            return True
        for job in jobs:
            p50_ = job.get("p50")
            if p50_ is None:
                continue
            s = max(float(p50_) - as_of, 0.0) + SCALE_S
            if job.get("p10") is not None:
                job["p10"] = min(float(job["p10"]), float(job["p10"]) + q_lo * s)
            if job.get("p90") is not None:
                job["p90"] = max(float(job["p90"]), float(job["p90"]) + q_hi * s)
        return True

    def calibrate(self, snap: TwinSnapshot, jobs: list[dict[str, Any]]) -> bool:
        """One refresh on ``snap``: the starts it shows (its running jobs), then ``jobs``' bands
        widened (its pending jobs' predictions, :meth:`Prediction.pending`), their runs' bands kept."""
        ids = snap.ids
        self.started({ids[row]: run.start for row, run in snap.sched.running.items()},
                     (ids[row] for row in snap.sched.pending))
        runs = [{"id": j["id"], "p10": j.get("p10"), "p50": j.get("p50"), "p90": j.get("p90")} for j in jobs]
        done = self.apply(snap.now, jobs)
        self.observe(snap.now, runs)
        return done

    def covers(self, covers: str) -> str:
        """What a calibrated band covers, given what the runs' band covers."""
        if len(self._done) < MIN_RESIDUALS:
            return covers
        return f"{covers}, widened to the twin's own errors on {len(self._done):,} past predictions"


def km_quantile(values: npt.NDArray[np.float64], seen: npt.NDArray[np.bool_], weight: npt.NDArray[np.float64],
                 level: float) -> float | None:
    """The ``level`` quantile of weighted values, those not ``seen`` right-censored (only known to be
    above the value), by the weighted Kaplan-Meier estimate; a level the estimate does not reach is
    the largest value (a lower bound). None: nothing observed."""
    if not seen.any():
        return None
    v, _, surv = product_limit(values, seen, weight=weight)
    dist = 1.0 - surv
    i = int(np.searchsorted(dist, level - 1e-12))
    return float(v[i] if i < v.size else v[-1])
