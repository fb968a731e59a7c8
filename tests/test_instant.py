"""The instant rule shared by the simulator and the live loop (kant.instant)."""

from __future__ import annotations

import math

from kant.config import load_policy
from kant.instant import Instant
from kant.model.cluster import Cluster
from kant.model.store import JobStore
from kant.scheduler import Scheduler


def scheduler() -> Scheduler:
    store = JobStore(tenant_names=["t"])
    for name in ("a", "b"):
        store.add(name, submit=0.0, workers=1, gpus_per_worker=8, tenant="t", estimate=10.0)
    return Scheduler(load_policy("fifo"), Cluster.uniform(1, 8), store)


def test_a_cycle_only_when_something_changed_and_jobs_wait() -> None:
    sched, instant = scheduler(), Instant()
    assert instant.cycle(sched, 0.0) is None and sched.cycles == 0  # nothing changed
    instant.changed = True
    assert instant.cycle(sched, 0.0) is None and not instant.changed  # nothing waits: no cycle, and forgotten
    sched.submit(0, 0.0)
    sched.submit(1, 0.0)
    instant.changed = True
    result = instant.cycle(sched, 0.0)
    assert result is not None and [job for job, _ in result.started] == [0] and sched.cycles == 1
    assert not instant.changed
    assert instant.cycle(sched, 1.0) is None and sched.cycles == 1  # job 1 waits, but nothing changed


def test_wake_ups_are_kept_once_and_make_their_instant_changed() -> None:
    instant = Instant()
    assert instant.next_wakeup() == math.inf
    for when in (5.0, 3.0, 5.0):
        instant.wake(when)
    assert instant.wakeups == [3.0, 5.0] and instant.next_wakeup() == 3.0
    instant.due(2.0)
    assert not instant.changed
    instant.due(4.0)  # 3 is spent
    assert instant.changed and instant.wakeups == [5.0]
    instant.changed = False
    instant.wake(3.0)  # a spent time may be asked for again
    instant.due(10.0)
    assert instant.changed and instant.wakeups == []
