"""Ids for equal rows of integer columns (the shape index's requests and shapes,
:class:`kant.framework.queue.ShapeIndex`): one id per distinct row, found without a Python loop over
the rows."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["DENSE_SLOTS", "dense_groups", "intern_rows", "row_groups"]

IntArray = npt.NDArray[np.int64]


def intern_rows(table: dict[tuple[int, ...], int], cols: list[IntArray]) -> IntArray:
    """Id per row of the columns ``cols`` from ``table`` (row values -> id), new rows getting the next
    ids in order of first appearance. Vectorised: one dict lookup per distinct row."""
    n = len(cols[0])
    if n == 1:
        key = tuple(int(c[0]) for c in cols)
        return np.array([table.setdefault(key, len(table))], dtype=np.int64)
    group, first = row_groups(cols)
    ids = np.empty(len(first), dtype=np.int64)
    for g in np.argsort(first, kind="stable").tolist():
        row = int(first[g])
        ids[g] = table.setdefault(tuple(int(c[row]) for c in cols), len(table))
    out: IntArray = ids[group]
    return out


def row_groups(cols: list[IntArray]) -> tuple[IntArray, IntArray]:
    """``(group, first)``: a dense group id per row of the columns ``cols`` (equal rows, equal ids,
    numbered in the order of the rows' keys) and the first row of each group, from one int64 key per
    row (column codes in mixed radix) when their product fits."""
    dense = dense_groups(cols)
    if dense is not None:
        return dense
    codes, sizes = [], []
    for col in cols:
        values, code = np.unique(col, return_inverse=True)
        codes.append(code.reshape(-1).astype(np.int64))
        sizes.append(len(values))
    if math.prod(sizes) >= (1 << 62):  # pragma: no cover - thousands of distinct values in every column
        _, first, group = np.unique(np.stack(cols, axis=1), axis=0, return_index=True, return_inverse=True)
        return group.reshape(-1).astype(np.int64), first.astype(np.int64)
    key = codes[0]
    for code, size in zip(codes[1:], sizes[1:], strict=True):
        key = key * size + code
    _, first, group = np.unique(key, return_index=True, return_inverse=True)
    return group.reshape(-1).astype(np.int64), first.astype(np.int64)


def dense_groups(cols: list[IntArray]) -> tuple[IntArray, IntArray] | None:
    """:func:`row_groups` without a sort, for integer columns of small ranges (a trace's request
    columns: a few distinct values each): each value less its column's least is its code, and the
    keys (mixed radix) index a table of first rows, one slot per possible key. The same groups,
    numbered alike (in key order); None when a column is not integer or the keys' range is over
    ``DENSE_SLOTS`` slots per row."""
    n = len(cols[0])
    key = np.zeros(n, dtype=np.int64)
    span = 1
    for col in cols:
        if col.dtype.kind not in "iub":
            return None
        lo, hi = int(col.min()), int(col.max())
        if lo < -(1 << 62) or hi >= 1 << 62:  # (values an int64 difference may not hold)
            return None
        size = hi - lo + 1
        span *= size
        if span > DENSE_SLOTS * n + 1024:
            return None
        key *= size
        key += col.astype(np.int64) - lo
    first = np.full(span, n, dtype=np.int64)
    np.minimum.at(first, key, np.arange(n, dtype=np.int64))  # each key's first row (n: none)
    present = first < n
    rank = np.cumsum(present) - 1  # a present key's group: how many present keys are below it
    group: IntArray = rank[key]
    firsts: IntArray = first[present]
    return group, firsts


#: :func:`dense_groups` takes key ranges up to this many slots per row (the table is 8 bytes a slot)
DENSE_SLOTS = 8
