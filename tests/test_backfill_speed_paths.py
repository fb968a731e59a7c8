"""The backfill action's incremental bookkeeping equals recomputing it from scratch.

* the release profile (``_Releases.sorted``: one row per running job and node, by time) built from
  per-job rows kept across reservations holds exactly the rows built from ``ctx.running`` now;
* an EASY reservation's ``spare`` (what it leaves at the shadow time), updated in place as long jobs
  backfill against it, stays ``free_at_shadow - reserved``.

Checked after every cycle of random runs with wrong estimates (jobs overrun and end early), CPU and
memory modelled on some runs, and node failures.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kant.actions.backfill import Backfill
from kant.config.policy import load_policy
from kant.model.cluster import Cluster, NodeSpec
from kant.model.job import JobTable, JobTableBuilder
from kant.sim import NodeFailure, Simulator


@st.composite
def workloads(draw: st.DrawFn) -> tuple[Cluster, JobTable, list[NodeFailure]]:
    n_nodes = draw(st.integers(2, 5))
    modelled = draw(st.booleans())
    nodes = [
        NodeSpec(f"n{i}", "V100", 4, cpu_milli=8000 if modelled else 0, memory_mib=64_000 if modelled else 0)
        for i in range(n_nodes)
    ]
    cluster = Cluster.from_nodes(nodes, nodes_per_leaf=2, leaves_per_spine=2)
    b = JobTableBuilder()
    for i in range(draw(st.integers(3, 14))):
        b.add(f"j{i}", submit=draw(st.integers(0, 40)), duration=draw(st.integers(0, 60)),
              workers=draw(st.integers(1, 3)), gpus_per_worker=draw(st.integers(1, 4)),
              cpu_milli=draw(st.sampled_from([0, 1000, 6000])) if modelled else 0,
              memory_mib=draw(st.sampled_from([0, 30_000])) if modelled else 0,
              estimate=draw(st.one_of(st.none(), st.integers(0, 90).map(float))))
    failures = [NodeFailure(float(draw(st.integers(0, 60))), draw(st.integers(0, n_nodes - 1)), 15.0)
                for _ in range(draw(st.integers(0, 2)))]
    return cluster, b.build(), failures


def _reference_rows(bf: Backfill, running: dict[int, Any], state: Any) -> list[tuple[float, int, tuple[int, ...]]]:
    rows = []
    modelled = bf._modelled
    for job, run in running.items():
        p = state.allocations[job]
        req = (p.gpus, p.cpu_milli, p.memory_mib)
        for node, count in p.per_node.items():
            amounts = tuple(int(req[r] * count * modelled[r, node]) for r in range(modelled.shape[0]))
            rows.append((run.expected_end, node, amounts))
    return sorted(rows)


@pytest.mark.parametrize("pol_name", ["kant", "slurm-backfill", "conservative-backfill"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=workloads())
def test_incremental_bookkeeping_equals_recomputing(
    pol_name: str, data: tuple[Cluster, JobTable, list[NodeFailure]]
) -> None:
    cluster, jobs, failures = data
    original = Backfill.execute
    checks = 0

    def checked(self: Backfill, ctx: Any, fw: Any) -> None:
        nonlocal checks
        # jobs started in earlier cycles are in ctx.running now: bring the mirror up to date
        if self._current is not None:
            self._unsynced.append(self._current)
            self._current = None
        self._sync(ctx)
        t, node, amt = self._releases.sorted()
        assert np.all(np.diff(t) >= 0)
        rows = sorted(zip(t.tolist(), node.tolist(), map(tuple, amt.tolist()), strict=True))
        assert rows == _reference_rows(self, ctx.running, ctx.state)
        original(self, ctx, fw)
        res = self._res
        if res is not None:
            np.testing.assert_array_equal(res.spare, res.free_at_shadow - res.reserved)
        checks += 1

    Backfill.execute = checked  # type: ignore[method-assign]
    try:
        Simulator(cluster, jobs, load_policy(pol_name), failures=failures, check_every=1).run()
    finally:
        Backfill.execute = original  # type: ignore[method-assign]
    assert checks > 0
