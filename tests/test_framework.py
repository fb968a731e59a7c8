"""Framework: queue order and shapes, placement by score, gangs, feasibility reasons, statements."""

from __future__ import annotations

import numpy as np
import pytest

from kant.config import parse_policy
from kant.framework.statement import Statement
from kant.framework.status import Code, Status
from kant.model import Cluster, ClusterState, JobTableBuilder, NodeSpec, Placement
from kant.plugins.binpack import most_allocated
from kant.plugins.spread import least_allocated
from kant.scheduler import Scheduler


def _policy(*plugins: str, blocking: bool = False) -> object:
    return parse_policy(
        {
            "name": "t",
            "actions": [{"name": "allocate", "args": {"blocking": blocking}}],
            "plugins": [{"name": p} for p in plugins],
        }
    )


@pytest.mark.parametrize(
    ("capacity", "free", "req", "binpack", "spread"),
    [
        # binpack = 100 * (cap - (free - req)) / cap ; spread = 100 * (free - req) / cap
        (8, 8, 1, 100 * 1 / 8, 100 * 7 / 8),  # empty node: 12.5 / 87.5
        (8, 2, 2, 100.0, 0.0),  # exact fit fills the node
        (4, 3, 1, 100 * 2 / 4, 100 * 2 / 4),  # 50 / 50
        (2, 2, 1, 50.0, 50.0),
    ],
)
def test_score_functions(capacity: int, free: int, req: int, binpack: float, spread: float) -> None:
    cap, fr = np.array([capacity]), np.array([free])
    assert most_allocated(cap, fr, req)[0] == pytest.approx(binpack)
    assert least_allocated(cap, fr, req)[0] == pytest.approx(spread)


def _jobs(*requests: tuple[int, int], submit: float = 0.0, gpu_type: str | None = None):  # type: ignore[no-untyped-def]
    b = JobTableBuilder()
    for i, (w, g) in enumerate(requests):
        b.add(f"j{i}", submit=submit + i, duration=10.0, workers=w, gpus_per_worker=g, gpu_type=gpu_type)
    return b.build()


def _prefill(s: Scheduler, used: list[int]) -> None:
    for node, gpus in enumerate(used):
        if gpus:
            s.state.allocate(1000 + node, Placement((node,), gpus=gpus))


@pytest.mark.parametrize(
    ("plugin", "used", "expected_node"),
    [
        # free = 8 - used = [6, 3, 8]; a 2-GPU worker:
        # binpack: (8-(6-2))/8=.5, (8-(3-2))/8=.875, (8-(8-2))/8=.25 -> node 1
        ("binpack", [2, 5, 0], 1),
        # spread: (6-2)/8=.5, (3-2)/8=.125, (8-2)/8=.75 -> node 2
        ("spread", [2, 5, 0], 2),
        # equal scores everywhere -> lowest node index wins
        ("binpack", [0, 0, 0], 0),
    ],
)
def test_single_worker_goes_to_best_scored_node(plugin: str, used: list[int], expected_node: int) -> None:
    s = Scheduler(_policy("fifo", plugin), Cluster.uniform(3, 8), _jobs((1, 2)))  # type: ignore[arg-type]
    _prefill(s, used)
    assert s.submit(0, 0.0).ok
    res = s.cycle(0.0)
    assert [(j, p.nodes) for j, p in res.started] == [(0, (expected_node,))]


def test_gang_all_or_nothing() -> None:
    # two nodes with 3 free GPUs each: a 3 x 2-GPU gang needs 3 slots but only 1 + 1 exist -> waits
    c = Cluster.uniform(2, 4)
    s = Scheduler(_policy("fifo", "binpack"), c, _jobs((3, 2), (2, 2)))  # type: ignore[arg-type]
    _prefill(s, [1, 1])
    s.submit(0, 0.0)
    s.submit(1, 0.0)
    res = s.cycle(1.0)
    # job 0 cannot get all workers, so it gets none; job 1 (2 x 2) fits one worker per node
    assert [j for j, _ in res.started] == [1]
    assert sorted(res.started[0][1].nodes) == [0, 1]
    assert 0 in s.queue and 0 not in s.state
    assert "room now for" in s.why_pending(0)
    s.state.check()


def test_gang_stacks_workers_on_one_node_with_binpack() -> None:
    # binpack keeps scoring the node it just used higher, so 4 x 2 GPUs land on node 0 together
    s = Scheduler(_policy("fifo", "binpack"), Cluster.uniform(2, 8), _jobs((4, 2)))  # type: ignore[arg-type]
    s.submit(0, 0.0)
    ((_, placement),) = s.cycle(0.0).started
    assert placement.nodes == (0, 0, 0, 0)


