"""The twin's run-time error model: how long a job really runs, given the run time the scheduler plans it
with (docs/whatif.md, "Which ratio a job draws"). :class:`RatioModel` owns it.

**Observations.** Every finished job of the snapshot's history gives its ratio ``actual / planned``.
Every running job gives a right-censored one: its ratio is above ``elapsed / planned``, as it has not
ended. The finished jobs alone are a biased sample (survival bias): at any moment the jobs that run long
for their estimate are the ones still running, most of all among long planned run times, so their
ratios are too small, and so was the work the twin sampled. The history is cut: the service keeps the
last N finished jobs and starts afresh on a restart, so its sample is the jobs that ended after
``ratios_from`` (the snapshot says when). A job that started before that time is in it only because it
ran past it, so it enters the estimate at ``(ratios_from - start) / planned`` (left truncation) and
not from ratio 0. A snapshot without ``ended`` / ``ratios_from`` takes every job as seen from its start.

**Estimate.** The ratio's law depends on the planned run time (estimates err differently at different
sizes). In logs, ``z = log(ratio) - slope x log(planned)`` takes the trend out: :func:`censored_slope`
fits the least-squares slope as before, censoring-aware (Buckley-James; least squares over the finished
jobs' logs alone inherits their bias). A job planned at ``p`` draws
``z`` from the Kaplan-Meier estimate (:func:`km`) over the :func:`neighbours` observations nearest
``p`` in planned run time and runs ``p x exp(z) x p ^ slope``: the window's ratios carried along the
slope, as before, now with the censored ones. A running job draws from the same estimate above its own
elapsed ``z``.

**The window at the ends.** The window is centred on ``p``'s place among the observations; near either
end of the planned run times it is cut there (down to half its size for a job planned beyond every
observation), not moved inward. A window moved inward holds mostly observations planned far from ``p``
(at the top: the top quarter, from about an hour to a thousand hours), and the global slope does not
carry them to ``p`` where the ratio's law bends within that range; there, too, the censored jobs are
mostly the longest-planned, so censoring is not independent of ``z`` (docs/whatif.md: at 16 h of the
accuracy slice the true ``z`` of the top window's jobs falls by 1.3 from its shortest-planned quarter
to its longest, and the pending jobs sit at its top: their work was sampled at over twice the truth).

**Tail.** Where the estimate ends before all its mass is placed (the largest observation of the window
is censored), or a running job has outrun every observation of its window, the ratio is the larger of
the last observation and the job's elapsed ratio, times a tail factor: ``exp(e)``, with ``e`` drawn
from how far the top tenth of every observation's ``z`` lies beyond their 90th percentile (Kaplan-Meier
weighted). A job that has run long is taken to run on in proportion (a heavy, Pareto-like tail, as run
times have), not to end now. With no spread above the 90th percentile (exact estimates) the factor is
1: the job ends now, as the scheduler's own plan assumes.

Draws are vectorised per window and use two uniforms per job from the caller's generator, so a seeded
run draws the same numbers on every call.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from kant.twin.snapshot import TwinSnapshot
from kant.twin.survival import product_limit

__all__ = ["RatioModel", "km", "km_level", "censored_slope", "neighbours", "SLOPE_ROUNDS", "TAIL_LEVEL"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

#: rounds of the censored slope fit (Buckley-James; it stops sooner once the slope settles)
SLOPE_ROUNDS = 20
#: a window's start is on a grid of k / WINDOW_GRID positions (RatioModel._window_lo)
WINDOW_GRID = 32
#: the tail factor is drawn from the excesses of ``z`` over this quantile (module docstring)
TAIL_LEVEL = 0.9


def neighbours(n: int) -> int:
    """How many observations, nearest in planned run time, a job's ratio is drawn from: a quarter of
    them (at least 10). Chosen on the accuracy bench (docs/whatif.md): the square root of ``n``
    halved the median error but overfitted (the P90 error grew by half)."""
    return min(n, max(10, math.ceil(n / 4)))


def km(exit_: FloatArray, event: BoolArray, entry: FloatArray) -> tuple[FloatArray, FloatArray, float]:
    """The product-limit (Kaplan-Meier) estimate of a law seen right-censored and left-truncated
    (:func:`kant.twin.survival.product_limit`: each observation ``i`` is at risk at ``t`` when
    ``entry_i < t <= exit_i``, ``-inf``: from the start). Returns the exits sorted (an event before a
    censoring at the same value), the probability mass at each (0 at a censoring) and the mass beyond
    the last one (the survival there: > 0 when the last one is censored)."""
    x, hazard, surv = product_limit(exit_, event, entry=entry)
    mass = np.concatenate([[1.0], surv[:-1]]) * hazard if x.size else surv
    return x, mass, float(surv[-1]) if x.size else 1.0


def km_level(x: FloatArray, mass: FloatArray, level: float) -> float | None:
    """The ``level`` quantile of :func:`km`'s estimate (None: the estimate does not reach it)."""
    cum = np.cumsum(mass)
    i = int(np.searchsorted(cum, level - 1e-12))
    return float(x[i]) if i < x.size else None


