"""``Placement.total_gpus`` is a field set at construction (issue 32: read at every stop), not a property:
``gpus`` x workers however the placement was made (constructor, ``dataclasses.replace``, pickle, copy),
and out of equality, hashing and repr, as ``per_node`` is."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kant.model.state import Placement


@given(st.lists(st.integers(0, 6), min_size=1, max_size=8), st.integers(0, 8), st.integers(0, 8))
def test_total_gpus_is_gpus_times_workers(nodes: list[int], gpus: int, other: int) -> None:
    p = Placement(tuple(nodes), gpus, 100, 200)
    made = [p, pickle.loads(pickle.dumps(p)), copy.copy(p), copy.deepcopy(p)]
    for q in made:
        assert q.total_gpus == gpus * len(nodes)
        assert q == p and hash(q) == hash(p)
        assert q.per_node == {n: nodes.count(n) for n in nodes}
    r = dataclasses.replace(p, gpus=other, nodes=tuple(nodes[:1]))
    assert r.total_gpus == other
    assert "total_gpus" not in repr(p)


def test_total_gpus_cannot_be_set() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Placement((0,), 1).total_gpus = 3  # type: ignore[misc]
