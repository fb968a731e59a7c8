"""The preemption round's pending side read from the kept order (``Rank.RANK_IS_MINUS_KEY``, issue 32):
at every round, the walk :meth:`kant.actions.preempt.Preempt.begin` builds from the kept order is the
one it builds by ranking every pending job and sorting the eligible ones (the same jobs in the same
order, the same failure keys and ranks, or no walk in both). Random Tiresias runs with promotions,
rounds, node failures and gangs (the cases of ``test_kept_order``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.actions.preempt import Preempt, _PreemptWalk, ranks_by_kept_order
from kant.config import parse_policy
from kant.framework.context import CycleContext
from kant.framework.runner import Framework
from kant.model import Cluster, JobTableBuilder, NodeSpec
from kant.sim.simulator import Simulator
from test_kept_order import Case, _cases, _outcome


def _fields(walk: _PreemptWalk | None) -> tuple[object, ...] | None:
    if walk is None:
        return None
    # ranks compared with their signs (-0.0 and 0.0 are the same rank; repr tells them apart)
    return (list(walk.pending), [repr(k) for k in walk.keys], sorted((j, repr(r)) for j, r in walk.rank_of.items()),
            walk.running.tolist(), walk.rank.tolist())


@contextmanager
def _both_ways() -> Iterator[list[int]]:
    """Each round's walk built both ways (the round's bookkeeping restored between them) and compared;
    the counts of rounds with a walk from the kept order are listed."""
    begin = Preempt.begin
    walks: list[int] = []

    def check(self: Preempt, ctx: CycleContext, fw: Framework) -> _PreemptWalk | None:
        saved = (self._round, self._asked, len(ctx.wakeups))
        self._by_kept = False
        fresh = begin(self, ctx, fw)
        self._round, self._asked = saved[0], saved[1]
        del ctx.wakeups[saved[2]:]
        self._by_kept = True
        kept = begin(self, ctx, fw)
        assert _fields(kept) == _fields(fresh)
        if kept is not None:
            walks.append(len(kept.pending))
        return kept

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Preempt, "begin", check)
        yield walks


@settings(max_examples=120, deadline=None)
@given(case=_cases(), factor=st.sampled_from([0.5, 1.0, 2.0, 8.0]), round_s=st.sampled_from([None, 7.0, 25.0]))
def test_the_kept_walk_is_the_ranked_and_sorted_walk(case: Case, factor: float, round_s: float | None) -> None:
    with _both_ways():
        _outcome(case, factor, round_s)


def test_the_kept_walk_is_taken_on_a_fixed_case() -> None:
    """A case with preemptions: the kept order is used (walks from it are made and checked)."""
    nodes = [NodeSpec("n0", "A", 4), NodeSpec("n1", "A", 2)]
    b = JobTableBuilder(source="test")
    for i in range(8):
        b.add(f"j{i}", submit=float(3 * i), duration=60.0, workers=1, gpus_per_worker=2)
    case: Case = (Cluster.from_nodes(nodes, nodes_per_leaf=2, leaves_per_spine=1), b.build(), [])
    with _both_ways() as walks:
        _outcome(case, 8.0, 7.0)
    assert len(walks) > 3 and max(walks) > 1


def test_only_a_first_sorter_that_is_minus_the_rank_reads_the_kept_order() -> None:
    def uses(plugins: list[object]) -> bool:
        policy = parse_policy({"name": "t", "actions": ["allocate", {"name": "preempt",
                              "args": {"rank_by": "tiresias-las", "round_s": 10}}], "plugins": plugins})
        sim = Simulator(*_one_case()[:2], policy)
        return ranks_by_kept_order(sim.scheduler.framework, "tiresias-las")

    tiresias = {"name": "tiresias-las"}
    assert uses([tiresias, {"name": "binpack"}])
    assert not uses([{"name": "priority"}, tiresias, {"name": "binpack"}])


def _one_case() -> Case:
    b = JobTableBuilder(source="test")
    b.add("j0", submit=0.0, duration=10.0, workers=1, gpus_per_worker=1)
    return Cluster.from_nodes([NodeSpec("n0", "A", 2)], nodes_per_leaf=1, leaves_per_spine=1), b.build(), []
