"""Quotas: guarantees and max never exceeded except by recorded borrowing, reclaim, derived
guarantees, DRF order, and argument validation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kant.actions.reclaim import ReclaimArgs
from kant.config import parse_policy
from kant.errors import ConfigError
from kant.framework.runner import DynamicKey
from kant.metrics.recorder import JobStatus
from kant.model import Cluster, JobTable, JobTableBuilder
from kant.plugins.drf import Drf
from kant.plugins.quota import Quota, derive_guarantees, gpu_time_share
from kant.scheduler import CycleResult
from kant.sim import Simulator
from strategies import clusters, workloads


def _policy(quota_args: dict[str, Any], actions: list[object] | None = None, order: str = "fifo") -> Any:
    return parse_policy({
        "name": "q",
        "actions": actions or ["allocate", "reclaim", "allocate"],
        "plugins": [{"name": order}, {"name": "quota", "args": quota_args}, {"name": "binpack"}],
    })


def _usage_from_state(sim: Simulator, n_tenants: int, n_types: int) -> np.ndarray:
    """GPUs per [tenant, column] recounted from the cluster state's allocations (column 0 = total,
    1 + k = cluster GPU type k), independent of the plugin's own accounting."""
    cluster, jobs = sim.cluster, sim.jobs
    use = np.zeros((n_tenants, 1 + n_types))
    for job, p in sim.scheduler.state.allocations.items():
        t = int(jobs.tenant[job])
        use[t, 0] += p.total_gpus
        for node, count in p.per_node.items():
            use[t, 1 + int(cluster.gpu_type[node])] += p.gpus * count
    return use


def _checked_run(sim: Simulator, quota: Quota) -> list[int]:
    """Run ``sim`` checking the quota invariants after every cycle; returns cycles checked."""
    n_t = len(sim.jobs.tenant_names)
    n_types = len(sim.cluster.gpu_type_names)
    sched = sim.scheduler
    original = sched.cycle
    checked = [0]

    def cycle(now: float) -> CycleResult:
        result = original(now)
        use = _usage_from_state(sim, n_t, n_types)
        if not quota.tracks_types:  # per-type columns are only kept when per-type quotas exist
            use[:, 1:] = 0.0
        assert np.allclose(use, quota.usage)
        running = list(sched.state.allocations)
        recorded = np.zeros_like(use)
        for job in running:
            recorded[int(sim.jobs.tenant[job])] += quota.job_borrowed[job]
        assert np.allclose(recorded, quota.borrowed)  # per-job records add up to the tenant's
        g = np.where(np.isfinite(quota.guaranteed), quota.guaranteed, np.inf)
        # never above guarantee + recorded borrowing, never above max
        assert np.all(use <= g + recorded + 1e-9)
        assert np.all(use <= quota.maximum + 1e-9)
        if not quota.borrowing_on:
            assert np.all(use <= g + 1e-9) and not recorded.any()
        checked[0] += 1
        return result

    sched.cycle = cycle  # type: ignore[method-assign]
    sim.run()
    return checked


@st.composite
def tenant_quota(draw: st.DrawFn) -> dict[str, Any]:
    """guaranteed 0..8 GPUs; sometimes a max of 1..16 (the guarantee is capped at it) and a per-type
    quota for GPU type A."""
    q: dict[str, Any] = {"guaranteed": draw(st.integers(0, 8))}
    if draw(st.booleans()):
        q["max"] = draw(st.integers(1, 16))
        q["guaranteed"] = min(q["guaranteed"], q["max"])
    if draw(st.booleans()):
        g = draw(st.integers(0, 6))
        q["per_type"] = {"A": {"guaranteed": g, "max": g + draw(st.integers(0, 8))}}
    return q


@given(
    cluster=clusters(max_nodes=6),
    jobs=workloads(max_jobs=25),
    quotas=st.fixed_dictionaries({"t1": tenant_quota(), "t2": tenant_quota(), "t3": tenant_quota()}),
    borrowing=st.booleans(),
)
def test_quota_never_exceeded_except_by_recorded_borrowing(
    cluster: Cluster, jobs: JobTable, quotas: dict[str, Any], borrowing: bool
) -> None:
    present = set(jobs.tenant_names)
    tenants = {name: q for name, q in quotas.items() if name in present}
    if "A" not in cluster.gpu_type_names:  # per-type quotas must name a cluster GPU type
        tenants = {name: {k: v for k, v in q.items() if k != "per_type"} for name, q in tenants.items()}
    sim = Simulator(cluster, jobs, _policy({"tenants": tenants, "cohort_borrowing": borrowing}), check_every=1)
    quota = sim.plugin(Quota)
    assert quota is not None
    _checked_run(sim, quota)
    res_status = sim.recorder.status
    # a job the tenant's max (total) can never hold is reported unschedulable, never started
    big = jobs.total_gpus > quota.maximum[jobs.tenant, 0]
    assert np.all(res_status[big] == JobStatus.UNSCHEDULABLE)


