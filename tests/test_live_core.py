"""The scheduler core as a live cluster drives it: a store that grows as jobs arrive, cancel, node
cordon / fail / repair, failed binds, snapshot and restore."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kant.config import load_policy
from kant.config.policy import parse_policy
from kant.errors import ConfigError, KantError, SchedulingError
from kant.metrics.recorder import SimResult
from kant.model.cluster import Cluster
from kant.model.job import JobTable, JobTableBuilder
from kant.model.state import Placement
from kant.model.store import JobStore
from kant.scheduler import CORDONED, DOWN, Scheduler, SchedulerSnapshot
from kant.sim import NodeFailure, Simulator
from strategies import clusters, workloads

#: bundled policies a live scheduler can run (sjf / srtf read true durations; capacity-quota and drf
#: derive guarantees and weights from the trace)
LIVE_POLICIES = ["kant", "kant-nobackfill", "volcano-binpack", "k8s-default", "fifo-strict", "slurm-backfill",
                 "conservative-backfill", "tiresias", "priority-preempt", "qssf", "best-fit", "topology-hard",
                 "random", "fifo"]


def outcome(res: SimResult) -> tuple[Any, ...]:
    """Per-job outcome (NaN, never started, as -1 so that lists compare) and the cycle count."""
    return (np.nan_to_num(res.first_start, nan=-1.0).tolist(), np.nan_to_num(res.end, nan=-1.0).tolist(),
            res.status.tolist(), res.runs.tolist(), res.cycles)


@settings(max_examples=25)
@given(cluster=clusters(), jobs=workloads(), policy=st.sampled_from(LIVE_POLICIES), fail=st.booleans())
def test_jobs_joining_the_store_on_arrival_change_nothing(cluster: Cluster, jobs: JobTable, policy: str,
                                                          fail: bool) -> None:
    """A store that starts empty and grows by one row per arrival (a live service) gives the same
    results as one filled from the whole trace before the run (the simulator)."""
    jobs = jobs.sorted_by_submit()
    failures = [NodeFailure(5.0, 0, 7.0)] if fail else []
    bulk = Simulator(cluster, jobs, load_policy(policy), failures=failures, check_every=1).run()
    live = Simulator(cluster, jobs, load_policy(policy), failures=failures, check_every=1, incremental=True).run()
    assert outcome(live) == outcome(bulk)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["kant", "volcano-binpack", "tiresias", "qssf"])
def test_incremental_philly_slice(philly_jobs: JobTable, policy: str) -> None:
    jobs = philly_jobs.take(np.arange(3000))
    cluster = Cluster.uniform(16, 8)
    bulk = Simulator(cluster, jobs, load_policy(policy)).run()
    live = Simulator(cluster, jobs, load_policy(policy), incremental=True).run()
    assert outcome(live) == outcome(bulk)


def test_incremental_needs_submit_order() -> None:
    b = JobTableBuilder()
    b.add("late", submit=5.0, duration=1.0)
    b.add("early", submit=1.0, duration=1.0)
    with pytest.raises(KantError, match="sorted by submit"):
        Simulator(Cluster.uniform(1, 8), b.build(), load_policy("fifo"), incremental=True)


@pytest.mark.parametrize(("policy", "plugin"), [("sjf", "sjf"), ("capacity-quota", "drf")])
def test_oracle_plugins_are_refused_live(policy: str, plugin: str) -> None:
    store = JobStore(tenant_names=["a"])
    with pytest.raises(ConfigError, match=f"{plugin} plugin.*only a simulation knows"):
        Scheduler(load_policy(policy), Cluster.uniform(2, 8), store)


def test_store_grows_columns_lists_and_vocabularies() -> None:
    store = JobStore()
    workers = store.list_of("workers")  # a list handed out before the store grows stays in step
    rows = [store.add(f"j{i}", submit=float(i), workers=1 + i % 3, gpus_per_worker=2, tenant=f"t{i % 5}",
                      gpu_type="A" if i % 2 else None, estimate=None if i % 4 else 10.0 * i,
                      default_estimate=99.0) for i in range(40)]
    assert rows == list(range(40))
    assert len(store) == 40 and store.workers.shape == (40,)
    assert workers == [1 + i % 3 for i in range(40)]
    assert store.total_gpus.tolist() == [2 * (1 + i % 3) for i in range(40)]
    assert store.tenant_names == ("t0", "t1", "t2", "t3", "t4")
    assert store.gpu_type_names == ("A",) and store.gpu_type.tolist()[:4] == [-1, 0, -1, 0]
    # job 0: estimate 0.0 given; job 1: none -> plans with the default, user_estimate NaN
    assert store.estimate.tolist()[:2] == [0.0, 99.0]
    assert store.user_estimate[0] == 0.0 and math.isnan(store.user_estimate[1])
    with pytest.raises(ValueError):
        store.workers[0] = 5  # views are read only
    store.set_runtime(3, 12.5)
    assert store.runtime[3] == 12.5 and store.list_of("runtime")[3] == 12.5


# --- a scheduler driven by hand ---------------------------------------------------------------------
def live(policy: str = "volcano-binpack", nodes: int = 2, gpus: int = 8) -> Scheduler:
    return Scheduler(load_policy(policy), Cluster.uniform(nodes, gpus), JobStore())


def submit(s: Scheduler, name: str, now: float = 0.0, **kw: Any) -> int:
    job = s.jobs.add(name, submit=now, **kw)
    assert s.submit(job, now).ok
    return job


def test_cordon_keeps_running_work_and_takes_no_new() -> None:
    s = live(nodes=2)
    a = submit(s, "a", gpus_per_worker=4)
    assert [j for j, _ in s.cycle(0.0).started] == [a]
    node = s.state.allocations[a].nodes[0]
    s.cordon(node)
    assert s.node_flags(node) == CORDONED
    assert s.state.free_gpus == 8  # only the other node's GPUs are free to schedule
    b = submit(s, "b", now=1.0, gpus_per_worker=4)
    c = submit(s, "c", now=1.0, gpus_per_worker=8)
    started = dict(s.cycle(1.0).started)
    assert started[b].nodes[0] != node and c not in started  # c would have needed the cordoned node
    s.state.check()
    s.finish(a, 2.0)  # the cordoned node's GPUs come back to nobody
    assert s.state.free_gpus == 4
    s.state.check()
    s.uncordon(node)
    assert s.state.free_gpus == 12
    assert dict(s.cycle(3.0).started)[c].nodes == (node,)
    s.state.check()


def test_fail_interrupts_and_repair_brings_the_node_back() -> None:
    s = live(nodes=1)
    a = submit(s, "a", workers=1, gpus_per_worker=8)
    s.cycle(0.0)
    s.cordon(0)
    hit = s.fail_node(0, 5.0)
    assert [j for j, _ in hit] == [a] and a in s.queue
    assert s.node_flags(0) == CORDONED | DOWN
    s.repair_node(0)  # still cordoned
    assert not s.cycle(6.0).started and s.state.free_gpus == 0
    s.uncordon(0)
    assert [j for j, _ in s.cycle(7.0).started] == [a]
    s.state.check()


def test_failed_bind_requeues_with_its_reason() -> None:
    s = live(nodes=1)
    a = submit(s, "a", gpus_per_worker=8)
    s.cycle(0.0)
    s.bind_failed(a, 1.0, "worker 0 did not start within 30 s")
    assert a in s.queue and a not in s.running and s.state.free_gpus == 8
    assert "its last start failed: worker 0 did not start within 30 s" in s.why_pending(a)
    s.cycle(2.0)
    assert a in s.running and s.why_pending(a) == "running"
    with pytest.raises(SchedulingError):
        s.bind_failed(12345, 3.0, "no such job")


def test_cancel_pending_and_running() -> None:
    s = live(nodes=1)
    a = submit(s, "a", gpus_per_worker=8)
    b = submit(s, "b", gpus_per_worker=8)
    s.cycle(0.0)
    assert s.cancel(b, 1.0) is None and b not in s.queue
    assert s.cancel(a, 1.0) is not None and s.state.free_gpus == 8
    s.state.check()


class Bound:
    """A binder that records what commits hand it."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int, tuple[int, ...]]] = []

    def bind(self, job: int, placement: Placement) -> None:
        self.log.append(("bind", job, placement.nodes))

    def evict(self, job: int, placement: Placement) -> None:
        self.log.append(("evict", job, placement.nodes))


