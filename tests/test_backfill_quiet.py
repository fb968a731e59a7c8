"""The EASY walk's caches across cycles change nothing:

* a walk skipped because it would repeat the last one (``QuietWalk``) starts exactly the jobs a full
  walk would have started (none), so whole runs are identical with the skip turned off;
* requests kept in ``LongBlocked`` while the capacity the reservation leaves has not grown give the
  same runs as forgetting them at every pass, and as never remembering any (every long job tried
  in what the reservation leaves: the memo-free reference). A verdict taken from the memo must be
  the one the free capacity gives, or the walk's reach within ``max_jobs`` would depend on what the
  memo happens to hold (a free-capacity failure drops the whole shape from the pass, a long job
  passed over counts one look).

Random runs with long queues (``max_jobs`` small), arrivals over time (some of higher priority, so
they sort before jobs already queued), wrong estimates (jobs overrun and end early) and node
failures.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cycle_helpers import easy_policy
from kant.actions.backfill.easy import QuietWalk
from kant.actions.backfill.leftover import LongBlocked
from kant.actions.backfill.reservation import EasyReservation
from kant.model.cluster import Cluster
from kant.model.job import JobTable, JobTableBuilder
from kant.sim import NodeFailure, Simulator

SKIPS = {"n": 0}


@st.composite
def arriving(draw: st.DrawFn) -> tuple[Cluster, JobTable, list[NodeFailure]]:
    n_nodes = draw(st.integers(2, 3))
    cluster = Cluster.uniform(n_nodes, 4, nodes_per_leaf=2, leaves_per_spine=2)
    b = JobTableBuilder()
    shapes = draw(st.lists(st.tuples(st.integers(1, n_nodes), st.sampled_from([1, 2, 4])), min_size=2, max_size=5))
    for i in range(draw(st.integers(10, 40))):
        w, g = draw(st.sampled_from(shapes))
        b.add(f"j{i}", submit=draw(st.integers(0, 200)), duration=draw(st.integers(1, 100)), workers=w,
              gpus_per_worker=g, priority=draw(st.sampled_from([0, 0, 0, 1])),
              estimate=draw(st.one_of(st.none(), st.integers(0, 150).map(float))))
    failures = [NodeFailure(float(draw(st.integers(0, 200))), draw(st.integers(0, n_nodes - 1)), 30.0)
                for _ in range(draw(st.integers(0, 1)))]
    return cluster, b.build(), failures


def _run(data: tuple[Cluster, JobTable, list[NodeFailure]], pol: Any) -> tuple[Any, Any]:
    cluster, jobs, failures = data
    res = Simulator(cluster, jobs, pol, failures=failures).run()
    return res.first_start, res.end


def _never(self: QuietWalk, cycle: Any) -> bool:
    return False


def _forget_each_pass(self: LongBlocked, res: EasyReservation | None, free_now: Any, state: Any = None) -> None:
    if res is not None:
        self._serial = res.serial
        self._clear()


def _remember_nothing(self: LongBlocked, request: int, short: Any = None) -> None:
    """The memo-free reference: every long job is tried in what the reservation leaves."""


def _counting(original: Any) -> Any:
    def repeats(self: QuietWalk, cycle: Any) -> bool:
        got: bool = original(self, cycle)
        SKIPS["n"] += got
        return got
    return repeats


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=arriving(), max_jobs=st.integers(1, 6), placer=st.sampled_from(["binpack", "e-binpack"]))
def test_skipped_walks_and_kept_long_blocked_change_nothing(
    data: tuple[Cluster, JobTable, list[NodeFailure]], max_jobs: int, placer: str
) -> None:
    pol = easy_policy(placer, max_jobs)
    repeats, renew, add = QuietWalk.repeats, LongBlocked.renew, LongBlocked.add
    QuietWalk.repeats = _counting(repeats)  # type: ignore[method-assign]
    try:
        fast = _run(data, pol)
        QuietWalk.repeats = _never  # type: ignore[method-assign]
        no_skip = _run(data, pol)
        LongBlocked.renew = _forget_each_pass  # type: ignore[method-assign]
        forget = _run(data, pol)
        LongBlocked.add = _remember_nothing  # type: ignore[method-assign]
        reference = _run(data, pol)
    finally:
        QuietWalk.repeats, LongBlocked.renew, LongBlocked.add = repeats, renew, add  # type: ignore[method-assign]
    for a, b, c, d in zip(fast, no_skip, forget, reference, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(a, d)


def test_walks_are_skipped_behind_a_blocked_head() -> None:
    """A long queue behind a big gang that waits: arrivals alone trigger cycles whose walk repeats
    the last one, and those are skipped (the property test above checks they change nothing)."""
    cluster = Cluster.uniform(2, 4, nodes_per_leaf=2, leaves_per_spine=2)
    b = JobTableBuilder()
    b.add("long", submit=0, duration=1000, workers=1, gpus_per_worker=4)
    b.add("gang", submit=1, duration=10, workers=2, gpus_per_worker=4)
    for i in range(30):
        b.add(f"j{i}", submit=2 + i, duration=2000, workers=1, gpus_per_worker=4)
    pol = easy_policy("binpack", 3)
    before = SKIPS["n"]
    repeats = QuietWalk.repeats
    QuietWalk.repeats = _counting(repeats)  # type: ignore[method-assign]
    try:
        fast = _run((cluster, b.build(), []), pol)
    finally:
        QuietWalk.repeats = repeats  # type: ignore[method-assign]
    assert SKIPS["n"] - before > 10
    assert fast[0][1] == 1000.0  # the gang starts when the long job ends


def test_queue_walk_from_start_positions_and_mark() -> None:
    """``PendingQueue.walk(start=...)`` resumes behind each shape's first jobs; ``since_mark`` says
    what left the queue and the smallest key pushed since ``mark``."""
    from cycle_helpers import make_ctx
    from kant.plugins.fifo import Fifo

    cluster = Cluster.uniform(2, 4, nodes_per_leaf=2, leaves_per_spine=2)
    specs: list[dict[str, Any]] = [{"gpus_per_worker": 1 + i % 2} for i in range(6)]  # two shapes, alternating
    ctx, _fw = make_ctx(cluster, specs, {}, [Fifo()])
    queue = ctx.queue
    for job in range(4):
        queue.push(job)
    assert list(queue.walk()) == [0, 1, 2, 3]
    shape0, shape1 = queue.shape_of[0], queue.shape_of[1]
    assert list(queue.walk(start={shape0: 1})) == [1, 2, 3]
    assert list(queue.walk(start={shape0: 2, shape1: 1})) == [3]
    queue.mark()
    assert queue.since_mark() == (0, None)
    queue.push(5)
    queue.push(4)
    queue.remove(0)
    removed, lowest = queue.since_mark()
    assert removed == 1 and lowest == queue.key(4)


def test_a_request_without_room_blocks_its_shape_whatever_long_blocked_holds() -> None:
    """A request whose long jobs were put in LongBlocked (room in the free capacity, none in what
    the reservation leaves) and that has since lost its room to a short job: its next long job,
    once the head is planned, is a free-capacity failure, which drops the shape from the pass, as
    without the memo. (Taken from the memo instead, each of its long jobs counted one look and the
    walk ran out of ``max_jobs`` before the job that could start: a 300,000-job replay differed
    with and without the memo.)"""
    cluster = Cluster.uniform(2, 4, nodes_per_leaf=2, leaves_per_spine=2)
    b = JobTableBuilder()
    b.add("a", submit=0, duration=100, workers=1, gpus_per_worker=4, estimate=100.0)  # node 0 until t=100
    b.add("head", submit=1, duration=10, workers=2, gpus_per_worker=4, estimate=10.0)  # waits for t=100
    b.add("p", submit=1.5, duration=1000, workers=1, gpus_per_worker=1, estimate=1000.0)  # long, has room
    for i in range(3):  # long: room on node 1 (4 free) but none left by the reservation (it needs all 8 GPUs)
        b.add(f"r{i}", submit=2, duration=1000, workers=1, gpus_per_worker=3, estimate=1000.0)
    b.add("short", submit=3, duration=10, workers=1, gpus_per_worker=2, estimate=10.0)  # 2 of node 1's GPUs
    for i in range(3, 6):  # more of the same request, queued before z
        b.add(f"r{i}", submit=3.5, duration=1000, workers=1, gpus_per_worker=3, estimate=1000.0)
    b.add("z", submit=4, duration=10, workers=1, gpus_per_worker=2, estimate=10.0)  # fits the other 2
    data = (cluster, b.build(), [])
    pol = easy_policy("binpack", 6)  # head, p, r0-r2, short at t=3; head, p, r0-r5, z would be 9 looks
    add = LongBlocked.add
    fast = _run(data, pol)
    LongBlocked.add = _remember_nothing  # type: ignore[method-assign]
    try:
        reference = _run(data, pol)
    finally:
        LongBlocked.add = add  # type: ignore[method-assign]
    # by hand: "short" starts at t=3 (node 1: 4 -> 2 free), so the r jobs have no room from then
    # on; at t=4 the walk looks at the head, p (the first look with room: the head's reservation is
    # planned there, and p is long) and r0 (no room: its shape is dropped), and starts z
    assert fast[0][6] == 3.0 and fast[0][10] == 4.0
    for a, b_ in zip(fast, reference, strict=True):
        np.testing.assert_array_equal(a, b_)
