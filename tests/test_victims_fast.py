"""The victim search's fast paths choose what their reference does (issue 32): the gang plan that
counts the job's worker slots per node instead of over all nodes and skips, without a trial, the
reprieve of a victim whose return would leave the job fewer slots than workers, against counting
over all nodes and trying every reprieve; the one-victim plan's one-step case against its whole
rule (:func:`kant.actions.one_victim_plan.single_worker_plan_general`); the one-worker trial on the node-class
index (:func:`kant.actions.victims._simulate_one`) against a trial on the state; the walk's one-victim scan
(:func:`kant.actions.victims.one_victim`) against :func:`~kant.actions.victims.choose_victims` on the
candidates' arrays. Whole preemptive runs on random
workloads (CPU, memory, GPU shares, typed GPUs) must give the same per-job outcomes with the fast
paths on and off."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.actions import evicting, one_victim_plan, victims
from kant.config import parse_policy
from kant.model import Cluster, JobTable, JobTableBuilder, NodeSpec
from kant.sim import ExecutionModel, Simulator


@st.composite
def _clusters(draw: st.DrawFn) -> Cluster:
    n = draw(st.integers(1, 6))
    with_cpu = draw(st.booleans())
    nodes = [NodeSpec(f"n{i}", draw(st.sampled_from(["A", "B"])), draw(st.sampled_from([1, 2, 4, 8])),
                      cpu_milli=draw(st.sampled_from([0, 4000, 16000])) if with_cpu else 0,
                      memory_mib=draw(st.sampled_from([0, 8192, 65536])) if with_cpu else 0)
             for i in range(n)]
    return Cluster.from_nodes(nodes, nodes_per_leaf=draw(st.integers(1, 3)), leaves_per_spine=2)


@st.composite
def _workloads(draw: st.DrawFn) -> JobTable:
    b = JobTableBuilder(source="hypothesis")
    for i in range(draw(st.integers(2, 30))):
        gpus = draw(st.sampled_from([0, 1, 1, 1, 2, 4, 8]))
        b.add(f"j{i}", submit=float(draw(st.integers(0, 40))), duration=float(draw(st.integers(1, 40))),
              workers=draw(st.sampled_from([1, 1, 1, 2, 3, 4])), gpus_per_worker=gpus,
              gpu_milli=draw(st.sampled_from([1000, 1000, 500, 250])) if gpus == 1 else 1000,
              cpu_milli=draw(st.sampled_from([0, 0, 1000, 3000])), memory_mib=draw(st.sampled_from([0, 0, 4096])),
              gpu_type=draw(st.sampled_from([None, None, "A", "B"])), priority=draw(st.integers(0, 3)))
    return b.build()


def _policy(tiresias: bool) -> object:
    if tiresias:
        return parse_policy({
            "name": "t", "actions": ["allocate", {"name": "preempt", "args": {"rank_by": "tiresias-las"}}],
            "plugins": [{"name": "tiresias-las", "args": {"thresholds_gpu_s": [20, 60]}}, {"name": "binpack"}]})
    return parse_policy({
        "name": "p", "actions": ["allocate", {"name": "preempt", "args": {"checkpoint_interval_s": 7.0}}],
        "plugins": [{"name": "priority"}, {"name": "fifo"}, {"name": "binpack"}]})


@contextmanager
def _reference() -> Iterator[None]:
    """The victim search without its fast paths."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(victims._SlotBound, "of", classmethod(lambda cls, ctx, job, ok: None))
        mp.setattr(victims, "_single_worker_plan", one_victim_plan.single_worker_plan_general)
        mp.setattr(victims, "_simulate_one", victims._simulate)
        mp.setattr(evicting, "one_victim", lambda *args: None)
        yield


def _outcome(cluster: Cluster, jobs: JobTable, tiresias: bool) -> tuple[object, ...]:
    sim = Simulator(cluster, jobs, _policy(tiresias),  # type: ignore[arg-type]
                    execution=ExecutionModel(restart_cost_s=1.0, checkpoint_interval_s=7.0), check_every=1)
    r = sim.run()
    return (r.cycles, *(np.nan_to_num(a, nan=-1.0).tobytes() for a in
                        (r.first_start, r.end, r.status, r.runs, r.preemptions, r.gpu_seconds)))


