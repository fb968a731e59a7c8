"""The blocking allocate's head-first walk (a static order, no admission: the queue's head again and
again instead of a merge of the shapes' lists) gives exactly what the general walk gives: the same
starts, the same run and every shape's "why pending" reason after every cycle."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings

from cycle_helpers import record_reasons
from kant.actions.allocate import Allocate
from kant.config import load_policy
from kant.model.cluster import Cluster
from kant.model.job import JobTable
from kant.sim import Simulator
from strategies import clusters, workloads

#: policies with a blocking allocate (fifo-strict alone, then each backfill mode behind it)
POLICIES = ("fifo-strict", "kant", "slurm-backfill", "conservative-backfill")


def _run(cluster: Cluster, jobs: JobTable, policy: str, head_first: bool) -> tuple[object, list[dict[int, str]]]:
    sim = Simulator(cluster, jobs, load_policy(policy))
    sched = sim.scheduler
    allocates = [a for a in sched.actions if isinstance(a, Allocate)]
    assert allocates and all(a.args.blocking for a in allocates)  # type: ignore[attr-defined]
    for action in allocates:
        action.head_first = head_first
    reasons = record_reasons(sched)
    return sim.run(), reasons


@settings(max_examples=40, deadline=None)
@given(clusters(), workloads(max_jobs=40))
def test_head_first_walk_is_the_general_walk(cluster: Cluster, jobs: JobTable) -> None:
    for policy in POLICIES:
        fast, fast_reasons = _run(cluster, jobs, policy, True)
        slow, slow_reasons = _run(cluster, jobs, policy, False)
        for col in ("first_start", "end", "status", "runs", "gpu_seconds", "span_nodes"):
            assert np.array_equal(getattr(fast, col), getattr(slow, col), equal_nan=True), (policy, col)
        assert fast.cycles == slow.cycles and fast.events == slow.events  # type: ignore[attr-defined]
        assert fast.reasons == slow.reasons  # type: ignore[attr-defined]
        assert fast_reasons == slow_reasons, policy
