"""GPUs lent to training (``kant.inference.unified``): the simulator's rule, taken now by the live
dashboard, and its share-out over the services."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kant.inference.unified import loaned_gpus, share_loan, training_share


def test_loaned_is_training_above_its_share() -> None:
    share = training_share(16, [(6, 2)])  # one service of up to 6 replicas of 2 GPUs
    assert share == 4.0
    assert [float(loaned_gpus(t, share)) for t in (0, 4, 5, 14)] == [0.0, 0.0, 1.0, 10.0]
    assert loaned_gpus(np.array([3.0, 9.0]), share).tolist() == [0.0, 5.0]


@given(st.integers(0, 1000), st.dictionaries(st.integers(0, 20), st.integers(-5, 200), max_size=8))
def test_share_loan_is_bounded_by_the_loan_and_each_headroom(loaned: int, headroom: dict[int, int]) -> None:
    out = share_loan(loaned, headroom)
    assert set(out) == set(headroom)
    assert sum(out.values()) <= loaned
    for k, h in headroom.items():
        assert 0 <= out[k] <= max(0, h)
    total = sum(max(0, h) for h in headroom.values())
    if loaned >= total:  # everything lent: every headroom is taken whole
        assert out == {k: max(0, h) for k, h in headroom.items()}
