"""The backfill action's incremental bookkeeping equals recomputing it from scratch.

* the release profile (``Releases.sorted``: one row per running job and node, by time) built from
  per-job rows kept across reservations holds exactly the rows built from ``ctx.running`` now;
* counting the shapes left out of the EASY walk lazily (only near ``max_jobs``) looks at the same
  jobs as counting them as the walk passes them;
* an EASY reservation's ``spare`` (what it leaves at the shadow time), updated in place as long jobs
  backfill against it, stays ``free_at_shadow - reserved``.

Checked after every cycle of random runs with wrong estimates (jobs overrun and end early), CPU and
memory modelled on some runs, and node failures.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kant.actions.backfill import Backfill
from kant.actions.backfill.easy import BLOCK, LONG, SKIP, STARTED, EasyCycle
from kant.config.policy import load_policy, parse_policy
from kant.model.cluster import Cluster, NodeSpec
from kant.model.job import JobTable, JobTableBuilder
from kant.sim import NodeFailure, Simulator


@st.composite
def workloads(draw: st.DrawFn) -> tuple[Cluster, JobTable, list[NodeFailure]]:
    n_nodes = draw(st.integers(2, 5))
    modelled = draw(st.booleans())
    nodes = [
        NodeSpec(f"n{i}", "V100", 4, cpu_milli=8000 if modelled else 0, memory_mib=64_000 if modelled else 0)
        for i in range(n_nodes)
    ]
    cluster = Cluster.from_nodes(nodes, nodes_per_leaf=2, leaves_per_spine=2)
    b = JobTableBuilder()
    for i in range(draw(st.integers(3, 14))):
        b.add(f"j{i}", submit=draw(st.integers(0, 40)), duration=draw(st.integers(0, 60)),
              workers=draw(st.integers(1, 3)), gpus_per_worker=draw(st.integers(1, 4)),
              cpu_milli=draw(st.sampled_from([0, 1000, 6000])) if modelled else 0,
              memory_mib=draw(st.sampled_from([0, 30_000])) if modelled else 0,
              estimate=draw(st.one_of(st.none(), st.integers(0, 90).map(float))))
    failures = [NodeFailure(float(draw(st.integers(0, 60))), draw(st.integers(0, n_nodes - 1)), 15.0)
                for _ in range(draw(st.integers(0, 2)))]
    return cluster, b.build(), failures


def _reference_rows(bf: Backfill, running: dict[int, Any], state: Any) -> list[tuple[float, int, tuple[int, ...]]]:
    rows = []
    modelled = bf.capacity.modelled
    for job, run in running.items():
        p = state.allocations[job]
        req = (p.gpus, p.cpu_milli, p.memory_mib)
        for node, count in p.per_node.items():
            amounts = tuple(int(req[r] * count * modelled[r, node]) for r in range(modelled.shape[0]))
            rows.append((run.expected_end, node, amounts))
    return sorted(rows)


@pytest.mark.parametrize("pol_name", ["kant", "slurm-backfill", "conservative-backfill"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=workloads())
def test_incremental_bookkeeping_equals_recomputing(
    pol_name: str, data: tuple[Cluster, JobTable, list[NodeFailure]]
) -> None:
    cluster, jobs, failures = data
    original = Backfill.execute
    checks = 0

    def checked(self: Backfill, ctx: Any, fw: Any) -> None:
        nonlocal checks
        # jobs started in earlier cycles are in ctx.running now: bring the mirror up to date
        releases = self.releases
        if releases._current is not None:
            releases.unsynced.append(releases._current)
            releases._current = None
        self.sync(ctx)
        t, node, amt = releases.sorted()
        assert np.all(np.diff(t) >= 0)
        rows = sorted(zip(t.tolist(), node.tolist(), map(tuple, amt.tolist()), strict=True))
        assert rows == _reference_rows(self, ctx.running, ctx.state)
        original(self, ctx, fw)
        res = self.kept.res
        if res is not None:
            np.testing.assert_array_equal(res.spare, res.free_at_shadow - res.reserved)
        checks += 1

    Backfill.execute = checked  # type: ignore[method-assign]
    try:
        Simulator(cluster, jobs, load_policy(pol_name), failures=failures, check_every=1).run()
    finally:
        Backfill.execute = original  # type: ignore[method-assign]
    assert checks > 0


def _eager_run_static(self: Any) -> None:
    """``EasyCycle.run_static`` as it was before left-out shapes were counted lazily (a reference)."""
    bf, queue, state = self.bf, self.ctx.queue, self.ctx.state
    max_jobs = bf.max_jobs
    key, shape_jobs, consider, is_long = queue.key, queue.shape_jobs, self.consider, self.is_long
    now, estimate, requests, cannot_fit = self.now, self.estimate, self.requests, self.failed.__contains__
    heappop, heappush = heapq.heappop, heapq.heappush
    firsts = []  # (key, shape, first job) per shape
    for shape in queue.pending_shapes():
        job0 = shape_jobs(shape)[0]
        firsts.append((key(job0), shape, job0))
    left_out: list[tuple[float, ...]] = []  # first keys of shapes not merged (looked at in passing)
    heap: list[tuple[tuple[float, ...], int]]
    if firsts:
        first = min(firsts)[2]  # keys are unique
        if cannot_fit(requests[first]) and (not self.check_admit or self.fw.admit(self.ctx, first).ok):
            # the queue's first job cannot start: it is the head, and a shape whose first job is
            # known not to fit would only be looked at once and dropped; leave it out of the merge
            self.head = first
            heap = []
            for k, shape, job0 in firsts:
                if cannot_fit(requests[job0]):
                    left_out.append(k)
                else:
                    heap.append((k, shape))
            left_out.sort()
        else:
            heap = [(k, shape) for k, shape, _ in firsts]
        heapq.heapify(heap)
    else:
        heap = []
    n_left = len(left_out)
    pos: dict[int, int] = {}
    short_only: set[int] = set()
    looked = 0
    passed = 0  # left-out shapes passed so far
    while heap and looked < max_jobs:
        top_key, shape = heappop(heap)
        while passed < n_left and left_out[passed] < top_key:
            passed += 1
            looked += 1
        if looked >= max_jobs:
            break
        lst = shape_jobs(shape)
        i = pos.get(shape, 0)
        if i >= len(lst):
            continue
        job = lst[i]
        looked += 1
        if self.head >= 0 and cannot_fit(requests[job]):
            continue  # known not to fit the free capacity; the head is already found
        verdict = consider(job, shape)
        if verdict == BLOCK:
            continue
        shadow = self.shadow  # known once the head is planned
        if verdict == STARTED:
            if bf.exhausted(state):
                return
            lst = shape_jobs(shape)  # the started job left the list
        else:
            i += 1
            if verdict == LONG or (verdict == SKIP and is_long(job)):
                short_only.add(shape)
        if shape in short_only:  # skip long jobs, but only those ahead of every other shape's
            top = heap[0][0] if heap else None
            n = len(lst)
            while i < n and looked < max_jobs:
                j = lst[i]
                if now + estimate(j) <= shadow or (top is not None and key(j) > top):
                    break
                i += 1
                looked += 1
        pos[shape] = i
        if i < len(lst):
            heappush(heap, (key(lst[i]), shape))


@st.composite
def crowded(draw: st.DrawFn) -> tuple[Cluster, JobTable]:
    """Many jobs of a few shapes on a small cluster: long queues, shapes left out of the walk."""
    n_nodes = draw(st.integers(2, 3))
    cluster = Cluster.uniform(n_nodes, 4, nodes_per_leaf=2, leaves_per_spine=2)
    b = JobTableBuilder()
    shapes = draw(st.lists(st.tuples(st.integers(1, n_nodes), st.sampled_from([1, 2, 4])), min_size=2, max_size=5))
    for i in range(draw(st.integers(8, 30))):
        w, g = draw(st.sampled_from(shapes))
        b.add(f"j{i}", submit=draw(st.integers(0, 20)), duration=draw(st.integers(1, 60)), workers=w,
              gpus_per_worker=g, estimate=draw(st.one_of(st.none(), st.integers(0, 90).map(float))))
    return cluster, b.build()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=crowded(), max_jobs=st.integers(1, 6))
def test_lazy_left_out_count_equals_eager(data: tuple[Cluster, JobTable], max_jobs: int) -> None:
    cluster, jobs = data
    pol = parse_policy({
        "name": "bf", "plugins": [{"name": "fifo"}, {"name": "binpack"}],
        "actions": [{"name": "allocate", "args": {"blocking": True}},
                    {"name": "backfill", "args": {"mode": "easy", "max_jobs": max_jobs}}],
    })
    lazy = Simulator(cluster, jobs, pol).run()
    cycle = EasyCycle
    original = cycle.run_static
    cycle.run_static = _eager_run_static  # type: ignore[method-assign]
    try:
        eager = Simulator(cluster, jobs, pol).run()
    finally:
        cycle.run_static = original  # type: ignore[method-assign]
    np.testing.assert_array_equal(lazy.first_start, eager.first_start)
