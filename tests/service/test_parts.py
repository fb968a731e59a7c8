"""The service's small parts on their own: clocks, the simulated executor, the job store's batches."""

from __future__ import annotations

import math
import time

import pytest

from kant.model.store import JobStore
from kant.service.clock import AcceleratedClock, ManualClock, WallClock, make_clock
from kant.service.executors import Launch, SimulatedExecutor
from kant.service.executors.simulated import EXIT_CODE_LABEL


def test_manual_clock_moves_only_forward() -> None:
    c = ManualClock(5.0)
    assert c.now() == 5.0 and c.manual
    c.set(7.5)
    assert c.now() == 7.5
    with pytest.raises(ValueError, match="cannot go back"):
        c.set(7.0)
    assert c.wall_delay(7.5) == 0.0 and c.wall_delay(8.0) == math.inf


def test_accelerated_clock() -> None:
    c = AcceleratedClock(1000.0, start=100.0)
    t0 = c.now()
    time.sleep(0.05)
    assert 100.0 <= t0 < c.now() and c.now() - t0 >= 40  # 50 ms of wall time, 1000x
    assert 0.0 < c.wall_delay(c.now() + 1000.0) <= 1.0
    with pytest.raises(ValueError):
        AcceleratedClock(0.0)
    assert isinstance(make_clock("wall"), WallClock) and not make_clock("wall").manual
    with pytest.raises(ValueError, match="unknown clock"):
        make_clock("sundial")


def launch(job: int, run: int, start: float, duration: float | None, **labels: str) -> Launch:
    return Launch(job, run, ("n0",), 1, start, duration_s=duration, labels=labels)


def test_simulated_executor_ends_runs_at_start_plus_duration() -> None:
    ex = SimulatedExecutor()
    ex.start(launch(1, 1, 0.0, 10.0))
    ex.start(launch(2, 1, 0.0, 5.0, **{EXIT_CODE_LABEL: "3"}))
    ex.start(launch(3, 1, 0.0, None))  # runs until stopped
    assert ex.next_time() == 5.0
    assert ex.poll(4.9) == []
    (failed,) = ex.poll(5.0)
    assert (failed.kind, failed.job_id, failed.exit_code, failed.time) == ("failed", 2, 3, 5.0)
    (done,) = ex.poll(100.0)
    assert (done.kind, done.job_id, done.time, done.runtime) == ("finished", 1, 10.0, 10.0)
    assert ex.next_time() == math.inf and ex.running() == [3]


def test_simulated_executor_forgets_stopped_and_earlier_runs() -> None:
    ex = SimulatedExecutor()
    ex.start(launch(1, 1, 0.0, 10.0))
    ex.stop(1)  # preempted: its end never comes
    ex.start(launch(1, 2, 20.0, 10.0))  # the second run
    assert ex.next_time() == 30.0
    assert [(e.job_id, e.run, e.time) for e in ex.poll(50.0)] == [(1, 2, 30.0)]
    ex.restore([launch(7, 1, -5.0, 10.0)])  # after a restart: it ends at its start plus its duration
    assert ex.next_time() == 5.0


def test_store_batch_refreshes_views_once_at_the_end() -> None:
    store = JobStore()
    gpus = store.list_of("gpus_per_worker")
    with store.batch():
        for k in range(5):
            store.add(f"j{k}", submit=0.0, gpus_per_worker=k)
        assert gpus == [0, 1, 2, 3, 4]  # the lists are in step at once
    assert store.gpus_per_worker.tolist() == [0, 1, 2, 3, 4] and len(store) == 5
