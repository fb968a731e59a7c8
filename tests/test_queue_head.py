"""The queue's kept first entry (``PendingQueue.head_entry``, read by ``head`` and the EASY walk's
start) against the fresh computation: the least of the shapes' first keys, and the job of least key,
after any sequence of pushes and removals (at a list's front or inside it), asked at any points."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cycle_helpers import make_ctx
from kant.model import Cluster
from kant.plugins.fifo import Fifo
from kant.plugins.priority import Priority


@settings(max_examples=300, deadline=None)
@given(data=st.data(), n=st.integers(1, 30))
def test_kept_head_is_the_least_key(data: st.DataObject, n: int) -> None:
    specs: list[dict[str, Any]] = [
        {"gpus_per_worker": data.draw(st.sampled_from([1, 2, 4])), "priority": data.draw(st.integers(0, 2))}
        for _ in range(n)]
    ctx, _fw = make_ctx(Cluster.uniform(2, 8), specs, {}, [Priority(), Fifo()])
    queue = ctx.queue
    # (push or remove, which job (a queued one for a removal: by index in the queue's order), ask after?)
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
            fresh = min(queue.head_entries().values(), default=None)
            assert queue.head_entry() == fresh
            assert queue.head() == min(queue.queued, key=queue.key, default=None)
    assert queue.head_entry() == min(queue.head_entries().values(), default=None)
    assert queue.head() == min(queue.queued, key=queue.key, default=None)
