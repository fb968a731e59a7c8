"""Preemption: victim choice on hand-made cases, never for equal priority, checkpoint/restart
accounting of GPU-seconds, and invariants on random workloads."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given

from kant.actions.victims import Candidates, choose_victims, work_lost
from kant.config import parse_policy
from kant.errors import ConfigError
from kant.framework.context import CycleContext, RunningJob
from kant.framework.statement import Statement
from kant.metrics.recorder import JobStatus
from kant.model import Cluster, JobTable, JobTableBuilder, Placement
from kant.scheduler import Scheduler
from kant.sim import ExecutionModel, Simulator
from strategies import clusters, workloads


def _policy(actions: list[object] | None = None) -> object:
    return parse_policy({
        "name": "t",
        "actions": actions or ["allocate", {"name": "preempt", "args": {"rank_by": "priority"}}],
        "plugins": [{"name": "priority"}, {"name": "fifo"}, {"name": "binpack"}],
    })


# (workers, gpus per worker, priority, start time, nodes) of the running jobs; the preemptor is last
Running = list[tuple[int, int, int, float, tuple[int, ...]]]


def _setup(running: Running, preemptor: tuple[int, int, int], n_nodes: int = 3,
           now: float = 1000.0) -> tuple[Scheduler, CycleContext, int]:
    b = JobTableBuilder()
    for i, (w, g, prio, _, _) in enumerate(running):
        b.add(f"r{i}", submit=0.0, duration=1e6, workers=w, gpus_per_worker=g, priority=prio)
    w, g, prio = preemptor
    p = b.add("p", submit=now, duration=10.0, workers=w, gpus_per_worker=g, priority=prio)
    s = Scheduler(_policy(), Cluster.uniform(n_nodes, 8), b.build())  # type: ignore[arg-type]
    for i, (_, g_i, _, start, nodes) in enumerate(running):
        placement = Placement(nodes, g_i)
        s.state.allocate(i, placement)
        s.running[i] = RunningJob(start, math.inf)
        s.framework.job_started(i, start, placement)
    assert s.submit(p, now).ok
    ctx = CycleContext(env=s.env, state=s.state, queue=s.queue, now=now, running=s.running,
                       statement=Statement(s.state))
    return s, ctx, p


def _choose(running: Running, preemptor: tuple[int, int, int], n_nodes: int = 3) -> list[int] | None:
    s, ctx, p = _setup(running, preemptor, n_nodes)
    jobs = s.env.jobs
    cand = np.array([j for j in range(len(running)) if jobs.priority[j] < jobs.priority[p]], dtype=np.int64)
    cands = Candidates(cand, jobs.priority[cand].astype(float), work_lost(ctx, cand, None))
    before = s.state.free.copy()
    plan = choose_victims(ctx, s.framework, p, cands)
    assert np.array_equal(s.state.free, before)  # planning changes nothing
    return None if plan is None else plan[0]


# Three candidate victim sets for a 1 x 8-GPU preemptor on three full 8-GPU nodes (now = 1000 s):
#   node 0: one 8-GPU job            node 1: two 4-GPU jobs          node 2: eight 1-GPU jobs
# work lost = GPUs x seconds run (no checkpoints).
EIGHT_ONES = [(1, 1, 1, 999.0, (2,)) for _ in range(8)]  # 1 GPU x 1 s = 1 GPU-s each


@pytest.mark.parametrize(
    ("running", "expected"),
    [
        # FEWEST: equal priority 1 everywhere. Node 0 needs 1 victim (lost 8 x 100 = 800 GPU-s), node 1
        # needs 2 (4 x 10 + 4 x 10 = 80), node 2 needs 8 (8 x 1 = 8). Fewest wins over less work lost
        # -> job 0.
        ([(1, 8, 1, 900.0, (0,)), (1, 4, 1, 990.0, (1,)), (1, 4, 1, 990.0, (1,)), *EIGHT_ONES], [0]),
        # LOWEST PRIORITY: node 0's job has priority 5, node 1's two jobs priority 1, node 2's eight
        # jobs priority 2. Highest victim priority per node: 5, 1, 2 -> node 1 although it takes two
        # victims -> jobs 1 and 2.
        ([(1, 8, 5, 900.0, (0,)), (1, 4, 1, 990.0, (1,)), (1, 4, 1, 990.0, (1,)),
          *[(1, 1, 2, 999.0, (2,)) for _ in range(8)]], [1, 2]),
        # LEAST WORK LOST: one 8-GPU job of priority 1 per node, started at 0, 900 and 500 s: lost
        # 8 x 1000 = 8000, 8 x 100 = 800, 8 x 500 = 4000 GPU-s -> job 1 (node 1).
        ([(1, 8, 1, 0.0, (0,)), (1, 8, 1, 900.0, (1,)), (1, 8, 1, 500.0, (2,))], [1]),
        # Node 0 holds a 4-GPU job (lost 4 x 10 = 40) and 4 free GPUs, so one victim there is enough;
        # nodes 1 and 2 each hold an 8-GPU job (lost 8 x 10 = 80). One victim either way, equal
        # priority -> least work lost: job 0.
        ([(1, 4, 1, 990.0, (0,)), (1, 8, 1, 990.0, (1,)), (1, 8, 1, 990.0, (2,))], [0]),
    ],
)
def test_single_worker_victims_are_minimal(running: Running, expected: list[int]) -> None:
    assert _choose(running, (1, 8, 10)) == expected


def test_two_victims_least_work_lost_across_nodes() -> None:
    # Node 0: two 4-GPU jobs started at 990 (lost 4 x 10 = 40 each, 80 together); node 1: two 4-GPU
    # jobs started at 900 (4 x 100 = 400 each, 800); node 2: one 8-GPU job of priority 3. All other
    # jobs priority 1. Highest victim priority: 1, 1, 3 -> nodes 0 and 1, two victims each -> least
    # lost: node 0, jobs 0 and 1.
    running = [(1, 4, 1, 990.0, (0,)), (1, 4, 1, 990.0, (0,)), (1, 4, 1, 900.0, (1,)), (1, 4, 1, 900.0, (1,)),
               (1, 8, 3, 990.0, (2,))]
    assert _choose(running, (1, 8, 10)) == [0, 1]


def test_subset_within_one_node() -> None:
    # One full 8-GPU node: two 1-GPU jobs and three 2-GPU jobs, priority 1; a 4-GPU preemptor needs 4
    # GPUs: fewest = two 2-GPU jobs. Their losses (2 GPUs x run time): job 2 ran 100 s -> 200, job 3
    # 10 s -> 20, job 4 50 s -> 100. Cheapest pair: jobs 3 and 4 (120).
    running = [(1, 1, 1, 999.0, (0,)), (1, 1, 1, 999.0, (0,)), (1, 2, 1, 900.0, (0,)), (1, 2, 1, 990.0, (0,)),
               (1, 2, 1, 950.0, (0,))]
    assert _choose(running, (1, 4, 10), n_nodes=1) == [3, 4]


def test_gang_victims_fewest() -> None:
    # A 2 x 8-GPU gang of priority 10 on three full nodes, all victims priority 0:
    #   node 0: one 8-GPU job, lost 8 x 100 = 800; node 1: two 4-GPU jobs, lost 4 x 10 = 40 each;
    #   node 2: one 8-GPU job, lost 8 x 50 = 400.
    # Candidate sets: {0, 3} (2 victims, 1200), {1, 2, 3} (3 victims, 480), {0, 1, 2} (3, 880).
    # Fewest first -> {0, 3}.
    running = [(1, 8, 0, 900.0, (0,)), (1, 4, 0, 990.0, (1,)), (1, 4, 0, 990.0, (1,)), (1, 8, 0, 950.0, (2,))]
    assert _choose(running, (2, 8, 10)) == [0, 3]


def test_gang_victim_spanning_nodes_counts_once() -> None:
    # A 2 x 8 running gang (job 0, priority 0) on nodes 0 and 1 vs two 8-GPU singles of priority 0 on
    # node 2 and... only three nodes: evicting job 0 frees two nodes with one victim -> [0].
    running = [(2, 8, 0, 900.0, (0, 1)), (1, 8, 0, 990.0, (2,))]
    assert _choose(running, (2, 8, 10)) == [0]


def test_no_plan_when_victims_cannot_make_room() -> None:
    # Only priority-1 jobs on node 0 are candidates (the node-1/2 jobs have priority 20 > 10): node 0
    # frees 8 GPUs, but the gang needs 2 nodes -> None.
    running = [(1, 8, 1, 900.0, (0,)), (1, 8, 20, 900.0, (1,)), (1, 8, 20, 900.0, (2,))]
    assert _choose(running, (2, 8, 10)) is None


def _one_node_jobs(prio_low: int, prio_high: int) -> JobTable:
    b = JobTableBuilder()
    b.add("low", submit=0.0, duration=100.0, workers=1, gpus_per_worker=8, priority=prio_low)
    b.add("high", submit=30.0, duration=50.0, workers=1, gpus_per_worker=8, priority=prio_high)
    return b.build()


@pytest.mark.parametrize(("prio_low", "prio_high"), [(1, 1), (2, 1)])
def test_never_preempts_for_equal_or_lower_priority(prio_low: int, prio_high: int) -> None:
    jobs = _one_node_jobs(prio_low, prio_high)
    res = Simulator(Cluster.uniform(1, 8), jobs, _policy(), check_every=1).run()  # type: ignore[arg-type]
    assert res.preemptions.tolist() == [0, 0]
    assert res.first_start.tolist() == [0.0, 100.0]  # "high" waits for "low" to finish at 100


def test_preemption_accounting_with_checkpoint_and_restart() -> None:
    # "low" (8 GPUs, 100 s of work) starts at 0; "high" (priority 5, 8 GPUs, 50 s) arrives at 30 and
    # preempts it. Checkpoints every 20 s: at 30 s "low" keeps floor(30/20) x 20 = 20 s and loses
    # 10 s. "high" runs 30..80. "low" restarts at 80, pays the 5 s restart cost and runs its remaining
    # 80 s: ends at 80 + 5 + 80 = 165.
    jobs = _one_node_jobs(0, 5)
    execution = ExecutionModel(restart_cost_s=5.0, checkpoint_interval_s=20.0)
    pol = _policy(["allocate", {"name": "preempt", "args": {"checkpoint_interval_s": 20.0}}, "allocate"])
    res = Simulator(Cluster.uniform(1, 8), jobs, pol, execution=execution, check_every=1).run()  # type: ignore[arg-type]
    assert res.preemptions.tolist() == [1, 0]
    assert res.first_start.tolist() == [0.0, 30.0]
    assert res.end.tolist() == [165.0, 80.0]
    # GPU-seconds: low 8 x 30 + 8 x 85 = 920; high 8 x 50 = 400. Demanded 8 x 100 + 8 x 50 = 1200;
    # lost work 8 x 10 (since the checkpoint) + 8 x 5 (restart) = 120 -> 1200 + 120 = 1320.
    assert res.gpu_seconds.tolist() == [920.0, 400.0]
    demanded = float((jobs.duration * jobs.total_gpus).sum())
    assert demanded == 1200.0
    assert float(res.gpu_seconds.sum()) == demanded + 8 * 10 + 8 * 5


def test_preemption_without_checkpoints_loses_the_whole_run() -> None:
    # No checkpoints: "low" loses its 30 s, restarts at 80 from scratch: ends at 80 + 100 = 180.
    # GPU-seconds 8 x 30 + 8 x 100 + 8 x 50 = 1440 = 1200 demanded + 8 x 30 lost.
    jobs = _one_node_jobs(0, 5)
    res = Simulator(Cluster.uniform(1, 8), jobs, _policy(), check_every=1).run()  # type: ignore[arg-type]
    assert res.end.tolist() == [180.0, 80.0]
    assert float(res.gpu_seconds.sum()) == 1200.0 + 8 * 30


def test_work_lost_estimate() -> None:
    # run for 1000 - 900 = 100 s on 8 GPUs: 800 GPU-s without checkpoints; with a 30 s interval,
    # 100 mod 30 = 10 s since the last checkpoint -> 80 GPU-s
    _, ctx, _ = _setup([(1, 8, 0, 900.0, (0,))], (1, 8, 10))
    assert work_lost(ctx, np.array([0]), None).tolist() == [800.0]
    assert work_lost(ctx, np.array([0]), 30.0).tolist() == [80.0]


def test_bad_args_rejected_with_key_path() -> None:
    with pytest.raises(ConfigError, match=r"actions\[1\]\.args\.round_s"):
        _policy(["allocate", {"name": "preempt", "args": {"round_s": -1}}])
    with pytest.raises(ConfigError, match=r"actions\[1\]\.args\.victims"):
        _policy(["allocate", {"name": "preempt", "args": {"victims": 1}}])


def test_unknown_rank_plugin_is_an_error() -> None:
    # caught when the policy is loaded, naming the key path
    with pytest.raises(ConfigError, match=r"actions\[1\]\.args\.rank_by: preempt: rank_by 'no-such' is not "
                                          r"'priority' \(this policy has no plugin that ranks jobs\)"):
        _policy(["allocate", {"name": "preempt", "args": {"rank_by": "no-such"}}])


def test_rank_by_a_plugin_that_does_not_rank_is_an_error() -> None:
    with pytest.raises(ConfigError, match="rank_by 'binpack' names a plugin that does not rank jobs; use 'priority'"):
        _policy(["allocate", {"name": "preempt", "args": {"rank_by": "binpack"}}])
    doc = {"name": "t", "actions": [{"name": "preempt", "args": {"rank_by": "fifo"}}],
           "plugins": [{"name": "tiresias-las"}, {"name": "fifo"}]}
    with pytest.raises(ConfigError, match=r"use 'priority' or a ranking plugin of this policy \(tiresias-las\)"):
        parse_policy(doc)
    doc["actions"] = [{"name": "preempt", "args": {"rank_by": "tiresias-las"}}]
    assert parse_policy(doc).actions[0].cls.NAME == "preempt"


def test_plugins_and_actions_in_the_wrong_list_are_named() -> None:
    with pytest.raises(ConfigError, match=r"actions\[1\]: 'binpack' is a plugin, not an action: list it under plugins"):
        _policy(["allocate", "binpack"])
    doc = {"name": "t", "actions": ["allocate"], "plugins": [{"name": "fifo"}, {"name": "preempt"}]}
    with pytest.raises(ConfigError, match=r"plugins\[1\]\.name: 'preempt' is an action, not a plugin"):
        parse_policy(doc)


def test_reclaim_without_a_guarantee_plugin_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"actions\[1\]: the reclaim action needs a Guarantee plugin in the "
                                          r"policy \(one of: quota, queues\)"):
        _policy(["allocate", "reclaim"])


@given(cluster=clusters(max_nodes=4), jobs=workloads(max_jobs=20))
def test_random_workloads_preemption_invariants(cluster: Cluster, jobs: JobTable) -> None:
    execution = ExecutionModel(restart_cost_s=2.0, checkpoint_interval_s=5.0)
    pol = _policy(["allocate", {"name": "preempt", "args": {"checkpoint_interval_s": 5.0}}, "allocate"])
    sim = Simulator(cluster, jobs, pol, execution=execution, check_every=1)  # type: ignore[arg-type]
    res = sim.run()
    done = res.status == JobStatus.FINISHED
    demanded = jobs.duration * jobs.total_gpus
    # every finished job executed at least its demand, plus its restart costs; exactly that if it
    # was never interrupted
    floor = demanded + jobs.total_gpus * execution.restart_cost_s * np.maximum(res.runs - 1, 0)
    assert np.all(res.gpu_seconds[done] >= floor[done] - 1e-6)
    clean = done & (res.preemptions == 0)
    assert np.allclose(res.gpu_seconds[clean], demanded[clean])
    assert float(res.gpu_seconds[done].sum()) >= float(demanded[done].sum()) - 1e-6
    # only strictly lower priorities are preempted: a top-priority job is never a victim
    top = jobs.priority == jobs.priority.max()
    if jobs.priority.min() < jobs.priority.max():
        assert res.preemptions[top].sum() == 0
