"""The EASY walk that resumes (``KeptWalk``: the last walk's looks at shapes whose long jobs it passed
over, kept between cycles, and the next walk started after the last of them that no event since can
have changed) changes nothing: at every cycle it leaves the same head, reservation, failure memo,
LongBlocked and QuietWalk, starts the same jobs and leaves the same reasons as a fresh walk.

Random runs with queues longer than ``max_jobs`` (the limit binds) and shorter, interleaved shapes
of long jobs with short ones among them behind a blocked head, arrivals at two priorities (pushed
into the middle of a list), wrong estimates (early releases move the reservation) and node failures.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cycle_helpers import easy_policy, record_cycles
from kant.actions.backfill.easy import EasyCycle
from kant.actions.backfill.resume import KeptWalk
from kant.model.cluster import Cluster
from kant.model.job import JobTable, JobTableBuilder
from kant.sim import NodeFailure, Simulator

Data = tuple[Cluster, JobTable, list[NodeFailure]]


@st.composite
def deep_queues(draw: st.DrawFn) -> Data:
    """A running job and a gang of every node at the top priority behind it (the head, with a
    reservation), then up to five shapes of mostly long jobs with short ones among them, arriving over
    time at two priorities; estimates often wrong, sometimes a node failure."""
    n_nodes = draw(st.integers(2, 4))
    cluster = Cluster.uniform(n_nodes, 4, nodes_per_leaf=2, leaves_per_spine=2)
    b = JobTableBuilder()
    b.add("running", submit=0, duration=draw(st.integers(200, 600)), workers=1, gpus_per_worker=4,
          estimate=500.0)
    b.add("gang", submit=1, duration=50, workers=n_nodes, gpus_per_worker=4, priority=2, estimate=50.0)
    shapes = draw(st.lists(st.sampled_from([(1, 1), (1, 2), (2, 1), (1, 4), (2, 2), (1, 3)]), min_size=1,
                           max_size=5, unique=True))
    for i in range(draw(st.integers(10, 80))):
        w, g = draw(st.sampled_from(shapes))
        est = float(draw(st.integers(600, 3000) if draw(st.integers(0, 3)) else st.integers(5, 200)))
        b.add(f"j{i}", submit=draw(st.integers(2, 450)), duration=est * draw(st.sampled_from([0.3, 0.7, 1.0, 1.5])),
              workers=w, gpus_per_worker=g, priority=draw(st.sampled_from([0, 0, 0, 1])), estimate=est)
    failures = [NodeFailure(float(draw(st.integers(0, 400))), draw(st.integers(0, n_nodes - 1)), 60.0)
                for _ in range(draw(st.integers(0, 1)))]
    return cluster, b.build(), failures


@st.composite
def half_blocked(draw: st.DrawFn) -> Data:
    """A gang on two GPUs of every node for a long time, a gang of all but one node's four GPUs at the
    top priority behind it (it stays in the failure memo: no node can be free before the first gang
    ends), then up to four shapes of mostly long jobs of one or two GPUs with short ones among them,
    arriving over time at two priorities: long jobs start only on the node the reservation leaves, so
    LongBlocked is cleared whenever a job there ends and the walk must test its requests again."""
    n_nodes = draw(st.integers(2, 4))
    cluster = Cluster.uniform(n_nodes, 4, nodes_per_leaf=2, leaves_per_spine=2)
    b = JobTableBuilder()
    d = draw(st.integers(500, 900))
    b.add("running", submit=0, duration=d, workers=n_nodes, gpus_per_worker=2,
          estimate=float(draw(st.sampled_from([d, d, d + 100]))))
    b.add("gang", submit=1, duration=50, workers=n_nodes - 1, gpus_per_worker=4, priority=2, estimate=50.0)
    shapes = draw(st.lists(st.sampled_from([(1, 1), (1, 2), (2, 1), (2, 2)]), min_size=1, max_size=4, unique=True))
    for i in range(draw(st.integers(30, 100))):
        w, g = draw(st.sampled_from(shapes))
        est = float(draw(st.integers(1000, 3000) if draw(st.integers(0, 2)) else st.integers(5, 100)))
        b.add(f"j{i}", submit=draw(st.integers(2, 600)), duration=est * draw(st.sampled_from([0.3, 1.0, 1.0, 1.0])),
              workers=w, gpus_per_worker=g, priority=draw(st.sampled_from([0, 0, 0, 1])), estimate=est)
    return cluster, b.build(), []


@st.composite
def freed_or_taken(draw: st.DrawFn) -> Data:
    """Four nodes of four GPUs, a gang on two GPUs of each until 900 (on time: the reservation stays)
    and a gang of three whole nodes blocked behind it; sometimes two jobs of one GPU on one node (one
    past 900, so the reservation leaves that node, one ending on time before: what the reservation
    leaves grows, LongBlocked is cleared under the same reservation); long jobs of every node's two
    free GPUs, of whole nodes (no room: left out, the queue longer than the limit) and of shapes with
    room; then short jobs arriving while the last ones run (each start takes room from requests the
    walk looked at before)."""
    cluster = Cluster.uniform(4, 4, nodes_per_leaf=2, leaves_per_spine=2)
    b = JobTableBuilder()
    if draw(st.booleans()):
        _side_jobs(b, float(draw(st.integers(100, 600))))
    else:
        b.add("running", submit=0, duration=900, workers=4, gpus_per_worker=2, estimate=900.0)
        b.add("gang", submit=1, duration=50, workers=3, gpus_per_worker=4, priority=2, estimate=50.0)
    t = 2
    for i in range(draw(st.integers(0, 4))):
        b.add(f"wide{i}", submit=t, duration=2000, workers=4, gpus_per_worker=2, estimate=2000.0)
        t += 1
    for i in range(draw(st.integers(0, 20))):
        b.add(f"whole{i}", submit=t, duration=2000, workers=2, gpus_per_worker=4, estimate=2000.0)
        t += 1
    shapes = draw(st.lists(st.sampled_from([(1, 1), (2, 1), (2, 2), (3, 1)]), min_size=1, max_size=3, unique=True))
    for i in range(draw(st.integers(5, 40))):
        w, g = draw(st.sampled_from(shapes))
        t += draw(st.integers(1, 6))
        b.add(f"long{i}", submit=t, duration=2000, workers=w, gpus_per_worker=g, estimate=2000.0)
    gap = draw(st.integers(10, 30))
    for i in range(draw(st.integers(0, 15))):
        d = float(draw(st.integers(gap, 3 * gap)))
        g = draw(st.sampled_from([1, 2]))
        b.add(f"short{i}", submit=t + gap * (i + 1), duration=d, workers=1, gpus_per_worker=g, estimate=d)
    return cluster, b.build(), []


def _run(data: Data, pol: Any, resume: bool) -> tuple[Any, list[Any], list[Any], int]:
    """One run; after every cycle its starts and reasons, after every EASY walk what it left behind
    (head, reservation, shadow time, QuietWalk, the failure memo's and LongBlocked's requests and
    change counts), and how many looks the walks resumed after."""
    cluster, jobs, failures = data
    sim = Simulator(cluster, jobs, pol, failures=failures)
    sched = sim.scheduler
    cycles = record_cycles(sched)
    walks: list[Any] = []
    skipped = [0]
    run_static, kept_resume = EasyCycle.run_static, KeptWalk.resume

    def walk(self: EasyCycle) -> None:
        # keep after every walk (the short walks of these small runs too), or never
        self.kept_walk.min_looks = 1 if resume else sys.maxsize
        run_static(self)
        q, bf = self.quiet, self.bf
        walks.append((self.now, self.head, self.planned, self.shadow,
                      -1 if self.res is None else self.res.serial, q.valid,
                      (q.frontier, q.max_short) if q.valid else None,
                      sorted(bf.failed.request_keys()), bf.failed.changes, sorted(bf.long_blocked.requests),
                      bf.long_blocked.changes))

    def counted(self: KeptWalk, *args: Any) -> Any:
        got = kept_resume(self, *args)
        if got is not None:
            skipped[0] += got.looked
        return got

    EasyCycle.run_static = walk  # type: ignore[method-assign]
    KeptWalk.resume = counted  # type: ignore[method-assign]
    try:
        res = sim.run()
    finally:
        EasyCycle.run_static = run_static  # type: ignore[method-assign]
        KeptWalk.resume = kept_resume  # type: ignore[method-assign]
    return res, cycles, walks, skipped[0]


def _assert_as_fresh(data: Data, pol: Any) -> int:
    """The resumed walks give the fresh walks' walks, cycles and per-job outcomes; returns the looks
    the resumed run skipped."""
    kept, kept_cycles, kept_walks, skipped = _run(data, pol, True)
    fresh, fresh_cycles, fresh_walks, none = _run(data, pol, False)
    assert none == 0
    assert kept_walks == fresh_walks
    assert kept_cycles == fresh_cycles
    for col in ("first_start", "end", "status", "runs"):
        np.testing.assert_array_equal(getattr(kept, col), getattr(fresh, col))
    return skipped


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.one_of(deep_queues(), half_blocked()), max_jobs=st.one_of(st.integers(1, 40), st.just(300)),
       placer=st.sampled_from(["binpack", "e-binpack"]))
def test_the_resumed_walk_gives_the_fresh_walk_at_every_cycle(data: Data, max_jobs: int, placer: str) -> None:
    """Resumed against fresh, at every cycle and walk, with the limit binding (queues longer than
    ``max_jobs``) or not (the policy's 300: passes past the merge, nothing kept)."""
    _assert_as_fresh(data, easy_policy(placer, max_jobs))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=freed_or_taken(), max_jobs=st.integers(15, 45))
