"""GPU sharing in the core: ClusterState's GPU slots, the one fit rule, and share placement."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.errors import SchedulingError
from kant.model import Cluster, ClusterState, Placement
from kant.model.fit import FULL_GPU_MILLI, Request, gpu_slots, is_share, worker_slots
from kant.model.shares import SLOT_CLOSED


def _snapshot(s: ClusterState) -> tuple[object, ...]:
    return (s.free.tolist(), s.free_cpu.tolist(), s.free_mem.tolist(), s.leaf_free.tolist(), s.spine_free.tolist(),
            s.allocated_gpus, s.partial_nodes, s.free_on_partial, s.empty_nodes, s.free_hist.tolist(),
            s.allocated_milli, s.shares.best.tolist(), s.shares.open, s.shares.used_milli,
            [[s.gpu_free_milli(n)] for n in range(s.cluster.n_nodes)])


def test_shares_pack_one_gpu_and_release_restores() -> None:
    s = ClusterState(Cluster.uniform(2, 2))
    before = _snapshot(s)
    s.allocate(1, Placement((0,), 1, gpu_milli=500))
    s.allocate(2, Placement((0,), 1, gpu_milli=300))  # best fit: the same GPU (500 free)
    assert s.gpu_free_milli(0) == [1000, 200]
    assert int(s.free[0]) == 1 and s.shares.open == 1 and s.allocated_milli == 800 and s.allocated_gpus == 1
    s.allocate(3, Placement((0,), 1, gpu_milli=300))  # 200 free is too little: opens the second GPU
    assert s.gpu_free_milli(0) == [700, 200]
    with pytest.raises(SchedulingError, match="cannot hold"):
        s.allocate(4, Placement((0,), 1))  # a whole GPU: none completely free
    s.check()
    for job in (2, 1, 3):
        s.release(job)
        s.check()
    assert _snapshot(s) == before


def test_gpu_pick_and_bad_pick() -> None:
    s = ClusterState(Cluster.uniform(1, 4))
    s.allocate(1, Placement((0,), 1, gpu_milli=600))
    s.allocate(2, Placement((0,), 1, gpu_milli=100, gpu_pick=(1000,)))  # a fresh GPU, not the 400 one
    assert s.gpu_free_milli(0) == [1000, 1000, 900, 400]
    with pytest.raises(SchedulingError, match="no GPU with 700 milli"):
        s.allocate(3, Placement((0,), 1, gpu_milli=100, gpu_pick=(700,)))
    s.allocate(3, Placement((0,), 1, gpu_milli=400, gpu_pick=(400,)))
    assert s.gpu_free_milli(0) == [1000, 1000, 900, 0]
    s.check()


def test_share_release_logs_a_return_for_the_memo() -> None:
    s = ClusterState(Cluster.uniform(1, 1))
    s.allocate(1, Placement((0,), 1, gpu_milli=500))
    s.allocate(2, Placement((0,), 1, gpu_milli=500))
    n = s.release_count
    s.release(1)  # no whole GPU comes back, but 500 milli does
    assert s.release_count == n + 1 and s.release_log[-1] == (0, 0, 0)
    s.release(2)
    assert s.release_log[-1] == (0, 0, 1)


def test_fit_rule() -> None:
    free = np.array([0, 1, 3], dtype=np.int64)
    cpu = np.array([10, 10, 10], dtype=np.int64)
    unmod = np.zeros(3, dtype=bool)
    assert worker_slots(2, 1000, 0, 0, free, cpu, cpu, unmod, unmod, limit=5).tolist() == [0, 0, 1]
    share = np.array([1, 0, 0], dtype=np.int64)
    assert worker_slots(1, 250, 0, 0, free, cpu, cpu, unmod, unmod, limit=5, share_free=share).tolist() == [1, 4, 12]
    assert worker_slots(1, 250, 5, 0, free, cpu, cpu, unmod, unmod, limit=5, share_free=share).tolist() == [1, 2, 2]
    assert worker_slots(0, 0, 3, 0, free, cpu, cpu, unmod, unmod, limit=5).tolist() == [3, 3, 3]
    rows = np.stack([free, free + 1])  # rows x nodes (capacity over time)
    assert worker_slots(2, 1000, 0, 0, rows, rows, rows, unmod, unmod, limit=5,
                        ok=np.array([True, True, False])).tolist() == [[0, 0, 0], [0, 1, 0]]
    assert worker_slots(0, 0, 0, 0, rows, rows, rows, unmod, unmod, limit=5).shape == (2, 3)
    assert gpu_slots(7, 2) == 3 and gpu_slots(2, 1, 300) == 6 and gpu_slots(2, 1) == 2
    assert is_share(1, 999) and not is_share(2, 500) and not is_share(1, 1000) and not is_share(0, 0)
    assert Request(1, 1, 500).share and not Request(1, 2).share


_op = st.tuples(st.integers(0, 3), st.sampled_from([0, 100, 250, 300, 500, 700, 1000]), st.booleans(),
                st.integers(0, 2))


@settings(max_examples=200, deadline=None)
@given(st.lists(_op, max_size=60))
def test_share_invariants(ops: list[tuple[int, int, bool, int]]) -> None:
    """Random allocates (whole GPUs and shares, with and without a GPU pick) and releases: a GPU's
    shares never exceed 1000 milli, whole-GPU jobs only take completely free GPUs, every aggregate
    stays in step, and releasing everything restores the empty state exactly."""
    cluster = Cluster.uniform(4, 3, cpu_milli=8000, nodes_per_leaf=2, leaves_per_spine=1)
    s = ClusterState(cluster)
    empty = _snapshot(s)
    live: dict[int, Placement] = {}
    job = 0
    for node, milli, release, extra in ops:
        if release and live:
            victim = sorted(live)[extra % len(live)]
            s.release(victim)
            del live[victim]
        else:
            job += 1
            whole = milli in (0, 1000)
            gpus = 1 + extra if whole else 1
            p = Placement((node,) * (1 + extra % 2), gpus, 1000, 0, FULL_GPU_MILLI if whole else milli,
                          (1000,) * (1 + extra % 2) if (not whole and extra == 2) else ())
            before = _snapshot(s)
            free_before = int(s.free[node])
            try:
                s.allocate(job, p)
            except SchedulingError:
                assert _snapshot(s) == before  # a refused placement changes nothing
                if whole:
                    assert free_before < gpus * len(p.nodes) or int(s.free_cpu[node]) < 1000 * len(p.nodes)
            else:
                live[job] = p
                if whole:  # whole-GPU workers only on completely free GPUs
                    assert int(s.free[node]) == free_before - gpus * len(p.nodes)
        s.check()
        for n in range(cluster.n_nodes):
            shares = s.shares.slots.get(n, [])
            assert all(v == SLOT_CLOSED or 0 <= v < FULL_GPU_MILLI for v in shares)
            assert len([v for v in shares if v != SLOT_CLOSED]) + int(s.free[n]) <= 3
    for j in sorted(live):
        s.release(j)
    s.check()
    assert _snapshot(s) == empty


# ------------------------------------------------------------------------------------------------
# the FGD experiment's policies as core plugins, from a policy file
# ------------------------------------------------------------------------------------------------
_SHARE_PLUGINS: list[dict[str, object]] = [
    {"name": "random-pick"}, {"name": "residual-fit"}, {"name": "residual-fit", "args": {"mem_weight": 1}},
    {"name": "dot-product"}, {"name": "dot-product", "args": {"prefer": "max", "tie": "random"}},
    {"name": "gpu-packing"}, {"name": "gpu-clustering", "args": {"tie": "random"}},
    {"name": "e-binpack", "args": {"share_aware": True}}, {"name": "fgd", "args": {"tie": "random"}},
]


@pytest.mark.parametrize("plugin", _SHARE_PLUGINS, ids=lambda p: str(p["name"]) + str(p.get("args", "")))
def test_share_plugins_in_a_policy(plugin: dict[str, object]) -> None:
    """Each experiment policy's plugin runs in a policy file under the simulator: shares of one GPU,
    a whole-GPU job that waits for a completely free GPU, jobs ending (the plugins' caches follow
    releases), a gang (placed by the runner's greedy)."""
    from kant.config.policy import parse_policy
    from kant.model.job import JobTableBuilder
    from kant.sim import simulate

    policy = parse_policy({"name": "t", "actions": ["allocate"], "plugins": [{"name": "fifo"}, plugin]})
    b = JobTableBuilder()
    b.add("a", submit=0, duration=10, gpu_milli=500)
    b.add("b", submit=1, duration=10, gpu_milli=500)
    b.add("c", submit=2, duration=4, gpu_milli=300)  # no room until a ends at 10
    b.add("d", submit=3, duration=5, gpu_milli=1000)  # waits for the GPU to be completely free
    res = simulate(Cluster.uniform(1, 1), b.build(), policy, check_every=1)
    assert list(res.first_start) == [0, 1, 10, 14]
    assert list(res.end) == [10, 11, 14, 19]
    b = JobTableBuilder()
    b.add("gang", submit=0, duration=10, workers=4, gpu_milli=400)
    b.add("s1", submit=1, duration=5, gpu_milli=200)
    b.add("w", submit=2, duration=3, workers=2, gpus_per_worker=1)
    b.add("s2", submit=20, duration=5, gpu_milli=700)
    res = simulate(Cluster.uniform(2, 2), b.build(), policy, check_every=1)  # where: the plugin's rule
    assert list(res.first_start[[0, 1, 3]]) == [0, 1, 20] and 2 <= res.first_start[2] <= 6


@pytest.mark.parametrize("policy", ["fifo", "kant", "fgd", "priority-preempt"])
def test_simulate_shares_one_gpu(policy: str) -> None:
    """Two 0.5-GPU jobs and a 0.3 one share one GPU in the simulator under every kind of placer; a
    0.6-GPU job waits until enough of it is free; a whole-GPU job waits for a completely free GPU."""
    from kant.config import load_policy
    from kant.model.job import JobTableBuilder
    from kant.sim import simulate

    b = JobTableBuilder()
    b.add("a", submit=0, duration=10, gpu_milli=500)
    b.add("b", submit=1, duration=10, gpu_milli=500)
    b.add("c", submit=2, duration=4, gpu_milli=300)  # no room until a ends at 10
    b.add("d", submit=3, duration=5, gpu_milli=1000)  # waits for the GPU to be completely free
    res = simulate(Cluster.uniform(1, 1), b.build(), load_policy(policy), check_every=1)
    assert list(res.first_start) == [0, 1, 10, 14]
    assert list(res.end) == [10, 11, 14, 19]


def test_preempt_frees_a_share() -> None:
    """A high-priority 0.6-GPU job evicts the low-priority 0.6-GPU job on the only GPU, and not the
    0.3-GPU one that leaves room; the victim restarts when the GPU has room again."""
    from kant.config import load_policy
    from kant.model.job import JobTableBuilder
    from kant.sim import simulate

    b = JobTableBuilder()
    b.add("small", submit=0, duration=100, gpu_milli=300, priority=0)
    b.add("low", submit=1, duration=100, gpu_milli=600, priority=0)
    b.add("high", submit=2, duration=10, gpu_milli=600, priority=5)
    res = simulate(Cluster.uniform(1, 1), b.build(), load_policy("priority-preempt"), check_every=1)
    assert list(res.first_start) == [0, 1, 2]
    assert res.end[2] == 12 and res.end[0] == 100 and res.end[1] == 112


@pytest.mark.parametrize("policy", ["fifo", "k8s-default", "kant"])
def test_share_gangs(policy: str) -> None:
    """A gang of 4 x 0.4 GPU fits 2 GPUs (two per GPU, on the runner's tentative bookings); two 0.2
    jobs then fill what is left; a gang of 5 x 0.4 can never run on 2 GPUs."""
    from kant.config import load_policy
    from kant.model.job import JobTableBuilder
    from kant.sim import simulate

    b = JobTableBuilder()
    b.add("gang", submit=0, duration=10, workers=4, gpu_milli=400)
    b.add("s1", submit=1, duration=5, gpu_milli=200)
    b.add("s2", submit=1, duration=5, gpu_milli=200)
    b.add("s3", submit=1, duration=5, gpu_milli=200)  # no room left: waits for s1
    b.add("big", submit=2, duration=1, workers=5, gpu_milli=400)
    res = simulate(Cluster.uniform(1, 2), b.build(), load_policy(policy), check_every=1)
    assert list(res.first_start[:4]) == [0, 1, 1, 6]
    assert np.isnan(res.first_start[4])
