"""ClusterState: allocation bookkeeping, aggregates and over-booking protection."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kant.errors import SchedulingError
from kant.model import Cluster, ClusterState, Placement


def test_allocate_release_aggregates() -> None:
    # 4 nodes x 8 GPUs, 2 nodes per leaf, 2 leaves per spine -> 2 leaves, 1 spine
    c = Cluster.uniform(4, 8, nodes_per_leaf=2, leaves_per_spine=2)
    s = ClusterState(c)
    s.allocate(1, Placement((0, 0), gpus=2))  # 4 GPUs on node 0
    s.allocate(2, Placement((1,), gpus=8))  # node 1 full
    s.allocate(3, Placement((2, 3), gpus=1))  # 1 GPU on each of nodes 2, 3
    assert s.allocated_gpus == 4 + 8 + 2
    assert s.free_gpus == 32 - 14
    assert list(s.free) == [4, 0, 7, 7]
    assert list(s.leaf_free) == [4, 14]  # leaf 0 = nodes 0,1; leaf 1 = nodes 2,3
    assert s.partial_nodes == 3  # nodes 0, 2, 3 (node 1 is full)
    assert s.free_on_partial == 4 + 7 + 7
    assert s.empty_nodes == 0
    s.check()
    s.release(2)
    assert s.empty_nodes == 1 and s.partial_nodes == 3
    s.release(1)
    s.release(3)
    assert s.allocated_gpus == 0 and s.empty_nodes == 4 and s.partial_nodes == 0
    s.check()


def test_overbooking_is_refused() -> None:
    s = ClusterState(Cluster.uniform(2, 4))
    s.allocate(1, Placement((0,), gpus=3))
    with pytest.raises(SchedulingError, match="cannot hold"):
        s.allocate(2, Placement((0,), gpus=2))  # 3 + 2 > 4
    with pytest.raises(SchedulingError, match="cannot hold"):
        s.allocate(3, Placement((1, 1, 1), gpus=2))  # 3 workers x 2 = 6 > 4 on one node
    with pytest.raises(SchedulingError, match="already allocated"):
        s.allocate(1, Placement((1,), gpus=1))
    with pytest.raises(SchedulingError, match="holds no allocation"):
        s.release(9)
    s.check()  # the refused calls left nothing behind


def test_node_down_and_up() -> None:
    s = ClusterState(Cluster.uniform(2, 8))
    s.allocate(1, Placement((0,), gpus=8))
    with pytest.raises(SchedulingError, match="still holds work"):
        s.set_down(0)
    s.set_down(1)
    assert s.down_gpus == 8 and s.free_gpus == 0 and s.empty_nodes == 0
    with pytest.raises(SchedulingError):
        s.allocate(2, Placement((1,), gpus=1))
    s.set_up(1)
    assert s.free_gpus == 8 and s.empty_nodes == 1
    s.check()


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 8), st.integers(1, 3)), max_size=40))
def test_random_allocations_keep_aggregates_exact(ops: list[tuple[int, int, int]]) -> None:
    """Random allocate/release sequences: aggregates always equal a from-scratch recount, and a
    refused allocation never changes anything."""
    s = ClusterState(Cluster.uniform(6, 8, nodes_per_leaf=2, leaves_per_spine=2))
    live: list[int] = []
    for job, (node, gpus, workers) in enumerate(ops):
        if live and gpus % 3 == 0:
            s.release(live.pop(0))
        try:
            s.allocate(job, Placement((node,) * workers, gpus=gpus))
            live.append(job)
        except SchedulingError:
            pass
        s.check()