def test_commit_binds_every_start_and_eviction_in_order() -> None:
    s = Scheduler(load_policy("priority-preempt"), Cluster.uniform(1, 8), JobStore())
    s.binder = binder = Bound()
    low = submit(s, "low", gpus_per_worker=8, priority=0)
    s.cycle(0.0)
    high = submit(s, "high", now=1.0, gpus_per_worker=8, priority=5)
    s.cycle(1.0)
    assert binder.log == [("bind", low, (0,)), ("evict", low, (0,)), ("bind", high, (0,))]


def test_offer_places_once_outside_the_queue() -> None:
    """``offer``: one try at placement now; a fit starts (listeners, binder, running) like a cycle's
    start, a miss changes nothing and is never queued."""
    s = live()  # 2 nodes x 8 GPUs, binpack
    s.binder = binder = Bound()
    a = s.jobs.add("a", submit=0.0, gpus_per_worker=6, estimate=10.0)
    b = s.jobs.add("b", submit=0.0, gpus_per_worker=4)
    c = s.jobs.add("c", submit=0.0, workers=2, gpus_per_worker=4)
    placed = s.offer(a, 0.0)
    assert isinstance(placed, Placement) and placed.nodes == (0,)
    assert s.offer(b, 1.0) == Placement((1,), 4)  # node 0 has 2 GPUs free, node 1 all 8
    miss = s.offer(c, 2.0)  # 2 workers x 4 GPUs; free 2 + 4: room for one worker
    assert not isinstance(miss, Placement) and not miss.ok
    assert c not in s.queue and c not in s.running and len(s.queue) == 0
    assert s.running[a].expected_end == 10.0 and s.state.free_gpus == 6  # 16 - 6 - 4
    assert binder.log == [("bind", a, (0,)), ("bind", b, (1,))]
    s.finish(a, 5.0)
    assert s.state.free_gpus == 12 and isinstance(s.offer(c, 6.0), Placement)
    s.state.check()


