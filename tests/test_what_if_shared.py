"""``ClusterState.what_if`` shares the per-node arrays it is given and the state's own (free GPUs, CPU,
memory, the share books'), no longer copies them (docs/performance.md, step 17): placing on the copy
must leave every one of them as it was (the placers' trial writes, :meth:`Framework.place_workers`,
are undone), and booking a share on the copy must raise without touching the state's books."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cycle_helpers import make_ctx
from kant.errors import SchedulingError
from kant.model import Cluster, ClusterState, Placement
from kant.plugins.fifo import Fifo


def _arrays(state: ClusterState) -> list[np.ndarray]:
    return [state.free, state.free_cpu, state.free_mem, state.shares.best, state.shares.version]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([1, 2, 4, 250, 500])), max_size=12),
       st.lists(st.integers(0, 4), min_size=4, max_size=4), st.booleans(),
       st.lists(st.tuples(st.integers(1, 3), st.sampled_from([1, 2, 300, 500]), st.integers(0, 3000)),
                min_size=1, max_size=6))
def test_placing_on_a_copy_leaves_the_shared_arrays(held: list[tuple[int, int]], less: list[int], shares: bool,
                                                    jobs: list[tuple[int, int, int]]) -> None:
    cluster = Cluster.uniform(4, 4, cpu_milli=8000, memory_mib=64000, nodes_per_leaf=2, leaves_per_spine=1)
    specs = [{"workers": w, "gpus_per_worker": 1 if g > 4 else g, "gpu_milli": g if g > 4 else 1000,
              "cpu_milli": c} for w, g, c in jobs]
    ctx, fw = make_ctx(cluster, specs, {}, [Fifo()])
    state = ctx.state
    for k, (node, g) in enumerate(held):  # whole GPUs and shares, where they fit
        p = Placement((node,), 1, gpu_milli=g) if g > 4 else Placement((node,), g, cpu_milli=500)
        with contextlib.suppress(SchedulingError):  # where it does not fit: not booked
            state.allocate(100 + k, p)
    free = np.maximum(state.free - np.array(less), 0)  # the caller's array (less than is free)
    before = [a.copy() for a in _arrays(state)] + [free.copy()]
    view = ctx.__class__(ctx.env, state.what_if(free, shares=shares), ctx.queue, ctx.now, {}, ctx.statement)
    for job in range(len(specs)):
        fw.place_workers(view, job)
    for a, b in zip([*_arrays(state), free], before, strict=True):
        np.testing.assert_array_equal(a, b)


def test_booking_a_share_on_a_copy_raises_and_leaves_the_books() -> None:
    state = ClusterState(Cluster.uniform(2, 2))
    state.allocate(1, Placement((0,), 1, gpu_milli=500))
    before = [a.copy() for a in _arrays(state)]
    view = state.what_if(state.free.copy())
    with pytest.raises(ValueError, match="read-only"):
        view.allocate(2, Placement((0,), 1, gpu_milli=300))
    for a, b in zip(_arrays(state), before, strict=True):
        np.testing.assert_array_equal(a, b)
