"""The Kubernetes-HPA autoscaler on hand-made load steps (every expected decision worked out by hand)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kant.inference.autoscaler import Hpa, HpaConfig, ScalingPolicy, ScalingRules, autoscale

P = 15.0  # tick period of the hand cases


def _run(loads: list[float], *, cfg: HpaConfig | None = None, min_r: int = 1, max_r: int = 100,
         initial: int | None = None) -> list[tuple[float, int]]:
    """Changes ``(time, replicas)`` after the start, ticks at 15, 30, ... with ``loads[k]`` at tick k."""
    cfg = cfg or HpaConfig(period_s=P, target_utilization=1.0)
    t = P * np.arange(1, len(loads) + 1)
    s = autoscale(t, np.asarray(loads, dtype=float), min_replicas=min_r, max_replicas=max_r, config=cfg,
                  initial=initial)
    assert s.times[0] == 0.0 and s.ticks == len(loads)
    return list(zip(s.times[1:].tolist(), s.replicas[1:].tolist(), strict=True))


def _rules(window: float, *policies: tuple[str, int, float], select: str = "Max") -> ScalingRules:
    return ScalingRules(stabilization_window_s=window, select_policy=select,  # type: ignore[arg-type]
                        policies=tuple(ScalingPolicy(type=k, value=v, period_s=p)  # type: ignore[arg-type]
                                       for k, v, p in policies))


CASES = [
    # name, loads, kwargs, expected changes
    (
        # default scale-up policies max(+100 %, +4 pods) per 15 s from 1: max(ceil(1 x 2), 1 + 4) = 5 at t=15;
        # the event at t=15 is not newer than 30 - 15, so from 5: max(10, 9) = 10 at t=30
        "step up, default rate limits",
        [10.0] * 4, {}, [(15.0, 5), (30.0, 10)],
    ),
    (
        # at 10 replicas, load 10.5 is ratio 1.05 (inside tolerance 0.1): no change; 11.5 -> ceil(11.5) = 12
        "tolerance",
        [10.5, 10.5, 11.5], {"initial": 10}, [(45.0, 12)],
    ),
    (
        # target 0.5: load 3 -> ceil(3 / 0.5) = 6 (from 2: max(4, 6) = 6 at once)
        "target utilisation",
        [3.0, 3.0], {"initial": 2, "cfg": HpaConfig(period_s=P, target_utilization=0.5)}, [(15.0, 6)],
    ),
    (
        # load 10 until t=150 (ticks 1..10), then 2. The default 300 s scale-down window keeps the max
        # of recommendations newer than t - 300: the last 10 (t=150) leaves the window at t=450, when
        # the count drops to 2 in one step (-100 % per 15 s allows down to 0, then min/raw 2)
        "scale-down stabilisation window",
        [10.0] * 10 + [2.0] * 25, {"initial": 10}, [(450.0, 2)],
    ),
    (
        # scale-down limited to 1 pod per 60 s, no window: 10 -> 9 at t=15; the event at t=15 counts
        # while it is newer than t - 60, i.e. until t=75 exclusive: 8 at t=75, 7 at t=135
        "scale-down rate limit",
        [0.0] * 9,
        {"initial": 10,
         "cfg": HpaConfig(period_s=P, target_utilization=1.0, scale_down=_rules(0.0, ("Pods", 1, 60.0)))},
        [(15.0, 9), (75.0, 8), (135.0, 7)],
    ),
    (
        # select_policy Min on scale-up: from 1, min(ceil(1 x 2), 1 + 4) = 2; from 2, min(4, 6) = 4; from 4,
        # min(8, 8) = 8, but the raw recommendation is 6
        "select Min on scale-up",
        [6.0] * 4,
        {"cfg": HpaConfig(period_s=P, target_utilization=1.0,
                          scale_up=_rules(0.0, ("Percent", 100, 15.0), ("Pods", 4, 15.0), select="Min"))},
        [(15.0, 2), (30.0, 4), (45.0, 6)],
    ),
    (
        # scale-up stabilisation 30 s: the min of recommendations newer than t - 30; a one-tick spike
        # to 8 (t=30) is ignored (recommendations newer than 0: min(1, 8) = 1); a lasting rise to 5 from
        # t=75 is taken at t=90 (newer than 60: 75 -> 5 and 90 -> 5; at t=75 the 1 of t=60 still counts)
        "scale-up stabilisation window",
        [1.0, 8.0, 1.0, 1.0, 5.0, 5.0, 5.0],
        {"cfg": HpaConfig(period_s=P, target_utilization=1.0, scale_up=_rules(30.0, ("Pods", 10, 15.0)))},
        [(90.0, 5)],
    ),
    (
        # from 2: max(ceil(2 x 2), 2 + 4) = 6 = max_replicas at t=15; at t=45 no load: raw 0, the
        # -100 % policy allows 0, the minimum keeps 2
        "bounds: max and min replicas",
        [50.0, 50.0, 0.0, 0.0], {"max_r": 6, "min_r": 2, "initial": 2,
                                 "cfg": HpaConfig(period_s=P, target_utilization=1.0,
                                                  scale_down=_rules(0.0, ("Percent", 100, 15.0)))},
        [(15.0, 6), (45.0, 2)],
    ),
    (
        # a count outside [min, max] (initial 0 with min 3) is first set to the bound
        "below min is raised first",
        [0.0], {"min_r": 3, "initial": 0}, [],
    ),
    (
        "scale-down disabled",
        [9.0, 0.0, 0.0],
        {"cfg": HpaConfig(period_s=P, target_utilization=1.0,
                          scale_down=_rules(0.0, ("Pods", 1, 15.0), select="Disabled"),
                          scale_up=_rules(0.0, ("Pods", 100, 15.0)))},
        [(15.0, 9)],
    ),
]


@pytest.mark.parametrize(("name", "loads", "kw", "expected"), CASES, ids=[c[0] for c in CASES])
def test_hand_made_load_steps(name: str, loads: list[float], kw: dict, expected: list[tuple[float, int]]) -> None:
    assert _run(loads, **kw) == expected


def test_initial_count_is_clamped() -> None:
    s = autoscale([15.0], [0.0], min_replicas=3, max_replicas=5, config=HpaConfig(), initial=0)
    assert s.replicas.tolist() == [3]  # clamped at the start; a tick with no load keeps the minimum


def test_schedule_lookup() -> None:
    s = autoscale(P * np.arange(1, 5), [10.0] * 4, min_replicas=1, max_replicas=100,
                  config=HpaConfig(period_s=P, target_utilization=1.0))
    # changes at 15 (-> 5) and 30 (-> 10); before 15 the initial 1
    assert s.at([0.0, 14.9, 15.0, 29.0, 30.0, 1e9]).tolist() == [1, 1, 5, 5, 10, 10]


@given(
    loads=st.lists(st.floats(0.0, 60.0), min_size=1, max_size=80),
    min_r=st.integers(0, 5),
    span=st.integers(0, 20),
    target=st.sampled_from([0.5, 0.7, 1.0]),
)
def test_bounds_and_convergence(loads: list[float], min_r: int, span: int, target: float) -> None:
    max_r = min_r + span
    cfg = HpaConfig(period_s=P, target_utilization=target)
    s = autoscale(P * np.arange(1, len(loads) + 1), loads, min_replicas=min_r, max_replicas=max_r, config=cfg)
    assert np.all((s.replicas >= min_r) & (s.replicas <= max_r))
    assert np.all(np.diff(s.times) > 0)
    # hold the last load long enough for every window and limit to pass: the count settles at the
    # raw recommendation (or stays inside the tolerance band around it), within the bounds
    hold = loads + [loads[-1]] * 60
    s2 = autoscale(P * np.arange(1, len(hold) + 1), hold, min_replicas=min_r, max_replicas=max_r, config=cfg)
    final = int(s2.replicas[-1])
    raw = min(max(math.ceil(loads[-1] / target - 1e-9), min_r), max_r)
    if final != raw:
        assert final > 0 and abs(loads[-1] / (final * target) - 1) <= cfg.tolerance


@given(st.lists(st.floats(min_value=0, max_value=50, allow_nan=False), min_size=1, max_size=60),
       st.integers(0, 3), st.integers(1, 20), st.sampled_from([0.5, 0.7, 1.0]), st.sampled_from([0.0, 30.0, 300.0]))
def test_the_live_controller_decides_as_the_schedule(loads: list[float], min_r: int, span: int, target: float,
                                                     down_window: float) -> None:
    """The live service's use of the autoscaler (one ``Hpa.decide`` per period, from the load alone)
    gives the simulator's schedule, decision for decision; a user's scale in between (``current``)
    is where the next decision starts from."""
    cfg = HpaConfig(period_s=P, target_utilization=target,
                    scale_down=_rules(down_window, ("Percent", 100, 15.0)))
    t = P * np.arange(1, len(loads) + 1)
    s = autoscale(t, np.asarray(loads), min_replicas=min_r, max_replicas=min_r + span, config=cfg)
    hpa = Hpa(cfg, min_replicas=min_r, max_replicas=min_r + span)
    live = [hpa.decide(float(now), load) for now, load in zip(t.tolist(), loads, strict=True)]
    assert live == s.at(t).tolist()
    told = Hpa(cfg, min_replicas=min_r, max_replicas=min_r + span)  # told the count is the maximum, no load:
    assert told.decide(P, 0.0, current=min_r + span) == min_r  # -100 % per period allowed: straight to min
    assert told.current == min_r
