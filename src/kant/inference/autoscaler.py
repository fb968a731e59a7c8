"""A horizontal pod autoscaler with the semantics of the Kubernetes HPA (``autoscaling/v2``).

Every ``period_s`` seconds (the controller's sync period, 15 s in Kubernetes) the autoscaler reads the
service's load over the last ``metric_window_s`` seconds, as *offered load in replicas* ``L`` (request
rate divided by the capacity of one replica: at ``L = 3`` three replicas would be exactly busy), and
decides the replica count. With ``R`` the current (desired, not necessarily ready) replica count and
``u* = target_utilization``:

1. **Raw recommendation.** ``ratio = L / (R u*)``; if ``|ratio - 1| <= tolerance`` keep ``R``, else
   ``ceil(R ratio) = ceil(L / u*)`` (Kubernetes' ``desired = ceil(current x metric / target)``). With
   ``R = 0`` it is ``ceil(L / u*)``. If ``R`` is outside ``[min, max]`` it is first set to the bound.
2. **Stabilisation.** Every raw recommendation is remembered with its time. The scale-up
   recommendation is the *minimum* of the raw ones newer than ``scale_up.stabilization_window_s``
   (and the current one), the scale-down recommendation the *maximum* of those newer than
   ``scale_down.stabilization_window_s``; the result is ``R`` raised to the first and lowered to the
   second (Kubernetes ``stabilizeRecommendationWithBehaviors``). Default windows: 0 s up, 300 s down.
3. **Rate limits.** Each policy ``{type: Pods|Percent, value, period_s}`` allows, from the replica
   count at the start of its period (``R`` minus replicas added plus replicas removed by scaling
   events newer than ``period_s``), up to ``+value`` pods or ``ceil(start x (1 + value/100))`` when
   scaling up, down to ``start - value`` or ``floor(start x (1 - value/100))`` when scaling down.
   ``select_policy: Max`` takes the policy allowing the largest change, ``Min`` the smallest,
   ``Disabled`` forbids scaling in that direction. Defaults: up ``max(+100 %, +4 pods) per 15 s``,
   down ``-100 % per 15 s``. The result is finally kept within ``[min_replicas, max_replicas]``.

Differences from Kubernetes: the load is the service's true offered load (no metrics-server delay or
sampling noise beyond the averaging window), and the utilisation is taken over the *desired* replica
count, so replicas still starting count as capacity (Kubernetes counts not-ready pods as idle when
scaling up, which gives the same ``ceil(L / u*)``). The recommendations do not depend on where or
whether replicas are placed, so the whole schedule is computed before the simulation
(:func:`autoscale`) and the simulator only applies its changes.

One implementation: :class:`Hpa` is the controller (one :meth:`Hpa.decide` per sync period, keeping
the stabilisation windows and the recent scaling events); :func:`autoscale` is a loop over it, and the
live service (:mod:`kant.service.serving.autoscale`) calls the same ``decide`` every ``period_s`` with
the load its request route measured.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Hpa", "HpaConfig", "ScalingPolicy", "ScalingRules", "Schedule", "autoscale", "default_scale_down",
           "default_scale_up"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_EPS = 1e-9


class ScalingPolicy(BaseModel):
    """One rate limit: at most ``value`` pods (or percent) of change per ``period_s`` seconds."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    type: Literal["Pods", "Percent"]
    value: int = Field(gt=0)
    period_s: float = Field(gt=0, le=1800)


