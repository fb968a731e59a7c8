"""Elastic gangs (kant.model.elastic, kant.actions.elastic): bounds and their errors, the speed of a
size, grow into idle GPUs, shrink instead of waiting, the resize cost in the simulator, the Pollux/Sia
reader, and invariants on random workloads (a size within [min, max] at every instant, no
over-allocation, every job done)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kant.config import load_policy, parse_policy
from kant.metrics.recorder import JobStatus
from kant.model import Cluster, JobTable, JobTableBuilder, NodeSpec
from kant.model.elastic import ElasticBounds, check_bounds, parse_speedup
from kant.scheduler import Scheduler
from kant.sim import ExecutionModel, Simulator, simulate
from strategies import GPU_TYPES, clusters

SHARED = Path("/work/shared/traces")


def _cluster(nodes: int = 1, gpus: int = 8) -> Cluster:
    return Cluster.from_nodes([NodeSpec(f"n{i}", "A", gpus) for i in range(nodes)])


def _policy() -> object:
    return load_policy("elastic")


# --- the model ------------------------------------------------------------------------------------
def test_bounds_errors_name_the_field() -> None:
    assert check_bounds(2, None, None) is None
    assert check_bounds(2, 1, 4) is None
    assert check_bounds(2, 1, None).startswith("max_workers: missing")
    assert check_bounds(2, None, 4).startswith("min_workers: missing")
    assert check_bounds(2, 0, 4).startswith("min_workers: must be >= 1")
    assert check_bounds(2, 3, 2).startswith("max_workers: must be >= min_workers")
    assert check_bounds(5, 1, 4).startswith("workers: must be within [min_workers, max_workers]")
    assert check_bounds(1, 1, 4, gpu_milli=500).startswith("min_workers: an elastic job asks for whole GPUs")


def test_builder_rejects_bad_bounds_with_the_job_name() -> None:
    b = JobTableBuilder()
    b.add("ok", submit=0, duration=1, workers=2, min_workers=1, max_workers=4)
    b.add("bad", submit=0, duration=1, workers=2, min_workers=3, max_workers=4)
    with pytest.raises(ValueError, match="job 'bad': workers: must be within"):
        b.build()


def test_rigid_table_has_no_elastic_spec() -> None:
    b = JobTableBuilder()
    b.add("a", submit=0, duration=1, workers=2)
    assert b.build().elastic is None
    b.add("b", submit=0, duration=1, workers=2, min_workers=1, max_workers=3)
    table = b.build()
    assert table.elastic is not None and not table.elastic.is_elastic(0) and table.elastic.is_elastic(1)
    assert table.take(np.array([1])).elastic is not None and table.take(np.array([0])).elastic is not None


def test_speed_linear_and_table() -> None:
    lin = ElasticBounds(1, 8, 4)
    assert lin.speed(4) == 1.0 and lin.speed(2) == 0.5 and lin.speed(8) == 2.0
    tab = ElasticBounds(1, 8, 2, parse_speedup("1:1,2:1.5,4:2"))
    assert tab.speed(2) == 1.0
    assert tab.speed(3) == pytest.approx(1.75 / 1.5)  # interpolated between 2 and 4
    assert tab.speed(8) == pytest.approx(2 / 1.5)  # flat beyond the largest size given


@pytest.mark.parametrize(("text", "why"), [("1:1", "at least two"), ("1:1,x", "SIZE:THROUGHPUT"),
                                           ("0:1,2:2", "size must be >= 1"), ("1:1,2:-1", "positive"),
                                           ("1:1,1:2", "given twice")])
def test_speedup_errors(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_speedup(text)


# --- the simulator --------------------------------------------------------------------------------
def test_alone_it_starts_at_its_maximum_for_free() -> None:
    b = JobTableBuilder()
    b.add("e", submit=0, duration=1000, workers=2, min_workers=1, max_workers=4)
    r = simulate(_cluster(), b.build(), _policy())
    assert r.end[0] == pytest.approx(500.0)  # 4 workers: twice the speed of 2, no resize paid
    assert r.gpu_seconds[0] == pytest.approx(4 * 500.0)
    assert r.resizes is not None and r.resizes[0] == 0


def test_shrinks_for_a_rigid_job_and_pays_the_resize() -> None:
    b = JobTableBuilder()
    b.add("e", submit=0, duration=1000, workers=4, min_workers=2, max_workers=8)  # grows to 8 at start
    b.add("r", submit=100, duration=100, workers=1, gpus_per_worker=4)
    r = simulate(_cluster(), b.build(), _policy(), execution=ExecutionModel(resize_cost_s=30))
    assert r.first_start[1] == 100.0  # the rigid job did not wait: the elastic one shrank
    # e: 100 s at 8 workers (200 s of its work at its size of 4), shrunk to 4 at 100: 30 s resize, then
    # 70 s at 4 until the rigid job ends at 200 (730 s of work left); growing back pays (730 x (1 - 4/8)
    # > 30 s): 30 s resize, then 730 s of work at twice the speed
    assert r.resizes is not None and r.resizes[0] == 2
    assert r.end[0] == pytest.approx(100 + 30 + 70 + 30 + 730 / 2)
    assert r.status.tolist() == [JobStatus.FINISHED, JobStatus.FINISHED], r.reasons


def test_starts_smaller_when_only_its_minimum_fits() -> None:
    b = JobTableBuilder()
    b.add("r", submit=0, duration=100, workers=1, gpus_per_worker=6)
    b.add("e", submit=10, duration=1000, workers=4, min_workers=1, max_workers=4)
    r = simulate(_cluster(), b.build(), _policy(), execution=ExecutionModel(resize_cost_s=0))
    assert r.first_start[1] == 10.0  # started on the 2 free GPUs instead of waiting for 4
    assert r.end[1] < 10 + 1000 + 90  # better than waiting for the rigid job to end


def test_shrink_never_below_minimum_nor_for_lower_priority() -> None:
    b = JobTableBuilder()
    b.add("e", submit=0, duration=1000, workers=4, min_workers=4, max_workers=8, priority=1)
    b.add("low", submit=10, duration=10, workers=1, gpus_per_worker=2, priority=0)
    b.add("big", submit=20, duration=10, workers=1, gpus_per_worker=6, priority=5)
    r = simulate(_cluster(), b.build(), _policy(), execution=ExecutionModel(resize_cost_s=0))
    # low may not take e's lent workers (lower priority): it waits for e to end
    assert r.first_start[1] >= r.end[0]
    # big needs 6 but e keeps its minimum of 4: big waits too (no whole eviction without preempt)
    assert r.first_start[2] >= r.end[0]


def test_rigid_workload_is_unchanged_by_the_elastic_actions() -> None:
    b = JobTableBuilder()
    rng = np.random.default_rng(3)
    for i in range(60):
        b.add(f"j{i}", submit=float(rng.integers(0, 500)), duration=float(rng.integers(1, 300)),
              workers=int(rng.integers(1, 4)), gpus_per_worker=int(rng.choice([1, 2, 4])))
    jobs = b.build()
    a = simulate(_cluster(4), jobs, load_policy("kant"))
    e = simulate(_cluster(4), jobs, _policy())
    for col in ("first_start", "end", "gpu_seconds"):
        np.testing.assert_array_equal(getattr(a, col), getattr(e, col))


# --- invariants -----------------------------------------------------------------------------------
@st.composite
def elastic_workloads(draw: st.DrawFn, max_jobs: int = 20) -> JobTable:
    n = draw(st.integers(1, max_jobs))
    b = JobTableBuilder(source="hypothesis")
    for i in range(n):
        w = draw(st.integers(1, 4))
        elastic = draw(st.booleans())
        lo = draw(st.integers(1, w)) if elastic else None
        hi = draw(st.integers(w, 8)) if elastic else None
        b.add(f"j{i}", submit=float(draw(st.integers(0, 50))), duration=float(draw(st.integers(0, 60))),
              workers=w, gpus_per_worker=draw(st.sampled_from([1, 1, 2, 4])),
              gpu_type=draw(st.sampled_from([None, None, *GPU_TYPES])), priority=draw(st.integers(0, 2)),
              min_workers=lo, max_workers=hi)
    return b.build()


@given(cluster=clusters(max_nodes=5), jobs=elastic_workloads(),
       cost=st.sampled_from([0.0, 5.0]), preempt=st.booleans(), place=st.sampled_from(["binpack", "e-binpack"]),
       backfill=st.sampled_from(["easy", "conservative"]))
def test_sizes_within_bounds_and_no_over_allocation(cluster: Cluster, jobs: JobTable, cost: float,
                                                     preempt: bool, place: str, backfill: str) -> None:
    actions: list[object] = [{"name": "allocate", "args": {"blocking": True}},
                             {"name": "elastic-shrink", "args": {"resize_cost_s": cost}}]
    if preempt:
        actions.append({"name": "preempt", "args": {"rank_by": "priority"}})
    actions += [{"name": "backfill", "args": {"mode": backfill}},
                {"name": "elastic-grow", "args": {"resize_cost_s": cost}}]
    policy = parse_policy({"name": "t", "actions": actions,
                           "plugins": [{"name": "priority"}, {"name": "fifo"}, {"name": place}]})
    sim = Simulator(cluster, jobs, policy, execution=ExecutionModel(resize_cost_s=cost), check_every=1)
    sched: Scheduler = sim.scheduler
    elastic = sched.jobs.elastic
    inner = sched.cycle
    capacity = int(cluster.gpus.sum())

    def checked(now: float):  # type: ignore[no-untyped-def]
        result = inner(now)
        held = 0
        for job, placement in sched.state.allocations.items():
            size = len(placement.nodes)
            bounds = elastic.get(job)
            if bounds is None:
                assert size == int(jobs.workers[job])
            else:
                assert bounds.min_workers <= size <= bounds.max_workers
            held += placement.total_gpus
        assert held == sched.state.allocated_gpus <= capacity
        for job, before, after in result.resized:  # a resize moves only the job's own workers
            assert job in elastic and before.gpus == after.gpus
        return result

    sched.cycle = checked  # type: ignore[method-assign]
    result = sim.run()
    placeable = result.status != JobStatus.UNSCHEDULABLE
    assert np.all(result.status[placeable] == JobStatus.FINISHED)
    # no work is lost to a resize: a job's GPU-seconds cover its work at its reference size when the
    # speed is linear (each size does k / workers of the work per second, on k x g GPUs)
    done = placeable & (result.preemptions == 0)
    need = jobs.duration[done] * jobs.total_gpus[done]
    assert np.all(result.gpu_seconds[done] >= need - 1e-6 * np.maximum(need, 1.0))
    if cost == 0:  # and without a resize cost, exactly that: nothing is held that does not work
        np.testing.assert_allclose(result.gpu_seconds[done], need, rtol=1e-9, atol=1e-6)


# --- the Pollux / Sia reader ----------------------------------------------------------------------
@pytest.mark.skipif(not (SHARED / "pollux-workloads").is_dir(), reason="shared traces not here")
def test_pollux_reader_elastic_and_rigid() -> None:
    from kant.traces.registry import load_trace

    jobs = load_trace("pollux:1")
    assert isinstance(jobs, JobTable) and len(jobs) == 160 and jobs.elastic is not None
    assert np.all(jobs.elastic.min_workers == 1) and np.all(jobs.elastic.max_workers == 2 * jobs.workers)
    again = load_trace("pollux:1")
    assert isinstance(again, JobTable)
    np.testing.assert_array_equal(jobs.duration, again.duration)  # deterministic
    from kant.traces.pollux import read_pollux

    rigid = read_pollux(SHARED / "pollux-workloads/workloads/workload-1.csv", elastic=False)
    assert rigid.elastic is None
    np.testing.assert_array_equal(rigid.duration, jobs.duration)
    amdahl = read_pollux(SHARED / "pollux-workloads/workloads/workload-1.csv", serial_fraction=0.05)
    assert amdahl.elastic is not None and amdahl.elastic.speedup[0] is not None
    sia = load_trace("sia:1")
    assert isinstance(sia, JobTable) and len(sia) == 160 and sia.elastic is not None


def test_pollux_reader_names_bad_rows(tmp_path: Path) -> None:
    from kant.errors import InputError
    from kant.traces.pollux import read_pollux

    f = tmp_path / "w.csv"
    f.write_text("name,time,application,num_replicas,batch_size\na,1,cifar10,2,64\nb,2,mnist,1,64\n")
    with pytest.raises(InputError, match="application"):
        read_pollux(f)
    f.write_text("name,time,application,num_replicas,batch_size\na,1,cifar10,0,64\n")
    with pytest.raises(InputError, match="num_replicas"):
        read_pollux(f)


# --- shrink before the evicting actions ------------------------------------------------------------
def _with(actions: list[object], extra_plugins: list[object] | None = None) -> object:
    return parse_policy({"name": "t", "actions": actions,
                         "plugins": [{"name": "priority"}, {"name": "fifo"}, *(extra_plugins or []),
                                     {"name": "binpack"}]})


@pytest.mark.parametrize("shrink_action", [True, False])
@pytest.mark.parametrize("elastic", [True, False])
def test_a_higher_priority_gang_shrinks_it_instead_of_preempting_it(elastic: bool, shrink_action: bool) -> None:
    b = JobTableBuilder()
    if elastic:
        b.add("e", submit=0, duration=1000, workers=8, min_workers=2, max_workers=8, priority=0)
    else:
        b.add("e", submit=0, duration=1000, workers=8, priority=0)
    b.add("high", submit=100, duration=100, workers=1, gpus_per_worker=4, priority=5)
    actions: list[object] = ["allocate", {"name": "preempt", "args": {"rank_by": "priority"}}]
    if shrink_action:  # without it, preempt itself shrinks its elastic candidates before evicting
        actions.insert(1, "elastic-shrink")
    r = simulate(_cluster(), b.build(), _with(actions), execution=ExecutionModel(resize_cost_s=0))
    assert r.first_start[1] == 100.0  # the high-priority gang starts at once either way
    if elastic:
        assert r.preemptions[0] == 0 and r.resizes is not None and r.resizes[0] == 1  # shrunk, not evicted
        assert r.end[0] == pytest.approx(100 + 900 * 8 / 4)  # 900 s of work left, at half the speed
    else:
        assert r.preemptions[0] == 1  # a rigid gang is evicted whole


def test_reclaim_shrinks_a_borrowers_lent_workers() -> None:
    b = JobTableBuilder()
    b.add("borrower", submit=0, duration=1000, workers=4, min_workers=2, max_workers=8, tenant="b")
    b.add("owner", submit=100, duration=100, workers=1, gpus_per_worker=4, tenant="a", priority=0)
    quota = {"name": "quota", "args": {"tenants": {"a": {"guaranteed": 4}, "b": {"guaranteed": 4}}}}
    policy = parse_policy({"name": "t", "actions": ["allocate", "reclaim", "elastic-grow"],
                           "plugins": [{"name": "priority"}, {"name": "fifo"}, quota, {"name": "binpack"}]})
    r = simulate(_cluster(), b.build(), policy, execution=ExecutionModel(resize_cost_s=0))
    assert r.first_start[1] == 100.0 and r.preemptions[0] == 0
    assert r.resizes is not None and r.resizes[0] >= 1


@pytest.mark.parametrize("policy_name", ["unified", "unified+elastic"])
def test_an_inference_replica_takes_lent_workers_before_reclaiming(policy_name: str) -> None:
    from kant.model.job import JobKind

    b = JobTableBuilder()
    if policy_name == "unified":  # the bundled policy as it is: inference-reclaim shrinks before it evicts
        policy = load_policy("unified")
        b.add("e", submit=0, duration=1000, workers=8, min_workers=2, max_workers=8)  # (no grow there)
    else:  # with the elastic actions: the job grows to 8 at its start, elastic-shrink takes the replica's
        policy = _with(["allocate", "elastic-shrink", {"name": "inference-reclaim", "args": {"reclaim_delay_s": 0}},
                        "allocate", "elastic-grow"], [{"name": "co-schedule", "args": {"mode": "unified"}}])
        b.add("e", submit=0, duration=1000, workers=4, min_workers=2, max_workers=8)
    b.add("replica", submit=100, duration=500, workers=1, gpus_per_worker=2, priority=100, kind=JobKind.INFERENCE)
    r = simulate(_cluster(), b.build(), policy, execution=ExecutionModel(resize_cost_s=0))
    assert r.first_start[1] == 100.0 and r.preemptions[0] == 0
    assert r.resizes is not None and r.resizes[0] >= 1


def test_inference_rows_keep_the_training_rows_elastic() -> None:
    from kant.inference.services import ServiceSpec
    from kant.inference.unified import append_replicas

    b = JobTableBuilder()
    b.add("e", submit=0, duration=10, workers=2, min_workers=1, max_workers=4)
    # (only the fields append_replicas reads: traffic and SLO do not matter here)
    spec = ServiceSpec.model_construct(name="s", gpus_per_replica=1, min_replicas=1, max_replicas=2, priority=100,
                                       gpu_type=None, tenant="inference", start_s=0.0)
    table, rows = append_replicas(b.build(), [spec])
    assert table.elastic is not None and table.elastic.is_elastic(0)
    assert not table.elastic.is_elastic(int(rows[0][0])) and len(table.elastic) == 3


# --- kant's own trace formats ---------------------------------------------------------------------
def _elastic_table() -> JobTable:
    b = JobTableBuilder()
    b.add("rigid", submit=0, duration=10, workers=2)
    b.add("lin", submit=1, duration=10, workers=2, min_workers=1, max_workers=4)
    b.add("tab", submit=2, duration=10, workers=2, min_workers=2, max_workers=8, speedup=parse_speedup("1:1,4:3"))
    return b.build()


def test_parquet_round_trip_keeps_elastic_columns(tmp_path: Path) -> None:
    from kant.traces.parquet import jobs_equal, read_parquet, write_parquet

    jobs = _elastic_table()
    write_parquet(jobs, tmp_path / "j.parquet")
    back = read_parquet(tmp_path / "j.parquet")
    assert isinstance(back, JobTable) and back.elastic is not None and jobs_equal(jobs, back)


def test_schema_csv_reads_elastic_columns_and_names_bad_ones(tmp_path: Path) -> None:
    from kant.errors import InputError
    from kant.traces.registry import read_path

    f = tmp_path / "jobs.csv"
    f.write_text("name,submit,duration,workers,min_workers,max_workers,speedup\n"
                 "rigid,0,10,2,,,\nlin,1,10,2,1,4,\ntab,2,10,2,2,8,\"1:1,4:3\"\n")
    jobs = read_path(f)
    assert isinstance(jobs, JobTable) and jobs.elastic is not None
    assert not jobs.elastic.is_elastic(0) and jobs.elastic.is_elastic(1)
    assert jobs.elastic.speedup[2] == ((1, 1.0), (4, 3.0))
    f.write_text("name,submit,duration,workers,min_workers,max_workers\nbad,0,10,2,3,4\n")
    with pytest.raises(InputError, match="workers"):
        read_path(f)
    f.write_text("name,submit,duration,workers,min_workers,max_workers\nbad,0,10,2,1,\n")
    with pytest.raises(InputError, match="max_workers"):
        read_path(f)


@given(jobs=elastic_workloads(), gpus=st.sampled_from([4, 8]), cost=st.sampled_from([0.0, 5.0]))
def test_shrink_returns_lent_capacity_to_the_head(jobs: JobTable, gpus: int, cost: float) -> None:
    """On one node, after every cycle of the ``elastic`` policy the head of the queue could not start
    even by taking back every lent worker it may take: its need (its GPUs; an elastic head's minimum)
    is above the free GPUs plus the GPUs that running elastic jobs of its priority or lower hold above
    their minimum. (Lent capacity never keeps a job waiting that could run with it.)"""
    cluster = Cluster.from_nodes([NodeSpec("n0", "A", gpus)])
    policy = parse_policy({"name": "t", "actions": [
        {"name": "allocate", "args": {"blocking": True}}, {"name": "elastic-shrink", "args": {"resize_cost_s": cost}},
        {"name": "backfill", "args": {"mode": "easy"}}, {"name": "elastic-grow", "args": {"resize_cost_s": cost}}],
        "plugins": [{"name": "priority"}, {"name": "fifo"}, {"name": "binpack"}]})
    sim = Simulator(cluster, jobs, policy, execution=ExecutionModel(resize_cost_s=cost))
    sched = sim.scheduler
    elastic, store = sched.jobs.elastic, sched.jobs
    inner = sched.cycle

    def checked(now: float):  # type: ignore[no-untyped-def]
        result = inner(now)
        head = sched.queue.head()
        if head is not None:
            prio = int(store.priority[head])
            lent = sum((len(p.nodes) - elastic[j].min_workers) * p.gpus
                       for j, p in sched.state.allocations.items() if j in elastic and int(store.priority[j]) <= prio)
            b = elastic.get(head)
            need = (b.min_workers if b is not None else int(store.workers[head])) * int(store.gpus_per_worker[head])
            assert need > sched.state.free_gpus + lent, (head, need, sched.state.free_gpus, lent, now)
        return result

    sched.cycle = checked  # type: ignore[method-assign]
    sim.run()


def test_a_resize_then_an_eviction_in_one_cycle_is_an_eviction(monkeypatch: pytest.MonkeyPatch) -> None:
    """An elastic job resized and then evicted whole in the same cycle: the simulator sees only the
    eviction (no finish of the resized run left behind), and a binder hears only the eviction."""
    from kant.actions.common import evict_job, resize_job
    from kant.actions.elastic import shrink_placement
    from kant.framework import registry
    from kant.framework.action import Action
    from kant.framework.statement import Statement
    from kant.model.state import ClusterState, Placement

    class ResizeThenEvict(Action):
        NAME = "test-resize-then-evict"
        done = False

        def execute(self, ctx, fw):  # type: ignore[no-untyped-def]
            if ResizeThenEvict.done or 0 not in ctx.running:
                return
            ResizeThenEvict.done = True
            p = ctx.state.allocations[0]
            resize_job(ctx, fw, 0, shrink_placement(p, p.nodes[-1]))
            evict_job(ctx, fw, 0)

    registry.action_names()  # (the built-ins first; then this one for this test only, never left behind)
    monkeypatch.setitem(registry._ACTIONS, ResizeThenEvict.NAME, ResizeThenEvict)
    b = JobTableBuilder()
    b.add("e", submit=0, duration=100, workers=2, min_workers=1, max_workers=2)
    b.add("tick", submit=10, duration=1, workers=1, gpus_per_worker=1)  # an event at 10: a cycle
    b.add("tock", submit=20, duration=1, workers=1, gpus_per_worker=1)  # and one at 20, to start it again
    r = simulate(_cluster(), b.build(), _with(["allocate", "test-resize-then-evict"]),
                 execution=ExecutionModel(resize_cost_s=0, checkpoint_interval_s=1.0))
    assert r.status.tolist() == [JobStatus.FINISHED] * 3, r.reasons
    assert r.preemptions[0] == 1 and r.resizes is not None and r.resizes[0] == 0

    heard: list[tuple[str, int]] = []

    class Binder:
        def bind(self, job: int, placement: Placement) -> None:
            heard.append(("bind", job))

        def evict(self, job: int, placement: Placement) -> None:
            heard.append(("evict", job))

        def resize(self, job: int, before: Placement, after: Placement) -> None:
            heard.append(("resize", job))

    state = ClusterState(_cluster())
    state.allocate(0, Placement((0, 0), 1))
    st_ = Statement(state)
    st_.resize(0, Placement((0,), 1))
    st_.evict(0)
    st_.commit(Binder())
    assert heard == [("evict", 0)]


def test_preempt_starts_an_elastic_job_at_its_minimum_without_evicting() -> None:
    """Under preempt alone, a high-priority elastic job that fits at its minimum on the free GPUs starts
    there (the shrink step finds it needs no lender), and nobody is evicted (found by Hypothesis: it
    was started twice)."""
    b = JobTableBuilder()
    b.add("lender", submit=0, duration=1000, workers=2, min_workers=1, max_workers=2)
    b.add("rigid", submit=0, duration=1000, workers=1, gpus_per_worker=4)
    b.add("p", submit=100, duration=100, workers=4, min_workers=2, max_workers=4, priority=5)
    r = simulate(_cluster(), b.build(), _with(["allocate", {"name": "preempt", "args": {"rank_by": "priority"}}]),
                 execution=ExecutionModel(resize_cost_s=0))
    assert r.first_start[2] == 100.0 and int(r.preemptions.sum()) == 0
    assert r.gpu_seconds[2] == pytest.approx(2 * 200.0)  # 2 workers: half the speed of its 4