@settings(max_examples=150, deadline=None)
@given(cluster=_clusters(), jobs=_workloads(), tiresias=st.booleans())
def test_victim_fast_paths_choose_as_the_reference(cluster: Cluster, jobs: JobTable, tiresias: bool) -> None:
    fast = _outcome(cluster, jobs, tiresias)
    with _reference():
        reference = _outcome(cluster, jobs, tiresias)
    assert fast == reference


@st.composite
def _gang_workloads(draw: st.DrawFn) -> tuple[Cluster, JobTable]:
    """Many gangs of whole GPUs on a cluster without CPU or memory modelled: the jobs whose gang plan
    runs on a delta (``Framework.places_by_room``), with reprieves that leave the job just enough
    slots."""
    nodes = [NodeSpec(f"n{i}", draw(st.sampled_from(["A", "B"])), draw(st.sampled_from([2, 4, 8])))
             for i in range(draw(st.integers(3, 10)))]
    b = JobTableBuilder(source="hypothesis")
    for i in range(draw(st.integers(4, 40))):
        b.add(f"j{i}", submit=float(draw(st.integers(0, 30))), duration=float(draw(st.integers(1, 40))),
              workers=draw(st.sampled_from([1, 2, 3, 4, 6])), gpus_per_worker=draw(st.sampled_from([1, 2, 4])),
              gpu_type=draw(st.sampled_from([None, None, "A"])), priority=draw(st.integers(0, 3)))
    return Cluster.from_nodes(nodes, nodes_per_leaf=draw(st.integers(1, 3)), leaves_per_spine=2), b.build()


@settings(max_examples=200, deadline=None)
@given(case=_gang_workloads(), tiresias=st.booleans())
def test_gang_plans_on_a_delta_choose_as_on_the_state(case: tuple[Cluster, JobTable], tiresias: bool) -> None:
    """The gang plan booked on the slot bound's delta (no trial evictions, allocations or placements)
    picks the victims and placement that the trial plan on the cluster state picks."""
    cluster, jobs = case
    fast = _outcome(cluster, jobs, tiresias)
    with _reference():
        reference = _outcome(cluster, jobs, tiresias)
    assert fast == reference


@settings(max_examples=100, deadline=None)
@given(case=_gang_workloads(), tiresias=st.booleans())
def test_one_worker_trial_on_the_classes_places_as_on_the_state(case: tuple[Cluster, JobTable], tiresias: bool) -> None:
    """At every call, the one-worker trial on the node-class index gives the trial on the state's
    answer (victims and placement), also where it would not change a run's outcome (a failed trial
    falls back to the gang plan)."""
    one = victims._simulate_one

    def both(ctx: Any, fw: Any, job: int, rows: list[int]) -> Any:
        got = one(ctx, fw, job, rows)
        assert got == victims._simulate(ctx, fw, job, rows)
        return got

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(victims, "_simulate_one", both)
        _outcome(*case, tiresias)


@st.composite
def _one_worker_workloads(draw: st.DrawFn) -> tuple[Cluster, JobTable]:
    """One-worker jobs of 1-8 GPUs (the one-victim scan's case), ranks 0-3, on nodes of 4 or 8 GPUs
    of two types: nodes of several small victims beside bigger ones of other ranks."""
    nodes = [NodeSpec(f"n{i}", draw(st.sampled_from(["A", "B"])), draw(st.sampled_from([4, 8])))
             for i in range(draw(st.integers(1, 5)))]
    b = JobTableBuilder(source="hypothesis")
    for i in range(draw(st.integers(4, 40))):
        b.add(f"j{i}", submit=float(draw(st.integers(0, 30))), duration=float(draw(st.integers(1, 40))),
              workers=1, gpus_per_worker=draw(st.sampled_from([1, 1, 2, 4, 8])),
              gpu_type=draw(st.sampled_from([None, None, "A"])), priority=draw(st.integers(0, 3)))
    return Cluster.from_nodes(nodes, nodes_per_leaf=2, leaves_per_spine=2), b.build()


