"""Tiresias 2D-LAS: queue levels and order, starvation promotion, preemption at round boundaries."""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kant.config import load_policy, parse_policy
from kant.errors import ConfigError
from kant.framework.runner import DynamicKey
from kant.metrics.recorder import JobStatus
from kant.model import Cluster, JobTable, JobTableBuilder, Placement
from kant.plugins.tiresias import TiresiasLas
from kant.scheduler import Scheduler
from kant.sim import Simulator
from strategies import clusters, workloads


def _policy(thresholds: list[float], factor: float | None = None, round_s: float = 50.0) -> Any:
    return parse_policy({
        "name": "las",
        "actions": ["allocate", {"name": "preempt", "args": {"rank_by": "tiresias-las", "round_s": round_s}},
                    "allocate"],
        "plugins": [{"name": "tiresias-las", "args": {"thresholds_gpu_s": thresholds, "starvation_factor": factor}},
                    {"name": "binpack"}],
    })


def _plugin(jobs: JobTable, thresholds: list[float], factor: float | None) -> tuple[Scheduler, TiresiasLas]:
    s = Scheduler(_policy(thresholds, factor), Cluster.uniform(1, 8), jobs)
    plugin = s.plugin(TiresiasLas)
    assert plugin is not None
    return s, plugin


def _run(plugin: TiresiasLas, s: Scheduler, job: int, start: float, end: float, gpus: int) -> None:
    p = Placement((0,), gpus)
    plugin.job_started(s.env, job, start, p)
    plugin.job_stopped(s.env, job, end, p, False)


def test_levels_and_queue_order() -> None:
    # thresholds [100, 1000] GPU-s. Attained service: job 0 none; job 1 1 GPU x 150 s = 150;
    # job 2 1 GPU x 50 s = 50; job 3 4 GPUs x 1250 s = 5000.
    # levels: 0 (0 < 100), 1 (100 <= 150 < 1000), 0 (50 < 100), 2 (5000 >= 1000).
    # order by (level, submit, row) with submits 3, 2, 1, 0: level 0 -> job 2 (submit 1) then job 0
    # (submit 3); then job 1; then job 3 -> [2, 0, 1, 3].
    b = JobTableBuilder()
    for i in range(4):
        b.add(f"j{i}", submit=3.0 - i, duration=1e5, gpus_per_worker=4 if i == 3 else 1)
    s, las = _plugin(b.build(), [100.0, 1000.0], None)
    _run(las, s, 1, 0.0, 150.0, 1)
    _run(las, s, 2, 0.0, 50.0, 1)
    _run(las, s, 3, 0.0, 1250.0, 4)
    jobs = np.arange(4)
    assert las.levels(jobs, 2000.0).tolist() == [0, 1, 0, 2]
    assert las.attained.tolist() == [0.0, 150.0, 50.0, 5000.0]
    key = s.framework.dynamic_key(2000.0)
    assert isinstance(key, DynamicKey)
    assert key.order(jobs).tolist() == [2, 0, 1, 3]
    assert sorted(jobs.tolist(), key=key) == [2, 0, 1, 3]  # per-job keys agree
    # a running job's service grows: job 0 running on 2 GPUs since 2000 -> at 2060, 120 GPU-s: level 1
    las.job_started(s.env, 0, 2000.0, Placement((0,), 2))
    assert las.levels(np.array([0]), 2060.0).tolist() == [1]
    assert las.rank(s.env, np.array([0]), 2060.0).tolist() == [-1.0]


def test_starvation_promotion() -> None:
    # Job 0 ran 4 GPUs x 1250 s = 5000 GPU-s (level 2 of [100, 1000]), stopped at 1250; factor 2:
    # promoted once it has waited 2 x 1250 = 2500 s, i.e. from 3750 on. When it starts again its
    # service restarts from 0, so it stays in level 0 until it has 100 more GPU-s.
    b = JobTableBuilder()
    b.add("j0", submit=0.0, duration=1e5, gpus_per_worker=4)
    s, las = _plugin(b.build(), [100.0, 1000.0], 2.0)
    _run(las, s, 0, 0.0, 1250.0, 4)
    job = np.array([0])
    assert las.levels(job, 3749.0).tolist() == [2]
    assert las.levels(job, 3750.0).tolist() == [0]
    las.job_started(s.env, 0, 3750.0, Placement((0,), 4))
    assert las.promotions == 1
    # 4 GPUs x 20 s = 80 < 100 -> 0; 4 x 30 = 120 -> 1
    assert las.levels(job, 3770.0).tolist() == [0]
    assert las.levels(job, 3780.0).tolist() == [1]


def test_preemption_at_round_boundary() -> None:
    # One 4-GPU node, thresholds [100] GPU-s, rounds of 50 s, no starvation promotion.
    # A (4 GPUs, 1000 s) starts at 0. B (1 GPU, 20 s) arrives at 10: both in queue 0 (A has 40 GPU-s)
    # -> no preemption; and it is not a round boundary anyway. At the boundary 50 A has 4 x 50 =
    # 200 GPU-s -> queue 1, B (queue 0) preempts it: B runs 50..70. A restarts at 70 from scratch
    # (no checkpoints) and ends at 70 + 1000 = 1070.
    b = JobTableBuilder()
    b.add("A", submit=0.0, duration=1000.0, gpus_per_worker=4)
    b.add("B", submit=10.0, duration=20.0, gpus_per_worker=1)
    res = Simulator(Cluster.uniform(1, 4), b.build(), _policy([100.0]), check_every=1).run()
    assert res.first_start.tolist() == [0.0, 50.0]
    assert res.end.tolist() == [1070.0, 70.0]
    assert res.preemptions.tolist() == [1, 0]


