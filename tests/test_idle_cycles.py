"""The scheduler's idle fast path (Action.idle): a cycle after arrivals only, for a policy whose
actions all have an idle test (allocate, blocking or not, backfill, preempt by rounds), gives exactly
what the full cycle gives, also under a queue order that changes with time (tiresias, drf)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings

from cycle_helpers import record_reasons
from kant.config import load_policy
from kant.model.cluster import Cluster
from kant.model.job import JobTable
from kant.sim import Simulator
from kant.traces import load_cluster, read_philly
from strategies import clusters, workloads


def _run(cluster: Cluster, jobs: JobTable, policy: str, idle: bool) -> tuple[Simulator, object, list[dict]]:
    """One run; also every shape's "why pending" reason after each cycle."""
    sim = Simulator(cluster, jobs, load_policy(policy))
    sched = sim.scheduler
    if not idle:
        sched._idle_ok = False  # every cycle runs the action in full
    reasons = record_reasons(sched)
    return sim, sim.run(), reasons


def _same(cluster: Cluster, jobs: JobTable, policy: str) -> None:
    """Runs with and without the fast path; asserts they agree."""
    _, fast, fast_reasons = _run(cluster, jobs, policy, True)
    _, slow, slow_reasons = _run(cluster, jobs, policy, False)
    for col in ("first_start", "end", "status", "runs", "gpu_seconds", "span_nodes"):
        assert np.array_equal(getattr(fast, col), getattr(slow, col), equal_nan=True), col
    assert fast.cycles == slow.cycles and fast.events == slow.events
    assert fast.reasons == slow.reasons
    # every shape's "why pending", after every cycle
    assert fast_reasons == slow_reasons


@settings(max_examples=40, deadline=None)
@given(clusters(), workloads(max_jobs=40))
def test_idle_cycles_change_nothing_on_random_workloads(cluster: Cluster, jobs: JobTable) -> None:
    for policy in ("volcano-binpack", "k8s-default", "fifo", "kant-nobackfill", "fifo-strict", "kant",
                   "slurm-backfill", "tiresias", "drf"):
        _same(cluster, jobs, policy)


def _idle_calls(cluster: Cluster, jobs: JobTable, policy: str) -> int:
    """Cycles of a run that took the fast path (the tests are asked last action first, so the first
    action's is asked only when every later one said idle)."""
    sim = Simulator(cluster, jobs, load_policy(policy))
    sched = sim.scheduler
    assert sched._idle_ok
    idle = sched._idle_tests[-1]
    taken = 0

    def first_idle(ctx):  # type: ignore[no-untyped-def]
        nonlocal taken
        result = idle(ctx)
        taken += bool(result)
        return result

    sched._idle_tests[-1] = first_idle
    sim.run()
    return taken


def test_idle_cycles_change_nothing_on_philly_and_are_taken() -> None:
    jobs = read_philly()
    cluster = load_cluster("philly")
    for policy, n in (("volcano-binpack", 6000), ("kant", 3000), ("tiresias", 3000)):
        sub = jobs.take(np.arange(n))
        _same(cluster, sub, policy)
        assert _idle_calls(cluster, sub, policy) > 0  # the fast path is used on a real trace


def test_idle_fast_path_only_when_every_action_has_one() -> None:
    cluster = load_cluster("philly")
    jobs = read_philly()
    for policy in ("volcano-binpack", "fifo-strict", "kant-nobackfill", "kant", "slurm-backfill", "tiresias", "drf"):
        assert Simulator(cluster, jobs, load_policy(policy)).scheduler._idle_ok, policy
    assert not Simulator(cluster, jobs, load_policy("capacity-quota")).scheduler._idle_ok  # admission
