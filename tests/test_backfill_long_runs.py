"""The EASY walk's long runs (``LongRun``: the long jobs it passed over one by one, kept between
cycles and passed over again in one step while the queue reports no edit among them) change
nothing: at every cycle the walk with them looks at the same jobs, stops at the same place, starts
the same jobs and leaves the same "why pending" reasons as a fresh walk that passes over every long
job one by one.

Random runs with long queues of few shapes (many long jobs of one request behind a blocked head,
short ones among them, so backfill starts jobs from the middle of a shape's list), arrivals over
time (some of higher priority: pushed into the middle of a list), wrong estimates, node failures
and a ``max_jobs`` from 1 to past the queue's length.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cycle_helpers import easy_policy, record_cycles
from kant.actions.backfill.easy import EasyCycle
from kant.model.cluster import Cluster
from kant.model.job import JobTable, JobTableBuilder
from kant.sim import NodeFailure, Simulator

Data = tuple[Cluster, JobTable, list[NodeFailure]]


@st.composite
def long_queues(draw: st.DrawFn) -> Data:
    n_nodes = draw(st.integers(2, 3))
    cluster = Cluster.uniform(n_nodes, 4, nodes_per_leaf=2, leaves_per_spine=2)
    b = JobTableBuilder()
    shapes = draw(st.lists(st.tuples(st.integers(1, n_nodes), st.sampled_from([1, 2, 4])), min_size=1, max_size=3))
    for i in range(draw(st.integers(10, 60))):
        w, g = draw(st.sampled_from(shapes))
        long = draw(st.booleans())
        b.add(f"j{i}", submit=draw(st.integers(0, 300)),
              duration=draw(st.integers(200, 900) if long else st.integers(1, 60)), workers=w,
              gpus_per_worker=g, priority=draw(st.sampled_from([0, 0, 0, 1])),
              estimate=draw(st.one_of(st.none(), st.integers(0, 1000).map(float))))
    failures = [NodeFailure(float(draw(st.integers(0, 300))), draw(st.integers(0, n_nodes - 1)), 50.0)
                for _ in range(draw(st.integers(0, 1)))]
    return cluster, b.build(), failures


def _run(data: Data, pol: Any, keep_runs: bool, min_run: int = 8,
         jump: bool | None = None) -> tuple[Any, list[Any], list[Any]]:
    """One run; also, after every cycle, its starts and reasons, and after every EASY walk what the
    walk left behind (the head, its shadow time, and, when the QuietWalk kept the walk, the longest
    short job and the QuietWalk's frontier: the last key the walk looked at; what else a walk leaves
    there is never read; the failure memo's and LongBlocked's requests and change counts: the same
    consider() calls). ``jump`` (default: ``keep_runs``): long jobs passed past the merge's next
    key when the limit cannot bind (``EasyCycle.jump_ok``)."""
    cluster, jobs, failures = data
    sim = Simulator(cluster, jobs, pol, failures=failures)
    sched = sim.scheduler
    cycles = record_cycles(sched)
    walks: list[Any] = []
    run_static = EasyCycle.run_static

    def walk(self: EasyCycle) -> None:
        self.keep_runs = keep_runs
        self.jump_ok = keep_runs if jump is None else jump
        self.min_run = min_run
        run_static(self)
        q = self.quiet
        bf = self.bf
        walks.append((self.now, self.head, self.planned, self.shadow, q.valid,
                      (q.frontier, q.max_short) if q.valid else None,
                      sorted(bf.failed.request_keys()), bf.failed.changes, sorted(bf.long_blocked.requests),
                      bf.long_blocked.changes))

    EasyCycle.run_static = walk  # type: ignore[method-assign]
    try:
        res = sim.run()
    finally:
        EasyCycle.run_static = run_static  # type: ignore[method-assign]
    return res, cycles, walks


def _assert_as_fresh(data: Data, pol: Any, min_run: int, jump: bool) -> None:
    """The walk with long runs (``min_run``; with ``jump``, passes past the merge's next key) gives the
    fresh walk's walks, cycles and per-job outcomes."""
    kept, kept_cycles, kept_walks = _run(data, pol, True, min_run, jump)
    fresh, fresh_cycles, fresh_walks = _run(data, pol, False)
    assert kept_walks == fresh_walks
    assert kept_cycles == fresh_cycles
    for col in ("first_start", "end", "status", "runs"):
        np.testing.assert_array_equal(getattr(kept, col), getattr(fresh, col))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=long_queues(), max_jobs=st.integers(1, 70), placer=st.sampled_from(["binpack", "e-binpack"]),
       min_run=st.sampled_from([1, 2, 8]), jump=st.booleans())