def censored_slope(log_planned: FloatArray, log_exit: FloatArray, event: BoolArray, log_entry: FloatArray) -> float:
    """The least-squares slope of ``log(ratio)`` on ``log(planned)``, censoring-aware (Buckley-James):
    each censored log ratio is replaced by its expected value given that it lies above what the job has
    run (the Kaplan-Meier estimate of the residuals about the current line, left-truncated as the
    observations are), the line refitted, until the slope moves by less than 1e-4 (at most
    :data:`SLOPE_ROUNDS` rounds). Started from the ended jobs' own slope. Without censoring it is the
    plain least-squares slope, as before; least squares over the ended jobs alone is biased (too
    steep: at long planned run times the long runs have not ended). A censored residual beyond the
    estimate's last mass keeps its value (a lower bound)."""
    x = log_planned
    vx = float(np.var(x))
    if vx <= 1e-12 or not event.any():
        return 0.0
    seen = x[event]
    slope = (float(np.mean((seen - seen.mean()) * (log_exit[event] - log_exit[event].mean())) / np.var(seen))
             if float(np.var(seen)) > 1e-12 else 0.0)
    cens = ~event
    if not cens.any():
        return slope
    for _ in range(SLOPE_ROUNDS):
        res = log_exit - slope * x
        v, mass, _ = km(res, event, log_entry - slope * x)
        above_w = np.cumsum(mass[::-1])[::-1]  # the estimate's mass at or above each sorted residual
        above_m = np.cumsum((mass * v)[::-1])[::-1]
        j = np.searchsorted(v, res[cens], side="right")  # the first residual above each censored one
        inside = j < v.size
        jj = np.minimum(j, v.size - 1)
        w = np.where(inside, above_w[jj], 0.0)
        expect = np.where(w > 1e-12, np.divide(above_m[jj], w, out=np.zeros_like(w), where=w > 1e-12), res[cens])
        y = log_exit.copy()
        y[cens] = slope * x[cens] + np.maximum(expect, res[cens])
        new = float(np.mean((x - x.mean()) * (y - y.mean())) / vx)
        done = abs(new - slope) < 1e-4
        slope = new
        if done:
            break
    return slope


def _log_entry(before: FloatArray, planned: FloatArray) -> FloatArray:
    """``log`` of the ratio at which a job entered the sample (``-inf``: it started after the cut)."""
    out = np.full(before.size, -math.inf)
    pos = before > 0
    out[pos] = np.log(before[pos] / planned[pos])
    return out