def _scan_checked(case: tuple[Cluster, JobTable], tiresias: bool) -> int:
    """Run ``case``, checking at every try the walk's one-victim scan settles that its plan (victim
    and placement) is the one :func:`choose_victims` gives on the candidates' arrays; returns how
    many tries it settled."""
    one = evicting.Walk.one_victim
    settled = 0

    def both(walk: evicting.Walk, ctx: Any, fw: Any, job: int, sel: Any) -> Any:
        nonlocal settled
        got = one(walk, ctx, fw, job, sel)
        if got is not None:
            settled += 1
            assert got == victims.choose_victims(ctx, fw, job, walk.candidates(ctx, sel))
        return got

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evicting.Walk, "one_victim", both)
        _outcome(*case, tiresias)
    return settled


@settings(max_examples=200, deadline=None)
@given(case=st.one_of(_one_worker_workloads(), _gang_workloads()), tiresias=st.booleans())
def test_one_victim_scan_plans_as_choose_victims(case: tuple[Cluster, JobTable], tiresias: bool) -> None:
    """Also where a run's outcome would hide a difference (see :func:`_scan_checked`)."""
    _scan_checked(case, tiresias)


def _four_gpu_case(big_rank: int) -> tuple[Cluster, JobTable]:
    """Two nodes of 4 GPUs: two 2-GPU jobs of priority 0 on one, a 4-GPU job of ``big_rank`` (started
    later: less work lost) on the other; a 4-GPU job of priority 3 arrives."""
    b = JobTableBuilder(source="test")
    for name, submit, gpus, prio in (("a", 0.0, 2, 0), ("b", 0.0, 2, 0), ("c", 3.0, 4, big_rank)):
        b.add(name, submit=submit, duration=100.0, workers=1, gpus_per_worker=gpus, priority=prio)
    b.add("d", submit=5.0, duration=10.0, workers=1, gpus_per_worker=4, priority=3)
    return Cluster.from_nodes([NodeSpec("n0", "A", 4), NodeSpec("n1", "A", 4)], nodes_per_leaf=2,
                              leaves_per_spine=2), b.build()


def test_one_victim_scan_settles_only_the_one_step_case() -> None:
    """The 4-GPU job's lowest-rank candidates are the two 2-GPU jobs, short alone: the scan must not
    take the 4-GPU job of a higher rank (the rule evicts the pair); with the 4-GPU job of the lowest
    rank too (and the least work lost), the scan settles it."""
    assert _scan_checked(_four_gpu_case(1), False) == 0
    assert _scan_checked(_four_gpu_case(0), False) == 1


def _typed_case() -> tuple[Cluster, JobTable]:
    """Node n0 (type A, 8 GPUs) runs two 4-GPU jobs of type A, node n1 (type B, 4 GPUs) one of type B
    that has lost the least work; a 4-GPU job of type A and an untyped one of a higher priority arrive
    together (one walk, the typed job first)."""
    b = JobTableBuilder(source="test")
    for name, submit, gpu_type in (("a2", 2.0, "A"), ("a", 3.0, "A"), ("b", 4.0, "B")):
        b.add(name, submit=submit, duration=100.0, workers=1, gpus_per_worker=4, gpu_type=gpu_type, priority=0)
    b.add("p1", submit=5.0, duration=10.0, workers=1, gpus_per_worker=4, gpu_type="A", priority=3)
    b.add("p2", submit=5.0, duration=10.0, workers=1, gpus_per_worker=4, priority=3)
    return Cluster.from_nodes([NodeSpec("n0", "A", 8), NodeSpec("n1", "B", 4)], nodes_per_leaf=2,
                              leaves_per_spine=2), b.build()


def test_one_victim_scan_reads_each_jobs_own_nodes() -> None:
    """The typed job evicts ``a`` (the least work lost on its type's node); the untyped one after it
    in the same walk may use node n1 and evicts ``b``, not ``a2``: the scan's kept node masks
    (:meth:`kant.actions.victims.PoolOrder.usable`) are per GPU type, not per GPU count alone."""
    assert _scan_checked(_typed_case(), False) == 2
