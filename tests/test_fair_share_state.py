"""Fair share's decayed usage is state the running jobs do not give back: a scheduler rebuilt from a
snapshot (a live service's compaction, a change of tenants or of the tree of queues, a what-if)
keeps it (``Plugin.saved_state`` / ``load_state`` through ``SchedulerSnapshot.plugin_state``)."""

from __future__ import annotations

import json

import pytest

from kant.config import load_policy
from kant.model import Cluster, JobTableBuilder
from kant.plugins.fair_share import FairShare
from kant.plugins.queues import QueuesArgs, with_queues
from kant.scheduler import SchedulerSnapshot
from kant.sim import Simulator

DOC = {"queues": [{"name": "a", "guaranteed": 8}, {"name": "b", "guaranteed": 8}], "fair_share": {"half_life_s": 100}}


def test_a_rebuilt_scheduler_keeps_the_decayed_usage_of_jobs_that_ended() -> None:
    b = JobTableBuilder(source="test")
    b.add("j0", submit=0, duration=50, gpus_per_worker=8, tenant="a", estimate=50)
    b.add("j1", submit=0, duration=500, gpus_per_worker=8, tenant="b", estimate=500)
    policy = with_queues(load_policy("fifo"), QueuesArgs.model_validate(DOC))
    sim = Simulator(Cluster.uniform(2, 8), b.build(), policy)
    sim.run(until=120.0)
    old = sim.scheduler.plugin(FairShare)
    assert old is not None
    before = old.report(120.0)
    assert before["a"]["usage"] > 0  # (its job ended at 50)
    snap = SchedulerSnapshot.from_dict(json.loads(json.dumps(sim.scheduler.snapshot(120.0).to_dict())))
    assert set(snap.plugin_state) == {"fair-share"}
    new = type(sim.scheduler).from_snapshot(policy, sim.scheduler.cluster, sim.scheduler.jobs, snap)
    fs = new.plugin(FairShare)
    assert fs is not None
    for q in ("a", "b"):
        assert fs.report(120.0)[q]["usage"] == pytest.approx(before[q]["usage"], rel=1e-12)
    # and later, as the original would have decayed and added b's running job
    assert fs.report(300.0)["a"]["usage"] == pytest.approx(old.report(300.0)["a"]["usage"], rel=1e-12)
