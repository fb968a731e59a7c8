"""Hierarchical queues (kant.model.queues, the queues plugin, reclaim with a tree) and fair share over
time (the fair-share plugin): the queues file, admission and its reasons, reclaim in Kueue's order, and
Hypothesis properties: no queue exceeds its limits at any instant, a guarantee comes back within one
reclaim round, fair-share order follows decayed usage."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.config import load_policy
from kant.errors import ConfigError
from kant.framework.context import SchedulerEnv
from kant.model import Cluster, JobTable, JobTableBuilder
from kant.model.state import Placement
from kant.plugins.fair_share import FairShare
from kant.plugins.queues import Queues, QueuesArgs, load_queues, with_queues
from kant.scheduler import CycleResult
from kant.sim import Simulator
from strategies import clusters, queue_trees, workloads

TREE = """\
queues:
  - name: org-a
    guaranteed: 16
    children:
      - {name: a1, guaranteed: 8, tenants: [t1]}
      - {name: a2, guaranteed: 8, borrowing_limit: 8, tenants: [t2]}
  - name: org-b
    guaranteed: 16
    lending_limit: 8
    children:
      - {name: b1, guaranteed: 16, tenants: [t3]}
"""


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "queues.yaml"
    path.write_text(text)
    return path


def _jobs(*specs: tuple[str, float, float, int]) -> JobTable:
    """(tenant, submit, duration, priority): one 8-GPU worker each."""
    b = JobTableBuilder(source="test")
    for i, (tenant, submit, duration, priority) in enumerate(specs):
        b.add(
            f"j{i}",
            submit=submit,
            duration=duration,
            gpus_per_worker=8,
            tenant=tenant,
            priority=priority,
            estimate=duration,
        )
    return b.build()


# --- the file ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, words",
    [
        ("queues: [{name: a, guaranteed: 8, borowing_limit: 2}]", "queues[0].borowing_limit: Extra inputs"),
        ("queues: [{name: a, guaranteed: -1}]", "queues[0]: queue a: guaranteed: must be a whole number of GPUs >= 0"),
        ("queues: [{name: a, guaranteed: 4, lending_limit: 8}]", "queues[0]: queue a: lending_limit (8) is"),
        ("queues: [{name: a}, {name: a}]", "queues[1].name: queue name 'a' is used twice"),
        (
            "queues: [{name: a, tenants: [x]}, {name: b, tenants: [x]}]",
            "queues[1].tenants: tenant 'x' is in two leaves",
        ),
        ("queues: [{name: a, tenants: [x], children: [{name: b}]}]", "queues[0]: queue a has children"),
        ("queues:\n  - name: a\n   guaranteed: 3\n", "line 3"),
        ("[1, 2]", "a queues file must be a mapping"),
    ],
)
def test_bad_queues_files_are_one_line_errors(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_queues(_file(tmp_path, text))
    message = str(err.value)
    assert words in message and "\n" not in message and str(tmp_path / "queues.yaml") in message


def test_guarantees_that_do_not_nest_are_named_when_the_run_starts(tmp_path: Path) -> None:
    policy = with_queues(load_policy("fifo"), load_queues(_file(tmp_path, TREE)))
    with pytest.raises(ConfigError, match="the queues guarantee 32 GPUs; the cluster has 16"):
        Simulator(Cluster.uniform(2, 8), _jobs(("t1", 0, 10, 0)), policy)
    nested = "queues: [{name: o, guaranteed: 8, children: [{name: a, guaranteed: 16}]}]"
    policy = with_queues(load_policy("fifo"), load_queues(_file(tmp_path, nested)))
    with pytest.raises(ConfigError, match="queue o: guaranteed 8 is below its children's 16"):
        Simulator(Cluster.uniform(4, 8), _jobs(("a", 0, 10, 0)), policy)


def test_with_queues_puts_kueues_order_first_and_reclaim_after_allocate(tmp_path: Path) -> None:
    args = load_queues(_file(tmp_path, TREE + "fair_share: {half_life_s: 3600}\n"))
    policy = with_queues(load_policy("kant"), args)
    assert [p.cls.NAME for p in policy.plugins] == ["queues", "fair-share", "priority", "fifo", "e-binpack"]
    assert [a.cls.NAME for a in policy.actions] == ["allocate", "reclaim", "backfill"]
    with pytest.raises(ConfigError, match="queues replace it"):
        with_queues(load_policy("capacity-quota"), args)


# --- admission and reclaim -------------------------------------------------------------------------
def test_admission_names_the_queue_and_reclaim_takes_lent_capacity_back(tmp_path: Path) -> None:
    policy = with_queues(load_policy("fifo"), load_queues(_file(tmp_path, TREE)))
    # 32 GPUs. a2 (t2) runs 6 jobs from t=0, a1 (t1) 1 from t=10, b1 (t3) 3 from t=20.
    jobs = _jobs(*[("t2", 0, 100, 0)] * 6, ("t1", 10, 100, 0), *[("t3", 20, 100, 0)] * 3)
    sim = Simulator(Cluster.uniform(4, 8), jobs, policy)
    sim.run(until=5.0)
    # a2 may hold 16 (guarantee 8 + borrowing limit 8): two run, the rest wait with the queue's reason
    assert sorted(sim.scheduler.running) == [0, 1]
    assert sim.scheduler.why_pending(2) == (
        "[queues] queue a2 at its max of 16 GPUs (guarantee 8 + borrowing limit 8; holds 16, the job needs 8)"
    )
    sim.run(until=15.0)
    # a1 gets its 8 (org-a may hold 32 - org-b's 8 never lent = 24)
    assert 6 in sim.scheduler.running
    result = sim.run()
    # t=20: b1 starts one job in the 8 GPUs left; its second (within its 16) reclaims the 8 org-a
    # borrows from org-b: a2 borrows (16 > 8) and so does org-a (24 > 16), a1 does not (8): the
    # victim is a2's, the most recently started (both at 0: the lower row, job 0)
    assert (result.first_start[7], result.first_start[8]) == (20.0, 20.0)
    assert result.preemptions.tolist() == [1, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    report = sim.plugin(Queues).report()
    assert (report["a2"]["reclaim_evictions"], report["b1"]["reclaims_for"]) == (1, 1)


def test_reclaim_takes_from_the_nearest_cohort_first(tmp_path: Path) -> None:
    tree = (
        "queues:\n"
        "  - {name: org-a, children: [{name: a1, guaranteed: 8, tenants: [t1]},"
        " {name: a2, guaranteed: 8, tenants: [t2]}]}\n"
        "  - {name: org-b, children: [{name: b1, guaranteed: 16, tenants: [t3]}]}\n"
    )
    policy = with_queues(load_policy("fifo"), load_queues(_file(tmp_path, tree)))
    # 40 GPUs, 32 guaranteed. a2 holds 16 (8 borrowed inside org-a), b1 24 (8 borrowed from the
    # unguaranteed 8) at low priority; then a1 asks for 8 of its own
    jobs = _jobs(("t2", 0, 100, 5), ("t2", 2, 100, 5), *[("t3", 1, 100, 0)] * 3, ("t1", 10, 100, 5))
    sim = Simulator(Cluster.uniform(5, 8), jobs, policy)
    result = sim.run()
    # Kueue's order: within the cohort first (a2, org-a), before priority (b1's jobs are lower) and
    # start time (b1's started at 1, before a2's second at 2): a2's most recent job (1) goes
    assert result.first_start[5] == 10.0
    assert result.preemptions.tolist() == [0, 1, 0, 0, 0, 0]


# --- properties ------------------------------------------------------------------------------------
def _checked(sim: Simulator, check: Any) -> list[int]:
    original = sim.scheduler.cycle
    count = [0]

    def cycle(now: float) -> CycleResult:
        result = original(now)
        check(now)
        count[0] += 1
        return result

    sim.scheduler.cycle = cycle  # type: ignore[method-assign]
    return count


@settings(max_examples=40, deadline=None)
@given(cluster=clusters(), jobs=workloads(), data=st.data(), policy=st.sampled_from(["fifo", "kant"]))
def test_no_queue_exceeds_its_limits_at_any_instant(
    cluster: Cluster, jobs: JobTable, data: st.DataObject, policy: str
) -> None:
    doc = data.draw(queue_trees(cluster.total_gpus, tenants=("t1", "t2", "t3", "x")))
    sim = Simulator(cluster, jobs, with_queues(load_policy(policy), QueuesArgs.model_validate(doc)))
    tree = sim.plugin(Queues)
    assert tree is not None
    n_jobs = len(jobs)

    def check(now: float) -> None:
        assert tree.tree.violations() == []
        # the usage is the running jobs' GPUs, recounted from the cluster state
        use = np.zeros(len(tree.tree))
        for job, p in sim.scheduler.state.allocations.items():
            if job < n_jobs:
                leaf = tree.leaf[int(sim.jobs.tenant[job])]
                for q in tree.tree.path[int(leaf)]:
                    use[q] += p.total_gpus
        assert np.allclose(use, tree.tree.usage)

    _checked(sim, check)
    sim.run()


@st.composite
def whole_node_jobs(draw: st.DrawFn) -> JobTable:
    b = JobTableBuilder(source="hypothesis")
    for i in range(draw(st.integers(1, 30))):
        b.add(
            f"j{i}",
            submit=float(draw(st.integers(0, 30))),
            duration=float(draw(st.integers(1, 40))),
            gpus_per_worker=8,
            priority=draw(st.integers(0, 2)),
            tenant=draw(st.sampled_from(["t1", "t2", "t3", "t4"])),
        )
    return b.build()


@settings(max_examples=40, deadline=None)
@given(nodes=st.integers(1, 6), jobs=whole_node_jobs(), data=st.data())
def test_a_guarantee_comes_back_within_one_reclaim_round(nodes: int, jobs: JobTable, data: st.DataObject) -> None:
    """Whole-node jobs on 8-GPU nodes, guarantees in whole nodes: after every cycle (one allocate and
    one reclaim round), no pending job's leaf is within its guarantee with it."""
    doc = data.draw(queue_trees(8 * nodes, step=8))
    sim = Simulator(Cluster.uniform(nodes, 8), jobs, with_queues(load_policy("fifo"), QueuesArgs.model_validate(doc)))
    plugin = sim.plugin(Queues)
    assert plugin is not None

    def check(now: float) -> None:
        pending = np.asarray(sorted(sim.scheduler.queue), dtype=np.int64)
        if len(pending):
            waiting = pending[plugin.entitled(sim.jobs.tenant[pending], sim.jobs.total_gpus[pending])]
            assert len(waiting) == 0, (now, waiting.tolist(), plugin.report())

    _checked(sim, check)
    sim.run()


