"""E-Binpack: the pure node key, placements on small hand-made clusters, invariants, a simulation.

Clusters used below (``Cluster.uniform``: consecutive nodes form a leaf, consecutive leaves a spine):

* ``C12``: 12 nodes x 8 GPUs, 3 nodes per leaf, 2 leaves per spine::

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
from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import BoolArray, Filter
from kant.framework.status import Code, Status
from kant.metrics.summary import summarize
from kant.model.cluster import Cluster
from kant.model.job import JobTableBuilder
from kant.model.state import Placement
from kant.plugins.e_binpack import EMPTY, EXACT, PARTIAL, EBinpack, EBinpackArgs, ebinpack_key, node_class
from kant.plugins.topology import CLUSTER, LEAF, SPINE, best_group, home_tier, node_slots
from kant.sim import simulate

C12 = Cluster.uniform(12, 8, nodes_per_leaf=3, leaves_per_spine=2)


def place(
    cluster: Cluster, job: dict[str, Any], used: dict[int, int], **args: Any
) -> Placement | Status:
    plugin = EBinpack(EBinpackArgs(**args))
    ctx, fw = make_ctx(cluster, [job], used, [plugin])
    return plugin.place(ctx, 0, fw)


# --- the pure key ----------------------------------------------------------------------------------
KEY_CASES = [
    # (capacity, free, request, leaf_free, spine_free, tie_break, expected best position)
    # exact fit: node 1 has free 2 == request -> class EXACT beats node 0 (PARTIAL, 1 left) and node 2 (EMPTY)
    ([8, 8, 8], [3, 2, 8], 2, [0, 0, 0], [0, 0, 0], ("leaf", "spine"), 1),
    # partly used node 1 (free 5 < 8) beats empty nodes 0 and 2 although all leave >= 4 free
    ([8, 8, 8], [8, 5, 8], 1, [0, 0, 0], [0, 0, 0], ("leaf", "spine"), 1),
    # among partly used nodes the one left with fewest free GPUs: free after = 5, 2, 4 -> node 1
    ([8, 8, 8], [6, 3, 5], 1, [0, 0, 0], [0, 0, 0], ("leaf", "spine"), 1),
    # equal class and free-after: the fuller leaf (10 free < 20 free) -> node 1
    ([8, 8], [4, 4], 1, [20, 10], [50, 50], ("leaf", "spine"), 1),
    # equal leaves: the fuller spine (40 < 50) -> node 1
    ([8, 8], [4, 4], 1, [10, 10], [50, 40], ("leaf", "spine"), 1),
    # leaf first: leaf 10 < 20 -> node 0; with spine first: spine 40 < 50 -> node 1
    ([8, 8], [4, 4], 1, [10, 20], [50, 40], ("leaf", "spine"), 0),
    ([8, 8], [4, 4], 1, [10, 20], [50, 40], ("spine", "leaf"), 1),
    # tie-breaks off: everything equal -> lowest position 0
    ([8, 8], [4, 4], 1, [20, 10], [50, 40], (), 0),
    # heterogeneous: an empty 4-GPU node is an exact fit for 4 GPUs (class 0) and beats the partly
    # used 8-GPU node with 6 free (class 1)
    ([8, 4], [6, 4], 4, [0, 0], [0, 0], ("leaf", "spine"), 1),
    # all identical -> lowest position
    ([8, 8, 8], [8, 8, 8], 1, [5, 5, 5], [5, 5, 5], ("leaf", "spine"), 0),
]


@pytest.mark.parametrize(("cap", "free", "req", "lf", "sf", "tb", "best"), KEY_CASES)
def test_ebinpack_key(cap: list[int], free: list[int], req: int, lf: list[int], sf: list[int],
                      tb: tuple[str, ...], best: int) -> None:
    a = [np.array(x, dtype=np.int64) for x in (cap, free, lf, sf)]
    key = ebinpack_key(a[0], a[1], req, a[2], a[3], tb)  # type: ignore[arg-type]
    assert int(np.argmin(key)) == best


def test_node_class() -> None:
    # free == request -> EXACT (also on an empty node); partly used -> PARTIAL; empty -> EMPTY
    cap = np.array([8, 8, 8, 4], dtype=np.int64)
    free = np.array([2, 5, 8, 4], dtype=np.int64)
    assert node_class(cap, free, 2).tolist() == [EXACT, PARTIAL, EMPTY, EMPTY]  # node 3: 4 of 4 free
    assert node_class(cap, free, 4).tolist() == [PARTIAL, PARTIAL, EMPTY, EXACT]


def test_key_large_values_fall_back_to_ranks() -> None:
    # radices beyond 62 bits: the key becomes lexsort ranks and still orders by the tuple
    big = 1 << 40
    cap = np.array([big, big, big], dtype=np.int64)
    free = np.array([big, big - 5, big - 5], dtype=np.int64)
    lf = np.array([big, big, big - 1], dtype=np.int64)
    key = ebinpack_key(cap, free, 1, lf, lf)
    # node 0 is empty (class 2); nodes 1, 2 partly used with equal free-after; node 2's leaf is fuller
    assert key.tolist().index(int(key.min())) == 2
    assert len(set(key.tolist())) == 3


# --- placements on hand-made clusters ----------------------------------------------------------------
PLACE_CASES = [
    # (job, used, args, expected nodes)
    # 1 GPU, node 5 partly used (free 2): fill it rather than break an empty node
    ({"gpus_per_worker": 1}, {5: 6}, {}, (5,)),
    # 2 GPUs: node 2 free 3 (partial), node 5 free 2 (exact) -> node 5
    ({"gpus_per_worker": 2}, {2: 5, 5: 6}, {}, (5,)),
    # 1 GPU, no partly used node (node 3 is full, free 0): an empty node in the fullest leaf;
    # leaf 1 (nodes 3 4 5) has 16 free, the others 24 -> node 4 (lowest index in leaf 1)
    ({"gpus_per_worker": 1}, {3: 8}, {}, (4,)),
    # 1 GPU, only full and empty nodes (nodes 0 6 9 full): all empty nodes tie on class and free-after;
    # leaves 0, 2, 3 have 16 free (leaf 1: 24); spine 0 has 40 free, spine 1 32 -> leaf 2 or 3, lowest
    # index -> node 7
    ({"gpus_per_worker": 1}, {0: 8, 6: 8, 9: 8}, {}, (7,)),
    # 2x8 gang: leaf 0 has 23 free / 2 slots, leaf 1 16 free / 2 slots (node 3 full), leaf 2 24 free / 3
    # slots, leaf 3 20 free / 2 slots (node 9 holds 4) -> fewest free among leaves that fit: leaf 1
    ({"workers": 2, "gpus_per_worker": 8}, {0: 1, 3: 8, 9: 4}, {}, (4, 5)),
    # 4x8 gang: a leaf has 3 nodes, home tier spine. Same state: spine 0 = leaf 0 (slots 2) + leaf 1
    # (slots 2) = 4 slots, 39 free; spine 1 = 3 + 2 = 5 slots, 44 free -> spine 0. Inside it the fuller
    # leaf first: leaf 1 (16 free) nodes 4 5, then leaf 0 (23 free) nodes 1 2
    ({"workers": 4, "gpus_per_worker": 8}, {0: 1, 3: 8, 9: 4}, {}, (4, 5, 1, 2)),
    # 2x2 gang fits on one node: co-located on the exact fit for 4 GPUs (node 7 free 4) -> (7, 7)
    ({"workers": 2, "gpus_per_worker": 2}, {7: 4, 2: 6}, {}, (7, 7)),
    # 2x6 gang (12 GPUs): one worker per node. Leaf 0: node 0 free 6 (exact), node 1 free 7, node 2
    # empty -> 3 slots, 21 free; other leaves 24 free -> leaf 0; order: node 0 (exact), node 1
    # (partial, 1 left), node 2 (empty)
    ({"workers": 2, "gpus_per_worker": 6}, {0: 2, 1: 1}, {}, (0, 1)),
]


@pytest.mark.parametrize(("job", "used", "args", "expected"), PLACE_CASES)
def test_place(job: dict[str, Any], used: dict[int, int], args: dict[str, Any], expected: tuple[int, ...]) -> None:
    result = place(C12, job, used, **args)
    assert isinstance(result, Placement), str(result)
    assert result.nodes == expected


# every leaf has exactly one empty node: 1 GPU used on nodes 0 1 3 4 6 7 9 10 (empty: 2 5 8 11)
ONE_EMPTY_PER_LEAF = {n: 1 for n in (0, 1, 3, 4, 6, 7, 9, 10)}


def test_hard_waits_soft_crosses_leaf() -> None:
    gang = {"workers": 2, "gpus_per_worker": 8}
    hard = place(C12, gang, ONE_EMPTY_PER_LEAF, topology="hard")
    assert isinstance(hard, Status) and hard.code == Code.UNSCHEDULABLE and hard.plugin == "e-binpack"
    # soft: no leaf fits; spines 0 and 1 both have 2 slots and 44 free -> spine 0; leaves 0 and 1 tie
    # at 22 free -> node order 2, 5
    soft = place(C12, gang, ONE_EMPTY_PER_LEAF, topology="soft")
    assert isinstance(soft, Placement) and soft.nodes == (2, 5)
    # max_tier leaf in soft mode: leaf only -> waits too
    capped = place(C12, gang, ONE_EMPTY_PER_LEAF, topology="soft", max_tier="leaf")
    assert isinstance(capped, Status) and capped.code == Code.UNSCHEDULABLE


def test_soft_crosses_spines_as_last_resort() -> None:
    # only nodes 5 and 11 empty (different spines); everything else holds 1 GPU
    used = {n: 1 for n in range(12) if n not in (5, 11)}
    gang = {"workers": 2, "gpus_per_worker": 8}
    assert place(C12, gang, used, topology="soft").nodes == (5, 11)  # type: ignore[union-attr]
    assert isinstance(place(C12, gang, used, topology="hard"), Status)
    assert isinstance(place(C12, gang, used, topology="soft", max_tier="spine"), Status)


def test_off_ignores_topology() -> None:
    # off: whole cluster in single-node key order: empty nodes, fullest leaf first. Node 3 full ->
    # leaf 1 has 16 free: nodes 4, 5 (then others). soft would pick the same leaf here, so use a state
    # where leaf 1 cannot hold the gang: nodes 3 full and 4 holds 1 -> leaf 1 free 15, 1 slot (node 5).
    # off takes node 5 first (fullest leaf) then node 0 (leaf 0, 24 free, lowest index): crosses a leaf.
    gang = {"workers": 2, "gpus_per_worker": 8}
    used = {3: 8, 4: 1}
    assert place(C12, gang, used, topology="off").nodes == (5, 0)  # type: ignore[union-attr]
    assert place(C12, gang, used, topology="soft").nodes == (0, 1)  # type: ignore[union-attr]


def test_no_room_is_unschedulable() -> None:
    used = {n: 8 for n in range(12)}
    r = place(C12, {"gpus_per_worker": 1}, used)
    assert isinstance(r, Status) and r.code == Code.UNSCHEDULABLE
    used = {n: 8 for n in range(11)}  # one empty node: room for 1 worker of 8, gang needs 2
    r = place(C12, {"workers": 2, "gpus_per_worker": 8}, used)
    assert isinstance(r, Status) and "room now for 1 worker" in r.reason


class BanNodes(Filter):
    NAME = "test-ban"

    def __init__(self, banned: list[int]) -> None:
        super().__init__()
        self.banned = banned

    def filter(self, ctx: CycleContext, job: int, mask: BoolArray) -> BoolArray:
        out = mask.copy()
        out[self.banned] = False
        return out


def test_filters_are_honoured() -> None:
    # without the filter the 1-GPU job goes to partly used node 5; with node 5 banned, to partly used node 8
    plugin = EBinpack()
    ctx, fw = make_ctx(C12, [{"gpus_per_worker": 1}], {5: 6, 8: 4}, [plugin, BanNodes([5])])
    r = plugin.place(ctx, 0, fw)
    assert isinstance(r, Placement) and r.nodes == (8,)


def test_feasible_max_tier() -> None:
    # home tiers on C12: 3x8 fits a leaf (3 nodes); 4x8 needs a spine (6 nodes); 7x8 only the cluster
    b = JobTableBuilder()
    for w in (3, 4, 7):
        b.add(f"g{w}", submit=0, duration=1, workers=w, gpus_per_worker=8)
    env = SchedulerEnv(C12, b.build())
    assert [home_tier(env, j) for j in range(3)] == [LEAF, SPINE, CLUSTER]
    capped = EBinpack(EBinpackArgs(topology="hard", max_tier="leaf"))
    assert [capped.feasible(env, j).ok for j in range(3)] == [True, False, False]
    assert [EBinpack(EBinpackArgs(max_tier="spine")).feasible(env, j).ok for j in range(3)] == [True, True, False]
    assert all(EBinpack(EBinpackArgs(topology="off", max_tier="leaf")).feasible(env, j).ok for j in range(3))


def test_bad_args_rejected_with_key_path() -> None:
    doc = {"name": "x", "actions": ["allocate"], "plugins": [{"name": "e-binpack", "args": {"topology": "strict"}}]}
    with pytest.raises(ConfigError, match=r"plugins\[0\]\.args\.topology"):
        parse_policy(doc)
    doc["plugins"] = [{"name": "e-binpack", "args": {"tie_break": ["leaf", "leaf"]}}]
    with pytest.raises(ConfigError, match=r"plugins\[0\]\.args\.tie_break"):
        parse_policy(doc)
    doc["plugins"] = [{"name": "e-binpack", "args": {"weights": 1}}]
    with pytest.raises(ConfigError, match=r"plugins\[0\]\.args\.weights"):
        parse_policy(doc)


# --- invariants ---------------------------------------------------------------------------------------
@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Cluster, dict[str, Any], dict[int, int], str]:
    n = draw(st.integers(2, 16))
    cap = draw(st.sampled_from([4, 8]))
    cluster = Cluster.uniform(n, cap, nodes_per_leaf=draw(st.integers(1, 4)), leaves_per_spine=draw(st.integers(1, 3)))
    used = {i: u for i in range(n) if (u := draw(st.integers(0, cap))) > 0}
    g = draw(st.integers(1, cap))
    w = draw(st.integers(1, 6))
    mode = draw(st.sampled_from(["soft", "hard", "off"]))
    return cluster, {"workers": w, "gpus_per_worker": g}, used, mode


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants(case: tuple[Cluster, dict[str, Any], dict[int, int], str]) -> None:
    cluster, job, used, mode = case
    plugin = EBinpack(EBinpackArgs(topology=mode))  # type: ignore[arg-type]
    ctx, fw = make_ctx(cluster, [job], used, [plugin])
    w, g = job["workers"], job["gpus_per_worker"]
    free_before = ctx.state.free.copy()
    slots = int((free_before // g).sum())
    result = plugin.place(ctx, 0, fw)
    assert np.array_equal(ctx.state.free, free_before)  # placing does not touch the state
    if isinstance(result, Status):
        assert result.code == Code.UNSCHEDULABLE
        if mode != "hard":
            assert slots < w  # soft/off place whenever the cluster has room
        return
    assert len(result.nodes) == w and result.gpus == g  # all workers, none more
    ctx.state.allocate(0, result)  # raises on any over-booking
    ctx.state.check()
    _, leaves, spines = result.span(cluster)
    tier = home_tier(ctx.env, 0)
    if mode == "hard":
        assert tier != LEAF or leaves == 1
        assert tier != SPINE or spines == 1
    elif mode == "soft" and tier == LEAF and leaves > 1:
        # soft crossed a leaf: then no leaf had room (checked on the state before placing)
        ctx.state.release(0)
        assert best_group(ctx, LEAF, node_slots(ctx, 0, fw.fit_mask(ctx, 0)), w) == -1


# --- a small simulation ---------------------------------------------------------------------------------
def test_simulation_gangs_stay_in_a_leaf() -> None:
    # 8 nodes x 8 GPUs, 2 nodes per leaf, 2 leaves per spine. t=0: a 1-GPU job (long) lands on node 0;
    # t=1: a 2x8 gang. Leaf 0 has one empty node (node 1) -> e-binpack takes leaf 1 (nodes 2, 3);
    # volcano-binpack scores all empty nodes 100 and takes the lowest indices 1, 2: crossing a leaf.
    cluster = Cluster.uniform(8, 8, nodes_per_leaf=2, leaves_per_spine=2)
    b = JobTableBuilder()
    b.add("small", submit=0, duration=100, gpus_per_worker=1)
    b.add("gang", submit=1, duration=10, workers=2, gpus_per_worker=8)
    jobs = b.build()
    ours = simulate(cluster, jobs, load_policy("kant-nobackfill"), check_every=1)
    theirs = simulate(cluster, jobs, load_policy("volcano-binpack"), check_every=1)
    assert summarize(ours).topology.cross_leaf == 0
    assert summarize(theirs).topology.cross_leaf == 1
    assert ours.span_leaves.tolist() == [1, 1] and theirs.span_leaves.tolist() == [1, 2]


def test_simulation_random_jobs_conserve() -> None:
    rng = np.random.default_rng(7)
    cluster = Cluster.uniform(16, 8, nodes_per_leaf=4, leaves_per_spine=2)
    b = JobTableBuilder()
    for i in range(300):
        w, g = [(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (4, 8), (2, 6), (6, 8)][int(rng.integers(8))]
        b.add(f"j{i}", submit=float(i), duration=float(rng.integers(1, 200)), workers=w, gpus_per_worker=g)
    jobs = b.build()
    res = simulate(cluster, jobs, load_policy("kant-nobackfill"), check_every=1)  # check_every: state.check()
    m = summarize(res)
    assert m.counts.finished == 300  # every job fits the cluster, so all finish
    again = simulate(cluster, jobs, load_policy("kant-nobackfill"))
    assert np.array_equal(res.first_start, again.first_start)  # deterministic


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from([("leaf", "spine"), ("spine", "leaf"), ("spine",), ()]))
def test_fast_key_orders_like_pure_key(case: tuple[Cluster, dict[str, Any], dict[int, int], str],
                                       tie_break: tuple[str, ...]) -> None:
    # the plugin builds the key with precomputed multipliers; it must order nodes exactly like
    # ebinpack_key (the documented rule), ties included
    cluster, job, used, _ = case
    plugin = EBinpack(EBinpackArgs(tie_break=tie_break))  # type: ignore[arg-type]
    ctx, fw = make_ctx(cluster, [job], used, [plugin])
    g = job["gpus_per_worker"]
    nodes = np.flatnonzero(fw.fit_mask(ctx, 0))
    if len(nodes) == 0:
        return
    st_ = ctx.state
    pure = ebinpack_key(cluster.gpus[nodes], st_.free[nodes], g, st_.leaf_free[cluster.leaf[nodes]],
                        st_.spine_free[cluster.spine[nodes]], tie_break)  # type: ignore[arg-type]
    fast = plugin._node_key(ctx, nodes, g)
    assert np.argsort(fast, kind="stable").tolist() == np.argsort(pure, kind="stable").tolist()
    assert np.array_equal(fast[:, None] == fast[None, :], pure[:, None] == pure[None, :])
