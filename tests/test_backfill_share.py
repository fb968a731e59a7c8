"""Backfill with GPU shares (docs/gpu-sharing.md): the per-node worker counts are kant.model.fit's
rule, a share backfills onto an open GPU slot, a GPU never holds more than 1000 milli
(``check_every=1`` runs ``ClusterState.check()`` every cycle) and the head is not delayed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kant.actions.backfill.fit as bf_fit
from kant.actions.backfill import backfill_action
from kant.config.policy import parse_policy
from kant.model import Cluster
from kant.model.job import JobTable, JobTableBuilder
from kant.sim import Simulator


def policy(mode: str | None) -> Any:
    actions: list[Any] = [{"name": "allocate", "args": {"blocking": True}}]
    if mode is not None:
        actions.append({"name": "backfill", "args": {"mode": mode}})
    plugins = [{"name": "fifo"}, {"name": "binpack"}]
    return parse_policy({"name": f"test-{mode}", "actions": actions, "plugins": plugins})


def starts(cluster: Cluster, jobs: JobTable, mode: str | None) -> list[float]:
    sim = Simulator(cluster, jobs, policy(mode), check_every=1)
    return [float(x) for x in sim.run().first_start]


def test_share_backfills_onto_an_open_gpu_slot() -> None:
    """1 node x 3 GPUs. A (0.5 GPU) opens a GPU slot, B takes the other 2 GPUs until 20; H (2 GPUs)
    is blocked until 20. S (0.5 GPU, long: ends at 52) fits on A's slot without a whole GPU, so it
    backfills at 2 without delaying H; S2 (0.5) finds no room (the slot is full, no free GPU) and
    starts when H ends. Without backfill S waits for H."""
    b = JobTableBuilder()
    b.add("A", submit=0, duration=100, gpu_milli=500)
    b.add("B", submit=0, duration=20, gpus_per_worker=2)
    b.add("H", submit=1, duration=10, gpus_per_worker=2)
    b.add("S", submit=2, duration=50, gpu_milli=500)
    b.add("S2", submit=3, duration=5, gpu_milli=500)
    jobs = b.build()
    for mode in ("easy", "conservative"):
        assert starts(Cluster.uniform(1, 3), jobs, mode) == [0, 0, 20, 2, 30]
    assert starts(Cluster.uniform(1, 3), jobs, None) == [0, 0, 20, 20, 30]


def test_share_head_reserves_shared_gpus() -> None:
    """1 node x 3 GPUs. The head H (3 x 0.5 GPU) needs 2 GPUs (two shares on one), not 3: at 20 when B
    ends. So when C ends at 5, the long 1-GPU job L backfills on the third GPU; H still starts at 20
    and L2 (0.5, long) joins H's half-free GPU then; S (0.5, short) finds no room before H ends."""
    b = JobTableBuilder()
    b.add("B", submit=0, duration=20, gpus_per_worker=2)
    b.add("C", submit=0, duration=5)
    b.add("H", submit=1, duration=10, workers=3, gpu_milli=500)
    b.add("L", submit=2, duration=50)
    b.add("L2", submit=3, duration=50, gpu_milli=500)
    b.add("S", submit=4, duration=10, gpu_milli=500)
    jobs = b.build()
    for mode in ("easy", "conservative"):
        sim = Simulator(Cluster.uniform(1, 3), jobs, policy(mode), check_every=1)
        got = [float(x) for x in sim.run().first_start]
        assert got == [0, 0, 20, 5, 20, 30]
        assert backfill_action(sim).head_shadow[2] == 20


def test_backfill_slot_counts_are_the_fit_rule() -> None:
    """The backfill fit module counts shares by kant.model.fit: whole GPUs times 1000 // milli plus
    the open slots (now only), and a share's planned GPUs are whole GPUs per 1000 // milli workers."""
    modelled = np.ones((1, 3), dtype=np.int64)
    avail = np.array([[2, 0, 1]])
    share = np.array([0, 3, 1])
    assert bf_fit.worker_slots(avail, (1, 250), None, modelled).tolist() == [8, 0, 4]
    assert bf_fit.worker_slots(avail, (1, 250), None, modelled, share).tolist() == [8, 3, 5]
    assert bf_fit.worker_slots(avail, (1,), None, modelled).tolist() == [2, 0, 1]
    assert bf_fit.Capacity.gpu_slots(avail[0], 1, None, 300, share) == 6 + 3 + 1 + 3
    assert bf_fit.Capacity.gpu_slots(avail[0], 2, np.array([True, False, True])) == 1
    usage = bf_fit.best_fit(np.array([8, 0, 4]), 5, (1, 250), modelled)
    assert usage.tolist() == [[1, 0, 1]]  # 4 workers on node 2 (1 GPU), then 1 on node 0 (1 GPU)
    # first_enough: a release of k whole GPUs adds k * (1000 // milli) workers
    assert bf_fit.first_enough(np.array([0, 0]), np.array([0, 1]), np.array([1, 1]), 1, 3, None, 500) == 1
    assert bf_fit.first_enough(np.array([0, 0]), np.array([0]), np.array([1]), 1, 2, None, 500) == 0
    assert bf_fit.first_enough(np.array([0, 0]), np.array([0]), np.array([1]), 1, 1, None, 500, np.array([1, 0])) == 0
    assert bf_fit.first_enough(np.array([0, 0]), np.array([0]), np.array([1]), 1, 3, None, 500) == -1


@st.composite
def share_workloads(draw: st.DrawFn) -> tuple[Cluster, JobTable]:
    n_nodes = draw(st.integers(1, 3))
    gpus = draw(st.integers(1, 4))
    cpu = draw(st.sampled_from([0, 8000]))  # modelled or not: the fit rule's CPU term
    mem = draw(st.sampled_from([0, 4096]))
    b = JobTableBuilder()
    for i in range(draw(st.integers(1, 14))):
        share = draw(st.booleans())
        g = 1 if share else draw(st.integers(1, gpus))
        milli = draw(st.sampled_from([100, 250, 300, 500, 700])) if share else 1000
        c = draw(st.sampled_from([0, 1000, 3000])) if cpu else 0
        m = draw(st.sampled_from([0, 1024])) if mem else 0
        per_node = gpus * (1000 // milli) if share else gpus // g  # workers a node holds when empty
        per_node = min(per_node, cpu // c if c else per_node, mem // m if m else per_node)
        b.add(f"j{i}", submit=draw(st.integers(0, 30)), duration=draw(st.integers(1, 40)),
              workers=draw(st.integers(1, min(3, n_nodes * per_node))), gpus_per_worker=g, gpu_milli=milli,
              cpu_milli=c, memory_mib=m)
    return Cluster.uniform(n_nodes, gpus, cpu_milli=cpu, memory_mib=mem), b.build()


@pytest.mark.parametrize("mode", ["easy", "conservative"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=share_workloads())
def test_share_backfill_never_overbooks_and_keeps_the_head(mode: str, data: tuple[Cluster, JobTable]) -> None:
    """Mixed share and whole-GPU workloads, with CPU and memory modelled or not: every cycle's state
    checks (no GPU above 1000 milli), every job runs, and with exact estimates the EASY head starts no
    later than its first shadow."""
    cluster, jobs = data
    sim = Simulator(cluster, jobs, policy(mode), check_every=1)
    result = sim.run()
    assert np.all(np.isfinite(result.first_start))
    if mode == "easy":
        shadow = backfill_action(sim).head_shadow
        reserved = np.isfinite(shadow)
        assert np.all(result.first_start[reserved] <= shadow[reserved])