def _decayed(intervals: list[tuple[int, float, float, float]], leaf: int, now: float, h: float) -> float:
    """GPU-seconds of ``leaf`` up to ``now``, each second weighted 2^(-age/h), integrated by hand:
    g h / ln 2 (2^(-(now - min(end, now))/h) - 2^(-(now - start)/h))."""
    total = 0.0
    for q, g, s, e in intervals:
        if q == leaf and s < now:
            total += g * h / math.log(2) * (2 ** (-(now - min(e, now)) / h) - 2 ** (-(now - s) / h))
    return total


@settings(max_examples=60, deadline=None)
@given(weights=st.lists(st.integers(1, 4), min_size=2, max_size=5), data=st.data())
def test_fair_share_order_follows_decayed_usage(weights: list[int], data: st.DataObject) -> None:
    n = len(weights)
    doc = {
        "queues": [{"name": f"q{i}", "weight": w} for i, w in enumerate(weights)],
        "fair_share": {"half_life_s": 50.0},
    }
    b = JobTableBuilder(source="test")
    spans = data.draw(
        st.lists(
            st.tuples(st.integers(0, n - 1), st.sampled_from([1, 2, 8]), st.integers(0, 200), st.integers(1, 200)),
            min_size=1,
            max_size=12,
        )
    )
    for k, (q, g, s, d) in enumerate(spans):
        b.add(f"j{k}", submit=float(s), duration=float(d), gpus_per_worker=g, tenant=f"q{q}")
    jobs = b.build()
    env = SchedulerEnv(Cluster.uniform(4, 8), jobs)
    plugin = FairShare(QueuesArgs.model_validate(doc))
    plugin.setup(env)
    events = sorted(
        [(float(s), 1, k) for k, (_, _, s, _) in enumerate(spans)]
        + [(float(s + d), 0, k) for k, (_, _, s, d) in enumerate(spans)]
    )
    for t, kind, k in events:
        p = Placement((0,), spans[k][1])
        if kind:
            plugin.job_started(env, k, t, p)
        else:
            plugin.job_stopped(env, k, t, p, True)
    now = 450.0
    leaves = [plugin.tree.index[f"q{i}"] for i in range(n)]
    intervals = [(leaves[q], float(g), float(s), float(s + d)) for q, g, s, d in spans]
    decayed = np.asarray([_decayed(intervals, leaf, now, 50.0) for leaf in leaves])
    usage = plugin.usage(now)[leaves]
    assert np.allclose(usage * decayed.sum(), decayed, rtol=1e-9, atol=1e-9)
    share = np.asarray(weights, dtype=np.float64) / sum(weights)
    assert np.allclose(plugin.share[leaves], share)
    # the order of the queues' jobs is the order of decayed usage over share (ties aside)
    keys = plugin.keys(
        env,
        np.asarray(
            [
                next(k for k, sp in enumerate(spans) if sp[0] == i) if any(sp[0] == i for sp in spans) else -1
                for i in range(n)
            ],
            dtype=np.int64,
        )[[any(sp[0] == i for sp in spans) for i in range(n)]],
        now,
    )
    used = [i for i in range(n) if any(sp[0] == i for sp in spans)]
    ratio = decayed[used] / share[used]
    for a in range(len(used)):
        for c in range(len(used)):
            if ratio[a] < ratio[c] * (1 - 1e-9):
                assert keys[a] < keys[c]