def test_the_resumed_walk_tests_room_and_long_blocked_again(data: Data, max_jobs: int) -> None:
    """Resumed against fresh where the requests kept lose their room in the free capacity, or leave
    LongBlocked while the reservation stays (a walk that took either as unchanged fails here)."""
    _assert_as_fresh(data, easy_policy("binpack", max_jobs))


def test_a_long_queue_behind_a_blocked_head_resumes() -> None:
    """A gang on half of every node's GPUs, a gang of all but one node blocked behind it, then long
    jobs of four interleaved shapes that cannot start in what its reservation leaves and, behind the
    first twenty of them, short jobs arriving every 10 s, the limit binding: the walks start the short
    ones deep in the walk, and the next walks resume after most of the looks ahead of them (and give
    the fresh walk's cycles, as the property above checks on random runs)."""
    cluster = Cluster.uniform(4, 4, nodes_per_leaf=2, leaves_per_spine=2)
    b = JobTableBuilder()
    b.add("running", submit=0, duration=900, workers=4, gpus_per_worker=2, estimate=900.0)
    b.add("gang", submit=1, duration=50, workers=3, gpus_per_worker=4, priority=2, estimate=50.0)
    for i in range(80):
        b.add(f"long{i}", submit=2 + 5 * i, duration=2000, workers=1 + i % 2, gpus_per_worker=1 + (i // 2) % 2,
              estimate=2000.0)
    for i in range(40):
        b.add(f"short{i}", submit=100 + 10 * i, duration=15, workers=1, gpus_per_worker=1, estimate=15.0)
    skipped = _assert_as_fresh((cluster, b.build(), []), easy_policy("binpack", 40))
    assert skipped > 500


def _side_jobs(b: JobTableBuilder, short_end: float = 300.0) -> None:
    """A gang on two GPUs of each of four nodes until 900 (no early end: the reservation stays), two
    jobs of one GPU on the node it packs first (one until 2000, so the head's reservation leaves that
    node, one ending at 300 on time), and a gang of three whole nodes at the top priority behind them:
    blocked, in the failure memo, with a reservation at 900 on the three other nodes."""
    b.add("running", submit=0, duration=900, workers=4, gpus_per_worker=2, estimate=900.0)
    b.add("side_long", submit=0, duration=2000, workers=1, gpus_per_worker=1, estimate=2000.0)
    b.add("side_short", submit=0, duration=short_end, workers=1, gpus_per_worker=1, estimate=short_end)
    b.add("gang", submit=1, duration=50, workers=3, gpus_per_worker=4, priority=2, estimate=50.0)


def test_long_blocked_cleared_under_the_same_reservation_is_tested_again() -> None:
    """At 300 a job ends on time on the node the reservation leaves: the reservation stays, what it
    leaves grows, so LongBlocked is cleared, and the first long job of one GPU kept in the walk before
    can start now: the resumed walk must test the request again, not take it as still blocked."""
    cluster = Cluster.uniform(4, 4, nodes_per_leaf=2, leaves_per_spine=2)
    b = JobTableBuilder()
    _side_jobs(b)
    for i in range(60):  # long jobs of three interleaved shapes, arriving every 5 s past 300
        w, g = [(1, 1), (2, 1), (2, 2)][i % 3]
        b.add(f"long{i}", submit=2 + 5 * i, duration=2000, workers=w, gpus_per_worker=g, estimate=2000.0)
    skipped = _assert_as_fresh((cluster, b.build(), []), easy_policy("binpack", 30))
    assert skipped > 40


def test_room_taken_from_a_kept_request_is_tested_again() -> None:
    """Long jobs of every node's two free GPUs first (one look passes them all), then long jobs of two
    shapes with room, then short jobs of two GPUs arriving deep in the walk: each start takes the room
    of the first request, which the walk does not look at again, so the next walk must find it without
    room (the failure memo), not resume past it as if it still had room."""
    cluster = Cluster.uniform(4, 4, nodes_per_leaf=2, leaves_per_spine=2)
    b = JobTableBuilder()
    b.add("running", submit=0, duration=900, workers=4, gpus_per_worker=2, estimate=900.0)
    b.add("gang", submit=1, duration=50, workers=3, gpus_per_worker=4, priority=2, estimate=50.0)
    for i in range(4):
        b.add(f"wide{i}", submit=2 + i, duration=2000, workers=4, gpus_per_worker=2, estimate=2000.0)
    for i in range(20):  # no room ever: left out of the walk, but the queue is longer than the limit
        b.add(f"whole{i}", submit=6 + i, duration=2000, workers=2, gpus_per_worker=4, estimate=2000.0)
    for i in range(20):
        w, g = [(2, 1), (2, 2), (3, 1)][i % 3]
        b.add(f"long{i}", submit=30 + 3 * i, duration=2000, workers=w, gpus_per_worker=g, estimate=2000.0)
    for i in range(20):  # each still running when the next arrives
        b.add(f"short{i}", submit=200 + 20 * i, duration=30, workers=1, gpus_per_worker=2, estimate=30.0)
    skipped = _assert_as_fresh((cluster, b.build(), []), easy_policy("binpack", 40))
    assert skipped > 60
