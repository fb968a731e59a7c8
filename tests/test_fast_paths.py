"""The class-index placement paths give exactly the node-scan answers (docs/performance.md).

``ClusterState.classes`` indexes up GPU nodes by (GPU type, capacity, free GPUs). ``Framework.
place_workers`` (``ClassScore`` scores) and E-Binpack use it instead of scanning every
node; setting ``state.classes = None`` forces the vectorised node scan. Each property below places the
same job both ways on random clusters and loads and requires the same placement (or the same
failure), and checks the index against a recount after random changes.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import Plugin
from kant.framework.queue import PendingQueue, ShapeIndex
from kant.framework.runner import Framework
from kant.framework.statement import Statement
from kant.model.cluster import Cluster, NodeSpec
from kant.model.job import JobTableBuilder
from kant.model.state import ClusterState, Placement
from kant.plugins.best_fit import BestFit
from kant.plugins.binpack import Binpack
from kant.plugins.e_binpack import EBinpack, EBinpackArgs
from kant.plugins.spread import Spread
from kant.plugins.topology import Topology, TopologyArgs
from strategies import clusters

POLICIES: dict[str, Any] = {
    "none": lambda: [],
    "binpack": lambda: [Binpack()],
    "spread": lambda: [Spread()],
    "best-fit": lambda: [BestFit()],
    "binpack+spread": lambda: [Binpack(weight=2.0), Spread(weight=1.0)],  # weighted sum, ties between classes
    "topology+binpack": lambda: [Topology(TopologyArgs(mode="soft")), Binpack()],  # restrict -> scan; else index
    "e-binpack": lambda: [EBinpack(EBinpackArgs())],
    "e-binpack-spine": lambda: [EBinpack(EBinpackArgs(tie_break=("spine",)))],
    "e-binpack-no-tie": lambda: [EBinpack(EBinpackArgs(tie_break=()))],
    "e-binpack-off": lambda: [EBinpack(EBinpackArgs(topology="off"))],
}


def build(cluster: Cluster, job: dict[str, Any], used: list[int], down: list[bool],
          plugins: list[Plugin]) -> tuple[CycleContext, Framework]:
    """Job 0 is ``job``; filler jobs hold ``used[n]`` GPUs on node n; nodes with ``down`` fail."""
    b = JobTableBuilder()
    b.add("job", submit=0.0, duration=1.0, **job)
    for n, u in enumerate(used):
        b.add(f"fill{n}", submit=0.0, duration=1.0, gpus_per_worker=max(u, 1))
    jobs = b.build()
    env = SchedulerEnv(cluster, jobs)
    fw = Framework(env, plugins)
    state = ClusterState(cluster)
    for n, u in enumerate(used):
        if down[n]:
            state.set_down(n)
        elif u:
            state.allocate(1 + n, Placement((n,), u))
    index = ShapeIndex()
    index.extend(env.jobs)
    queue = PendingQueue(env.jobs, index, fw.static_key)
    return CycleContext(env, state, queue, 0.0, {}, Statement(state)), fw


@st.composite
def labelled_clusters(draw: st.DrawFn) -> Cluster:
    """Nodes with explicit leaf and spine labels in any order (a leaf's nodes need not be consecutive)."""
    many = draw(st.booleans())  # more leaves than E-Binpack's plain-Python leaf scan handles
    n = draw(st.integers(1, 80 if many else 12))
    in_order = many and draw(st.booleans())
    nodes = []
    for i in range(n):
        leaf = i // 2 if in_order else draw(st.integers(0, 47 if many else 3))
        nodes.append(NodeSpec(f"n{i}", draw(st.sampled_from(["A", "B"])), draw(st.sampled_from([2, 4, 8])),
                              leaf=f"leaf{leaf}", spine=f"spine{leaf % 2}"))
    return Cluster.from_nodes(nodes)


@st.composite
def cases(draw: st.DrawFn) -> tuple[Cluster, dict[str, Any], list[int], list[bool]]:
    cluster = draw(st.one_of(clusters(max_nodes=12), labelled_clusters()))
    caps = cluster.gpus.tolist()
    used = [draw(st.integers(0, c)) for c in caps]
    down = [draw(st.integers(0, 9)) == 0 for _ in caps]
    job = {
        "workers": draw(st.integers(1, 4)),
        "gpus_per_worker": draw(st.sampled_from([1, 1, 2, 4, 8])),
        "gpu_type": draw(st.sampled_from([None, None, "A", "B", "A|B"])),
    }
    return cluster, job, used, down


def outcome(result: Placement | object) -> object:
    return result if isinstance(result, Placement) else str(result)


@settings(max_examples=400, deadline=None)
@given(cases(), st.sampled_from(sorted(POLICIES)))
def test_index_places_like_the_node_scan(case: tuple[Cluster, dict[str, Any], list[int], list[bool]],
                                         policy: str) -> None:
    cluster, job, used, down = case
    ctx, fw = build(cluster, job, used, down, POLICIES[policy]())
    ctx.state.check()  # the index agrees with a recount
    fast = fw.place(ctx, 0)
    ctx.state.check()  # tentative moves of a gang were undone
    ctx.state.classes = None  # force the vectorised node scan
    slow = fw.place(ctx, 0)
    assert outcome(fast) == outcome(slow)


@settings(max_examples=60, deadline=None)
@given(clusters(max_nodes=10), st.lists(st.tuples(st.integers(0, 9), st.integers(0, 3), st.integers(1, 8)),
                                        max_size=40))
def test_index_stays_in_step_with_changes(cluster: Cluster, ops: list[tuple[int, int, int]]) -> None:
    """Random allocations, releases, failures and repairs; ``check`` recounts everything after each."""
    state = ClusterState(cluster)
    held: dict[int, int] = {}  # job -> node
    for k, (node_pick, op, gpus) in enumerate(ops):
        node = node_pick % cluster.n_nodes
        if op == 0 and state.fits(node, gpus):
            state.allocate(k, Placement((node,), gpus))
            held[k] = node
        elif op == 1 and held:
            state.release(min(held))
            del held[min(held)]
        elif op == 2 and node not in held.values():
            state.set_down(node)
        elif op == 3:
            state.set_up(node)
        state.check()


# 4 nodes x 8 GPUs, one node per leaf, two leaves per spine: node n is leaf n, spine n // 2.
C4 = Cluster.uniform(4, 8, nodes_per_leaf=1, leaves_per_spine=2)
TIE_CASES = [
    # (policy, used GPUs per node, expected node for one 1-GPU worker)
    # nodes 0, 2, 3 are partly used with 4 free (same class); leaf free 4 = 4 = 4, spine free 12 (spine 0:
    # nodes 0+1 = 4 + 8) vs 8 (spine 1: 4 + 4) -> the fuller spine 1, lowest index there: node 2
    ("e-binpack", [4, 0, 4, 4], 2),
    ("e-binpack-spine", [4, 0, 4, 4], 2),
    # without tie-break terms the lowest index of the class wins: node 0
    ("e-binpack-no-tie", [4, 0, 4, 4], 0),
    # binpack: nodes 0, 2, 3 score alike (4 + 1 = 5 of 8 used after placing), lowest index: node 0
    ("binpack", [4, 0, 4, 4], 0),
    # spread: the empty node 1 (7 of 8 free after placing) beats the others (3 of 8)
    ("spread", [4, 0, 4, 4], 1),
    # binpack: node 3 (6 used -> 7 of 8 after) beats nodes 0 and 2 (4 used -> 5 of 8)
    ("binpack", [4, 0, 4, 6], 3),
]


def test_tie_breaks_match_the_rule() -> None:
    for policy, used, expected in TIE_CASES:
        ctx, fw = build(C4, {"workers": 1, "gpus_per_worker": 1}, used, [False] * 4, POLICIES[policy]())
        fast = fw.place(ctx, 0)
        ctx.state.classes = None
        slow = fw.place(ctx, 0)
        assert isinstance(fast, Placement) and fast.nodes == (expected,), (policy, used, fast)
        assert fast == slow


def test_head_is_the_lowest_index_of_a_class() -> None:
    # 4 nodes x 8 GPUs (one type): class id = free GPUs. Allocate 3 on nodes 2 and 0 -> class 5 = {0, 2}
    # (head 0), class 8 = {1, 3} (head 1); release node 0 -> class 5 = {2}, class 8 = {0, 1, 3} (head 0).
    state = ClusterState(Cluster.uniform(4, 8))
    classes = state.classes
    assert classes is not None
    state.allocate(10, Placement((2,), 3))
    state.allocate(11, Placement((0,), 3))
    assert (classes.head(5), classes.head(8), classes.head(0)) == (0, 1, -1)
    state.release(11)
    assert (classes.head(5), classes.head(8)) == (2, 0)
    assert classes.nodes(8) == [0, 1, 3] and classes.count[8] == 3
    assert state.what_if(state.free).classes is None  # a planning copy has no index


def test_tie_breaks_on_many_leaves() -> None:
    """Over 32 leaves E-Binpack picks the leaf with NumPy; the same node as the node scan and the rule.
    40 nodes x 8 GPUs, one node per leaf, 4 leaves per spine: nodes 5, 17 and 30 have 4 free (one
    class, equal leaf keys); nodes 16, 18 and 19 are full, so node 17's spine is the fullest."""
    used = [0] * 40
    for n in (5, 17, 30):
        used[n] = 4
    for n in (16, 18, 19):
        used[n] = 8
    in_order = Cluster.uniform(40, 8, nodes_per_leaf=1, leaves_per_spine=4)
    # the same leaves and spines, but leaf ids in reverse node order (a leaf's id is not its position)
    reverse = Cluster.from_nodes([NodeSpec(f"n{i}", "A", 8, leaf=f"leaf{39 - i:02d}", spine=f"spine{(39 - i) // 4}")
                                  for i in range(40)])
    for cluster, expected in ((in_order, 17), (reverse, 17)):
        for policy in ("e-binpack", "e-binpack-spine"):
            ctx, fw = build(cluster, {"workers": 1, "gpus_per_worker": 4}, used, [False] * 40, POLICIES[policy]())
            fast = fw.place(ctx, 0)
            ctx.state.classes = None
            slow = fw.place(ctx, 0)
            assert isinstance(fast, Placement) and fast.nodes == (expected,), (policy, fast)
            assert fast == slow


@settings(max_examples=400, deadline=None)
@given(cases(), st.sampled_from(["e-binpack", "e-binpack-spine", "e-binpack-no-tie", "e-binpack-off"]),
       st.booleans())
def test_one_worker_placed_without_the_room_test_as_with_it(
        case: tuple[Cluster, dict[str, Any], list[int], list[bool]], policy: str, scan: bool) -> None:
    """E-Binpack's ``one_worker_by_room`` (issue 32): the runner asks it at once for a one-worker job,
    without ``room_for`` first; the outcome (the placement, or the status itself) is the one the room
    test then the placer give, on the class index and on the node scan."""
    cluster, job, used, down = case
    job = {**job, "workers": 1}
    ctx, fw = build(cluster, job, used, down, POLICIES[policy]())
    if scan:
        ctx.state.classes = None
    placer = fw.placer
    assert placer is not None and placer.one_worker_by_room
    fast = fw.place(ctx, 0)
    placer.one_worker_by_room = False
    slow = fw.place(ctx, 0)
    assert fast == slow
    assert isinstance(fast, Placement) == (fw.room_for(ctx, 0) >= 1)