def test_kant_simulate_with_queues(tmp_path: Path) -> None:
    """``kant simulate --queues``: the queues apply to the policy (the Philly VCs as leaves under one
    organisation; a tenant in no leaf is unschedulable with the reason); a bad file is one line, exit 2."""
    import json

    from click.testing import CliRunner

    from kant.cli.main import cli

    doc = {
        "queues": [
            {"name": "all", "children": [{"name": "6214e9", "guaranteed": 256}, {"name": "11cb48", "guaranteed": 128}]}
        ]
    }
    good = tmp_path / "q.yaml"
    good.write_text(json.dumps(doc))
    r = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--limit",
            "300",
            "--cluster",
            "philly",
            "--queues",
            str(good),
            "--no-report",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert r.exit_code == 0, r.output
    counts = json.loads((tmp_path / "o" / "result.json").read_text())["metrics"]["counts"]
    reasons = counts["unschedulable_reasons"]
    assert counts["finished"] > 0 and counts["unschedulable"] == sum(reasons.values()) > 0
    assert all("is in no queue of the queues file" in why for why in reasons)
    bad = _file(tmp_path, "queues: [{name: a, guaranteed: 8, borowing_limit: 2}]")
    r = CliRunner().invoke(cli, ["simulate", "--queues", str(bad), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "queues[0].borowing_limit: Extra inputs" in r.output
    assert "Traceback" not in r.output


def test_a_job_no_queue_state_could_admit_is_unschedulable_with_the_reason(tmp_path: Path) -> None:
    # b keeps all 24 of its guarantee (lending limit 0), so a may take at most 32 - 24 = 8 GPUs, even
    # though its own limits (guarantee 8, no borrowing limit) allow more
    tree = "queues: [{name: a, guaranteed: 8}, {name: b, guaranteed: 24, lending_limit: 0}]\n"
    policy = with_queues(load_policy("fifo"), load_queues(_file(tmp_path, tree)))
    b = JobTableBuilder(source="test")
    b.add("big", submit=0, duration=10, workers=2, gpus_per_worker=8, tenant="a")
    b.add("fits", submit=0, duration=10, workers=1, gpus_per_worker=8, tenant="a")
    result = Simulator(Cluster.uniform(4, 8), b.build(), policy).run()
    assert result.reasons[0] == (
        "[queues] needs 16 GPUs; queue a may take at most 8 (its limits, its parents' "
        "and what other queues keep reserved)"
    )
    assert result.first_start[1] == 0.0


@settings(max_examples=30, deadline=None)
@given(cluster=clusters(), jobs=workloads(), data=st.data(), policy=st.sampled_from(["fifo", "kant"]))
def test_the_walk_by_shape_gives_the_order_of_the_full_sort(
    cluster: Cluster, jobs: JobTable, data: st.DataObject, policy: str
) -> None:
    """The queues' and fair share's keys are equal within a shape (SHAPE_KEYED): a walk that computes
    them once per shape and merges the shapes yields the jobs in the order of the full sort."""
    doc = data.draw(queue_trees(cluster.total_gpus, tenants=("t1", "t2", "t3", "x")))
    doc["fair_share"] = {"half_life_s": float(data.draw(st.sampled_from([10, 1000])))}
    sim = Simulator(cluster, jobs, with_queues(load_policy(policy), QueuesArgs.model_validate(doc)))
    fw, queue = sim.scheduler.framework, sim.scheduler.queue
    assert fw.shape_slots == (0, 1) and queue.index.by_tenant
    walks = [0]

    def check(now: float) -> None:
        key = fw.dynamic_key(now)
        assert key is not None
        by_shape = list(queue.walk(key))
        assert by_shape == list(queue._walk_ordered(key.order, ()))
        walks[0] += bool(by_shape)

    _checked(sim, check)
    sim.run()
