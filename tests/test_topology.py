"""Topology-aware placement: home tiers, best groups, the ``topology`` Place plugin in hard and soft
mode, the ``topology-score`` Score plugin, invariants, and cross-leaf shares in simulations.

``C12``: 12 nodes x 8 GPUs, 3 nodes per leaf, 2 leaves per spine::

    spine 0: leaf 0 = nodes 0 1 2,  leaf 1 = nodes 3 4 5
    spine 1: leaf 2 = nodes 6 7 8,  leaf 3 = nodes 9 10 11

``used`` maps node -> GPUs already allocated there (by filler jobs).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cycle_helpers import make_ctx
from kant.config.policy import load_policy, parse_policy
from kant.errors import ConfigError
from kant.framework.context import SchedulerEnv
from kant.framework.status import Code, Status
from kant.metrics.summary import summarize
from kant.model.cluster import Cluster, NodeSpec
from kant.model.job import JobTableBuilder
from kant.model.state import Placement
from kant.plugins.binpack import Binpack
from kant.plugins.topology import (
    CLUSTER,
    LEAF,
    SPINE,
    Topology,
    TopologyArgs,
    TopologyScore,
    best_group,
    home_tier,
    lexicographic_key,
    node_slots,
)
from kant.sim import ExecutionModel, simulate

C12 = Cluster.uniform(12, 8, nodes_per_leaf=3, leaves_per_spine=2)
ONE_EMPTY_PER_LEAF = {n: 1 for n in (0, 1, 3, 4, 6, 7, 9, 10)}  # empty nodes: 2 5 8 11


# --- home tier ---------------------------------------------------------------------------------------
# mixed: one spine; leaf 0 = nodes 0 1 (A) + 2 (B), leaf 1 = node 3 (A) + 4 5 (B); 8 GPUs each
MIXED = Cluster.from_nodes(
    [NodeSpec(f"n{i}", t, 8, leaf=f"l{i // 3}", spine="s") for i, t in enumerate("AABABB")]
)

HOME_CASES = [
    # (cluster, workers, gpus, gpu type, expected tier)
    (C12, 1, 8, None, LEAF),
    (C12, 3, 8, None, LEAF),  # 3 nodes per leaf: exactly a leaf
    (C12, 4, 8, None, SPINE),  # > 3 nodes, <= 6 (a spine)
    (C12, 6, 8, None, SPINE),
    (C12, 7, 8, None, CLUSTER),  # > 6 nodes: no spine holds it
    (C12, 3, 6, None, LEAF),  # 6-GPU workers: 1 per node, 3 per leaf
    (C12, 6, 4, None, LEAF),  # 4-GPU workers: 2 per node, 6 per leaf
    (C12, 7, 4, None, SPINE),  # 7 > 6 per leaf, <= 12 per spine
    (C12, 13, 4, None, CLUSTER),  # 13 > 12 per spine
    (MIXED, 2, 8, "A", LEAF),  # leaf 0 has 2 A nodes
    (MIXED, 3, 8, "A", SPINE),  # A nodes: 2 in leaf 0, 1 in leaf 1 -> only the spine holds 3
    (MIXED, 3, 8, None, LEAF),  # any type: a leaf has 3 nodes
]


@pytest.mark.parametrize(("cluster", "w", "g", "t", "tier"), HOME_CASES)
def test_home_tier(cluster: Cluster, w: int, g: int, t: str | None, tier: int) -> None:
    b = JobTableBuilder()
    b.add("j", submit=0, duration=1, workers=w, gpus_per_worker=g, gpu_type=t)
    assert home_tier(SchedulerEnv(cluster, b.build()), 0) == tier


# --- best group ----------------------------------------------------------------------------------------
GROUP_CASES = [
    # (used, workers, tier, expected group)
    # 2x8: leaf slots 2 (node 0 full), 3, 3, 3; leaf 0 has 16 free, the fewest -> leaf 0
    ({0: 8}, 2, LEAF, 0),
    # 3x8: leaf 0 now has only 2 slots; leaves 1-3 tie at 24 free; spine 0 (40 free) is fuller than
    # spine 1 (48) -> leaf 1
    ({0: 8}, 3, LEAF, 1),
    # one empty node per leaf: no leaf has 2 slots -> -1
    (ONE_EMPTY_PER_LEAF, 2, LEAF, -1),
    # spines: spine 0 = 2 slots / 44 free, spine 1 = 2 slots / 44 free -> lowest index 0
    (ONE_EMPTY_PER_LEAF, 2, SPINE, 0),
    # node 5 full as well: spine 0 has 1 slot -> spine 1
    ({**ONE_EMPTY_PER_LEAF, 5: 8}, 2, SPINE, 1),
]


@pytest.mark.parametrize(("used", "w", "tier", "group"), GROUP_CASES)
def test_best_group(used: dict[int, int], w: int, tier: int, group: int) -> None:
    ctx, fw = make_ctx(C12, [{"workers": w, "gpus_per_worker": 8}], used, [])
    slots = node_slots(ctx, 0, fw.fit_mask(ctx, 0))
    assert best_group(ctx, tier, slots, w) == group


def test_lexicographic_key_orders_like_tuples() -> None:
    a = np.array([1, 0, 1, 0], dtype=np.int64)
    b = np.array([0, 5, 0, 2], dtype=np.int64)
    key = lexicographic_key([a, b])
    # tuples (1,0) (0,5) (1,0) (0,2): order 3, 1, then 0 and 2 equal
    assert np.argsort(key, kind="stable").tolist() == [3, 1, 0, 2]
    assert key[0] == key[2]


# --- the topology Place plugin (with binpack scoring inside the group) ------------------------------------
TOPO_CASES = [
    # (job, used, mode, expected nodes or None for "waits")
    # single worker: unchanged binpack -> the partly used node 5
    ({"gpus_per_worker": 1}, {5: 6}, "hard", (5,)),
    # 2x8: leaf 1 has the fewest free GPUs among leaves with 2 slots (16: node 3 full) -> nodes 4 5
    ({"workers": 2, "gpus_per_worker": 8}, {0: 1, 3: 8, 9: 4}, "hard", (4, 5)),
    ({"workers": 2, "gpus_per_worker": 8}, {0: 1, 3: 8, 9: 4}, "soft", (4, 5)),
    # one empty node per leaf: hard waits; soft takes spine 0 (tie with spine 1 at 44 free, lower
    # index), binpack inside: the only fitting nodes 2 and 5
    ({"workers": 2, "gpus_per_worker": 8}, ONE_EMPTY_PER_LEAF, "hard", None),
    ({"workers": 2, "gpus_per_worker": 8}, ONE_EMPTY_PER_LEAF, "soft", (2, 5)),
    # only nodes 5 and 11 empty: soft crosses spines, hard waits
    ({"workers": 2, "gpus_per_worker": 8}, {n: 1 for n in range(12) if n not in (5, 11)}, "soft", (5, 11)),
    ({"workers": 2, "gpus_per_worker": 8}, {n: 1 for n in range(12) if n not in (5, 11)}, "hard", None),
    # 7x8 has home tier cluster: placed anywhere even in hard mode; binpack ties -> lowest indices
    ({"workers": 7, "gpus_per_worker": 8}, {}, "hard", (0, 1, 2, 3, 4, 5, 6)),
    # 4x8 home tier spine; node 0 holds 1 -> spine 0 has 5 slots / 47 free, spine 1 6 / 48 -> spine 0;
    # binpack inside spine 0 (all empty fitting nodes score 100) -> lowest indices 1 2 3 4
    ({"workers": 4, "gpus_per_worker": 8}, {0: 1}, "hard", (1, 2, 3, 4)),
]


@pytest.mark.parametrize(("job", "used", "mode", "expected"), TOPO_CASES)
def test_topology_place(job: dict[str, Any], used: dict[int, int], mode: str, expected: tuple[int, ...] | None) -> None:
    plugin = Topology(TopologyArgs(mode=mode))  # type: ignore[arg-type]
    ctx, fw = make_ctx(C12, [job], used, [Binpack(), plugin])
    result = plugin.place(ctx, 0, fw)
    if expected is None:
        assert isinstance(result, Status) and result.code == Code.UNSCHEDULABLE and result.plugin == "topology"
    else:
        assert isinstance(result, Placement), str(result)
        assert result.nodes == expected


def test_topology_soft_max_tier_caps_the_fallback() -> None:
    plugin = Topology(TopologyArgs(mode="soft", max_tier="spine"))
    used = {n: 1 for n in range(12) if n not in (5, 11)}
    ctx, fw = make_ctx(C12, [{"workers": 2, "gpus_per_worker": 8}], used, [Binpack(), plugin])
    assert isinstance(plugin.place(ctx, 0, fw), Status)


def test_topology_feasible() -> None:
    b = JobTableBuilder()
    for w in (1, 3, 4, 7):
        b.add(f"g{w}", submit=0, duration=1, workers=w, gpus_per_worker=8)
    env = SchedulerEnv(C12, b.build())
    # home tiers: 1x8 single worker (always ok), 3x8 leaf, 4x8 spine, 7x8 cluster
    for max_tier, ok in (("leaf", [1, 1, 0, 0]), ("spine", [1, 1, 1, 0]), ("cluster", [1, 1, 1, 1])):
        for mode in ("hard", "soft"):
            p = Topology(TopologyArgs(mode=mode, max_tier=max_tier))  # type: ignore[arg-type]
            assert [int(p.feasible(env, j).ok) for j in range(4)] == ok, (mode, max_tier)


def test_topology_bad_args() -> None:
    doc = {"name": "x", "actions": ["allocate"], "plugins": [{"name": "topology", "args": {"mode": "strict"}}]}
    with pytest.raises(ConfigError, match=r"plugins\[0\]\.args\.mode"):
        parse_policy(doc)
    doc["plugins"] = [{"name": "topology", "args": {"max_tier": "rack"}}]
    with pytest.raises(ConfigError, match=r"plugins\[0\]\.args\.max_tier"):
        parse_policy(doc)


# --- topology-score --------------------------------------------------------------------------------------
def test_topology_score() -> None:
    # used {0: 8, 1: 8}: leaf 0 has 8 free of 24, spine 0 40 free; other leaves 24 free.
    # gang 2x8 = 16 GPUs:
    #   node 2 (leaf 0): 100 x (0.5 x [8 >= 16] + 0.25 x [40 >= 16] + 0.25 x (1 - 8/24)) = 25 + 16.67 = 41.67
    #   node 3 (leaf 1): 100 x (0.5 + 0.25 + 0.25 x 0) = 75;  node 6 (leaf 2, spine 1): 75
    # single 1-GPU job: every leaf fits it -> node 2: 100 x (0.5 + 0.25 + 0.25 x 2/3) = 91.67
    ctx, _ = make_ctx(C12, [{"workers": 2, "gpus_per_worker": 8}, {"gpus_per_worker": 1}], {0: 8, 1: 8}, [])
    nodes = np.array([2, 3, 6], dtype=np.int64)
    s = TopologyScore().score(ctx, 0, nodes)
    assert s.tolist() == pytest.approx([25 + 100 / 6, 75.0, 75.0])
    assert TopologyScore().score(ctx, 1, nodes[:1]).tolist() == pytest.approx([75 + 100 / 6])


# --- invariants --------------------------------------------------------------------------------------------
@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Cluster, dict[str, Any], dict[int, int], str]:
    n = draw(st.integers(2, 16))
    cap = draw(st.sampled_from([4, 8]))
    cluster = Cluster.uniform(n, cap, nodes_per_leaf=draw(st.integers(1, 4)), leaves_per_spine=draw(st.integers(1, 3)))
    used = {i: u for i in range(n) if (u := draw(st.integers(0, cap))) > 0}
    job = {"workers": draw(st.integers(2, 6)), "gpus_per_worker": draw(st.integers(1, cap))}
    return cluster, job, used, draw(st.sampled_from(["soft", "hard"]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_topology_invariants(case: tuple[Cluster, dict[str, Any], dict[int, int], str]) -> None:
    cluster, job, used, mode = case
    plugin = Topology(TopologyArgs(mode=mode))  # type: ignore[arg-type]
    ctx, fw = make_ctx(cluster, [job], used, [Binpack(), plugin])
    w, g = job["workers"], job["gpus_per_worker"]
    slots = int((ctx.state.free // g).sum())
    result = plugin.place(ctx, 0, fw)
    if isinstance(result, Status):
        assert result.code == Code.UNSCHEDULABLE
        assert mode == "hard" or slots < w  # soft places whenever the cluster has room
        return
    assert len(result.nodes) == w
    ctx.state.allocate(0, result)  # raises on over-booking
    ctx.state.check()
    _, leaves, spines = result.span(cluster)
    tier = home_tier(ctx.env, 0)
    if mode == "hard":
        assert tier != LEAF or leaves == 1
        assert tier != SPINE or spines == 1
    elif tier == LEAF and leaves > 1:
        # soft crossed a leaf: then no leaf had room (checked on the state before placing)
        ctx.state.release(0)
        assert best_group(ctx, LEAF, node_slots(ctx, 0, fw.fit_mask(ctx, 0)), w) == -1


# --- simulations: cross-leaf shares ------------------------------------------------------------------------
def _mixed_jobs(n: int, seed: int) -> Any:
    rng = np.random.default_rng(seed)
    b = JobTableBuilder()
    shapes = [(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (3, 8), (2, 4), (2, 6)]  # every gang fits in a leaf
    for i in range(n):
        w, g = shapes[int(rng.integers(len(shapes)))]
        b.add(f"j{i}", submit=float(rng.integers(0, 2000)), duration=float(rng.integers(10, 500)),
              workers=w, gpus_per_worker=g)
    return b.build().sorted_by_submit()


def test_topology_hard_policy_never_crosses_a_leaf() -> None:
    # 16 nodes x 8 GPUs, 4 nodes per leaf: every gang above (at most 3 x 8) fits in one leaf, so under
    # topology-hard the share of multi-node gangs crossing a leaf is exactly 0; volcano-binpack on the
    # same jobs crosses leaves (the assertion that makes this test able to fail).
    cluster = Cluster.uniform(16, 8, nodes_per_leaf=4, leaves_per_spine=2)
    jobs = _mixed_jobs(400, 3)
    ex = ExecutionModel(cross_leaf_penalty=0.1, cross_spine_penalty=0.25)
    hard = summarize(simulate(cluster, jobs, load_policy("topology-hard"), execution=ex, check_every=1))
    base = summarize(simulate(cluster, jobs, load_policy("volcano-binpack"), execution=ex))
    assert hard.counts.finished == 400 and base.counts.finished == 400
    assert hard.topology.multi_node > 0
    assert hard.topology.cross_leaf == 0 and hard.topology.cross_leaf_share == 0.0
    assert hard.topology.cross_spine_share == 0.0
    assert base.topology.cross_leaf_share is not None and base.topology.cross_leaf_share > 0


def test_topology_soft_policy_runs() -> None:
    cluster = Cluster.uniform(16, 8, nodes_per_leaf=4, leaves_per_spine=2)
    jobs = _mixed_jobs(200, 5)
    m = summarize(simulate(cluster, jobs, load_policy("topology-soft"), check_every=1))
    assert m.counts.finished == 200
