"""The jobs that have not arrived yet: an arrival model learned from the service's own history.

A live service keeps its recent arrivals (each job's submit time, tenant, user, shape and planned run
time; :attr:`TwinSnapshot.arrivals`). :class:`ArrivalModel` turns them into a sampler of future
arrivals for the forward runs:

- **Rate by time of day, across days.** The history covers ``[first, now]`` (up to ``window_s``,
  default 7 days). For each hour of the day ``h`` it has ``E_h`` seconds of exposure (how much of the
  window fell in that hour of the day, summed over the days) and ``C_h`` arrivals. The hour's rate
  is ``(C_h + A x r) / (E_h + A)``, with ``r`` the overall rate ``C / (now - first)`` over the whole
  window and ``A`` :data:`SHRINK_S` (two hours): an hour of the day seen on one day gets a third of
  its own rate and two thirds of the overall one; seen on every day of a week, 7/9 of its own. One
  busy day is then read as "a busy day", not as "every day is like this", and the rate averages over
  every day the history holds.
- **Which jobs.** Each sampled arrival is a copy of a past arrival (tenant, user, shape, GPU type,
  priority and planned run time together: the bootstrap keeps who asks for what, and how long
  they say it runs), taken from the whole window, whatever its hour: a rare shape (a 32-GPU gang seen
  twice in a week) is sampled at its rate in the whole history, not only when the same hour of the
  day happened to have one.
- **In bursts, as users submit.** Users submit in batches (a sweep of a dozen jobs within minutes),
  so arrivals come in bursts with lulls between them (on the Philly slice of docs/whatif.md, the counts
  in 10-minute windows vary 27 times as much as Poisson arrivals' would). The history is cut into
  *bursts*: one user's arrivals (same tenant and user) each within :data:`BURST_GAP_S` of that user's
  previous one. A sampled burst is a copy of a past burst, chosen uniformly among the window's bursts:
  its jobs together, at the same offsets from its first arrival.
- **When.** Bursts start in each hour segment of ``[now, now + horizon)`` as a Poisson process with
  the hour's rate divided by the mean burst size (so the expected arrivals per hour are the hour's
  rate), placed uniformly in it; a burst's later jobs may fall in the next hour.

With fewer than :data:`MIN_ARRIVALS` arrivals, or less than an hour of history, there is no model:
the forward runs are "if nothing else arrives" and the answer says so.

Sampling is deterministic: :meth:`ArrivalModel.sample` takes the generator of the forward run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["ARRIVAL_COLUMNS", "ArrivalModel", "MIN_ARRIVALS", "Arrivals"]

HOUR = 3600.0
DAY = 86400.0
#: fewer past arrivals than this: no arrival model
MIN_ARRIVALS = 20
#: how far back the history is used
DEFAULT_WINDOW_S = 7 * DAY
#: the shrinkage of an hour of the day's rate towards the overall rate: this much exposure at that rate
SHRINK_S = 2 * HOUR
#: one user's arrivals at most this far apart belong to one burst (see the module docstring)
BURST_GAP_S = 300.0
#: one past arrival: its columns (as a snapshot's job columns, without ``name`` and ``estimate``'s
#: user meaning: ``estimate`` is the run time the scheduler planned it with)
ARRIVAL_COLUMNS = ("submit", "tenant", "user", "workers", "gpus_per_worker", "gpu_milli", "cpu_milli",
                   "memory_mib", "gpu_type", "priority", "kind", "estimate")

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Arrivals:
    """Sampled future arrivals: ``rows[i]`` is the history row copied, arriving at ``submit[i]``."""

    submit: FloatArray
    rows: IntArray

    def __len__(self) -> int:
        return int(self.submit.size)


@dataclass(frozen=True)
class ArrivalModel:
    """Past arrivals (columns by :data:`ARRIVAL_COLUMNS`, in submit order) and the hourly rates
    learned from them (see the module docstring)."""

    history: Mapping[str, tuple[Any, ...]]
    rate: FloatArray  # arrivals per second, by hour of the day (24)
    first: float
    now: float
    #: the history's rows burst by burst (each burst's in submit order), where burst ``b`` is
    #: ``burst_rows[burst_bounds[b]:burst_bounds[b + 1]]``, and each row's offset from its burst's first
    #: arrival (aligned with ``burst_rows``)
    burst_rows: IntArray
    burst_bounds: IntArray
    burst_offset: FloatArray

    @classmethod
    def learn(cls, history: Mapping[str, tuple[Any, ...]], now: float,
              window_s: float = DEFAULT_WINDOW_S) -> ArrivalModel | None:
        """The model of ``history`` as of ``now`` (None: too little history, see the module docstring)."""
        submit = np.asarray(history.get("submit", ()), dtype=np.float64)
        keep = np.flatnonzero((submit >= now - window_s) & (submit <= now))
        if keep.size < MIN_ARRIVALS:
            return None
        first = float(submit[keep].min())
        span = now - first
        if span < HOUR:
            return None
        hist = {c: tuple(history[c][int(i)] for i in keep) for c in ARRIVAL_COLUMNS}
        sub = submit[keep]
        hour = (np.floor(np.mod(sub, DAY) / HOUR)).astype(np.int64)
        counts = np.bincount(hour, minlength=24).astype(np.float64)
        exposure = _exposure(first, now)
        overall = keep.size / span
        rate = (counts + SHRINK_S * overall) / (exposure + SHRINK_S)
        rows, bounds, offset = _bursts(hist["tenant"], hist["user"], sub)
        return cls(hist, rate, first, now, rows, bounds, offset)

    def __len__(self) -> int:
        return len(self.history["submit"])

    def expected(self, horizon_s: float) -> float:
        """The mean number of arrivals in ``[now, now + horizon_s)``."""
        return float(sum(self.rate[h] * (b - a) for a, b, h in _segments(self.now, self.now + horizon_s)))

    def sample(self, rng: np.random.Generator, horizon_s: float) -> Arrivals:
        """One draw of the arrivals in ``(now, now + horizon_s)``, in submit order: bursts copied from the
        history (module docstring)."""
        bounds = self.burst_bounds
        bursts = bounds.size - 1
        per_burst = len(self) / bursts  # the mean burst size
        starts: list[FloatArray] = []
        which: list[IntArray] = []
        for a, b, h in _segments(self.now, self.now + horizon_s):
            k = int(rng.poisson(self.rate[h] * (b - a) / per_burst))
            if not k:
                continue
            starts.append(a + (b - a) * rng.random(k))
            which.append(rng.integers(0, bursts, size=k).astype(np.int64))
        if not starts:
            return Arrivals(np.zeros(0), np.zeros(0, dtype=np.int64))
        t0, ids = np.concatenate(starts), np.concatenate(which)
        size = bounds[ids + 1] - bounds[ids]
        # the positions (in burst order) of every copied burst's rows, burst after burst
        pos = np.repeat(bounds[ids] - (np.cumsum(size) - size), size) + np.arange(int(size.sum()))
        submit = np.repeat(t0, size) + self.burst_offset[pos]
        keep = submit < self.now + horizon_s
        submit, rows = submit[keep], self.burst_rows[pos][keep]
        order = np.argsort(submit, kind="stable")
        return Arrivals(submit[order], rows[order])

    def describe(self) -> dict[str, Any]:
        """What the model learned, for answers and docs: arrivals seen, hours of history, the mean
        rate per hour, the planned GPU-hours that arrived per hour of history (GPUs times the
        estimate), the busiest and quietest hour of the day and the largest gang seen (GPUs)."""
        gangs = np.asarray(self.history["workers"], dtype=np.int64) * np.asarray(
            self.history["gpus_per_worker"], dtype=np.int64)
        planned = float(np.dot(gangs, np.asarray(self.history["estimate"], dtype=np.float64))) / HOUR
        return {"arrivals": len(self), "history_h": round((self.now - self.first) / HOUR, 2),
                "largest_gang": int(gangs.max()) if gangs.size else 0,
                "per_hour": round(float(self.rate.mean()) * HOUR, 2),
                "planned_gpu_h_per_hour": round(planned / max((self.now - self.first) / HOUR, 1e-9), 1),
                "busiest_hour": int(np.argmax(self.rate)), "quietest_hour": int(np.argmin(self.rate))}


def _bursts(tenant: tuple[Any, ...], user: tuple[Any, ...],
            submit: FloatArray) -> tuple[IntArray, IntArray, FloatArray]:
    """The bursts of the arrivals (module docstring), met in submit order whatever the rows' order:
    (rows burst by burst, each burst's bounds in them, each row's offset from its burst's first
    arrival)."""
    burst = np.empty(submit.size, dtype=np.int64)
    first: list[float] = []  # each burst's first arrival
    last: dict[tuple[Any, Any], tuple[int, float]] = {}  # (tenant, user) -> (its last burst, last arrival)
    for i in np.argsort(submit, kind="stable").tolist():
        who, t = (tenant[i], user[i]), float(submit[i])
        seen = last.get(who)
        if seen is None or t - seen[1] > BURST_GAP_S:
            b = len(first)
            first.append(t)
        else:
            b = seen[0]
        burst[i] = b
        last[who] = (b, t)
    rows = np.lexsort((submit, burst)).astype(np.int64)
    bounds = np.searchsorted(burst[rows], np.arange(len(first) + 1)).astype(np.int64)
    offset = submit[rows] - np.asarray(first, dtype=np.float64)[burst[rows]]
    return rows, bounds, offset


def _segments(lo: float, hi: float) -> list[tuple[float, float, int]]:
    """``[lo, hi)`` cut at whole hours of the day: (start, end, hour of the day) per piece."""
    out = []
    t = lo
    while t < hi:
        nxt = min((math.floor(t / HOUR) + 1) * HOUR, hi)
        out.append((t, nxt, int((t % DAY) // HOUR) % 24))
        t = nxt
    return out


def _exposure(lo: float, hi: float) -> FloatArray:
    """Seconds of ``[lo, hi)`` in each hour of the day."""
    out = np.zeros(24)
    days = math.floor((hi - lo) / DAY)
    out += days * HOUR
    for a, b, h in _segments(lo + days * DAY, hi):
        out[h] += b - a
    return out
