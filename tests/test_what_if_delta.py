"""``ClusterState.what_if`` from the changed nodes alone equals the full recount (docs/performance.md,
"Work per cycle (issue 32)", step 5).

Random clusters (GPU types, nodes without GPUs, leaves in any order) and random histories
(allocations, releases, failures, repairs, cordons with jobs still running), then random free-GPU
arrays that differ from the state's on a few nodes or on many: the planning copy built from the
state's aggregates and the changed nodes (:meth:`ClusterState._what_if_delta`) must hold the same
values as the one recounted over every node, also when it is told the changed nodes (and some that
did not change) instead of finding them.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kant.model.state as state_module
from kant.model.cluster import Cluster
from kant.model.state import ClusterState, Placement
from strategies import clusters
from test_fast_paths import labelled_clusters

AGGREGATES = ("allocated_gpus", "partial_nodes", "free_on_partial", "empty_nodes", "down_gpus")


def views(state: ClusterState, free: np.ndarray, monkeypatch: pytest.MonkeyPatch,
          extra: set[int] | None = None) -> tuple[ClusterState, ClusterState]:
    """(delta copy, recounted copy) of ``state`` with ``free``; with ``extra``, the delta copy is
    told the changed nodes (those where ``free`` differs, and ``extra``) instead of finding them."""
    with monkeypatch.context() as m:
        m.setattr(state_module, "_DELTA_SHARE", 1)  # every change set is few enough
        changed = None if extra is None else set(np.flatnonzero(free != state.free).tolist()) | extra
        delta = state.what_if(free, changed=changed)
        m.setattr(state_module, "_DELTA_SHARE", 10**9)  # any change recounts
        full = state.what_if(free)
    return delta, full


@settings(max_examples=300, deadline=None)
@given(st.one_of(clusters(max_nodes=12), labelled_clusters()),
       st.lists(st.tuples(st.integers(0, 99), st.integers(0, 5), st.integers(1, 8)), max_size=40),
       st.lists(st.tuples(st.integers(0, 99), st.integers(-8, 8)), min_size=1, max_size=30),
       st.one_of(st.none(), st.sets(st.integers(0, 11), max_size=4)))
def test_delta_copy_equals_the_recount(cluster: Cluster, ops: list[tuple[int, int, int]],
                                       edits: list[tuple[int, int]], extra: set[int] | None) -> None:
    monkeypatch = pytest.MonkeyPatch()
    state = ClusterState(cluster)
    held: dict[int, int] = {}
    for k, (pick, op, gpus) in enumerate(ops):
        node = pick % cluster.n_nodes
        if op <= 1 and state.fits(node, gpus):
            state.allocate(k, Placement((node,), gpus))
            held[k] = node
        elif op == 2 and held:
            state.release(min(held))
            del held[min(held)]
        elif op == 3 and node not in held.values():
            state.set_down(node)
        elif op == 4:
            state.set_unschedulable(node)  # cordoned: its jobs go on, its free GPUs show as 0
        else:
            state.set_up(node)
    state.check()
    free = state.free.copy()
    caps = cluster.gpus
    for pick, change in edits:
        node = pick % cluster.n_nodes
        free[node] = min(max(int(free[node]) + change, 0), int(caps[node]))
        delta, full = views(state, free, monkeypatch,
                            None if extra is None else {v % cluster.n_nodes for v in extra})
        for name in AGGREGATES:
            assert getattr(delta, name) == getattr(full, name), name
        for name in ("free", "leaf_free", "spine_free", "free_hist"):
            a, b = getattr(delta, name), getattr(full, name)
            assert a.dtype == b.dtype and np.array_equal(a, b), name
        assert delta._leaf_free == full._leaf_free and delta._spine_free == full._spine_free
        assert delta._hist == full._hist and delta.hist_counts[1] == full.hist_counts[1]
        # hist_counts is kept with the list each copy counts in (and the live state's is its own)
        assert delta.hist_counts[0] is delta._hist and full.hist_counts[0] is full._hist
        assert state.hist_counts[0] is state._hist and state._hist is not delta._hist
