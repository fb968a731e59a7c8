"""The dynamic queue walk (``PendingQueue.walk`` with a :class:`QueueOrder`) against its rule, on
random queues (issue 32: it goes down the sorted order instead of merging per-shape runs): the
pending jobs of requests not skipped, in the order's sequence, passing over shapes the caller
blocks and jobs the caller starts during the walk."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cycle_helpers import make_ctx
from kant.framework.queue import IntArray, QueueOrder, SortKey
from kant.model import Cluster
from kant.plugins.fifo import Fifo


class _ByArray(QueueOrder):
    __slots__ = ("key",)

    def __init__(self, key: list[int]) -> None:
        self.key = key

    def __call__(self, job: int) -> SortKey:
        return (float(self.key[job]), float(job))

    def order(self, jobs: IntArray) -> IntArray:
        k = np.asarray(self.key, dtype=np.int64)[jobs]
        out: IntArray = jobs[np.lexsort((jobs, k))]
        return out


@settings(max_examples=200, deadline=None)
@given(data=st.data(), n=st.integers(1, 40))
def test_ordered_walk_follows_its_rule(data: st.DataObject, n: int) -> None:
    gpus = data.draw(st.lists(st.sampled_from([1, 2, 4]), min_size=n, max_size=n))
    specs: list[dict[str, Any]] = [{"gpus_per_worker": g} for g in gpus]
    ctx, _fw = make_ctx(Cluster.uniform(2, 8), specs, {}, [Fifo()])
    queue = ctx.queue
    pending = data.draw(st.lists(st.integers(0, n - 1), unique=True))
    for job in pending:
        queue.push(job)
    key = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    skip = set(data.draw(st.lists(st.sampled_from(sorted({queue.request_of[j] for j in range(n)})), max_size=2)))
    blocks = set(data.draw(st.lists(st.integers(0, n - 1))))  # looking at these blocks their shape
    starts = set(data.draw(st.lists(st.integers(0, n - 1))))  # looking at these starts them

    # the rule, on a copy of what is pending
    expected: list[int] = []
    left = set(pending)
    blocked: set[int] = set()
    for job in sorted(pending, key=lambda j: (key[j], j)):
        if queue.request_of[job] in skip or queue.shape_of[job] in blocked or job not in left:
            continue
        expected.append(job)
        if job in starts:
            left.discard(job)
        elif job in blocks:
            blocked.add(queue.shape_of[job])

    got: list[int] = []
    for job in queue.walk(_ByArray(key), skip):
        got.append(job)
        if job in starts:
            queue.remove(job)
        elif job in blocks:
            queue.block(queue.shape_of[job])
    assert got == expected
