"""The digital twin: a snapshot loads back into the same scheduler, predictions on hand-made cases are
exact, sampling is conditioned and deterministic, what-if changes act as they say, bad snapshots
are named."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kant.config import load_policy
from kant.errors import KantError
from kant.model.cluster import Cluster
from kant.model.job import JobTable, JobTableBuilder
from kant.sim import Simulator
from kant.traces import load_cluster
from kant.twin import SnapshotError, TwinSnapshot, predict, sample_durations
from kant.twin.whatif import Scenario, compare
from strategies import clusters, workloads


def jobs_of(*specs: tuple[float, float, int]) -> JobTable:
    """Jobs (submit, duration, GPUs) on one worker each, estimates exact."""
    b = JobTableBuilder(source="test")
    for i, (submit, duration, gpus) in enumerate(specs):
        b.add(f"j{i}", submit=submit, duration=duration, gpus_per_worker=gpus, estimate=duration)
    return b.build()


def snapshot_at(cluster: Cluster, jobs: JobTable, policy: str, t: float, **kw: Any) -> tuple[Simulator, TwinSnapshot]:
    sim = Simulator(cluster, jobs, load_policy(policy))
    sim.run(until=t)
    return sim, TwinSnapshot.capture(sim.scheduler, t, **kw)


def round_trip(snap: TwinSnapshot) -> TwinSnapshot:
    return TwinSnapshot.from_dict(json.loads(json.dumps(snap.to_dict())))


# --- the snapshot loads back into the same scheduler --------------------------------------------------
@given(cluster=clusters(), jobs=workloads(), policy=st.sampled_from(["kant", "volcano-binpack", "k8s-default",
                                                                     "slurm-backfill", "fifo-strict"]),
       cut=st.integers(0, 60))
def test_a_loaded_snapshot_decides_the_same_next_cycle(cluster: Cluster, jobs: JobTable, policy: str,
                                                       cut: int) -> None:
    t = cut + 0.5  # between events: the live scheduler has cycled after everything up to t
    sim, snap = snapshot_at(cluster, jobs, policy, t)
    snap = round_trip(snap)
    live, twin = sim.scheduler, snap.scheduler()
    row_of = {job_id: row for row, job_id in enumerate(snap.ids)}
    # the same change in both: the longest-running job ends (or nothing, if none runs), then one cycle
    if live.running:
        job = min(live.running)
        live.finish(job, t)
        twin.finish(row_of[job], t)
    a, b = live.cycle(t), twin.cycle(t)
    names = cluster.names
    got = [(snap.ids[row], tuple(names[n] for n in p.nodes), p.gpus) for row, p in b.started]
    want = [(job, tuple(names[n] for n in p.nodes), p.gpus) for job, p in a.started]
    assert got == want
    assert sorted(snap.ids[r] for r in twin.queue) == sorted(live.queue)


# --- exact predictions on hand-made cases -------------------------------------------------------------
def test_one_node_known_run_times_predict_exactly() -> None:
    # one 8-GPU node; three whole-node jobs of 100, 200, 300 s submitted at 0, FIFO: 0, 100, 300
    cluster = load_cluster("1x8:V100")
    jobs = jobs_of((0, 100, 8), (0, 200, 8), (0, 300, 8), (10, 50, 4))
    _, snap = snapshot_at(cluster, jobs, "fifo-strict", 50.0)
    pred = predict(round_trip(snap))
    starts = {j["id"]: (j["p10"], j["p50"], j["p90"]) for j in pred.pending()}
    assert starts == {1: (100.0, 100.0, 100.0), 2: (300.0, 300.0, 300.0), 3: (600.0, 600.0, 600.0)}
    assert {j["tenant"] for j in pred.pending()} == {"default"}
    # and this is when the simulator, run to the end, starts them
    full = Simulator(cluster, jobs, load_policy("fifo-strict")).run()
    assert [full.first_start[j] for j in (1, 2, 3)] == [100.0, 300.0, 600.0]


def test_backfill_prediction_is_exact_when_estimates_are() -> None:
    # 8 GPUs: a 4-GPU job runs to 100; an 8-GPU head waits for it; a 4-GPU 50 s job backfills now
    cluster = load_cluster("1x8:V100")
    jobs = jobs_of((0, 100, 4), (1, 100, 8), (2, 50, 4), (3, 500, 4))
    _, snap = snapshot_at(cluster, jobs, "kant", 2.5)
    starts = {j["id"]: j["p50"] for j in predict(snap).pending()}
    full = Simulator(cluster, jobs, load_policy("kant")).run()
    assert starts == {j: float(full.first_start[j]) for j in starts}
    assert starts[1] == 100.0


# --- sampling run times -------------------------------------------------------------------------------
def test_running_jobs_are_sampled_past_what_they_have_run() -> None:
    cluster = load_cluster("2x8:V100")
    b = JobTableBuilder(source="test")
    b.add("late", submit=0, duration=10_000, gpus_per_worker=8, estimate=100)  # runs past its estimate
    b.add("long", submit=0, duration=1000, gpus_per_worker=8, estimate=1000)
    b.add("next", submit=0, duration=100, gpus_per_worker=8, estimate=100)
    jobs = b.build()
    _, snap = snapshot_at(cluster, jobs, "fifo-strict", 150.0, ratios=(0.5, 1.0, 2.0, 4.0))
    assert set(snap.sched.running) == {0, 1}
    # job 0 (estimate 100) ran 150 s: only ratios 2 and 4 are possible; job 1 (estimate 1000) any ratio
    seen0, seen1 = set(), set()
    for k in range(50):
        d = sample_durations(snap, np.random.default_rng([0, k]))
        seen0.add(float(d[0]))
        seen1.add(float(d[1]))
    assert seen0 == {200.0, 400.0}
    assert seen1 == {500.0, 1000.0, 2000.0, 4000.0}
    # a job that outran every ratio, with no spread above their 90th percentile to run on by, ends now
    # (kant.twin.ratios: the tail; tests/test_twin_ratios.py has one that runs on)
    _, late = snapshot_at(cluster, jobs, "fifo-strict", 150.0, ratios=(0.5, 1.0))
    assert sample_durations(late, np.random.default_rng(0))[0] == 150.0


def test_ratios_follow_the_planned_run_time() -> None:
    # finished jobs planned at 10-19 s ran twice as long; those planned at 10,000-10,019 s half as long:
    # every ratio, carried along the fitted slope, says about 2 for a short job and 0.5 for a long one
    planned = [10.0 + i for i in range(10)] + [10_000.0 + i for i in range(10)]
    ratios = [2.0] * 10 + [0.5] * 10
    cluster = load_cluster("1x8:V100")
    jobs = jobs_of((0, 15, 8), (0, 15, 8), (0, 10_005, 8))
    _, snap = snapshot_at(cluster, jobs, "fifo-strict", 0.0, ratios=ratios, planned=planned)
    for k in range(20):
        d = sample_durations(snap, np.random.default_rng([0, k]))
        assert d.tolist() == pytest.approx([30.0, 30.0, 5002.5], rel=0.1)
    # without the planned run times, every ratio may come up for every job
    plain = TwinSnapshot.from_dict({**snap.to_dict(), "planned": []})
    seen = {float(sample_durations(plain, np.random.default_rng([0, k]))[2]) for k in range(40)}
    assert seen == {5002.5, 20_010.0}
    with pytest.raises(SnapshotError, match="planned: 3 planned run times for 20 ratios"):
        TwinSnapshot.from_dict({**snap.to_dict(), "planned": [1.0, 2.0, 3.0]})


def test_predictions_are_deterministic_and_banded() -> None:
    cluster = load_cluster("1x8:V100")
    jobs = jobs_of(*[(0, 100, 8)] * 6)
    _, snap = snapshot_at(cluster, jobs, "fifo-strict", 50.0, ratios=(0.5, 1.0, 1.5, 3.0))
    a, b = predict(snap, runs=8), predict(round_trip(snap), runs=8)
    assert np.array_equal(a.starts, b.starts, equal_nan=True)
    for job in a.pending():
        assert job["p10"] <= job["p50"] <= job["p90"]
    assert a.pending()[-1]["p10"] < a.pending()[-1]["p90"]  # uncertain run times give a real band
    assert not np.array_equal(predict(snap, runs=8, seed=1).starts, a.starts)


# --- what-if ----------------------------------------------------------------------------------------
def test_whatif_changes_do_what_they_say() -> None:
    cluster = load_cluster("2x8:V100")
    jobs = jobs_of(*[(0, 3600, 8)] * 6)
    _, snap = snapshot_at(cluster, jobs, "kant", 10.0)
    now, more, drained, other = compare(snap, [
        Scenario("more", add_nodes=4), Scenario("drained", drain=(cluster.names[0],)),
        Scenario("k8s", policy=load_policy("k8s-default"))], horizon_s=4 * 3600.0, runs=1)
    assert now.waits["pending"] == 4 and now.waits["started"] == 4
    assert (now.waits["p50"], now.waits["max"]) == (5400.0, 7200.0)  # two start at 1 h, two at 2 h
    assert more.waits["started"] == 4 and more.waits["max"] == 10.0
    assert drained.waits["max"] > now.waits["max"]  # one node: the queue takes longer
    assert other.policy == "k8s-default"
    assert 0 < now.gar <= 1
    out = json.loads(json.dumps(now.to_dict()))
    assert [j["id"] for j in out["jobs"]] == [2, 3, 4, 5]
    assert now.to_dict(tenant="default")["jobs"] == out["jobs"] and now.to_dict(tenant="other")["jobs"] == []


def test_whatif_quota_applies_under_any_policy_and_bad_changes_are_named() -> None:
    cluster = load_cluster("2x8:V100")
    sim, snap = snapshot_at(cluster, jobs_of((0, 100, 8), (0, 100, 8), (0, 100, 8)), "kant", 1.0)
    with pytest.raises(KantError, match=r"scenario .q.: .*tenants.nobody: no such tenant"):
        compare(snap, [Scenario("q", quotas={"nobody": (0, 4)})], runs=1)
    # kant has no quota plugin: one is added. Two 8-GPU jobs run; the third starts when they end
    # (100 s), unless the tenant's max is 4: then it is held for good (running jobs keep running)
    tenant = sim.jobs.tenant_names[0]
    now, capped = compare(snap, [Scenario("cap", quotas={tenant: (0, 4)})], horizon_s=1000.0, runs=1)
    assert (now.waits["started"], now.waits["not_started"]) == (1, 0)
    assert (capped.waits["started"], capped.waits["not_started"]) == (0, 1)
    with pytest.raises(KantError, match=r"scenario .d.: drain: no node .nope."):
        compare(snap, [Scenario("d", drain=("nope",))], runs=1)
    with pytest.raises(KantError, match="horizon"):
        compare(snap, horizon_s=math.nan)


def test_whatif_quota_change_holds_a_tenant_back() -> None:
    b = JobTableBuilder(source="test")
    for i in range(8):
        b.add(f"a{i}", submit=0, duration=1000, gpus_per_worker=8, tenant="a", estimate=1000)
    cluster = load_cluster("4x8:V100")
    _, snap = snapshot_at(cluster, b.build(), "capacity-quota", 0.5)
    now, capped = compare(snap, [Scenario("cap", quotas={"a": (0, 8)})], horizon_s=3000.0, runs=1)
    # four run now; the four pending start together at 1000 s, or one at a time under an 8-GPU cap
    assert (now.waits["started"], now.waits["max"]) == (4, 1000.0)
    assert (capped.waits["started"], capped.waits["max"], capped.waits["not_started"]) == (3, 3000.0, 1)


# --- bad snapshots --------------------------------------------------------------------------------------
def good() -> dict[str, Any]:
    _, snap = snapshot_at(load_cluster("1x8:V100"), jobs_of((0, 100, 8), (0, 100, 8)), "kant", 1.0)
    return snap.to_dict()


@pytest.mark.parametrize("edit, where", [
    (lambda d: d.pop("nodes"), "missing field 'nodes'"),
    (lambda d: d.update(version=99), "version: 99 is not supported"),
    (lambda d: d["jobs"]["workers"].__setitem__(0, "x"), "jobs.workers[0]"),
    (lambda d: d["jobs"]["submit"].pop(), "jobs.submit: 1 values for 2 jobs"),
    (lambda d: d["scheduler"]["pending"].append(7), "names job row 7"),
    (lambda d: d["policy"].update(plugins=[{"name": "nope"}]), "unknown plugin 'nope'"),
    (lambda d: d.update(ratios=[-1]), "ratios"),
    (lambda d: d.update(ratios=[1.0], ended=[1.0, 2.0]), "ended: 2 end times for 1 ratios"),
    (lambda d: d.update(ratios_from="yesterday"), "ratios_from: must be a number or null"),
    (lambda d: d["nodes"][0].update(gpus=-8), "nodes[0].gpus"),
])
def test_bad_snapshots_name_the_field(edit: Any, where: str) -> None:
    data = good()
    edit(data)
    with pytest.raises(SnapshotError, match=__import__("re").escape(where)):
        TwinSnapshot.from_dict(data)
    assert TwinSnapshot.from_dict(good()).sched.pending == (1,)
