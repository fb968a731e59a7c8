"""The queue's views that the EASY walk takes once per queue (``kant.framework.queue.QueueViews.of``: the key table's
lookup, the shapes' lists, their position bases, their first entries and requests) against fresh
reads and the fresh computation, after any sequence of pushes and removals (at a list's front or
inside it): the queue keeps updating the same objects, never replaces them."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cycle_helpers import make_ctx
from kant.framework.queue import QueueViews
from kant.model import Cluster
from kant.plugins.fifo import Fifo
from kant.plugins.priority import Priority


@settings(max_examples=300, deadline=None)
@given(data=st.data(), n=st.integers(1, 30))
def test_views_taken_once_stay_the_queues(data: st.DataObject, n: int) -> None:
    specs: list[dict[str, Any]] = [
        {"gpus_per_worker": data.draw(st.sampled_from([1, 2, 4])), "priority": data.draw(st.integers(0, 2))}
        for _ in range(n)]
    ctx, _fw = make_ctx(Cluster.uniform(2, 8), specs, {}, [Priority(), Fifo()])
    queue = ctx.queue
    views = QueueViews.of(queue)  # taken before anything is queued, as the walk's first cycle may
    ops = data.draw(st.lists(st.tuples(st.booleans(), st.integers(0, n - 1), st.booleans()), max_size=60))
    for push, pick, ask in ops:
        queued = sorted(queue.queued, key=queue.key)
        if push:
            waiting = [j for j in range(n) if j not in queue.queued]
            if not waiting:
                continue
            queue.push(waiting[pick % len(waiting)])
        elif queued:
            queue.remove(queued[pick % len(queued)])  # often the first: the head starts
        if ask:
            _check(queue, views)
    _check(queue, views)


def _check(queue: Any, views: QueueViews) -> None:
    assert views.queue is queue
    shapes = {queue.shapes[j].item() for j in queue.queued}
    for shape in range(max(shapes, default=0) + 2):  # and shapes with nothing queued
        jobs = sorted((j for j in queue.queued if queue.shapes[j].item() == shape), key=queue.key)
        assert list(views.lists.get(shape, ())) == jobs == list(queue.shape_jobs(shape))
        assert views.bases.get(shape, 0) == queue.position_base(shape)
        if jobs:
            assert views.heads[shape] == (queue.key(jobs[0]), shape)
            assert views.shape_requests[shape] == queue.request_of[jobs[0]]
        else:
            assert shape not in views.heads and shape not in views.shape_requests
    assert set(views.lists) == set(views.heads) == shapes
    for job in queue.queued:
        assert views.key(job) == queue.key(job)
