"""The queue order kept across cycles (:class:`kant.framework.kept_order.KeptOrder`, issue 32) equals
a fresh sort of the pending jobs at every read, and whole runs give the same outcomes with it and
without it (every walk sorting afresh). Random Tiresias runs with promotions (a low starvation
factor), preemptions at rounds, node failures and gangs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.config import parse_policy
from kant.framework import kept_order
from kant.framework.queue import PendingQueue, SortKey
from kant.framework.runner import DynamicKey, Framework
from kant.model import Cluster, JobTable, JobTableBuilder, NodeSpec
from kant.sim import ExecutionModel, NodeFailure, Simulator

Case = tuple[Cluster, JobTable, list[NodeFailure]]


@st.composite
def _cases(draw: st.DrawFn) -> Case:
    nodes = [NodeSpec(f"n{i}", "A", draw(st.sampled_from([1, 2, 4, 8]))) for i in range(draw(st.integers(1, 5)))]
    b = JobTableBuilder(source="hypothesis")
    for i in range(draw(st.integers(2, 40))):
        b.add(f"j{i}", submit=float(draw(st.integers(0, 60))), duration=float(draw(st.integers(1, 80))),
              workers=draw(st.sampled_from([1, 1, 1, 2, 3])), gpus_per_worker=draw(st.sampled_from([1, 1, 2, 4])))
    failures = [NodeFailure(node=draw(st.integers(0, len(nodes) - 1)), time=float(draw(st.integers(1, 120))),
                            repair_s=float(draw(st.integers(1, 40)))) for _ in range(draw(st.integers(0, 2)))]
    return Cluster.from_nodes(nodes, nodes_per_leaf=2, leaves_per_spine=2), b.build(), failures


def _policy(factor: float, round_s: float | None) -> object:
    return parse_policy({
        "name": "t",
        "actions": ["allocate", {"name": "preempt", "args": {"rank_by": "tiresias-las", "round_s": round_s}}],
        "plugins": [{"name": "tiresias-las", "args": {"thresholds_gpu_s": [10, 40], "starvation_factor": factor}},
                    {"name": "binpack"}]})


def _outcome(case: Case, factor: float, round_s: float | None) -> tuple[object, ...]:
    cluster, jobs, failures = case
    sim = Simulator(cluster, jobs, _policy(factor, round_s),  # type: ignore[arg-type]
                    execution=ExecutionModel(restart_cost_s=1.0, checkpoint_interval_s=5.0), failures=failures)
    r = sim.run()
    return (r.cycles, *(np.nan_to_num(a, nan=-1.0).tobytes() for a in
                        (r.first_start, r.end, r.status, r.runs, r.preemptions, r.gpu_seconds)))


@contextmanager
def _checked() -> Iterator[list[int]]:
    """Every read of the kept order compared with a fresh sort of the queue at the read's time."""
    reads: list[int] = []
    kept_by_shape = DynamicKey.kept_by_shape

    def check(self: DynamicKey, queue: PendingQueue) -> Mapping[int, list[SortKey]] | None:
        lists = kept_by_shape(self, queue)
        assert lists is not None
        assert set(lists) == set(queue.pending_shapes())
        for shape, lst in lists.items():
            jobs = np.asarray([int(e[-1]) for e in lst], dtype=np.int64)
            assert sorted(jobs.tolist()) == sorted(queue.shape_jobs(shape))
            assert jobs.tolist() == self.order(jobs).tolist()
        reads.append(len(lists))
        return lists

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(DynamicKey, "kept_by_shape", check)
        yield reads


@contextmanager
def _unkept() -> Iterator[None]:
    """Every walk sorts afresh (no order kept)."""
    init = Framework.__init__

    def without(self: Framework, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)  # type: ignore[arg-type]
        self.kept = None

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Framework, "__init__", without)
        yield


@settings(max_examples=120, deadline=None)
@given(case=_cases(), factor=st.sampled_from([0.5, 1.0, 2.0, 8.0]), round_s=st.sampled_from([None, 7.0, 25.0]))
def test_kept_order_is_the_fresh_sort_at_every_read(case: Case, factor: float, round_s: float | None) -> None:
    with _checked():
        kept = _outcome(case, factor, round_s)
    with _unkept():
        fresh = _outcome(case, factor, round_s)
    assert kept == fresh


@settings(max_examples=60, deadline=None)
@given(case=_cases(), factor=st.sampled_from([0.5, 1.0, 2.0]), round_s=st.sampled_from([None, 7.0]))
def test_the_change_heap_rebuilt_at_every_read_keeps_the_order(case: Case, factor: float,
                                                               round_s: float | None) -> None:
    """The heap of key changes rebuilt from its live items whenever it holds more than twice the queue
    (no slack): every read still equals a fresh sort, and the run's outcome is unchanged."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kept_order, "_SLACK", 0)
        with _checked():
            kept = _outcome(case, factor, round_s)
    with _unkept():
        fresh = _outcome(case, factor, round_s)
    assert kept == fresh


def test_the_kept_order_is_read_and_reorders_by_promotion() -> None:
    """A fixed case where the kept order is read and a waiting job's key changes as it starves."""
    nodes = [NodeSpec("n0", "A", 2)]
    b = JobTableBuilder(source="test")
    for i in range(6):
        b.add(f"j{i}", submit=float(i), duration=40.0, workers=1, gpus_per_worker=2)
    case: Case = (Cluster.from_nodes(nodes, nodes_per_leaf=1, leaves_per_spine=1), b.build(), [])
    with _checked() as reads:
        kept = _outcome(case, 0.5, 7.0)
    assert len(reads) > 10
    with _unkept():
        assert kept == _outcome(case, 0.5, 7.0)