def test_long_runs_give_the_fresh_walk_at_every_cycle(data: Data, max_jobs: int, placer: str, min_run: int,
                                                      jump: bool) -> None:
    """The walk with long runs (and, with ``jump``, passes past the merge's next key while the limit
    cannot bind) against the fresh walk that passes every long job one by one up to the next key."""
    pol = easy_policy(placer, max_jobs)
    _assert_as_fresh(data, pol, min_run, jump)


def test_long_runs_are_used_behind_a_blocked_head() -> None:
    """A blocked gang, then many long jobs of one request that cannot start in what its reservation
    leaves, then short jobs arriving: later walks pass over the long jobs from the kept run (and
    give the fresh walk's runs, as the property above checks on random runs)."""
    cluster = Cluster.uniform(2, 4, nodes_per_leaf=2, leaves_per_spine=2)
    b = JobTableBuilder()
    b.add("a", submit=0, duration=500, workers=1, gpus_per_worker=2, estimate=500.0)
    b.add("gang", submit=1, duration=10, workers=2, gpus_per_worker=4, estimate=10.0)
    for i in range(40):
        b.add(f"long{i}", submit=2, duration=1000, workers=1, gpus_per_worker=1, estimate=1000.0)
    for i in range(20):
        b.add(f"short{i}", submit=3 + 20 * i, duration=15, workers=1, gpus_per_worker=1, estimate=15.0)
    data = (cluster, b.build(), [])
    pol = easy_policy("binpack", 300)
    used = {"n": 0}
    keep = EasyCycle._keep_run

    def counting(self: EasyCycle, shape: int, lo: int, hi: int) -> None:
        used["n"] += hi - lo
        keep(self, shape, lo, hi)

    EasyCycle._keep_run = counting  # type: ignore[method-assign]
    try:
        kept, kept_cycles, _ = _run(data, pol, True)
    finally:
        EasyCycle._keep_run = keep  # type: ignore[method-assign]
    fresh, fresh_cycles, _ = _run(data, pol, False)
    assert kept_cycles == fresh_cycles
    np.testing.assert_array_equal(kept.first_start, fresh.first_start)
    # the 40 long jobs were passed over one by one once, then from the run
    walks = sum(1 for _, started, _ in kept_cycles if started)
    assert walks > 10 and used["n"] < 2 * 40


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 23), st.booleans()), max_size=80))
def test_the_queue_reports_every_edit_and_keeps_each_shapes_head(ops: list[tuple[bool, int, bool]]) -> None:
    """``watch_edits``: positions below the reported edit hold the same jobs as when the entry was
    cleared; ``head_entries``: each shape's first key, after any pushes (out of key order: inserts
    into the middle of a list) and removals (front, middle, back)."""
    from cycle_helpers import make_ctx
    from kant.plugins.fifo import Fifo

    cluster = Cluster.uniform(2, 4, nodes_per_leaf=2, leaves_per_spine=2)
    specs: list[dict[str, Any]] = [{"gpus_per_worker": 1 + i % 3} for i in range(24)]  # three shapes
    ctx, _fw = make_ctx(cluster, specs, {}, [Fifo()])
    queue = ctx.queue
    edits = queue.watch_edits()
    seen: dict[int, dict[int, int]] = {}  # per shape: position -> job when its entry was cleared

    def snapshot(shape: int) -> None:
        base = queue.position_base(shape)
        seen[shape] = {base + i: job for i, job in enumerate(queue.shape_jobs(shape))}
        edits.pop(shape, None)

    for push, job, clear in ops:
        if push and job not in queue:
            queue.push(job)
        elif not push and job in queue:
            queue.remove(job)
        for shape in {queue.shape_of[j] for j in range(24)}:
            lst, base, low = queue.shape_jobs(shape), queue.position_base(shape), edits.get(shape)
            for at, was in seen.get(shape, {}).items():
                if at >= base and (low is None or at < low):
                    assert at - base < len(lst) and lst[at - base] == was
            if clear:
                snapshot(shape)
        assert dict(queue.head_entries()) == {
            s: (queue.key(queue.shape_jobs(s)[0]), s) for s in queue.pending_shapes()}
        assert queue.head() == min(queue, key=queue.key, default=None)


