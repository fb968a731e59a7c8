"""The EASY walk's caches across cycles change nothing:

* a walk skipped because it would repeat the last one (``QuietWalk``) starts exactly the jobs a full
  walk would have started (none), so whole runs are identical with the skip turned off;
* requests kept in ``LongBlocked`` while the capacity the reservation leaves has not grown give the
  same runs as forgetting them at every pass.

Random runs with long queues (``max_jobs`` small), arrivals over time (some of higher priority, so
they sort before jobs already queued), wrong estimates (jobs overrun and end early) and node
failures.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kant.actions.backfill.easy import EasyReservation, LongBlocked, QuietWalk
from kant.config.policy import parse_policy
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


def _policy(placer: str, max_jobs: int) -> Any:
    return parse_policy({
        "name": "bf", "plugins": [{"name": "priority"}, {"name": "fifo"}, {"name": placer}],
        "actions": [{"name": "allocate", "args": {"blocking": True}},
                    {"name": "backfill", "args": {"mode": "easy", "max_jobs": max_jobs}}],
    })


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
    pol = _policy(placer, max_jobs)
    repeats, renew = QuietWalk.repeats, LongBlocked.renew
    QuietWalk.repeats = _counting(repeats)  # type: ignore[method-assign]
    try:
        fast = _run(data, pol)
        QuietWalk.repeats = _never  # type: ignore[method-assign]
        no_skip = _run(data, pol)
        LongBlocked.renew = _forget_each_pass  # type: ignore[method-assign]
        reference = _run(data, pol)
    finally:
        QuietWalk.repeats, LongBlocked.renew = repeats, renew  # type: ignore[method-assign]
    for a, b, c in zip(fast, no_skip, reference, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def test_walks_are_skipped_behind_a_blocked_head() -> None:
    """A long queue behind a big gang that waits: arrivals alone trigger cycles whose walk repeats
    the last one, and those are skipped (the property test above checks they change nothing)."""
    cluster = Cluster.uniform(2, 4, nodes_per_leaf=2, leaves_per_spine=2)
    b = JobTableBuilder()
    b.add("long", submit=0, duration=1000, workers=1, gpus_per_worker=4)
    b.add("gang", submit=1, duration=10, workers=2, gpus_per_worker=4)
    for i in range(30):
        b.add(f"j{i}", submit=2 + i, duration=2000, workers=1, gpus_per_worker=4)
    pol = _policy("binpack", 3)
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