# --- snapshot and restore ------------------------------------------------------------------------
@settings(max_examples=25)
@given(cluster=clusters(), jobs=workloads(), policy=st.sampled_from(["kant", "volcano-binpack", "fifo-strict",
                                                                     "conservative-backfill", "k8s-default"]),
       cut=st.integers(0, 60))
def test_a_restored_scheduler_makes_the_same_decisions(cluster: Cluster, jobs: JobTable, policy: str,
                                                       cut: int) -> None:
    """Run to time ``cut``, snapshot (through JSON), restore into a new scheduler on the same store,
    and go on: every later cycle starts the same jobs on the same nodes as the original."""
    jobs = jobs.sorted_by_submit()
    one = Scheduler(load_policy(policy), cluster, JobStore.from_table(jobs, 0))
    two: Scheduler | None = None
    ends: dict[int, float] = {}  # running job -> its true end
    row = 0
    while row < len(jobs) or ends:
        now = min(float(jobs.submit[row]) if row < len(jobs) else math.inf, min(ends.values(), default=math.inf))
        if two is None and now >= cut:
            snap = SchedulerSnapshot.from_dict(one.snapshot(now).to_dict())
            two = Scheduler.from_snapshot(one.policy, cluster, one.jobs, snap)
        both = [one] if two is None else [one, two]
        for job in sorted(j for j, e in ends.items() if e == now):
            del ends[job]
            for sched in both:
                sched.finish(job, now)
        while row < len(jobs) and jobs.submit[row] <= now:
            one.jobs.append_table_rows(jobs, row + 1)
            for sched in both:
                sched.submit(row, now)
            row += 1
        got = [sorted((j, p.nodes) for j, p in sched.cycle(now).started) for sched in both]
        assert got[-1] == got[0]
        for job, _ in got[0]:
            ends[job] = now + float(jobs.duration[job])
        for sched in both:
            sched.state.check()


def test_restore_names_what_does_not_fit() -> None:
    s = live(nodes=2)
    a = submit(s, "a", gpus_per_worker=8)
    s.cycle(0.0)
    snap = s.snapshot(1.0)
    small = Cluster.uniform(1, 8)  # node-1 is gone
    node = s.cluster.names[s.state.allocations[a].nodes[0]]
    if node == "node-0":
        s2 = Scheduler.from_snapshot(s.policy, small, s.jobs, snap)
        assert a in s2.running
    else:
        with pytest.raises(SchedulingError, match="node 'node-1' is not in the cluster"):
            Scheduler.from_snapshot(s.policy, small, s.jobs, snap)
    bad = SchedulerSnapshot(now=0.0, pending=(99,), running={}, node_flags={})
    with pytest.raises(SchedulingError, match="job 99"):
        Scheduler.from_snapshot(s.policy, s.cluster, s.jobs, bad)


def test_rebuilt_on_a_bigger_cluster_keeps_placements_and_flags() -> None:
    s = live(nodes=2)
    a = submit(s, "a", gpus_per_worker=8)
    b = submit(s, "b", gpus_per_worker=8)
    c = submit(s, "c", gpus_per_worker=8)
    s.cycle(0.0)
    s.cordon(1)
    bigger = Cluster.uniform(3, 8)
    t = s.rebuilt(bigger, 1.0)
    assert t.state.allocations[a] == s.state.allocations[a] and t.state.allocations[b] == s.state.allocations[b]
    assert t.node_flags(1) == CORDONED and c in t.queue
    assert dict(t.cycle(1.0).started)[c].nodes == (2,)
    t.state.check()