def _reclaim_jobs() -> JobTable:
    b = JobTableBuilder()
    b.add("b1", submit=0.0, duration=100.0, gpus_per_worker=4, tenant="b")  # row 0
    b.add("b2", submit=0.0, duration=100.0, gpus_per_worker=4, tenant="b")  # row 1
    b.add("a1", submit=10.0, duration=50.0, gpus_per_worker=4, tenant="a")  # row 2
    return b.build()


def test_reclaim_gives_owner_its_guarantee_back() -> None:
    # One 8-GPU node; tenants a and b are guaranteed 4 GPUs each.
    # t=0: b1 (4 GPUs, within b's guarantee) and b2 (4 GPUs, borrowed: 4 + 4 - max(4, 4) = 4) start.
    # t=10: a1 arrives; a is under its guarantee (0 + 4 <= 4) -> reclaim evicts b2 (b's only borrowed
    #       job); a1 runs 10..60.
    # t=60: b2 restarts, borrowing 4 again (no checkpoints: 100 s from scratch -> ends 160).
    # t=100: b1 ends; b's usage 4 = its guarantee, so b2's borrowing is re-labelled as guaranteed.
    # Borrowed GPU-seconds of b: 4 x (10 - 0) + 4 x (100 - 60) = 40 + 160 = 200.
    jobs = _reclaim_jobs()
    sim = Simulator(Cluster.uniform(1, 8), jobs,
                    _policy({"tenants": {"a": {"guaranteed": 4}, "b": {"guaranteed": 4}}}), check_every=1)
    quota = sim.plugin(Quota)
    assert quota is not None
    _checked_run(sim, quota)
    res = sim.recorder
    a, b = jobs.tenant_names.index("a"), jobs.tenant_names.index("b")
    assert res.first_start.tolist() == [0.0, 0.0, 10.0]
    assert res.end.tolist() == [100.0, 160.0, 60.0]
    assert res.preemptions.tolist() == [0, 1, 0]
    assert quota.reclaim_evictions[b] == 1 and quota.reclaims_for[a] == 1
    assert quota.borrowed_gpu_seconds[b] == 200.0 and quota.borrowed_gpu_seconds[a] == 0.0
    assert quota.borrowing_starts[b] == 2  # b2 at 0 and again at 60
    assert bool(quota.ever_borrowed[1]) and not quota.ever_borrowed[0]
    rep = quota.report()
    assert rep["b"]["borrowed_gpu_seconds"] == 200.0 and rep["b"]["reclaim_evictions"] == 1


def test_without_reclaim_the_owner_waits() -> None:
    # Same jobs, no reclaim action: a1 waits until b1 or b2 ends at 100 -> starts at 100.
    jobs = _reclaim_jobs()
    sim = Simulator(Cluster.uniform(1, 8), jobs, _policy({"tenants": {"a": {"guaranteed": 4}, "b": {"guaranteed": 4}}},
                                                          actions=["allocate"]), check_every=1)
    res = sim.run()
    assert res.first_start.tolist() == [0.0, 0.0, 100.0]


def test_no_borrowing_keeps_tenant_within_guarantee() -> None:
    # Borrowing off: b2 would exceed b's guarantee (4 + 4 > 4), so it waits for b1 (ends 100) even
    # though 4 GPUs are idle; a1 starts on arrival at 10. b2 runs 100..200.
    jobs = _reclaim_jobs()
    sim = Simulator(Cluster.uniform(1, 8), jobs, _policy(
        {"tenants": {"a": {"guaranteed": 4}, "b": {"guaranteed": 4}}, "cohort_borrowing": False}), check_every=1)
    res = sim.run()
    assert res.first_start.tolist() == [0.0, 100.0, 10.0]
    assert res.end.tolist() == [100.0, 200.0, 60.0]


def test_max_caps_a_tenant_and_oversize_jobs_are_unschedulable() -> None:
    # b's max is 4: b2 waits for b1 (starts at 100); a 12-GPU job of b can never run.
    b = JobTableBuilder()
    b.add("b1", submit=0.0, duration=100.0, gpus_per_worker=4, tenant="b")
    b.add("b2", submit=0.0, duration=100.0, gpus_per_worker=4, tenant="b")
    b.add("b3", submit=0.0, duration=10.0, workers=3, gpus_per_worker=4, tenant="b")
    jobs = b.build()
    sim = Simulator(Cluster.uniform(2, 8), jobs, _policy({"tenants": {"b": {"guaranteed": 0, "max": 4}}}))
    res = sim.run()
    assert res.first_start.tolist()[:2] == [0.0, 100.0]
    assert res.status[2] == JobStatus.UNSCHEDULABLE and "at most 4" in res.reasons[2]


