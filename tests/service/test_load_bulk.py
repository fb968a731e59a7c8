"""A start loads the active jobs into the job store in whole columns (``LiveState.add_all_to_store``):
the store and the loop's books are the same as when the jobs are added one by one (``add_to_store``),
as arrivals are."""

from __future__ import annotations

import math

import numpy as np

from kant.config import load_policy
from kant.model.store import FLOAT_COLUMNS, INT_COLUMNS, JobStore
from kant.service.db.jobs import JobRow
from kant.service.live.state import LiveState


def _live() -> LiveState:
    return LiveState(load_policy("kant"), seed=0, default_estimate=3600.0, metrics=None, history=None, ratio_history=10)


def test_bulk_load_equals_one_by_one() -> None:
    jobs = [
        JobRow(
            tenant=("a", "b")[i % 2],
            user=(None, "u1", "u2")[i % 3] or ("a", "b")[i % 2],
            name=f"j{i}",
            kind=i % 2,
            workers=1 + i % 3,
            gpus_per_worker=i % 4,
            gpu_milli=500 if i % 4 == 1 else 1000,
            gpu_type=(None, "V100", "A100|H100")[i % 3],
            cpu_milli=i,
            memory_mib=2 * i,
            priority=i % 5 - 2,
            estimate_s=None if i % 2 else 10.0 * i + 1,
            time_limit_s=None if i % 3 else 99.5,
            duration_s=5.0,
            command=f"c{i}",
            labels={"k": str(i % 2)},
            chdir="/tmp",
            environment={"A": "1"} if i % 2 else None,
            id=100 + i,
            submit_time=float(i),
        )
        for i in range(40)
    ]
    one, bulk = _live(), _live()
    for live in (one, bulk):
        live.ids, live.active = [], {}
    s1, s2 = JobStore(tenant_names=["b"]), JobStore(tenant_names=["b"])
    with s1.batch():
        rows1 = [one.add_to_store(s1, j.id, j, j.submit_time) for j in jobs]
    rows2 = list(bulk.add_all_to_store(s2, jobs))
    assert rows1 == rows2 == list(range(40))
    for col in INT_COLUMNS + FLOAT_COLUMNS:
        a, b = getattr(s1, col), getattr(s2, col)
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), col
    assert (s1.names, s1.tenant_names, s1.user_names, s1.gpu_type_names) == (
        s2.names,
        s2.tenant_names,
        s2.user_names,
        s2.gpu_type_names,
    )
    assert s1.list_of("priority") == s2.list_of("priority")
    assert one.ids == bulk.ids and one.active == bulk.active
    assert math.isnan(float(s2.user_estimate[1])) and float(s2.estimate[1]) == 3600.0