# --- a state machine of live operations ------------------------------------------------------------
class LiveScheduler(RuleBasedStateMachine):
    """Random submits, cycles, finishes, cancels, failed binds, cordons, failures and repairs on a
    small cluster under several policies; after every step no GPU is double-booked, every gang is
    whole, nothing starts on a node that takes no work, and every job is in exactly one state."""

    @initialize(policy=st.sampled_from(["kant", "volcano-binpack", "tiresias", "conservative-backfill"]))
    def setup(self, policy: str) -> None:
        self.s = Scheduler(load_policy(policy), Cluster.uniform(4, 8, nodes_per_leaf=2), JobStore())
        self.now = 0.0
        self.done: set[int] = set()
        self.unschedulable: set[int] = set()

    @rule(workers=st.integers(1, 3), gpus=st.sampled_from([1, 2, 4, 8]), priority=st.integers(0, 2),
          tenant=st.sampled_from(["a", "b"]))
    def add(self, workers: int, gpus: int, priority: int, tenant: str) -> None:
        job = self.s.jobs.add(f"j{len(self.s.jobs)}", submit=self.now, workers=workers, gpus_per_worker=gpus,
                              priority=priority, tenant=tenant, estimate=float(1 + len(self.s.jobs) % 7))
        if not self.s.submit(job, self.now).ok:
            self.unschedulable.add(job)

    @rule(dt=st.integers(0, 3))
    def cycle(self, dt: int) -> None:
        self.now += dt
        for _job, placement in self.s.cycle(self.now).started:
            for node in placement.nodes:
                assert self.s.node_flags(node) == 0, "started on a node that takes no work"

    @precondition(lambda self: bool(self.s.running))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from(sorted(self.s.running)))
        self.s.finish(job, self.now)
        self.done.add(job)

    @precondition(lambda self: bool(self.s.running))
    @rule(data=st.data())
    def bind_fails(self, data: st.DataObject) -> None:
        self.s.bind_failed(data.draw(st.sampled_from(sorted(self.s.running))), self.now, "lost")

    @precondition(lambda self: len(self.s.jobs) > 0)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job = data.draw(st.integers(0, len(self.s.jobs) - 1))
        if job in self.s.running or job in self.s.queue:
            self.s.cancel(job, self.now)
            self.done.add(job)

    @rule(node=st.integers(0, 3), op=st.sampled_from(["cordon", "uncordon", "fail", "repair"]))
    def node_op(self, node: int, op: str) -> None:
        if op == "fail":
            self.s.fail_node(node, self.now)
        elif op == "repair":
            self.s.repair_node(node)
        else:
            getattr(self.s, op)(node)

    @invariant()
    def consistent(self) -> None:
        s = self.s
        s.state.check()
        assert set(s.state.allocations) == set(s.running)
        for job, placement in s.state.allocations.items():
            assert len(placement.nodes) == int(s.jobs.workers[job])  # gangs whole
            assert all(s.node_flags(n) & DOWN == 0 for n in placement.nodes)
        for job in range(len(s.jobs)):
            places = [job in s.running, job in s.queue, job in self.done, job in self.unschedulable]
            assert sum(places) == 1, (job, places)


TestLiveScheduler = LiveScheduler.TestCase
TestLiveScheduler.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)


def test_snapshot_json_round_trip_keeps_infinite_ends() -> None:
    s = live(nodes=1)
    submit(s, "svc", gpus_per_worker=8)  # no estimate, default inf: never expected to end
    s.cycle(0.0)
    data = s.snapshot(0.0).to_dict()
    assert data["running"]["0"]["expected_end"] is None
    assert SchedulerSnapshot.from_dict(data).running[0].expected_end == math.inf


def test_unknown_node_in_flags_is_named() -> None:
    s = live(nodes=1)
    snap = SchedulerSnapshot(now=0.0, pending=(), running={}, node_flags={"ghost": CORDONED})
    with pytest.raises(SchedulingError, match="node 'ghost'"):
        Scheduler.from_snapshot(s.policy, s.cluster, s.jobs, snap)


def test_policy_file_for_live_quota_needs_known_tenants() -> None:
    policy = parse_policy({"name": "q", "actions": ["allocate"],
                           "plugins": [{"name": "quota", "args": {"tenants": {"a": {"max": 8}}}}]}, "q")
    s = Scheduler(policy, Cluster.uniform(2, 8), JobStore(tenant_names=["a"]))
    first = submit(s, "one", gpus_per_worker=8, tenant="a")
    second = submit(s, "two", gpus_per_worker=8, tenant="a")
    other = submit(s, "three", gpus_per_worker=8, tenant="new-tenant")  # joins the vocabulary on arrival
    started = {j for j, _ in s.cycle(0.0).started}
    assert started == {first, other}  # a's max of 8 GPUs holds back its second job
    assert "tenant a at its max of 8 GPUs (holds 8, the job needs 8)" in s.why_pending(second)
