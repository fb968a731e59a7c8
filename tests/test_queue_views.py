"""The queue's views that the EASY walk takes once per queue (``kant.framework.queue.QueueViews.of``: the key table's
lookup, the shapes' lists, their position bases, their first entries and requests) against fresh
reads and the fresh computation, after any sequence of pushes and removals (at a list's front or
inside it): the queue keeps updating the same objects, never replaces them."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cycle_helpers import drive_queue, random_queue
from kant.framework.queue import QueueViews


@settings(max_examples=300, deadline=None)
@given(data=st.data(), n=st.integers(1, 30))
def test_views_taken_once_stay_the_queues(data: st.DataObject, n: int) -> None:
    queue = random_queue(data, n)
    views = QueueViews.of(queue)  # taken before anything is queued, as the walk's first cycle may
    drive_queue(data, queue, n, lambda: _check(queue, views))
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