def test_blocking_fifo_stops_at_head() -> None:
    s = Scheduler(_policy("fifo", blocking=True), Cluster.uniform(1, 8), _jobs((1, 8), (1, 1)))  # type: ignore[arg-type]
    _prefill(s, [4])
    s.submit(0, 0.0)
    s.submit(1, 0.0)
    assert s.cycle(0.0).started == []  # the 8-GPU head blocks the 1-GPU job behind it
    s2 = Scheduler(_policy("fifo"), Cluster.uniform(1, 8), _jobs((1, 8), (1, 1)))  # type: ignore[arg-type]
    _prefill(s2, [4])
    s2.submit(0, 0.0)
    s2.submit(1, 0.0)
    assert [j for j, _ in s2.cycle(0.0).started] == [1]  # non-blocking skips ahead


def test_priority_order_then_submit_then_row() -> None:
    b = JobTableBuilder()
    b.add("low-early", submit=0, duration=1, priority=0)
    b.add("high-late", submit=5, duration=1, priority=9)
    b.add("low-late", submit=5, duration=1, priority=0)
    b.add("low-late-2", submit=5, duration=1, priority=0)
    jobs = b.build()
    s = Scheduler(_policy("priority", "fifo"), Cluster.uniform(1, 2), jobs)  # type: ignore[arg-type]
    for j in range(4):
        s.submit(j, 5.0)
    started = [j for j, _ in s.cycle(5.0).started]
    assert started == [1, 0]  # priority 9 first, then the earliest low-priority job
    assert list(s.queue.walk()) == [2, 3]  # same submit time: row order breaks the tie


def test_unresolvable_jobs_name_the_reason() -> None:
    nodes = [NodeSpec("a", "A100", 8), NodeSpec("b", "A100", 4)]
    c = Cluster.from_nodes(nodes)
    b = JobTableBuilder()
    b.add("too-wide", submit=0, duration=1, workers=1, gpus_per_worker=16)
    b.add("too-many", submit=0, duration=1, workers=3, gpus_per_worker=4)  # slots: 8//4 + 4//4 = 3 -> fits
    b.add("too-many-8", submit=0, duration=1, workers=2, gpus_per_worker=8)  # slots: 1 + 0 = 1 < 2
    b.add("wrong-type", submit=0, duration=1, gpu_type="H100")
    s = Scheduler(_policy("fifo"), c, b.build())  # type: ignore[arg-type]
    st0, st1, st2, st3 = (s.submit(j, 0.0) for j in range(4))
    assert st0.code == Code.UNRESOLVABLE and "room for only 0 worker(s) of 16 GPU(s)" in st0.reason
    assert st1.ok
    assert st2.code == Code.UNRESOLVABLE and "only 1 worker(s)" in st2.reason
    assert st3.code == Code.UNRESOLVABLE and "no node has GPU type H100" in st3.reason
    assert len(s.queue) == 1


def test_gpu_type_constraint_and_alternatives() -> None:
    nodes = [NodeSpec("a", "T4", 8), NodeSpec("b", "V100", 8), NodeSpec("c", "A100", 8)]
    b = JobTableBuilder()
    b.add("v", submit=0, duration=1, gpu_type="V100")
    b.add("either", submit=0, duration=1, gpu_type="A100|H100")
    s = Scheduler(_policy("fifo", "spread"), Cluster.from_nodes(nodes), b.build())  # type: ignore[arg-type]
    s.submit(0, 0.0)
    s.submit(1, 0.0)
    placed = {j: p.nodes for j, p in s.cycle(0.0).started}
    assert placed == {0: (1,), 1: (2,)}


def test_statement_discard_restores_state() -> None:
    c = Cluster.uniform(2, 8)
    state = ClusterState(c)
    state.allocate(7, Placement((1,), gpus=4))
    version, releases = state.version, state.release_count
    st = Statement(state)
    st.allocate(1, Placement((0,), gpus=8))
    st.evict(7)
    assert list(state.free) == [0, 8]  # node 0 taken by job 1, node 1 freed by evicting job 7
    st.discard()
    assert list(state.free) == [8, 4] and set(state.allocations) == {7}
    assert state.allocations[7] == Placement((1,), gpus=4) and state.free_gpus == 12  # 16 - 4
    assert st.operations == []
    state.check()
    # what discard does not undo (docs/architecture.md, "Statements"): the change counters moved on
    assert state.version > version and state.release_count > releases


def test_status_str() -> None:
    assert str(Status()) == "ok"
    assert str(Status.unschedulable("full", "binpack")) == "[binpack] full"


def test_the_runs_generator_is_made_at_first_use_from_the_seed() -> None:
    from kant.framework.context import SchedulerEnv

    cluster = Cluster.uniform(1, 8)
    env = SchedulerEnv(cluster, _jobs((1, 1)), seed=7)
    assert "rng" not in vars(env)
    assert env.rng.integers(1 << 30, size=4).tolist() == np.random.default_rng(7).integers(1 << 30, size=4).tolist()
    with pytest.raises(ValueError, match="seed must be a non-negative integer, got -1"):
        SchedulerEnv(cluster, _jobs((1, 1)), seed=-1)
