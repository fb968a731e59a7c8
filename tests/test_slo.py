"""The SLO model (M/M/c, Erlang C) against hand-computed values, and its properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kant.inference.slo import attainment, erlang_c, response_within, wait_within


def _erlang_c_direct(c: int, a: float) -> float:
    """Textbook Erlang C: (a^c/c! * c/(c-a)) / (sum_{k<c} a^k/k! + a^c/c! * c/(c-a))."""
    top = a**c / math.factorial(c) * c / (c - a)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


@pytest.mark.parametrize(
    ("c", "a", "expected"),
    [
        (1, 0.5, 0.5),  # M/M/1: P(wait) = rho = 0.5
        (2, 1.0, 1 / 3),  # (1/2 * 2/1) / (1 + 1 + 1) = 1/3
        (2, 1.5, 4.5 / 7),  # a^2/2 * 2/0.5 = 4.5; 1 + 1.5 + 4.5 = 7
        (3, 0.0, 0.0),  # no load, nobody waits
        (2, 2.0, 1.0),  # a = c: unstable, everyone waits
        (2, 5.0, 1.0),  # overloaded
        (0, 1.0, 1.0),  # no server
    ],
)
def test_erlang_c_hand_values(c: int, a: float, expected: float) -> None:
    assert float(erlang_c(c, a)) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    ("t", "c", "lam", "mu", "expected"),
    [
        # M/M/1, rho = 0.5: P(W <= 1) = 1 - 0.5 exp(-(1 - 0.5) 1) = 1 - 0.5 * 0.6065307 = 0.6967347
        (1.0, 1, 0.5, 1.0, 1 - 0.5 * math.exp(-0.5)),
        # M/M/2, a = 1: C = 1/3, theta = 2 - 1 = 1: 1 - exp(-2)/3 = 0.9548882
        (2.0, 2, 1.0, 1.0, 1 - math.exp(-2.0) / 3),
        (5.0, 2, 0.0, 1.0, 1.0),  # no arrivals
        (5.0, 1, 2.0, 1.0, 0.0),  # unstable
    ],
)
def test_wait_within(t: float, c: int, lam: float, mu: float, expected: float) -> None:
    assert float(wait_within(t, c, lam, mu)) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize(
    ("t", "c", "lam", "mu", "expected"),
    [
        # M/M/1: T ~ Exp(mu - lam) = Exp(0.5): P(T <= 2) = 1 - exp(-1) = 0.6321206
        (2.0, 1, 0.5, 1.0, 1 - math.exp(-1.0)),
        # M/M/2, lam = mu = 1: C = 1/3, theta = mu, so P(T > t) = exp(-t)(1 + t/3); t = 1: 1 - 4/(3e)
        (1.0, 2, 1.0, 1.0, 1 - math.exp(-1.0) * 4 / 3),
        # no arrivals: the service time alone, 1 - exp(-mu t) = 1 - exp(-0.5)
        (1.0, 3, 0.0, 0.5, 1 - math.exp(-0.5)),
        (1.0, 1, 1.0, 1.0, 0.0),  # a = c: unstable
    ],
)
def test_response_within(t: float, c: int, lam: float, mu: float, expected: float) -> None:
    assert float(response_within(t, c, lam, mu)) == pytest.approx(expected, abs=1e-9)


def test_attainment_maps_replicas_and_slots_to_servers() -> None:
    # 2 replicas x 2 slots = 4 servers; capacity 2 req/s per replica = 1 req/s per slot; lam = 2:
    # a = 2, c = 4: Erlang C direct; P(W <= 0.5) = 1 - C exp(-(4 - 2) 0.5)
    c_val = _erlang_c_direct(4, 2.0)
    got = attainment([2.0], [2], [2.0], concurrency=2, slo_s=0.5, metric="wait")
    assert float(got[0]) == pytest.approx(1 - c_val * math.exp(-1.0), abs=1e-12)
    # no load: counts as met; load and no replica: 0
    assert attainment([0.0, 3.0], [0, 0], [1.0, 1.0], concurrency=1, slo_s=1.0).tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="unknown SLO metric"):
        attainment([1.0], [1], [1.0], concurrency=1, slo_s=1.0, metric="p99")


@given(c=st.integers(1, 40), rho=st.floats(0.0, 0.999))
def test_erlang_c_matches_the_textbook_formula(c: int, rho: float) -> None:
    a = rho * c
    assert float(erlang_c(c, a)) == pytest.approx(_erlang_c_direct(c, a), rel=1e-9, abs=1e-12)


def test_erlang_c_is_finite_for_many_servers() -> None:
    # factorials overflow a float at c = 171; the recursion does not
    v = erlang_c(np.array([500, 2000]), np.array([490.0, 1990.0]))
    assert np.all(np.isfinite(v)) and np.all((v > 0) & (v < 1))


@given(c=st.integers(1, 30), rho=st.floats(0.01, 0.99), t=st.floats(0.01, 20.0), mu=st.floats(0.1, 10.0))
def test_more_servers_and_more_time_never_hurt(c: int, rho: float, t: float, mu: float) -> None:
    lam = rho * c * mu
    for fn in (wait_within, response_within):
        p = float(fn(t, c, lam, mu))
        assert 0.0 <= p <= 1.0
        assert float(fn(t, c + 1, lam, mu)) >= p - 1e-12
        assert float(fn(t * 2, c, lam, mu)) >= p - 1e-12
    assert float(response_within(t, c, lam, mu)) <= float(wait_within(t, c, lam, mu)) + 1e-12
