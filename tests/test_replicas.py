"""The scale-down order shared by the simulated inference driver and the live loop."""

from __future__ import annotations

import pytest

from kant.inference.replicas import scale_down_victims


@pytest.mark.parametrize(("starts", "count", "victims"), [
    # queued replicas (None) first, newest first; then running ones, latest start first
    ([0.0, 5.0, None, 2.0, None], 5, [4, 2, 1, 3, 0]),
    ([0.0, 5.0, None, 2.0, None], 3, [4, 2, 1]),
    # equal starts: the newest (last added) first
    ([1.0, 1.0, 1.0], 2, [2, 1]),
    # an older replica that restarted later goes before a newer one that kept running
    ([7.0, 3.0], 1, [0]),
    ([0.0], 0, []),
    ([], 2, []),
])
def test_scale_down_victims(starts: list[float | None], count: int, victims: list[int]) -> None:
    assert scale_down_victims(starts, count) == victims
