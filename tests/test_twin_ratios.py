"""The twin's run-time ratio model (kant.twin.ratios): censoring-aware estimates recover a known law."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.twin.ratios import RatioModel, censored_slope, km

N = 8000  # jobs started over the history
PLANNED = 3600.0


def _ks(draws: np.ndarray, mu: float, sigma: float, upto: float) -> float:
    """Kolmogorov-Smirnov distance of ``draws`` from lognormal(mu, sigma), over the ratios up to
    ``upto`` (beyond the longest a job could have run, no estimate knows the law: the tail rule)."""
    x = np.sort(np.log(draws))
    cdf = 0.5 * (1 + np.vectorize(math.erf)((x - mu) / (sigma * math.sqrt(2))))
    emp = np.arange(1, x.size + 1) / x.size
    gap = np.maximum(np.abs(emp - cdf), np.abs(emp - 1 / x.size - cdf))
    return float(np.max(gap[x <= math.log(upto)]))


def _history(seed: int, mu: float, sigma: float, span: float, n: int = N) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Jobs planned at PLANNED, started uniformly over ``span`` planned run times before now (0), with
    lognormal(mu, sigma) ratios: each one's start, ratio and whether it has ended by now."""
    rng = np.random.default_rng(seed)
    start = -rng.uniform(0, span * PLANNED, n)
    ratio = np.exp(rng.normal(mu, sigma, n))
    return start, ratio, start + ratio * PLANNED <= 0


def _draws(model: RatioModel) -> np.ndarray:
    est = np.full(4000, PLANNED)
    return model.sample(est, np.random.default_rng(1)) / PLANNED


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), mu=st.floats(-0.3, 0.5), sigma=st.floats(0.8, 1.2), span=st.floats(2.0, 4.0))
def test_running_jobs_as_censored_ratios_recover_the_law(seed: int, mu: float, sigma: float, span: float) -> None:
    start, ratio, ended = _history(seed, mu, sigma, span)
    planned = np.full(N, PLANNED)
    exit_ = np.where(ended, ratio, -start / PLANNED)  # a running job: above what it has run
    censored = RatioModel.observed(planned, exit_, ended)
    upto = 0.9 * span
    assert _ks(_draws(censored), mu, sigma, upto) < 0.06
    # the finished jobs alone (the first model) are biased short: the long ones are still running
    finished = RatioModel.observed(planned[ended], ratio[ended], np.ones(int(ended.sum()), dtype=bool))
    assert np.median(_draws(finished)) < math.exp(mu) * 0.9
    assert _ks(_draws(finished), mu, sigma, upto) > 0.1
    # censoring ignored (the running jobs' elapsed ratios taken as ended): biased short too
    ignored = RatioModel.observed(planned, exit_, np.ones(N, dtype=bool))
    assert _ks(_draws(ignored), mu, sigma, upto) > 0.08


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), mu=st.floats(0.0, 0.5), sigma=st.floats(0.8, 1.2))
def test_a_cut_history_is_left_truncated(seed: int, mu: float, sigma: float) -> None:
    # the service keeps the jobs that ended after a cut: the earlier ended ones are gone, and those that
    # started before it are in the sample only because they ran past it
    start, ratio, ended = _history(seed, mu, sigma, 12.0, 3 * N)
    cut = -4.0 * PLANNED
    keep = start + ratio * PLANNED > cut
    start, ratio, ended = start[keep], ratio[keep], ended[keep]
    planned = np.full(start.size, PLANNED)
    exit_ = np.where(ended, ratio, -start / PLANNED)
    with np.errstate(divide="ignore"):
        entry = np.log(np.maximum(cut - start, 0.0) / PLANNED)
    truncated = RatioModel.observed(planned, exit_, ended, entry)
    assert _ks(_draws(truncated), mu, sigma, 7.0) < 0.06
    # without the truncation the long jobs of before the cut weigh too much: biased long
    plain = RatioModel.observed(planned, exit_, ended)
    assert np.median(_draws(plain)) > math.exp(mu) * 1.08
    assert _ks(_draws(plain), mu, sigma, 7.0) > 0.07


def test_km_is_the_product_limit_estimate() -> None:
    # events at 1, 2, 4; censored at 1.5 and 0.5 (at risk 4, 3 then 1 at the events)
    x, mass, tail = km(np.asarray([1.0, 2.0, 4.0, 1.5, 0.5]), np.asarray([True, True, True, False, False]),
                       np.full(5, -math.inf))
    assert x.tolist() == [0.5, 1.0, 1.5, 2.0, 4.0]
    assert mass.tolist() == [0.0, 0.25, 0.0, 0.375, 0.375]
    assert tail == 0.0
    # the last one censored: its mass is beyond it; a job seen from 1.2 on is not at risk at 1
    x, mass, tail = km(np.asarray([1.0, 2.0, 3.0]), np.asarray([True, True, False]),
                       np.asarray([-math.inf, 1.2, -math.inf]))
    assert mass.tolist() == [0.5, 0.25, 0.0] and tail == 0.25