class RatioModel:
    """The run-time error as a function of the planned run time, fitted on finished (observed) and
    running (right-censored) jobs (module docstring). :meth:`fit` builds it from a snapshot,
    :meth:`sample` draws run times; each window's estimate is computed once, when first drawn from."""

    def __init__(self, planned: FloatArray, z: FloatArray, event: BoolArray, z_entry: FloatArray, slope: float,
                 k: int) -> None:
        order = np.argsort(planned, kind="stable")
        self.planned = planned[order]  # ones when not known: slope 0, one window of every observation
        self.z, self.event, self.z_entry = z[order], event[order], z_entry[order]
        self.slope = slope
        self.k = k
        x, mass, _ = km(self.z, self.event, self.z_entry)
        q = km_level(x, mass, TAIL_LEVEL)
        q = float(x[mass > 0][-1]) if q is None and (mass > 0).any() else q
        above = (mass > 0) & (x > q) if q is not None else np.zeros(x.size, dtype=bool)
        #: the tail's excesses of z over its TAIL_LEVEL quantile and their cumulative weights (empty: factor 1)
        self.tail_excess = x[above] - (q or 0.0)
        self.tail_cum = np.cumsum(mass[above]) / mass[above].sum() if above.any() else np.zeros(0)
        self._windows: dict[int, tuple[FloatArray, FloatArray, float]] = {}

    @classmethod
    def fit(cls, snap: TwinSnapshot) -> RatioModel:
        """The model of ``snap``'s finished jobs (``ratios``, ``planned``, ``ended``) and its running
        jobs (censored at ``elapsed / estimate``)."""
        ratios = np.asarray(snap.ratios, dtype=np.float64)
        known = bool(snap.planned)
        planned = np.asarray(snap.planned, dtype=np.float64) if known else np.ones_like(ratios)
        est = np.asarray(snap.jobs["estimate"], dtype=np.float64)
        rows = [r for r, run in snap.sched.running.items()
                if 0 < est[r] < math.inf and snap.now - run.start > 0]
        start_r = np.asarray([snap.sched.running[r].start for r in rows], dtype=np.float64)
        p_run = est[rows] if rows else np.zeros(0)
        p_all = np.concatenate([planned, p_run if known else np.ones(len(rows))])
        exit_ = np.concatenate([ratios, (snap.now - start_r) / np.maximum(p_run, 1e-300)])
        # left truncation: seen from (ratios_from - start) / planned; -inf: from its start (or not known)
        entry = np.full(exit_.size, -math.inf)
        if snap.ratios_from is not None and known and snap.ended:
            since = float(snap.ratios_from)
            start_f = np.asarray(snap.ended, dtype=np.float64) - ratios * planned
            entry[:ratios.size] = _log_entry(since - start_f, planned)
            entry[ratios.size:] = _log_entry(since - start_r, p_run)
        event = np.concatenate([np.ones(ratios.size, dtype=bool), np.zeros(len(rows), dtype=bool)])
        return cls.observed(p_all, exit_, event, entry, by_planned=known)

    @classmethod
    def observed(cls, planned: FloatArray, exit_: FloatArray, event: BoolArray, log_entry: FloatArray | None = None,
                 *, by_planned: bool = True) -> RatioModel:
        """The model of ratios ``exit_`` of jobs planned at ``planned``: observed where ``event``, else only
        known to be above it; ``log_entry``: the log of the ratio from which each was seen (None: all from
        0). ``by_planned`` False: one window of every ratio, slope 0 (the planned run times not known)."""
        n = exit_.size
        entry = np.full(n, -math.inf) if log_entry is None else log_entry
        log_p, log_x = np.log(planned), np.log(exit_)
        fit = by_planned and n >= 3
        slope = censored_slope(log_p, log_x, event, entry) if fit else 0.0
        return cls(planned, log_x - slope * log_p, event, entry - slope * log_p, slope, neighbours(n) if fit else n)

    def _window_lo(self, est: FloatArray) -> IntArray:
        """Each estimate's window start: the k observations nearest in planned run time, centred on the
        estimate's place among them, the start rounded to a grid of k / WINDOW_GRID positions (off
        centre by under 1/64 of the window: a prediction then computes at most a few dozen windows'
        estimates, not one per distinct estimate). Near either end the window is cut there, not moved
        inward (:meth:`window`): it keeps at least half its observations and stays centred on the
        estimate. A start below 0 or past ``n - k`` says so; with one window of every observation
        (``k = n``) it is 0."""
        n, k = self.planned.size, self.k
        if k >= n:
            return np.zeros(est.size, dtype=np.int64)
        step = max(1, k // WINDOW_GRID)
        # the estimate's place: the middle of the observations planned at exactly it, if any
        pos = (np.searchsorted(self.planned, est, side="left") + np.searchsorted(self.planned, est, side="right")) // 2
        lo = np.rint((pos - k // 2) / step).astype(np.int64) * step
        out: IntArray = np.clip(lo, -(k // 2), n - (k + 1) // 2)
        return out

    def window(self, lo: int) -> tuple[FloatArray, FloatArray, float]:
        """The window from sorted position ``lo`` (:meth:`_window_lo`: the observations from ``lo`` to
        ``lo + k``, cut at either end): its ``z`` sorted, the estimate's cumulative mass at each, and its
        largest observation (event or censored)."""
        got = self._windows.get(lo)
        if got is None:
            sl = self._rows(lo)
            x, mass, tail = km(self.z[sl], self.event[sl], self.z_entry[sl])
            cum = np.cumsum(mass)
            if tail <= 1e-12 and cum.size and cum[-1] > 0:
                cum = cum / cum[-1]  # (no mass beyond the last: rounding must not leave any)
            got = (x, cum, float(x[-1]))
            self._windows[lo] = got
        return got

    def _rows(self, lo: int) -> slice:
        return slice(max(lo, 0), min(lo + self.k, self.planned.size))

    def rows(self, estimate: float) -> slice:
        """The observations a job planned at ``estimate`` draws from, as positions in the model's arrays
        (``planned``, ``z``, ``event``: sorted by planned run time)."""
        return self._rows(int(self._window_lo(np.asarray([estimate]))[0]))

    def draws(self, estimate: float) -> tuple[FloatArray, FloatArray]:
        """The ratios a job planned at ``estimate`` may draw (its window's observed ones, carried to it)
        and their probabilities (less than 1 in all when some lies in the tail)."""
        x, cum, _ = self.window(int(self._window_lo(np.asarray([estimate]))[0]))
        mass = np.diff(np.concatenate([[0.0], cum]))
        keep = mass > 0
        return np.exp(x[keep]) * estimate ** self.slope, mass[keep]

    def sample(self, est: FloatArray, rng: np.random.Generator, elapsed: FloatArray | None = None) -> FloatArray:
        """One run time per estimate, ``est x`` a ratio from its window's estimate; where ``elapsed > 0``
        (a running job), from the estimate above ``elapsed / est`` (module docstring: the tail)."""
        n = est.size
        u, v = rng.random(n), rng.random(n)
        ok = (est > 0) & np.isfinite(est)
        with np.errstate(divide="ignore", invalid="ignore"):
            shift = np.where(ok, self.slope * np.log(np.where(ok, est, 1.0)), 0.0)
            floor = (np.where(ok & (elapsed > 0), np.log(elapsed / np.where(ok, est, 1.0)), -np.inf) - shift
                     if elapsed is not None else np.full(n, -np.inf))
        lo = self._window_lo(est)
        z = np.empty(n)
        order = np.argsort(lo, kind="stable")
        starts = np.flatnonzero(np.diff(lo[order], prepend=-1))  # each window's first row in ``order``
        for a, b in zip(starts.tolist(), [*starts[1:].tolist(), n], strict=True):
            sel = order[a:b]
            x, cum, last = self.window(int(lo[sel[0]]))
            below = np.concatenate([[0.0], cum])[np.searchsorted(x, floor[sel], side="right")]
            q = below + u[sel] * (1.0 - below)
            inside = q < (cum[-1] if cum.size else 0.0)
            i = np.minimum(np.searchsorted(cum, q, side="right"), max(x.size - 1, 0))
            beyond = np.maximum(last, floor[sel]) + self._tail(v[sel])
            z[sel] = np.where(inside, x[i] if x.size else 0.0, beyond)
        out: FloatArray = est * np.exp(z + shift)
        return out

    def _tail(self, v: FloatArray) -> FloatArray:
        """Tail excesses of ``z`` for uniforms ``v`` (0 when the observations have no tail)."""
        if not self.tail_excess.size:
            return np.zeros(v.size)
        out: FloatArray = self.tail_excess[np.minimum(np.searchsorted(self.tail_cum, v, side="right"),
                                                      self.tail_excess.size - 1)]
        return out