class ScalingRules(BaseModel):
    """Kubernetes ``HPAScalingRules`` for one direction."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    stabilization_window_s: float = Field(default=0.0, ge=0, le=3600)
    select_policy: Literal["Max", "Min", "Disabled"] = "Max"
    policies: tuple[ScalingPolicy, ...] = Field(min_length=1)


def default_scale_up() -> ScalingRules:
    return ScalingRules(stabilization_window_s=0.0, policies=(
        ScalingPolicy(type="Percent", value=100, period_s=15), ScalingPolicy(type="Pods", value=4, period_s=15)))


def default_scale_down() -> ScalingRules:
    return ScalingRules(stabilization_window_s=300.0,
                        policies=(ScalingPolicy(type="Percent", value=100, period_s=15),))


class HpaConfig(BaseModel):
    """Autoscaler settings (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    period_s: float = Field(default=15.0, gt=0)
    target_utilization: float = Field(default=0.7, gt=0, le=1.0)
    tolerance: float = Field(default=0.1, ge=0, lt=1.0)
    metric_window_s: float | None = Field(default=None, gt=0)
    scale_up: ScalingRules = Field(default_factory=default_scale_up)
    scale_down: ScalingRules = Field(default_factory=default_scale_down)

    @property
    def window(self) -> float:
        """Seconds of load averaged per decision (default: one period)."""
        return self.metric_window_s if self.metric_window_s is not None else self.period_s


@dataclass(frozen=True)
class Schedule:
    """The autoscaler's decisions as a step function: ``replicas[k]`` holds from ``times[k]`` on.
    ``times[0]`` is the service start (``replicas[0]`` the initial count); later entries are only the
    ticks where the count changed. ``ticks`` is how many decisions were taken."""

    times: FloatArray
    replicas: IntArray
    ticks: int

    def at(self, t: npt.ArrayLike) -> IntArray:
        """Desired replicas at time(s) ``t`` (the initial count before the start)."""
        k = np.searchsorted(self.times, np.asarray(t, dtype=np.float64), side="right") - 1
        out: IntArray = self.replicas[np.clip(k, 0, len(self.replicas) - 1)]
        return out


def _limit(current: int, rules: ScalingRules, ups: deque[tuple[float, int]], downs: deque[tuple[float, int]],
           now: float, *, up: bool) -> int:
    """The furthest count from ``current`` the rules' policies allow in one direction: each policy
    counts from what the count was ``period_s`` ago (changes since then undone) and allows ``value``
    pods or percent more (``up``) or fewer; ``Max`` takes the policy allowing the largest change."""
    if rules.select_policy == "Disabled":
        return current
    proposals: list[int] = []
    for p in rules.policies:
        cutoff = now - p.period_s
        added = sum(n for t, n in ups if t > cutoff)
        removed = sum(n for t, n in downs if t > cutoff)
        start = current - added + removed
        if up:
            proposals.append(start + p.value if p.type == "Pods" else math.ceil(start * (1 + p.value / 100) - _EPS))
        else:
            proposals.append(start - p.value if p.type == "Pods" else math.floor(start * (1 - p.value / 100) + _EPS))
    assert proposals
    # the largest change is the highest count going up and the lowest going down
    return max(proposals) if (rules.select_policy == "Max") == up else min(proposals)


class Hpa:
    """The autoscaler as an incremental controller: :meth:`decide` is one decision (a sync period's),
    and the object keeps what the next decision needs (the stabilisation windows, the recent scaling
    events, the current count). :func:`autoscale` (the simulator's whole schedule) and the live
    service's loop (one decision every ``period_s``) call it alike."""

    def __init__(self, config: HpaConfig, *, min_replicas: int, max_replicas: int, initial: int | None = None) -> None:
        if not 0 <= min_replicas <= max_replicas:
            raise ValueError("need 0 <= min_replicas <= max_replicas")
        self.config = config
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        up, down = config.scale_up, config.scale_down
        self._horizon = max([p.period_s for p in up.policies] + [p.period_s for p in down.policies])
        #: the replica count the autoscaler last decided (or was told: :meth:`decide`'s ``current``)
        self.current = min(max(min_replicas if initial is None else int(initial), min_replicas), max_replicas)
        # sliding-window minimum / maximum of the raw recommendations (monotonic deques of (time, value))
        self._low: deque[tuple[float, int]] = deque()
        self._high: deque[tuple[float, int]] = deque()
        self._ups: deque[tuple[float, int]] = deque()  # (time, replicas added)
        self._downs: deque[tuple[float, int]] = deque()  # (time, replicas removed)

    def raw(self, load: float) -> int:
        """The raw recommendation for offered load ``load`` (replicas), before the tolerance."""
        return math.ceil(load / self.config.target_utilization - _EPS)

    def decide(self, now: float, load: float, *, current: int | None = None, raw: int | None = None) -> int:
        """One decision at time ``now`` (not before the last one) with offered load ``load`` in
        replicas; returns the desired replica count (also kept as :attr:`current`). ``current``: the
        count now, when something else changed it since the last decision (a user's scale); ``raw``:
        :meth:`raw` of ``load`` when the caller has it already."""
        cfg = self.config
        target, tol = cfg.target_utilization, cfg.tolerance
        up, down = cfg.scale_up, cfg.scale_down
        min_replicas, max_replicas = self.min_replicas, self.max_replicas
        ups, downs, low, high = self._ups, self._downs, self._low, self._high
        horizon = self._horizon
        if current is not None:
            self.current = int(current)
        while ups and ups[0][0] <= now - horizon:
            ups.popleft()
        while downs and downs[0][0] <= now - horizon:
            downs.popleft()
        cur = self.current
        if cur > max_replicas:
            desired = max_replicas
        elif cur < min_replicas:
            desired = min_replicas
        else:
            rec = self.raw(load) if raw is None else raw
            if cur > 0 and abs(load / (cur * target) - 1.0) <= tol:
                rec = cur
            # stabilisation: min over (now - up_win, now], max over (now - down_win, now]
            while low and low[0][0] <= now - up.stabilization_window_s:
                low.popleft()
            while low and low[-1][1] >= rec:
                low.pop()
            low.append((now, rec))
            while high and high[0][0] <= now - down.stabilization_window_s:
                high.popleft()
            while high and high[-1][1] <= rec:
                high.pop()
            high.append((now, rec))
            desired = max(cur, low[0][1])
            desired = min(desired, high[0][1])
            # rate limits and bounds
            if desired > cur:
                limit = max(_limit(cur, up, ups, downs, now, up=True), cur)
                desired = min(desired, limit, max_replicas)
            elif desired < cur:
                limit = min(_limit(cur, down, ups, downs, now, up=False), cur)
                desired = max(desired, limit, min_replicas)
        if desired != cur:
            if desired > cur:
                ups.append((now, desired - cur))
            else:
                downs.append((now, cur - desired))
            self.current = desired
        return desired


def autoscale(tick_times: npt.ArrayLike, load: npt.ArrayLike, *, min_replicas: int, max_replicas: int,
              config: HpaConfig, start: float = 0.0, initial: int | None = None) -> Schedule:
    """Run the autoscaler over decision times ``tick_times`` (increasing) with the offered load in
    replicas ``load[k]`` seen at tick ``k``; the service starts at ``start`` with ``initial``
    replicas (default ``min_replicas``): one :class:`Hpa` decision per tick."""
    times = np.asarray(tick_times, dtype=np.float64)
    loads = np.asarray(load, dtype=np.float64)
    if times.shape != loads.shape:
        raise ValueError("tick_times and load must have the same length")
    hpa = Hpa(config, min_replicas=min_replicas, max_replicas=max_replicas, initial=initial)
    out_t: list[float] = [float(start)]
    out_r: list[int] = [hpa.current]
    raw_all = np.ceil(loads / config.target_utilization - _EPS).astype(np.int64).tolist()
    load_list = loads.tolist()
    for k, now in enumerate(times.tolist()):
        before = hpa.current
        desired = hpa.decide(now, load_list[k], raw=raw_all[k])
        if desired != before:
            out_t.append(now)
            out_r.append(desired)
    return Schedule(np.asarray(out_t, dtype=np.float64), np.asarray(out_r, dtype=np.int64), int(times.size))
