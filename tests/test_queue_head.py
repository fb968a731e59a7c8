"""The queue's kept first entry (``PendingQueue.head_entry``, read by ``head`` and the EASY walk's
start) against the fresh computation: the least of the shapes' first keys, and the job of least key,
after any sequence of pushes and removals (at a list's front or inside it), asked at any points."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cycle_helpers import drive_queue, random_queue


@settings(max_examples=300, deadline=None)
@given(data=st.data(), n=st.integers(1, 30))
def test_kept_head_is_the_least_key(data: st.DataObject, n: int) -> None:
    queue = random_queue(data, n)
    drive_queue(data, queue, n, lambda: _check(queue))
    _check(queue)


def _check(queue: Any) -> None:
    assert queue.head_entry() == min(queue.head_entries().values(), default=None)
    assert queue.head() == min(queue.queued, key=queue.key, default=None)
