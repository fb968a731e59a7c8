"""Predicted start times: the snapshot run forward several times with sampled run times.

Each run gives every job a true run time drawn from the estimator's error distribution: its estimate
(what the scheduler plans with) times a ratio ``actual / planned`` of a finished job. The ratio is
drawn among the finished jobs whose planned run time was nearest the job's own (the
:func:`neighbours` nearest, a quarter of them) and carried to the job's planned run time along the
fitted slope of log ratio on log planned run time (:class:`RatioModel`): estimates err differently
at different sizes (users round up long jobs more), and a ratio drawn regardless of the estimate
makes the runs too long on average. A snapshot without the planned run times of its ratios draws
among all of them.

When the snapshot has an arrival history (:mod:`kant.twin.arrivals`), each run also gets future
arrivals sampled from it (:func:`draw_run`), so the band covers the jobs that have not arrived yet
as well as the run-time error; :attr:`Prediction.covers` says which it covers.

A running job's draw is conditioned on what it has already run: only ratios that
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
from kant.twin.arrivals import ArrivalModel, Arrivals
from kant.twin.forward import run_forward
from kant.twin.snapshot import TwinSnapshot

__all__ = ["Prediction", "predict", "sample_durations", "neighbours", "DEFAULT_RUNS", "RatioModel", "covers",
           "arrival_model", "draw_run", "ARRIVAL_HORIZON_S"]

FloatArray = npt.NDArray[np.float64]
#: one run's sampled arrivals: the model they come from, the draw, their run times
Drawn = tuple[ArrivalModel, Arrivals, FloatArray]

#: forward runs per prediction when the snapshot has an error distribution
DEFAULT_RUNS = 10
#: how far ahead a prediction samples arrivals when it has no horizon (after it: none more arrive)
ARRIVAL_HORIZON_S = 24 * 3600.0


@dataclass(frozen=True)
class Prediction:
    """Predicted first starts of the snapshot's jobs (absolute times on the snapshot's clock; NaN:
    not started within the horizon in that share of runs, see :meth:`band`). ``starts[k, j]`` is
    job row ``j``'s start in run ``k``."""

    snapshot: TwinSnapshot
    starts: FloatArray  # runs x jobs
    runs: tuple[SimResult, ...]
    horizon_s: float | None
    covers: str = ""  # what the band covers, in words (kant.twin.predict.covers)

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
        P90; None where it did not start within the horizon), and ``reason`` (None, or why there is
        no P50). The band is at least the snapshot's ``resolution_s`` wide (its info: how late a
        start can come on the live clock), so an exact prediction counts as inside it."""
        snap = self.snapshot
        p10, p90 = self.band()
        p50 = self.p50
        res = float(snap.info.get("resolution_s", 0.0) or 0.0)
        tenants = snap.jobs["tenant"]
        reasons = self.runs[0].reasons if self.runs else {}
        out = []
        for row in snap.sched.pending:
            mid, hi = _opt(p50[row]), _opt(p90[row])
            if mid is not None and hi is not None and hi < mid + res:
                hi = mid + res
            reason = None
            if mid is None:
                why = reasons.get(int(row))
                reason = (f"does not start in the twin's run: {why}" if why else
                          "does not start within the horizon" if self.horizon_s is not None else
                          "does not start in the twin's run (if nothing else changes)")
            out.append({"id": snap.ids[row], "tenant": tenants[row], "p50": mid, "p10": _opt(p10[row]),
                        "p90": hi, "reason": reason})
        return out


def _opt(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def neighbours(n: int) -> int:
    """How many finished jobs, nearest in planned run time, a job's ratio is drawn from: a quarter
    of them (at least 10). Chosen on the accuracy bench (docs/whatif.md): the square root of ``n``
    halved the median error but overfitted (the P90 error grew by half)."""
    return min(n, max(10, math.ceil(n / 4)))


@dataclass(frozen=True)
class RatioModel:
    """The run-time error as a function of the planned run time (module docstring): a job planned
    at ``p`` draws one of the :func:`neighbours` finished jobs nearest ``p`` in planned run time, and
    that job's ratio is carried from its own planned run time to ``p`` along the slope of
    ``log(actual / planned)`` on ``log(planned)`` (least squares over every finished job):
    ``ratio_i x (p / planned_i) ^ slope``.

    Why both: estimates err differently at different sizes (users round up long jobs more; with
    noisy estimates a long planned run time is more often an overestimate), so a ratio drawn
    regardless of the estimate runs jobs too long. The window keeps the local spread, but a window
    of a quarter of the jobs spans a wide range of planned run times, and at the top of the range it
    can only reach down: the longest-planned jobs, which hold the GPUs longest, drew the ratios of
    shorter ones, too large (measured on Philly with lognormal noise of sigma 1, ``bench_whatif.py
    --ratio-check``: the sampled work of the top 1 % was 2.3 to 5.7 times the actual with the window
    alone, 1.0 to 2.1 times with the slope; docs/whatif.md). Slope 0
    (exact estimates; no planned run times) draws the window's ratios as they are."""

    ratios: FloatArray  # sorted by planned run time
    planned: FloatArray  # (ones when not known: slope 0, one window of every ratio)
    slope: float
    k: int

    @classmethod
    def fit(cls, snap: TwinSnapshot) -> RatioModel:
        ratios = np.asarray(snap.ratios, dtype=np.float64)
        n = ratios.size
        if not snap.planned or n < 3:
            return cls(ratios, np.ones_like(ratios), 0.0, n)
        planned = np.asarray(snap.planned, dtype=np.float64)
        x, y = np.log(planned), np.log(ratios)
        vx = float(np.var(x))
        slope = float(np.mean((x - x.mean()) * (y - y.mean())) / vx) if vx > 1e-12 else 0.0
        order = np.argsort(planned, kind="stable")
        return cls(ratios[order], planned[order], slope, neighbours(n))

    def _window(self, est: FloatArray) -> npt.NDArray[np.int64]:
        n, k = self.ratios.size, self.k
        lo: npt.NDArray[np.int64] = np.clip(np.searchsorted(self.planned, est) - k // 2, 0, n - k).astype(np.int64)
        return lo

    def _carry(self, idx: npt.NDArray[np.int64], est: FloatArray) -> FloatArray:
        if self.slope == 0.0:
            out: FloatArray = self.ratios[idx]
            return out
        safe = np.where((est > 0) & np.isfinite(est), est, self.planned[idx])
        out = self.ratios[idx] * (safe / self.planned[idx]) ** self.slope
        return out

    def draws(self, estimate: float) -> FloatArray:
        """The ratios a job planned at ``estimate`` may draw (its window's, carried to it)."""
        lo = int(self._window(np.asarray([estimate]))[0])
        idx = np.arange(lo, lo + self.k, dtype=np.int64)
        return self._carry(idx, np.full(self.k, estimate))

    def sample(self, est: FloatArray, rng: np.random.Generator) -> FloatArray:
        """One run time per estimate: ``est x`` a ratio drawn uniformly from its window, carried."""
        idx = self._window(est) + rng.integers(0, self.k, size=est.size)
        out: FloatArray = est * self._carry(idx, est)
        return out


def sample_durations(snap: TwinSnapshot, rng: np.random.Generator, model: RatioModel | None = None) -> FloatArray:
    """One draw of every job's true run time (see the module docstring)."""
    est = np.asarray(snap.jobs["estimate"], dtype=np.float64)
    if not snap.ratios:
        return est.copy()
    model = model or RatioModel.fit(snap)
    out = model.sample(est, rng)
    now = snap.now
    for row, run in snap.sched.running.items():
        e = float(est[row])
        if not math.isfinite(e):
            continue
        elapsed = now - run.start
        past = elapsed / e if e > 0 else math.inf
        near = model.draws(e)
        near = near[near > past]
        if near.size:  # a neighbour's ratio that ends it after now, uniformly among those
            out[row] = e * near[int(rng.integers(0, near.size))]
            continue
        every = model._carry(np.arange(model.ratios.size, dtype=np.int64), np.full(model.ratios.size, e))
        every = every[every > past]
        if every.size:  # any ratio that ends it after now, uniformly among those
            out[row] = e * every[int(rng.integers(0, every.size))]
        else:  # it has outrun every ratio seen: it ends now
            out[row] = elapsed
    return out


def arrival_model(snap: TwinSnapshot, arrivals: bool | ArrivalModel | None) -> ArrivalModel | None:
    """The arrival model a forward run samples from: ``arrivals`` itself, the snapshot's history's
    (True; None when it has too little), or none (False / None)."""
    if isinstance(arrivals, ArrivalModel):
        return arrivals
    if arrivals and snap.arrivals:
        return ArrivalModel.learn(snap.arrivals, snap.now)
    return None


def covers(snap: TwinSnapshot, model: ArrivalModel | None) -> str:
    """What the band of a prediction covers, in words (the answers carry it)."""
    if snap.ratios and model is not None:
        return "run-time error and future arrivals"
    if snap.ratios:
        return "run-time error only (no arrival history yet: if nothing else arrives)"
    if model is not None:
        return "future arrivals only (no job has finished yet: estimates taken as exact)"
    return "nothing: estimates taken as exact and no arrival history (if nothing else arrives)"


def draw_run(snap: TwinSnapshot, base: int, k: int, ratio_model: RatioModel | None,
             model: ArrivalModel | None, arrival_horizon_s: float) -> tuple[FloatArray, Drawn | None]:
    """Run ``k``'s draw: every active job's run time (``default_rng([base, k])``, as without arrivals),
    and the sampled arrivals (``default_rng([base, k, 1])``) with their run times (``[base, k, 2]``).
    Both are drawn in time order, so a longer horizon draws the same first arrivals: a prediction
    and a what-if of the same snapshot agree on every start within the shorter horizon."""
    duration = sample_durations(snap, np.random.default_rng([base, k]), ratio_model)
    if model is None:
        return duration, None
    rng = np.random.default_rng([base, k, 1])
    arr = model.sample(rng, max(arrival_horizon_s, ARRIVAL_HORIZON_S))  # (then cut: the same draw for any horizon)
    if arrival_horizon_s < ARRIVAL_HORIZON_S:
        keep = arr.submit < snap.now + arrival_horizon_s
        arr = Arrivals(arr.submit[keep], arr.rows[keep])
    est = np.asarray([model.history["estimate"][int(r)] for r in arr.rows], dtype=np.float64)
    if snap.ratios and est.size:
        extra = (ratio_model or RatioModel.fit(snap)).sample(est, np.random.default_rng([base, k, 2]))
    else:
        extra = est
    return duration, (model, arr, extra)


def predict(snap: TwinSnapshot, *, runs: int = DEFAULT_RUNS, seed: int | None = None,
            horizon_s: float | None = None, policy: Policy | None = None, cluster: Cluster | None = None,
            sched: SchedulerSnapshot | None = None, arrivals: bool | ArrivalModel | None = True,
            arrival_horizon_s: float | None = None, until_started: bool = True) -> Prediction:
    """Run ``snap`` forward ``runs`` times (once when nothing is uncertain: no error distribution and
    no arrival model) under ``policy`` / ``cluster`` / ``sched`` (defaults: the snapshot's) and collect
    each job's start. ``arrivals``: sample future arrivals from the snapshot's history (True), from
    this model, or not (False); they arrive over ``arrival_horizon_s`` (default: ``horizon_s``, else
    :data:`ARRIVAL_HORIZON_S`). ``until_started``: each run stops once every pending job has started
    (the runs' results then end there: what-if metrics run :func:`~kant.twin.whatif.compare`)."""
    if runs < 1:
        raise ValueError("runs must be >= 1")
    model = arrival_model(snap, arrivals)
    if not snap.ratios and model is None:
        runs = 1
    base = snap.seed if seed is None else seed
    ahead = arrival_horizon_s or horizon_s or ARRIVAL_HORIZON_S
    ratio_model = RatioModel.fit(snap) if snap.ratios else None
    done: list[SimResult] = []
    n = len(snap)
    for k in range(runs):
        duration, drawn = draw_run(snap, base, k, ratio_model, model, ahead)
        done.append(run_forward(snap, duration, policy=policy, cluster=cluster, sched=sched, horizon_s=horizon_s,
                                arrivals=drawn, until_started=until_started))
    starts = np.vstack([r.first_start[:n] for r in done]) if done else np.zeros((0, n))
    return Prediction(snap, starts, tuple(done), horizon_s, covers(snap, model))