@st.composite
def interleaved_queues(draw: st.DrawFn) -> Data:
    """A gang of every node blocked behind a running job, then jobs of up to four interleaved shapes,
    mostly long (past the gang's shadow time) with short ones among them, arriving over time at
    two priorities: the walks pass long jobs past other shapes' keys and starts send them back."""
    n_nodes = draw(st.integers(2, 4))
    cluster = Cluster.uniform(n_nodes, 4, nodes_per_leaf=2, leaves_per_spine=2)
    b = JobTableBuilder()
    b.add("running", submit=0, duration=500, workers=1, gpus_per_worker=4, estimate=500.0)
    b.add("gang", submit=1, duration=50, workers=n_nodes, gpus_per_worker=4, priority=1, estimate=50.0)
    shapes = draw(st.lists(st.sampled_from([(1, 1), (1, 2), (2, 1), (1, 4), (2, 2)]), min_size=2, max_size=4,
                           unique=True))
    for i in range(draw(st.integers(10, 70))):
        w, g = draw(st.sampled_from(shapes))
        est = float(draw(st.integers(600, 3000) if draw(st.integers(0, 3)) else st.integers(5, 200)))
        b.add(f"j{i}", submit=draw(st.integers(2, 450)), duration=est * draw(st.sampled_from([0.3, 0.7, 1.0])),
              workers=w, gpus_per_worker=g, priority=draw(st.sampled_from([0, 0, 1])), estimate=est)
    return cluster, b.build(), []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=interleaved_queues(), max_jobs=st.one_of(st.just(300), st.integers(1, 80), st.integers(-3, 0)),
       placer=st.sampled_from(["binpack", "e-binpack"]), min_run=st.sampled_from([1, 8]))
def test_passes_past_the_next_key_give_the_merge_at_every_cycle(data: Data, max_jobs: int, placer: str,
                                                                min_run: int) -> None:
    """While the limit cannot bind, the walk passes a shape's long jobs up to its next short job (past
    other shapes' keys) and a start sends such shapes back: the same starts, reasons and walks as the
    fresh walk at every cycle. ``max_jobs`` <= 0: the trace's length plus 4 less that (the limit
    just out of reach)."""
    if max_jobs <= 0:
        max_jobs += len(data[1].names) + 4
    pol = easy_policy(placer, max_jobs)
    _assert_as_fresh(data, pol, min_run, True)


def test_long_jobs_passed_again_after_starts_do_not_stop_the_walk() -> None:
    """One shape of long jobs only, interleaved with short jobs of another that all start, and the
    limit just out of reach: after each start the long jobs are passed again from the merge's
    position (and counted again); the walk must still start every short job, as the fresh walk does."""
    cluster = Cluster.uniform(6, 4, nodes_per_leaf=2, leaves_per_spine=2)
    b = JobTableBuilder()
    b.add("running", submit=0, duration=500, workers=1, gpus_per_worker=4, estimate=500.0)
    # the gang arrives with the others: the walk finds it does not fit (no shape is left out)
    b.add("gang", submit=2, duration=50, workers=6, gpus_per_worker=4, priority=1, estimate=50.0)
    for i in range(10):
        b.add(f"short{i}", submit=2, duration=40, workers=1, gpus_per_worker=1, estimate=50.0)
        for k in range(3):
            b.add(f"long{i}-{k}", submit=2, duration=900, workers=1, gpus_per_worker=2, estimate=1000.0)
    data = (cluster, b.build(), [])
    pol = easy_policy("binpack", len(data[1].names) + 2)
    kept, kept_cycles, kept_walks = _run(data, pol, True, 8, True)
    fresh, fresh_cycles, fresh_walks = _run(data, pol, False)
    assert kept_walks == fresh_walks
    assert kept_cycles == fresh_cycles
    np.testing.assert_array_equal(kept.first_start, fresh.first_start)
    assert sum(len(started) for _, started, _ in kept_cycles if started) > 10  # the short ones started