def test_no_preemption_within_the_same_queue() -> None:
    # Same jobs with a 1e6 GPU-s threshold: A stays in queue 0 with B -> B waits for A (ends 1000).
    b = JobTableBuilder()
    b.add("A", submit=0.0, duration=1000.0, gpus_per_worker=4)
    b.add("B", submit=10.0, duration=20.0, gpus_per_worker=1)
    res = Simulator(Cluster.uniform(1, 4), b.build(), _policy([1e6]), check_every=1).run()
    assert res.first_start.tolist() == [0.0, 1000.0]
    assert res.preemptions.tolist() == [0, 0]


@pytest.mark.parametrize(
    ("args", "path"),
    [
        ({"thresholds_gpu_s": [100, 50]}, r"plugins\[0\]\.args\.thresholds_gpu_s"),
        ({"thresholds_gpu_s": []}, r"plugins\[0\]\.args\.thresholds_gpu_s"),
        ({"starvation_factor": 0}, r"plugins\[0\]\.args\.starvation_factor"),
        ({"round_s": 60}, r"plugins\[0\]\.args\.round_s"),
    ],
)
def test_bad_args_rejected_with_key_path(args: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError, match=path):
        parse_policy({"name": "x", "actions": ["allocate"], "plugins": [{"name": "tiresias-las", "args": args}]})


@given(cluster=clusters(max_nodes=4), jobs=workloads(max_jobs=20))
def test_bundled_tiresias_policy_on_random_workloads(cluster: Cluster, jobs: JobTable) -> None:
    res = Simulator(cluster, jobs, load_policy("tiresias"), check_every=1).run()
    # every job either finishes or was unschedulable from the start; finished jobs executed at
    # least their demand (no checkpoints: interrupted runs add lost work on top)
    assert np.all((res.status == JobStatus.FINISHED) | (res.status == JobStatus.UNSCHEDULABLE))
    done = res.status == JobStatus.FINISHED
    demanded = jobs.duration * jobs.total_gpus
    assert np.all(res.gpu_seconds[done] >= demanded[done] - 1e-6)
    assert np.allclose(res.gpu_seconds[done & (res.preemptions == 0)], demanded[done & (res.preemptions == 0)])


def _served(runs: list[tuple[int, int, int, int]], factor: float | None) -> tuple[Scheduler, TiresiasLas, float]:
    """Seven jobs under thresholds 100 / 1,000 / 2,500 s, run and stopped as ``runs`` says (job, wait
    before, time run, GPUs), one after another: the scheduler, the plugin and the time the last
    stopped."""
    b = JobTableBuilder()
    for i in range(7):
        b.add(f"j{i}", submit=float(i), duration=1e5)
    s, las = _plugin(b.build(), [100.0, 1000.0, 2500.0], factor)
    t = 0.0
    for job, wait, ran, gpus in runs:
        p = Placement((0,), gpus)
        las.job_started(s.env, job, t + wait, p)
        las.job_stopped(s.env, job, t + wait + ran + 0.1, p, False)
        t += wait + ran + 0.1
    return s, las, t


@given(runs=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 400), st.integers(0, 900), st.integers(1, 8)),
                     max_size=25),
       now=st.integers(0, 3000), factor=st.sampled_from([None, 0.5, 2.0]))
def test_waiting_levels_equal_the_service_rule(runs: list[tuple[int, int, int, int]], now: int,
                                              factor: float | None) -> None:
    """The levels of waiting jobs come from the level counted at their last stop (issue 32); a job
    array that holds a running job takes the general rule (service up to now): both agree on every
    waiting job, whatever runs, promotions and starvation came before."""
    s, las, t = _served(runs, factor)
    las.job_started(s.env, 6, t, Placement((0,), 1))  # job 6 runs
    waiting = np.arange(6)
    at = t + now
    fast = las.levels(waiting, at).tolist()
    general = las.levels(np.arange(7), at).tolist()[:6]
    assert fast == general


@given(runs=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 400), st.integers(0, 900), st.integers(1, 8)),
                     max_size=25),
       now=st.integers(0, 3000), factor=st.sampled_from([None, 0.5, 2.0]), gpus=st.integers(1, 8))
def test_running_levels_equal_the_service_rule(runs: list[tuple[int, int, int, int]], now: int,
                                               factor: float | None, gpus: int) -> None:
    """The levels of an array of running jobs only (a preemption round's pool; no starvation test)
    are those of the same jobs in an array with waiting jobs, and the thresholds over their service
    up to now (jobs that starved while waiting start again: they run, never promoted by the test)."""
    s, las, t = _served(runs, factor)
    running = np.arange(3)
    for job in running.tolist():
        las.job_started(s.env, job, t, Placement((0,), gpus))
    at = t + now
    alone = las.levels(running, at).tolist()
    assert alone == las.levels(np.arange(7), at).tolist()[:3]
    assert alone == [bisect.bisect_right(las._thresholds, v) for v in las.service(running, at).tolist()]


@given(runs=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 400), st.integers(0, 900), st.integers(1, 8)),
                     max_size=25),
       now=st.integers(0, 3000), factor=st.sampled_from([None, 0.5, 2.0]))
def test_lowest_rank_bounds_every_rank(runs: list[tuple[int, int, int, int]], now: int, factor: float | None) -> None:
    """No job, running or waiting, ranks under :meth:`TiresiasLas.lowest` (the preempt action skips a
    round whose pending jobs all have it), and a job served past the last threshold has it."""
    s, las, t = _served(runs, factor)
    las.job_started(s.env, 6, t, Placement((0,), 8))  # job 6 runs, past every threshold after 313 s
    at = t + now
    rank = las.rank(s.env, np.arange(7), at)
    assert float(rank.min()) >= las.lowest()
    assert (float(rank[6]) == las.lowest()) == (now * 8 >= 2500.0)
