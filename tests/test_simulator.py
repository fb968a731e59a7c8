"""Simulator invariants on random workloads (Hypothesis) and hand-made timelines."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given

from kant.config import load_policy
from kant.metrics.recorder import JobStatus
from kant.model import Cluster, JobTable, JobTableBuilder, Placement
from kant.sim import EventKernel, ExecutionModel, NodeFailure, Simulator, simulate
from strategies import clusters, workloads

POLICIES = ["volcano-binpack", "k8s-default", "fifo-strict"]


class _Recording(Simulator):
    """A simulator that also logs every run (job, start, placement) for independent checks."""

    def __init__(self, *a, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*a, **kw)
        self.log: list[tuple[int, float, Placement]] = []

    def _started(self, job: int, now: float, placement: Placement) -> None:
        self.log.append((job, now, placement))
        super()._started(job, now, placement)


def _slots_on_empty(cluster: Cluster, jobs: JobTable, j: int) -> int:
    g = int(jobs.gpus_per_worker[j])
    t = jobs.gpu_type_name(j)
    ok = np.ones(cluster.n_nodes, bool) if t is None else np.array(
        [cluster.gpu_type_names[c] == t for c in cluster.gpu_type]
    )
    return int((cluster.gpus[ok] // g).sum())


@pytest.mark.parametrize("policy", POLICIES)
@given(cluster=clusters(), jobs=workloads())
def test_invariants_on_random_workloads(policy: str, cluster: Cluster, jobs: JobTable) -> None:
    sim = _Recording(cluster, jobs, load_policy(policy), check_every=1)
    res = sim.run()
    # every job ends: finished, or unschedulable with a reason -- and only if it truly cannot fit
    for j in range(len(jobs)):
        fits = _slots_on_empty(cluster, jobs, j) >= jobs.workers[j]
        if fits:
            assert res.status[j] == JobStatus.FINISHED, (j, res.reasons.get(j))
        else:
            assert res.status[j] == JobStatus.UNSCHEDULABLE and res.reasons[j]
    # gangs are atomic: every run holds exactly `workers` workers of `gpus_per_worker` GPUs
    for j, _, p in sim.log:
        assert len(p.nodes) == jobs.workers[j] and p.gpus == jobs.gpus_per_worker[j]
    # no GPU double-booked at any instant: an independent sweep over the run intervals
    deltas: dict[int, list[tuple[float, int, int]]] = defaultdict(list)
    for j, start, p in sim.log:
        end = float(res.end[j])
        for node, count in p.per_node.items():
            deltas[node].append((start, 1, count * p.gpus))
            deltas[node].append((end, 0, -count * p.gpus))  # releases sort before starts at a tie
    for node, ds in deltas.items():
        used = 0
        for _, _, d in sorted(ds):
            used += d
            assert used <= cluster.gpus[node]
    # GPU-seconds conserved: held = duration x GPUs for every finished job (no slowdown, no preemption)
    fin = res.status == JobStatus.FINISHED
    np.testing.assert_allclose(res.gpu_seconds[fin], (jobs.duration * jobs.total_gpus)[fin])
    # nobody starts before arriving; run length equals duration
    assert np.all(res.first_start[fin] >= jobs.submit[fin])
    np.testing.assert_allclose(res.end[fin] - res.first_start[fin], jobs.duration[fin])


def test_same_seed_same_result() -> None:
    from strategies import GPU_TYPES  # noqa: F401  (strategies module importable)

    b = JobTableBuilder()
    rng = np.random.default_rng(3)
    for i in range(300):
        b.add(f"j{i}", submit=float(rng.integers(0, 500)), duration=float(rng.integers(1, 200)),
              workers=int(rng.integers(1, 3)), gpus_per_worker=int(rng.choice([1, 2, 4, 8])))
    jobs = b.build()
    c = Cluster.uniform(6, 8, nodes_per_leaf=2)
    a = simulate(c, jobs, load_policy("k8s-default"), seed=7)
    z = simulate(c, jobs, load_policy("k8s-default"), seed=7)
    for name in ("first_start", "end", "gpu_seconds", "times"):
        assert np.array_equal(getattr(a, name), getattr(z, name), equal_nan=True)
    assert all(np.array_equal(a.series[k], z.series[k]) for k in a.series)


def test_hand_made_timeline() -> None:
    # one node of 8 GPUs; job0 (8 GPUs, 0..10), job1 (4 GPUs, arrives 2, waits for job0) 10..15,
    # job2 (4 GPUs, arrives 3) starts with job1 at 10, ends 10+7=17
    b = JobTableBuilder()
    b.add("j0", submit=0, duration=10, gpus_per_worker=8)
    b.add("j1", submit=2, duration=5, gpus_per_worker=4)
    b.add("j2", submit=3, duration=7, gpus_per_worker=4)
    res = simulate(Cluster.uniform(1, 8), b.build(), load_policy("volcano-binpack"))
    assert list(res.first_start) == [0, 10, 10]
    assert list(res.end) == [10, 15, 17]
    assert res.end_time == 17
    assert list(res.times) == [0, 2, 3, 10, 15, 17]
    assert list(res.series["allocated_gpus"]) == [8, 8, 8, 8, 4, 0]
    assert list(res.series["queue_len"]) == [0, 1, 2, 0, 0, 0]


def test_zero_duration_and_simultaneous_events() -> None:
    b = JobTableBuilder()
    b.add("instant", submit=5, duration=0, gpus_per_worker=8)
    b.add("next", submit=5, duration=3, gpus_per_worker=8)
    res = simulate(Cluster.uniform(1, 8), b.build(), load_policy("fifo-strict"))
    assert list(res.first_start) == [5, 5] and list(res.end) == [5, 8]


def test_node_failure_requeues_and_checkpoints() -> None:
    # job runs on node 0 from 0; node 0 fails at 25 (repair 100 s). With 10 s checkpoints the job
    # keeps 20 s of work, restarts at 25 on node 1 after a 5 s restart cost: ends 25 + 5 + (60-20) = 70
    b = JobTableBuilder()
    b.add("j", submit=0, duration=60, gpus_per_worker=8)
    ex = ExecutionModel(restart_cost_s=5, checkpoint_interval_s=10)
    sim = Simulator(Cluster.uniform(2, 8), b.build(), load_policy("volcano-binpack"), execution=ex,
                    failures=[NodeFailure(25, 0, 100)], check_every=1)
    res = sim.run()
    assert res.end[0] == 70 and res.runs[0] == 2 and res.preemptions[0] == 1
    # GPU-seconds held: 25 s + 45 s on 8 GPUs
    assert res.gpu_seconds[0] == pytest.approx((25 + 45) * 8)
    assert max(res.series["down_gpus"]) == 8


def test_cross_leaf_penalty_stretches_run_time() -> None:
    # 2 nodes in different leaves; a 2 x 8 gang must span both leaves -> 100 s x 1.5 = 150 s
    b = JobTableBuilder()
    b.add("gang", submit=0, duration=100, workers=2, gpus_per_worker=8)
    c = Cluster.uniform(2, 8, nodes_per_leaf=1, leaves_per_spine=2)
    res = simulate(c, b.build(), load_policy("volcano-binpack"),
                   execution=ExecutionModel(cross_leaf_penalty=0.5, cross_spine_penalty=2.0))
    assert res.end[0] == 150 and res.span_leaves[0] == 2 and res.span_spines[0] == 1


def test_inference_replicas_run_to_the_end() -> None:
    from kant.model import InferenceService

    b = JobTableBuilder()
    b.add_service(InferenceService("llm", gpus_per_replica=4, min_replicas=2, max_replicas=4))
    b.add("train", submit=10, duration=50, gpus_per_worker=8)
    res = simulate(Cluster.uniform(2, 8), b.build(), load_policy("volcano-binpack"))
    assert list(res.status) == [JobStatus.RUNNING, JobStatus.RUNNING, JobStatus.FINISHED]
    assert res.end_time == 60 and res.gpu_seconds[0] == 60 * 4


def test_kernel_orders_ties_and_refuses_the_past() -> None:
    k = EventKernel()
    seen: list[str] = []
    k.schedule(5, 1, seen.append, "b")
    k.schedule(5, 0, seen.append, "a")
    k.schedule(5, 1, seen.append, "c")
    k.run_due(5)
    assert seen == ["a", "b", "c"]
    with pytest.raises(ValueError, match="before now"):
        k.schedule(4, 0, seen.append, "x")


@pytest.mark.parametrize("policy", ["kant", "tiresias", "drf"])
@given(cluster=clusters(), jobs=workloads())
def test_a_run_in_pieces_is_the_run_in_one(policy: str, cluster: Cluster, jobs: JobTable) -> None:
    """``run(until=...)`` and then ``run()`` again go on from where the first stopped: every job is
    submitted once, and the starts and ends are those of one whole run (a second run used to submit
    every arrival again from the first)."""
    whole = Simulator(cluster, jobs, load_policy(policy)).run()
    sim = Simulator(cluster, jobs, load_policy(policy))
    mid = float(np.median(jobs.submit)) if len(jobs) else 0.0
    sim.run(until=mid)
    sim.run(until=mid + 1.0)
    pieces = sim.run()
    for name in ("first_start", "end", "gpu_seconds", "status", "preemptions"):
        assert np.array_equal(getattr(whole, name), getattr(pieces, name), equal_nan=True), name