def test_per_type_max() -> None:
    # Two nodes: n0 type A, n1 type B (8 GPUs each). Tenant t may hold at most 4 A GPUs. Two
    # untyped 4-GPU jobs: the first goes to A (binpack, lowest index), the second is kept off A by
    # the filter and runs on B at once.
    from kant.model import NodeSpec

    cluster = Cluster.from_nodes([NodeSpec("n0", "A", 8), NodeSpec("n1", "B", 8)])
    b = JobTableBuilder()
    b.add("j0", submit=0.0, duration=10.0, gpus_per_worker=4, tenant="t")
    b.add("j1", submit=0.0, duration=10.0, gpus_per_worker=4, tenant="t")
    sim = Simulator(cluster, b.build(), _policy({"tenants": {"t": {"per_type": {"A": {"max": 4}}}}}))
    log: list[tuple[int, tuple[int, ...]]] = []
    original = sim._started

    def started(job: int, now: float, placement: Any) -> None:
        log.append((job, placement.nodes))
        original(job, now, placement)

    sim._started = started  # type: ignore[method-assign]
    res = sim.run()
    assert res.first_start.tolist() == [0.0, 0.0]
    assert sorted(log) == [(0, (0,)), (1, (1,))]


@pytest.mark.parametrize(
    ("work", "capacity", "fraction", "expected"),
    [
        # GPU-time 300 : 100 -> shares .75 / .25 of 512 -> 384 / 128
        ([300.0, 100.0], 512, 1.0, [384, 128]),
        # equal thirds of 10 -> 3.33 each: floors 3, 3, 3 and the 1 left goes to the lowest index
        ([1.0, 1.0, 1.0], 10, 1.0, [4, 3, 3]),
        # half of 10 GPUs by shares .6 / .4 -> 3 / 2
        ([6.0, 4.0], 10, 0.5, [3, 2]),
    ],
)
def test_derive_guarantees(work: list[float], capacity: int, fraction: float, expected: list[int]) -> None:
    b = JobTableBuilder()
    for i, w in enumerate(work):
        b.add(f"j{i}", submit=0.0, duration=w, gpus_per_worker=1, tenant=f"t{i}")
    jobs = b.build()
    assert np.allclose(gpu_time_share(jobs), np.array(work) / sum(work))
    assert derive_guarantees(jobs, capacity, "gpu-time-share", fraction).tolist() == expected


def test_guarantees_from_gpu_time_share_in_plugin() -> None:
    # tenant x: 3 jobs x 1 GPU x 100 s = 300 GPU-s; y: 100 GPU-s -> 16 GPUs split 12 / 4
    b = JobTableBuilder()
    for i in range(3):
        b.add(f"x{i}", submit=0.0, duration=100.0, tenant="x")
    b.add("y0", submit=0.0, duration=100.0, tenant="y")
    sim = Simulator(Cluster.uniform(2, 8), b.build(), _policy({"guarantees_from": "gpu-time-share"}))
    quota = sim.plugin(Quota)
    assert quota is not None
    assert quota.guaranteed[:, 0].tolist() == [12.0, 4.0]


@pytest.mark.parametrize(
    ("args", "path"),
    [
        ({"tenants": {"a": {"guaranteed": 8, "max": 4}}}, r"plugins\[1\]\.args\.tenants\.a"),
        ({"tenants": {"a": {"guaranted": 8}}}, r"plugins\[1\]\.args\.tenants\.a\.guaranted"),
        ({"guarantees_from": "votes"}, r"plugins\[1\]\.args\.guarantees_from"),
        ({"guaranteed_fraction": 1.5}, r"plugins\[1\]\.args\.guaranteed_fraction"),
    ],
)
def test_bad_quota_args_rejected_with_key_path(args: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError, match=path):
        _policy(args)


def test_unknown_tenant_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"args\.tenants\.nobody"):
        Simulator(Cluster.uniform(1, 8), _reclaim_jobs(), _policy({"tenants": {"nobody": {"guaranteed": 1}}}))


def test_reclaim_needs_quota_plugin() -> None:
    # rejected when the policy is loaded, at the action's key path
    with pytest.raises(ConfigError, match=r"actions\[1\]: the reclaim action needs a Guarantee plugin"):
        parse_policy({"name": "x", "actions": ["allocate", "reclaim"], "plugins": [{"name": "fifo"}]})


