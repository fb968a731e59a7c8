"""Golden test: fixed-seed runs give exactly the results recorded before the performance work.

The fixture ``tests/golden/golden.json`` was written by ``tests/golden/make_golden.py`` from the code
as it was before any optimisation of ``docs/performance.md``. Every case (trace x policy) must
reproduce it: a SHA-256 of every per-job outcome array and of the cluster time series, and the cycle
and event counts, bit for bit (results must not change to get faster); the headline metrics to
1e-12 relative (BLAS sums their weighted means in an order that depends on its thread count). A
failure lists each differing field.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "golden"))
import make_golden

EXPECTED: dict[str, Any] = json.loads(make_golden.FIXTURE.read_text())
_LOADED: dict[str, Any] = {}


def test_fixture_covers_every_case() -> None:
    # 8 policies on the Philly slice + 8 on the synthetic trace + 3 with node failures = 19 cases
    assert sorted(EXPECTED) == sorted(f"{t}/{p}" for t, p in make_golden.CASES)
    assert len(EXPECTED) == 19


@pytest.mark.parametrize(("trace", "policy"), make_golden.CASES, ids=[f"{t}/{p}" for t, p in make_golden.CASES])
def test_same_results_as_before(trace: str, policy: str) -> None:
    got = make_golden.run_case(trace, policy, _LOADED)
    problems = make_golden.diff(EXPECTED[f"{trace}/{policy}"], got)
    assert not problems, "\n".join(problems[:20])


@pytest.mark.parametrize(
    ("expected", "got", "n_problems"),
    [
        ({"a": 1.0, "b": [1, 2]}, {"a": 1.0, "b": [1, 2]}, 0),  # identical
        ({"a": float("nan")}, {"a": float("nan")}, 0),  # NaN equals NaN here
        ({"a": 1.0}, {"a": 1.0000000000000002}, 0),  # one ulp off: BLAS summation order, tolerated
        ({"a": 1.0}, {"a": 1.000000001}, 1),  # 1e-9 relative is a difference
        ({"a": 5}, {"a": 6}, 1),  # integers (counts) exactly
        ({"a": 1, "b": 2}, {"a": 1}, 1),  # a missing field is a difference
        ({"x": {"y": "abc"}}, {"x": {"y": "abd"}}, 1),  # a changed digest is a difference
    ],
)
def test_diff_is_exact(expected: dict[str, Any], got: dict[str, Any], n_problems: int) -> None:
    assert len(make_golden.diff(expected, got)) == n_problems
