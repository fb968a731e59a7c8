"""The shape index's row groups without a sort (:func:`kant.framework.row_groups.dense_groups`, issue 32):
the same groups, numbered alike, and the same first rows as the sorting path (``np.unique`` of the
mixed-radix keys) on random integer columns, small ranges and large, negative values included."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.framework import row_groups as q


def _sorted_groups(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The rule the dense path must match: groups in key order, each with its first row."""
    _, first, group = np.unique(np.stack(cols, axis=1), axis=0, return_index=True, return_inverse=True)
    return group.reshape(-1).astype(np.int64), first.astype(np.int64)


@st.composite
def _columns(draw: st.DrawFn) -> list[np.ndarray]:
    n = draw(st.integers(2, 60))
    cols = []
    for _ in range(draw(st.integers(1, 5))):
        lo = draw(st.integers(-5, 5))
        width = draw(st.sampled_from([1, 2, 3, 8, 1000, 10**9]))
        cols.append(np.asarray(draw(st.lists(st.integers(lo, lo + width - 1), min_size=n, max_size=n)),
                               dtype=np.int64))
    return cols


@settings(max_examples=300, deadline=None)
@given(_columns())
def test_row_groups_match_the_sorted_rule(cols: list[np.ndarray]) -> None:
    want_group, want_first = _sorted_groups(cols)
    group, first = q.row_groups(cols)
    assert np.array_equal(group, want_group)
    assert np.array_equal(first, want_first)
    dense = q.dense_groups(cols)
    if dense is not None:  # (None: a range too wide for the table; the sorting path answered above)
        assert np.array_equal(dense[0], want_group)
        assert np.array_equal(dense[1], want_first)


def test_dense_groups_take_small_ranges_and_leave_wide_ones() -> None:
    small = [np.array([3, 1, 3, 2, 1], dtype=np.int64), np.array([0, 0, 0, 1, 0], dtype=np.int64)]
    dense = q.dense_groups(small)
    assert dense is not None
    assert dense[0].tolist() == [2, 0, 2, 1, 0]  # keys (3,0) (1,0) (3,0) (2,1) (1,0): in key order
    assert dense[1].tolist() == [1, 3, 0]
    wide = [np.array([0, 10**12], dtype=np.int64)]
    assert q.dense_groups(wide) is None
    assert q.dense_groups([np.array([0.5, 1.5])]) is None  # not integers
    assert q.dense_groups([np.array([2**63, 2**63 + 1], dtype=np.uint64)]) is None  # beyond int64
    assert q.dense_groups([np.array([True, False, True])]) is not None  # booleans are integers here
