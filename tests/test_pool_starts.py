"""A preemption walk's work lost from the run starts read with its pool (:func:`kant.actions.evicting.pool_of`,
``Walk.starts``) equals :func:`kant.actions.victims.work_lost` reading each pool job's start from the
running jobs, at every walk of random Tiresias runs (promotions, rounds, node failures, gangs)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.actions.evicting import Walk
from kant.actions.victims import FloatArray, work_lost
from kant.framework.context import CycleContext
from test_kept_order import Case, _cases, _outcome


@settings(max_examples=80, deadline=None)
@given(case=_cases(), factor=st.sampled_from([0.5, 2.0, 8.0]), round_s=st.sampled_from([None, 7.0, 25.0]))
def test_work_lost_from_the_pools_starts_is_work_lost(case: Case, factor: float, round_s: float | None) -> None:
    lost_of = Walk._lost

    def checked(self: Walk, ctx: CycleContext) -> FloatArray:
        if self.lost is None:
            assert self.starts is not None  # (preempt's walks read the starts with the pool)
            expected = work_lost(ctx, self.running, self.checkpoint_interval_s)
            assert np.array_equal(lost_of(self, ctx), expected)
        return lost_of(self, ctx)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Walk, "_lost", checked)
        _outcome(case, factor, round_s)


def test_a_walk_reads_the_starts_of_its_pool() -> None:
    """At least one random case walks (the property above is not vacuous)."""
    from kant.model import Cluster, JobTableBuilder, NodeSpec

    nodes = [NodeSpec("n0", "A", 2)]
    b = JobTableBuilder(source="fixed")
    b.add("long", submit=0.0, duration=200.0, workers=1, gpus_per_worker=2)
    b.add("short", submit=50.0, duration=10.0, workers=1, gpus_per_worker=2)
    case = (Cluster.from_nodes(nodes, nodes_per_leaf=2, leaves_per_spine=2), b.build(), [])
    seen: list[FloatArray] = []
    lost_of = Walk._lost

    def spy(self: Walk, ctx: CycleContext) -> FloatArray:
        assert self.starts is not None
        seen.append(self.starts.copy())
        return lost_of(self, ctx)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Walk, "_lost", spy)
        _outcome(case, 8.0, 7.0)
    assert seen and seen[0].tolist() == [0.0]
