"""Predicted start times: the snapshot run forward several times with sampled run times.

Each run gives every job a true run time drawn from the estimator's error distribution: its estimate
(what the scheduler plans with) times a ratio ``actual / planned`` of a finished job. The ratio is
drawn among the finished jobs whose planned run time was nearest the job's own (the
:func:`neighbours` nearest, a quarter of them): estimates err differently
at different sizes (users round up long jobs more), and a ratio drawn regardless of the estimate
makes the runs too long on average. A snapshot without the planned run times of its ratios draws
among all of them. A running job's draw is conditioned on what it has already run: only ratios that
put its end after the snapshot's time are drawn (its neighbours', else anyone's); if none does, it
is taken to end now (as the scheduler's own plan for an overrunning job does). With no finished
jobs yet, the ratio is 1 (the estimate) and one run is the answer.

Run ``k`` draws with ``numpy.random.default_rng([seed, k])``: the same snapshot, seed and run count
give the same predictions, bit for bit. A job's P50 is the median of its starts over the runs and
P10/P90 the band (nearest rank, so a job that did not start within the horizon in a run counts as
"later than any time"); :func:`predict` also returns the runs' results for what-if metrics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kant.config.policy import Policy
from kant.metrics.recorder import SimResult
from kant.model.cluster import Cluster
from kant.scheduler import SchedulerSnapshot
from kant.twin.forward import run_forward
from kant.twin.snapshot import TwinSnapshot

__all__ = ["Prediction", "predict", "sample_durations", "neighbours", "DEFAULT_RUNS"]

FloatArray = npt.NDArray[np.float64]

#: forward runs per prediction when the snapshot has an error distribution
DEFAULT_RUNS = 10


@dataclass(frozen=True)
class Prediction:
    """Predicted first starts of the snapshot's jobs (absolute times on the snapshot's clock; NaN:
    not started within the horizon in that share of runs, see :meth:`band`). ``starts[k, j]`` is
    job row ``j``'s start in run ``k``."""

    snapshot: TwinSnapshot
    starts: FloatArray  # runs x jobs
    runs: tuple[SimResult, ...]
    horizon_s: float | None

    def quantile(self, q: float) -> FloatArray:
        """Each job's nearest-rank ``q`` quantile of its starts over the runs (NaN: not started by
        then in the runs that rank selects)."""
        k = self.starts.shape[0]
        ordered = np.sort(np.where(np.isnan(self.starts), np.inf, self.starts), axis=0)
        rank = min(max(math.ceil(q * k) - 1, 0), k - 1)
        row = ordered[rank]
        return np.where(np.isinf(row), np.nan, row)

    @property
    def p50(self) -> FloatArray:
        return self.quantile(0.5)

    def band(self) -> tuple[FloatArray, FloatArray]:
        return self.quantile(0.1), self.quantile(0.9)

    def pending(self) -> list[dict[str, Any]]:
        """One entry per pending job of the snapshot: its id, tenant and predicted start (P50, P10,
        P90; None where it did not start within the horizon)."""
        snap = self.snapshot
        p10, p90 = self.band()
        p50 = self.p50
        tenants = snap.jobs["tenant"]
        out = []
        for row in snap.sched.pending:
            out.append({"id": snap.ids[row], "tenant": tenants[row], "p50": _opt(p50[row]), "p10": _opt(p10[row]),
                        "p90": _opt(p90[row])})
        return out


def _opt(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def neighbours(n: int) -> int:
    """How many finished jobs, nearest in planned run time, a job's ratio is drawn from: a quarter
    of them (at least 10). Chosen on the accuracy bench (docs/whatif.md): the square root of ``n``
    halved the median error but overfitted (the P90 error grew by half); a quarter made the
    predictions unbiased and the band calibrated once nothing more arrives."""
    return min(n, max(10, math.ceil(n / 4)))


def sample_durations(snap: TwinSnapshot, rng: np.random.Generator) -> FloatArray:
    """One draw of every job's true run time (see the module docstring)."""
    est = np.asarray(snap.jobs["estimate"], dtype=np.float64)
    ratios = np.asarray(snap.ratios, dtype=np.float64)
    n = ratios.size
    if n == 0:
        return est.copy()
    if snap.planned:  # conditioned on the estimate: the ratios of the k nearest planned run times
        planned = np.asarray(snap.planned, dtype=np.float64)
        order = np.argsort(planned, kind="stable")
        planned, ratios = planned[order], ratios[order]
        k = neighbours(n)
        lo = np.clip(np.searchsorted(planned, est) - k // 2, 0, n - k)
    else:  # every ratio, whatever the estimate
        k = n
        lo = np.zeros(est.size, dtype=np.int64)
    out: FloatArray = est * ratios[lo + rng.integers(0, k, size=est.size)]
    ordered = np.sort(ratios)
    now = snap.now
    for row, run in snap.sched.running.items():
        e = est[row]
        if not math.isfinite(e):
            continue
        elapsed = now - run.start
        past = elapsed / e if e > 0 else math.inf
        near = ratios[int(lo[row]):int(lo[row]) + k]
        near = near[near > past]
        if near.size:  # a neighbour's ratio that ends it after now
            out[row] = e * near[int(rng.integers(0, near.size))]
            continue
        first = int(np.searchsorted(ordered, past, side="right"))
        if first < n:  # any ratio that ends it after now, uniformly among those
            out[row] = e * ordered[first + int(rng.integers(0, n - first))]
        else:  # it has outrun every ratio seen: it ends now
            out[row] = elapsed
    return out


def predict(snap: TwinSnapshot, *, runs: int = DEFAULT_RUNS, seed: int | None = None,
            horizon_s: float | None = None, policy: Policy | None = None, cluster: Cluster | None = None,
            sched: SchedulerSnapshot | None = None) -> Prediction:
    """Run ``snap`` forward ``runs`` times (once when it has no error distribution) under
    ``policy`` / ``cluster`` / ``sched`` (defaults: the snapshot's) and collect each job's start."""
    if runs < 1:
        raise ValueError("runs must be >= 1")
    if not snap.ratios:
        runs = 1
    base = snap.seed if seed is None else seed
    done: list[SimResult] = []
    for k in range(runs):
        duration = sample_durations(snap, np.random.default_rng([base, k]))
        done.append(run_forward(snap, duration, policy=policy, cluster=cluster, sched=sched, horizon_s=horizon_s))
    starts = np.vstack([r.first_start for r in done]) if done else np.zeros((0, len(snap)))
    return Prediction(snap, starts, tuple(done), horizon_s)
