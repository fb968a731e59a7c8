"""Predicted start times: the snapshot run forward several times with sampled run times.

Each run gives every job a true run time drawn from the estimator's error distribution: its estimate
(what the scheduler plans with) times a ratio ``actual / planned``, drawn from the Kaplan-Meier
estimate over the finished jobs (observed ratios) and the running ones (censored: above
``elapsed / planned``) whose planned run time was nearest the job's own (the :func:`neighbours`
nearest, a quarter of them), carried to the job's planned run time along the censoring-aware slope of
log ratio on log planned run time (:class:`~kant.twin.ratios.RatioModel`): estimates err differently
at different sizes (users round up long jobs more), and a ratio drawn regardless of the estimate
makes the runs too long on average. A snapshot without the planned run times of its ratios draws
among all of them.

When the snapshot has an arrival history (:mod:`kant.twin.arrivals`), each run also gets future
arrivals sampled from it (:func:`draw_run`), so the band covers the jobs that have not arrived yet
as well as the run-time error; :attr:`Prediction.covers` says which it covers.

A running job's draw is conditioned on what it has already run: it is drawn from its window's
estimate above its elapsed ratio; if it has outrun every observation, it runs on by a tail factor
(:mod:`kant.twin.ratios`: the tail). With no finished jobs yet, the ratio is 1 (the estimate) and one
run is the answer.

Run ``k`` draws with ``numpy.random.default_rng([seed, k])``: the same snapshot, seed and run count
give the same predictions, bit for bit. A job's P50 is the median of its starts over the runs and
P10/P90 the band (nearest rank, so a job that did not start within the horizon in a run counts as
"later than any time"); :func:`predict` also returns the runs' results for what-if metrics.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from kant.config.policy import Policy
from kant.metrics.recorder import SimResult
from kant.model.cluster import Cluster
from kant.scheduler import SchedulerSnapshot
from kant.twin.arrivals import ArrivalModel, Arrivals
from kant.twin.forward import run_forward
from kant.twin.ratios import RatioModel, neighbours
from kant.twin.snapshot import TwinSnapshot

__all__ = ["Prediction", "predict", "predict_part", "join_parts", "PartStarts", "sample_durations", "neighbours",
           "DEFAULT_RUNS", "RatioModel", "covers", "arrival_model", "draw_run", "ARRIVAL_HORIZON_S"]

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
    #: why a job did not start in the first run (row -> reason), as the first run's result has it
    reasons: Mapping[int, str] = field(default_factory=dict)

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
        reasons = self.reasons
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


def sample_durations(snap: TwinSnapshot, rng: np.random.Generator, model: RatioModel | None = None) -> FloatArray:
    """One draw of every job's true run time (see the module docstring); a running job's is drawn above
    what it has run (:meth:`RatioModel.sample`)."""
    est = np.asarray(snap.jobs["estimate"], dtype=np.float64)
    if not snap.ratios:
        return est.copy()
    model = model or RatioModel.fit(snap)
    elapsed = np.zeros(est.size)
    for row, run in snap.sched.running.items():
        elapsed[row] = snap.now - run.start
    return model.sample(est, rng, elapsed)


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


@dataclass(frozen=True)
class PartStarts:
    """Some of a prediction's runs (:func:`predict_part`): ``starts[i]`` is run ``ks[i]``'s first start
    of every snapshot job (NaN: not started), ``reasons`` the first run's (when ``0 in ks``)."""

    ks: tuple[int, ...]
    starts: FloatArray
    reasons: Mapping[int, str]
    covers: str


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
    model = arrival_model(snap, arrivals)
    done = [r for _, r in _runs(snap, range(runs), runs=runs, seed=seed, horizon_s=horizon_s, policy=policy,
                                cluster=cluster, sched=sched, model=model, arrival_horizon_s=arrival_horizon_s,
                                until_started=until_started)]
    n = len(snap)
    starts = np.vstack([r.first_start[:n] for r in done]) if done else np.zeros((0, n))
    return Prediction(snap, starts, tuple(done), horizon_s, covers(snap, model), done[0].reasons if done else {})


def predict_part(snap: TwinSnapshot, ks: Iterable[int], *, runs: int = DEFAULT_RUNS) -> PartStarts:
    """Runs ``ks`` of ``predict(snap, runs=runs)`` alone (those below the runs it makes): their starts,
    the same as that prediction's rows ``ks``, bit for bit, since run ``k`` draws from its own seed.
    Several processes can each make some of a prediction's runs; :func:`join_parts` puts them together."""
    model = arrival_model(snap, True)
    done = _runs(snap, ks, runs=runs, model=model)
    n = len(snap)
    starts = np.vstack([r.first_start[:n] for _, r in done]) if done else np.zeros((0, n))
    reasons = next((dict(r.reasons) for k, r in done if k == 0), {})
    return PartStarts(tuple(k for k, _ in done), starts, reasons, covers(snap, model))


def join_parts(snap: TwinSnapshot, parts: Sequence[PartStarts]) -> Prediction:
    """The prediction :func:`predict` (its defaults) gives, from parts that together make each of its runs
    once (:func:`predict_part`); the runs' own results are not kept (``runs`` is empty)."""
    ks = [k for p in parts for k in p.ks]
    if sorted(ks) != list(range(len(ks))):
        raise ValueError(f"the parts make runs {sorted(ks)}, not each of 0..{len(ks) - 1} once")
    rows = {k: p.starts[i] for p in parts for i, k in enumerate(p.ks)}
    n = len(snap)
    starts = np.vstack([rows[k] for k in range(len(ks))]) if ks else np.zeros((0, n))
    reasons = next((p.reasons for p in parts if 0 in p.ks), {})
    return Prediction(snap, starts, (), None, parts[0].covers if parts else "", reasons)


def _runs(snap: TwinSnapshot, ks: Iterable[int], *, runs: int, seed: int | None = None,
          horizon_s: float | None = None, policy: Policy | None = None, cluster: Cluster | None = None,
          sched: SchedulerSnapshot | None = None, model: ArrivalModel | None = None,
          arrival_horizon_s: float | None = None, until_started: bool = True) -> list[tuple[int, SimResult]]:
    """Runs ``ks`` of :func:`predict`'s (those below the count it makes; ``model``: the arrival model
    they sample from, if any), each with its result."""
    if runs < 1:
        raise ValueError("runs must be >= 1")
    if not snap.ratios and model is None:
        runs = 1
    base = snap.seed if seed is None else seed
    ahead = arrival_horizon_s or horizon_s or ARRIVAL_HORIZON_S
    ratio_model = RatioModel.fit(snap) if snap.ratios else None
    done: list[tuple[int, SimResult]] = []
    for k in ks:
        if k >= runs:
            continue
        duration, drawn = draw_run(snap, base, k, ratio_model, model, ahead)
        done.append((k, run_forward(snap, duration, policy=policy, cluster=cluster, sched=sched, horizon_s=horizon_s,
                                    arrivals=drawn, until_started=until_started)))
    return done
