"""Per-GPU-type guarantees and limits in the tree of queues (Kueue's resource flavors): the file,
admission and reclaim by type, and the Hypothesis property that no queue exceeds any per-type limit
(nor its GPU-total limits) at any instant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.config import load_policy
from kant.errors import ConfigError
from kant.model import Cluster, JobTable, JobTableBuilder, NodeSpec
from kant.plugins.queues import Queues, QueuesArgs, TypedQueues, load_queues, with_queues
from kant.scheduler import CycleResult
from kant.sim import Simulator
from strategies import GPU_TYPES, clusters, workloads

TYPED = """\
queues:
  - name: org
    children:
      - {name: a, guaranteed: {V100: 16}, borrowing_limit: {V100: 0}, tenants: [t1]}
      - {name: b, guaranteed: {K80: 8}, tenants: [t2]}
"""


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "queues.yaml"
    path.write_text(text)
    return path


def _cluster() -> Cluster:
    """16 V100 and 16 K80, two 8-GPU nodes each."""
    return Cluster.from_nodes([NodeSpec(f"v{i}", "V100", 8) for i in range(2)] +
                              [NodeSpec(f"k{i}", "K80", 8) for i in range(2)])


def _jobs(*specs: tuple[str, float, float, str | None]) -> JobTable:
    """(tenant, submit, duration, GPU type): one 8-GPU worker each."""
    b = JobTableBuilder(source="test")
    for i, (tenant, submit, duration, gpu_type) in enumerate(specs):
        b.add(f"j{i}", submit=submit, duration=duration, gpus_per_worker=8, tenant=tenant, gpu_type=gpu_type,
              estimate=duration)
    return b.build()


@pytest.mark.parametrize(
    "text, words",
    [
        ("queues: [{name: a, guaranteed: {V100: -2}}]", "queues[0]: queue a: guaranteed.V100: must be a whole number"),
        ("queues: [{name: a, borrowing_limit: {V100: 1.5}}]", "queue a: borrowing_limit.V100: must be a whole"),
        ("queues: [{name: a, guaranteed: {}}]", "queue a: guaranteed: an empty mapping"),
        ("queues: [{name: a, guaranteed: {V100: 4}, lending_limit: {V100: 8}}]",
         "queue a: lending_limit.V100 (8) is above its guarantee (4)"),
        ("queues: [{name: a, guaranteed: [4]}]", "queue a: guaranteed: must be a whole number of GPUs >= 0 or a"),
    ],
)
def test_bad_per_type_amounts_are_one_line_errors_naming_file_queue_and_key(
    tmp_path: Path, text: str, words: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_queues(_file(tmp_path, text))
    message = str(err.value)
    assert words in message and "\n" not in message and str(tmp_path / "queues.yaml") in message


def test_a_type_the_cluster_lacks_or_too_many_of_a_type_is_named_when_the_run_starts(tmp_path: Path) -> None:
    path = _file(tmp_path, "queues: [{name: o, children: [{name: a, guaranteed: {H100: 8}}]}]")
    policy = with_queues(load_policy("fifo"), load_queues(path))
    with pytest.raises(ConfigError) as err:
        Simulator(_cluster(), _jobs(("a", 0, 10, None)), policy)
    assert str(err.value) == (f"{path}: queue a: guaranteed.H100: no GPU type H100 in the cluster "
                              "(types: V100, K80)")
    path = _file(tmp_path, "queues: [{name: a, guaranteed: {V100: 24}}]")
    policy = with_queues(load_policy("fifo"), load_queues(path))
    with pytest.raises(ConfigError, match="the queues guarantee 24 V100 GPUs; the cluster has 16"):
        Simulator(_cluster(), _jobs(("a", 0, 10, None)), policy)


def test_with_queues_uses_the_typed_plugin_only_with_per_type_limits(tmp_path: Path) -> None:
    typed = with_queues(load_policy("kant"), load_queues(_file(tmp_path, TYPED)))
    assert typed.plugins[0].cls is TypedQueues
    plain = with_queues(load_policy("kant"), load_queues(_file(tmp_path, "queues: [{name: a, guaranteed: 8}]")))
    assert plain.plugins[0].cls is Queues
    # the GPU total of a per-type guarantee is the types' sum
    args = load_queues(_file(tmp_path, TYPED))
    assert [c.guaranteed for c in args.defs()[0].children] == [16, 8]


def test_per_type_max_and_reclaim_by_type(tmp_path: Path) -> None:
    policy = with_queues(load_policy("fifo"), load_queues(_file(tmp_path, TYPED)))
    # b (t2) runs two V100 jobs from t=0 (V100 is a's: b borrows it); a (t1) asks for V100 at t=10;
    # a's third V100 job is over its V100 max of 16 (borrowing limit 0)
    jobs = _jobs(("t2", 0, 100, "V100"), ("t2", 0, 100, "V100"), ("t1", 10, 100, "V100"),
                 ("t1", 10, 100, "V100"), ("t1", 11, 100, "V100"))
    sim = Simulator(_cluster(), jobs, policy)
    sim.run(until=5.0)
    assert sorted(sim.scheduler.running) == [0, 1]
    sim.run(until=12.0)
    # both of b's V100 jobs were reclaimed for a, which now holds its 16
    assert sorted(sim.scheduler.running) == [2, 3]
    assert sim.scheduler.why_pending(4) == (
        "[queues] the queues take 16 of the cluster's 16 V100 GPUs, used or reserved (the job needs 8)"
    )
    report = sim.plugin(Queues).report()
    assert report["a"]["per_type"]["V100"]["in_use"] == 16.0
    assert report["b"]["reclaim_evictions"] == 2


def test_a_job_of_any_type_is_kept_off_the_types_its_queue_may_not_take(tmp_path: Path) -> None:
    policy = with_queues(load_policy("fifo"), load_queues(_file(tmp_path, TYPED)))
    # a may hold no more than 16 V100: its third untyped job goes to the K80s (the filter)
    jobs = _jobs(("t1", 0, 100, None), ("t1", 0, 100, None), ("t1", 0, 100, None))
    sim = Simulator(_cluster(), jobs, policy)
    sim.run(until=1.0)
    cluster = sim.scheduler.cluster
    types = sorted(cluster.gpu_type_names[int(cluster.gpu_type[p.nodes[0]])]
                   for p in sim.scheduler.state.allocations.values())
    assert len(types) == 3 and types.count("V100") <= 2


# --- the property -------------------------------------------------------------------------------------
@st.composite
def typed_trees(draw: st.DrawFn, cluster: Cluster) -> dict[str, Any]:
    """Two organisations of two leaves (tenants t1, t2, t3, x); each leaf's guarantee is a number or per
    GPU type (of the types the cluster has), with random per-type borrowing and lending limits."""
    caps = {t: int(cluster.gpus[cluster.gpu_type == cluster.gpu_type_code(t)].sum())
            for t in GPU_TYPES if cluster.gpu_type_code(t) >= 0}

    def some(top: int) -> int | None:
        return draw(st.one_of(st.none(), st.integers(0, max(top, 0))))

    orgs = []
    for k, tenants in enumerate((("t1", "t2"), ("t3", "x"))):
        children = []
        for i, tenant in enumerate(tenants):
            per = {t: draw(st.integers(0, c // 4)) for t, c in caps.items()}
            leaf: dict[str, Any] = {"name": f"q{k}{i}", "tenants": [tenant]}
            if draw(st.booleans()):
                leaf["guaranteed"] = per
                lend = {t: v for t, v in ((t, some(g)) for t, g in per.items()) if v is not None}
                if lend:
                    leaf["lending_limit"] = lend
            else:
                leaf["guaranteed"] = sum(per.values())
                leaf["lending_limit"] = some(sum(per.values()))
            borrow = {t: v for t, v in ((t, some(c)) for t, c in caps.items()) if v is not None}
            if borrow:
                leaf["borrowing_limit"] = borrow
            children.append(leaf)
        org: dict[str, Any] = {"name": f"org{k}", "children": children}
        borrow = {t: v for t, v in ((t, some(c)) for t, c in caps.items()) if v is not None}
        if borrow and draw(st.booleans()):
            org["borrowing_limit"] = borrow
        orgs.append(org)
    return {"queues": orgs}


def _checked(sim: Simulator, check: Any) -> None:
    original = sim.scheduler.cycle

    def cycle(now: float) -> CycleResult:
        result = original(now)
        check(now)
        return result

    sim.scheduler.cycle = cycle  # type: ignore[method-assign]


@settings(max_examples=40, deadline=None)
@given(cluster=clusters(), jobs=workloads(), data=st.data(), policy=st.sampled_from(["fifo", "kant"]))
def test_no_queue_exceeds_any_per_type_limit_at_any_instant(
    cluster: Cluster, jobs: JobTable, data: st.DataObject, policy: str
) -> None:
    doc = data.draw(typed_trees(cluster))
    args = QueuesArgs.model_validate(doc)
    sim = Simulator(cluster, jobs, with_queues(load_policy(policy), args))
    plugin = sim.plugin(Queues)
    assert plugin is not None
    assert len(plugin.types) == len(args.type_names())
    n_jobs = len(jobs)

    def check(now: float) -> None:
        assert plugin.tree.violations() == []
        for tree in plugin.types.values():
            assert tree.violations() == [], tree.unit
        # per type, the usage is the running jobs' GPUs of that type, recounted from the cluster state
        for k, tree in plugin.types.items():
            use = np.zeros(len(tree))
            for job, p in sim.scheduler.state.allocations.items():
                if job < n_jobs:
                    leaf = int(plugin.leaf[int(sim.jobs.tenant[job])])
                    if leaf < 0:
                        continue
                    g = sum(p.gpus * c for node, c in p.per_node.items() if int(cluster.gpu_type[node]) == k)
                    for q in tree.path[leaf]:
                        use[q] += g
            assert np.allclose(use, tree.usage)
            # and nobody holds more of the type than its guarantee + borrowing limit
            assert np.all(tree.usage[1:] <= (tree.guaranteed + tree.borrowing_limit)[1:] + 1e-9)

    _checked(sim, check)
    sim.run()


@st.composite
def typed_whole_node_jobs(draw: st.DrawFn) -> JobTable:
    b = JobTableBuilder(source="hypothesis")
    for i in range(draw(st.integers(1, 30))):
        b.add(f"j{i}", submit=float(draw(st.integers(0, 30))), duration=float(draw(st.integers(1, 40))),
              gpus_per_worker=8, gpu_type=draw(st.sampled_from(["V100", "K80"])), priority=draw(st.integers(0, 2)),
              tenant=draw(st.sampled_from(["t1", "t2", "t3", "t4"])))
    return b.build()


@settings(max_examples=40, deadline=None)
@given(v100=st.integers(1, 3), k80=st.integers(1, 3), jobs=typed_whole_node_jobs(), data=st.data())
def test_a_per_type_guarantee_comes_back_within_one_reclaim_round(
    v100: int, k80: int, jobs: JobTable, data: st.DataObject
) -> None:
    """Whole-node jobs of one GPU type on 8-GPU nodes of two types, per-type guarantees in whole
    nodes: after every cycle (one allocate and one reclaim round), no pending job is within its leaf's
    guarantee in the GPU total and in its type's tree."""
    cluster = Cluster.from_nodes([NodeSpec(f"v{i}", "V100", 8) for i in range(v100)] +
                                 [NodeSpec(f"k{i}", "K80", 8) for i in range(k80)])
    left = {"V100": v100, "K80": k80}
    leaves = []
    for i, tenant in enumerate(("t1", "t2", "t3", "t4")):
        per = {}
        for t in ("V100", "K80"):
            n = data.draw(st.integers(0, left[t]))
            left[t] -= n
            if n:
                per[t] = 8 * n
        leaves.append({"name": f"q{i}", "tenants": [tenant], **({"guaranteed": per} if per else {})})
    doc = {"queues": [{"name": "o1", "children": leaves[:2]}, {"name": "o2", "children": leaves[2:]}]}
    sim = Simulator(cluster, jobs, with_queues(load_policy("fifo"), QueuesArgs.model_validate(doc)))
    plugin = sim.plugin(Queues)
    assert plugin is not None

    def check(now: float) -> None:
        pending = np.asarray(sorted(sim.scheduler.queue), dtype=np.int64)
        if len(pending):
            waiting = pending[plugin.entitled(sim.jobs.tenant[pending], sim.jobs.total_gpus[pending],
                                              sim.jobs.gpu_type[pending])]
            assert len(waiting) == 0, (now, waiting.tolist(), plugin.report())

    _checked(sim, check)
    sim.run()