# --- DRF ------------------------------------------------------------------------------------------
def test_drf_orders_by_dominant_share() -> None:
    # Cluster 16 GPUs. Tenant a holds 8 GPUs (share 8/16 = .5), b holds 2 (2/16 = .125), c none (0).
    # Pending jobs of a (submitted first), b, c -> order c, b, a. With weights a: 8 -> a's share
    # .5 / 8 = .0625 < b's .125 -> order c, a, b.
    b = JobTableBuilder()
    b.add("a-run", submit=0.0, duration=100.0, gpus_per_worker=8, tenant="a")
    b.add("b-run", submit=0.0, duration=100.0, gpus_per_worker=2, tenant="b")
    b.add("a-wait", submit=1.0, duration=1.0, tenant="a")
    b.add("b-wait", submit=2.0, duration=1.0, tenant="b")
    b.add("c-wait", submit=3.0, duration=1.0, tenant="c")
    jobs = b.build()
    for weights, expected in (({}, [4, 3, 2]), ({"a": 8.0}, [4, 2, 3])):
        pol = parse_policy({"name": "d", "actions": ["allocate"],
                            "plugins": [{"name": "drf", "args": {"weights": weights}}]})
        sim = Simulator(Cluster.uniform(2, 8), jobs, pol)
        s = sim.scheduler
        for j in (0, 1):
            s.submit(j, 0.0)
        s.cycle(0.0)
        drf = next(p for p in s.framework.plugins if isinstance(p, Drf))
        assert drf.shares.tolist()[:2] == pytest.approx([0.5 / weights.get("a", 1.0), 0.125])
        key = s.framework.dynamic_key(5.0)
        assert isinstance(key, DynamicKey)
        assert key.order(np.array([2, 3, 4])).tolist() == expected
        # the per-job key agrees with the vectorised order
        assert sorted([2, 3, 4], key=key) == expected


# --- quotas apply by default (with_quotas) -------------------------------------------------------
def test_with_quotas_adds_the_plugin_and_reclaim_only_when_needed() -> None:
    from kant.config import load_policy
    from kant.plugins.quota import TenantQuota, with_quotas

    kant = load_policy("kant")
    assert with_quotas(kant, {}) is kant  # no quota: the policy as it is (golden outputs unchanged)
    capped = with_quotas(kant, {"a": TenantQuota(max=8)})
    assert [p.cls.NAME for p in capped.plugins] == ["priority", "fifo", "e-binpack", "quota"]
    assert [a.cls.NAME for a in capped.actions] == ["allocate", "backfill"]  # no guarantee: no reclaim
    kept = with_quotas(kant, {"a": TenantQuota(guaranteed=8)})
    assert [a.cls.NAME for a in kept.actions] == ["allocate", "reclaim", "backfill"]
    # kant's allocate blocks: backfill comes next, so reclaim runs no allocate pass of its own
    assert isinstance(kept.actions[1].args, ReclaimArgs) and kept.actions[1].args.allocate_after is False
    fifo = with_quotas(load_policy("fifo"), {"a": TenantQuota(guaranteed=8)})
    assert isinstance(fifo.actions[1].args, ReclaimArgs) and fifo.actions[1].args.allocate_after is True


def test_a_job_its_quota_holds_does_not_block_a_blocking_allocate() -> None:
    from kant.config import load_policy
    from kant.plugins.quota import TenantQuota, with_quotas

    b = JobTableBuilder(source="test")
    b.add("big-a", submit=0, duration=100, workers=2, gpus_per_worker=8, tenant="a", estimate=100)
    b.add("small-b", submit=1, duration=100, workers=1, gpus_per_worker=8, tenant="b", estimate=100)
    jobs = b.build()
    policy = with_quotas(load_policy("kant"), {"a": TenantQuota(max=8)})
    sim = Simulator(Cluster.uniform(4, 8), jobs, policy)
    result = sim.run()
    # a's 16-GPU job is over its max of 8: unschedulable on arrival (the simulator's quotas are fixed);
    # b's job behind it starts at once (t = 1)
    assert result.status[0] == JobStatus.UNSCHEDULABLE and "tenant a may hold at most 8" in result.reasons[0]
    assert result.first_start[1] == 1.0
    for name in ("kant", "fifo-strict"):  # (fifo-strict: a blocking allocate and no backfill after it)
        held = with_quotas(load_policy(name), {"a": TenantQuota(max=8)}, hold_over_max=True)
        sim = Simulator(Cluster.uniform(4, 8), jobs, held)
        sim.run(until=5.0)
        # held instead (the live service): it waits with the quota's reason and blocks no one
        assert 1 in sim.scheduler.running and 0 in sim.scheduler.queue, name
        assert sim.scheduler.why_pending(0) == "[quota] tenant a at its max of 8 GPUs (holds 0, the job needs 16)"
