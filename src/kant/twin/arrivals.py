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
  they say it runs), drawn uniformly among every past arrival of the window, whatever its hour: a
  rare shape (a 32-GPU gang seen twice in a week) is sampled at its rate in the whole history, not
  only when the same hour of the day happened to have one.
- **When.** Arrivals in each hour segment of ``[now, now + horizon)`` are Poisson with the hour's
  rate, placed uniformly in it.

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
        return cls(hist, rate, first, now)

    def __len__(self) -> int:
        return len(self.history["submit"])

    def expected(self, horizon_s: float) -> float:
        """The mean number of arrivals in ``[now, now + horizon_s)``."""
        return float(sum(self.rate[h] * (b - a) for a, b, h in _segments(self.now, self.now + horizon_s)))

    def sample(self, rng: np.random.Generator, horizon_s: float) -> Arrivals:
        """One draw of the arrivals in ``(now, now + horizon_s)``, in submit order."""
        times: list[FloatArray] = []
        rows: list[IntArray] = []
        n_all = len(self)
        for a, b, h in _segments(self.now, self.now + horizon_s):
            k = int(rng.poisson(self.rate[h] * (b - a)))
            if not k:
                continue
            t = np.sort(a + (b - a) * rng.random(k))
            times.append(t)
            rows.append(rng.integers(0, n_all, size=k).astype(np.int64))
        if not times:
            return Arrivals(np.zeros(0), np.zeros(0, dtype=np.int64))
        return Arrivals(np.concatenate(times), np.concatenate(rows))

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