def test_a_running_job_past_every_ratio_runs_on_by_the_tail() -> None:
    # ratios 1..e^2 observed (log-uniform); a job planned at 100 s that has run 1,000 s (ratio 10, past
    # every one) runs on by a factor from the top tenth's excess over the 90th percentile, not "ends now"
    ratios = np.exp(np.linspace(0.0, 2.0, 101))
    model = RatioModel.observed(np.ones(101), ratios, np.ones(101, dtype=bool), by_planned=False)
    d = model.sample(np.full(200, 100.0), np.random.default_rng(0), np.full(200, 1000.0))
    assert (d > 1000.0).mean() > 0.9
    assert d.max() <= 1000.0 * math.exp(0.2) + 1e-6  # the excesses are at most 2 - 1.8 in log
    # exact estimates (every ratio 1): no tail, an overrunning job ends now
    exact = RatioModel.observed(np.ones(10), np.ones(10), np.ones(10, dtype=bool), by_planned=False)
    assert exact.sample(np.asarray([100.0]), np.random.default_rng(0), np.asarray([150.0])).tolist() == [150.0]


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), slope=st.floats(-0.4, 0.0))
def test_the_slope_fit_is_censoring_aware(seed: int, slope: float) -> None:
    # log ratio = slope x log planned + noise; jobs started over 3 median planned run times: the long
    # planned ones are more often still running, so the ended jobs alone give a slope too steep
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 1.0, N)
    y = slope * x + rng.normal(0.0, 0.8, N)
    start = -rng.uniform(0, 3.0, N)
    ended = start + np.exp(x + y) <= 0
    exit_ = np.where(ended, y, np.log(-start) - x)  # a running job's log ratio: above its elapsed one
    fit = censored_slope(x, exit_, ended, np.full(N, -math.inf))
    assert abs(fit - slope) < 0.04
    naive = float(np.polyfit(x[ended], y[ended], 1)[0])
    assert naive < slope - 0.08


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 12), st.booleans(), st.integers(0, 12), st.integers(1, 4), st.booleans()),
                min_size=1, max_size=25))
def test_product_limit_is_the_kaplan_meier_definition(obs: list[tuple[int, bool, int, int, bool]]) -> None:
    """kant.twin.survival.product_limit, weighted and left-truncated, against the definition: at each
    event time t, the hazard is the weight of the events at t over the weight at risk there (entered
    before t, not exited before t), and the survival is the product of (1 - hazard) over the event
    times up to t. Integer values, so ties (between events, censorings and entries) are common."""
    from kant.twin.survival import product_limit

    exit_ = np.asarray([float(o[0]) for o in obs])
    event = np.asarray([o[1] for o in obs])
    entry = np.asarray([float(o[2]) if o[4] else -math.inf for o in obs])
    entry = np.minimum(entry, exit_ - 1.0)  # each enters before it exits (an entry may equal another's exit)
    weight = np.asarray([float(o[3]) for o in obs])
    x, _, surv = product_limit(exit_, event, entry=entry, weight=weight)
    assert np.all(np.diff(x) >= 0)
    expected = 1.0
    for t in sorted({float(e) for e, ev in zip(exit_, event, strict=True) if ev}):
        at_risk = float(weight[(entry < t) & (exit_ >= t)].sum())
        dead = float(weight[(exit_ == t) & event].sum())
        expected *= 1.0 - dead / at_risk
        last = int(np.flatnonzero(x == t)[-1])  # the survival just after every exit at t
        assert math.isclose(float(surv[last]), expected, rel_tol=1e-9, abs_tol=1e-12)


def test_a_job_past_the_longest_planned_draws_from_the_top_not_a_window_moved_inward() -> None:
    # 100 jobs planned 1..100 s, ratio 1 up to 80 s and e above (slope 0, windows of 40): a job planned
    # past all of them draws from the top 20 only (its window cut at the end, centred on it); a window
    # moved inward (the top 40) would draw ratio 1 half the time
    planned = np.arange(1.0, 101.0)
    z = np.where(planned > 80, 1.0, 0.0)
    model = RatioModel(planned, z, np.ones(100, dtype=bool), np.full(100, -math.inf), 0.0, 40)
    d = model.sample(np.full(500, 1000.0), np.random.default_rng(0))
    assert np.allclose(d, 1000.0 * math.e)
    # and one below the shortest from the bottom 20; one in the middle from the 40 around it
    assert np.allclose(model.sample(np.full(500, 0.5), np.random.default_rng(0)), 0.5)
    ratios, mass = model.draws(85.0)  # 20 below it, 20 above cut to 16: jobs 65..100
    assert ratios.size == 36 and math.isclose(float(mass[ratios > 2].sum()), 20 / 36)
    # a job planned as many observations are sits in their middle: a whole window, not half of one
    tied = RatioModel(np.full(100, 100.0), np.arange(100) / 100, np.ones(100, dtype=bool), np.full(100, -math.inf),
                      0.0, 40)
    assert tied.draws(100.0)[0].size == 40


@settings(max_examples=100, deadline=None)
@given(n=st.integers(12, 600), data=st.data())
def test_a_window_is_centred_on_its_estimate_and_cut_at_the_ends(n: int, data: st.DataObject) -> None:
    # observation i (planned i + 1 s) has ratio exp(i / n): a window's ratios name its observations
    k = data.draw(st.integers(10, n - 1), label="k")
    pos = data.draw(st.integers(0, n), label="rank")  # how many observations are planned below the job
    planned = np.arange(1.0, n + 1.0)
    model = RatioModel(planned, np.arange(n) / n, np.ones(n, dtype=bool), np.full(n, -math.inf), 0.0, k)
    ratios, mass = model.draws(pos + 0.5)
    got = np.rint(np.log(ratios) * n).astype(int)
    lo, hi = int(got.min()), int(got.max()) + 1
    assert got.tolist() == list(range(lo, hi)) and math.isclose(float(mass.sum()), 1.0)
    step = max(1, k // 32)
    ideal = pos - k // 2  # the window's start centred on the job, before the ends cut it
    assert (k + 1) // 2 <= hi - lo <= k
    assert lo == 0 or abs(lo - ideal) <= step // 2 + 1
    assert hi == n or abs(hi - (ideal + k)) <= step // 2 + 1
    assert lo > 0 or ideal <= step // 2 + 1  # cut at an end only where the centred window passes it
    assert hi < n or ideal + k >= n - step // 2 - 1
