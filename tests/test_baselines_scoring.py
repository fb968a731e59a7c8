"""Baselines ``random`` and ``best-fit`` (scores, determinism, how best-fit differs from binpack) and the
bundled policy files of the Kant and baseline policies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from cycle_helpers import make_ctx
from kant.config.policy import bundled_policies, load_policy
from kant.framework.registry import action_class
from kant.metrics.summary import summarize
from kant.model.cluster import Cluster, NodeSpec
from kant.model.job import JobTable, JobTableBuilder
from kant.model.state import Placement
from kant.plugins.best_fit import BestFit, best_fit
from kant.plugins.binpack import Binpack, most_allocated
from kant.plugins.random_score import RandomScore
from kant.sim import simulate

# --- best-fit -------------------------------------------------------------------------------------------
BEST_FIT_CASES = [
    # (capacity, free, request, best-fit choice, binpack choice)
    # homogeneous: free after = 4, 1, 7 -> both pick node 1 (fewest left; 7/8 allocated)
    ([8, 8, 8], [5, 2, 8], 1, 1, 1),
    # heterogeneous, request 2: node 0 (16 GPUs, 4 free) ends with 2 free = 14/16 = 87.5% allocated;
    # node 1 (4 GPUs, 3 free) ends with 1 free = 3/4 = 75% -> binpack node 0, best-fit node 1
    ([16, 4], [4, 3], 2, 1, 0),
    # heterogeneous, request 1: node 0 (8 GPUs, 2 free) ends with 1 free (7/8); node 1 (2 GPUs, empty)
    # ends with 1 free (1/2): best-fit ties -> lowest index 0; binpack 87.5 > 50 -> node 0
    ([8, 2], [2, 2], 1, 0, 0),
    # heterogeneous, request 1: node 0 (8 GPUs, 3 free) -> 2 left (6/8 = 75%); node 1 (4 GPUs, 2 free)
    # -> 1 left (3/4 = 75%): binpack ties -> node 0; best-fit 1 left < 2 -> node 1
    ([8, 4], [3, 2], 1, 1, 0),
]


@pytest.mark.parametrize(("cap", "free", "req", "bf", "bp"), BEST_FIT_CASES)
def test_best_fit_vs_binpack(cap: list[int], free: list[int], req: int, bf: int, bp: int) -> None:
    c = np.array(cap, dtype=np.int64)
    f = np.array(free, dtype=np.int64)
    assert int(np.argmax(best_fit(f, req, int(c.max())))) == bf
    assert int(np.argmax(most_allocated(c, f, req))) == bp


def test_best_fit_values() -> None:
    # C = 8: free after 0 -> 100; 4 -> 50; 7 -> 12.5
    assert best_fit(np.array([2, 6, 9]), 2, 8).tolist() == [100.0, 50.0, 12.5]
    assert best_fit(np.array([0, 0]), 0, 0).tolist() == [0.0, 0.0]  # no GPUs in the cluster


HETERO = Cluster.from_nodes([NodeSpec("big", "A", 16), NodeSpec("small", "A", 4)])


def test_best_fit_plugin_on_heterogeneous_nodes() -> None:
    # the second case above through the framework: big node has 12 used (4 free), small 1 used (3 free)
    for plugin, expected in ((BestFit(), 1), (Binpack(), 0)):
        ctx, fw = make_ctx(HETERO, [{"gpus_per_worker": 2}], {0: 12, 1: 1}, [plugin])
        r = fw.place_workers(ctx, 0)
        assert isinstance(r, Placement) and r.nodes == (expected,), plugin.NAME


def _jobs(n: int, seed: int, shapes: list[tuple[int, int]]) -> JobTable:
    rng = np.random.default_rng(seed)
    b = JobTableBuilder()
    for i in range(n):
        w, g = shapes[int(rng.integers(len(shapes)))]
        b.add(f"j{i}", submit=float(rng.integers(0, 1000)), duration=float(rng.integers(10, 400)),
              workers=w, gpus_per_worker=g)
    return b.build().sorted_by_submit()


def test_best_fit_equals_binpack_on_homogeneous_cluster() -> None:
    # on equal nodes (capacity - free_after)/capacity and (C - free_after)/C are the same score, so the
    # two policies make identical decisions; on HETERO-like mixes they do not
    jobs = _jobs(300, 11, [(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (2, 4)])
    homo = Cluster.uniform(8, 8, nodes_per_leaf=2)
    a = simulate(homo, jobs, load_policy("best-fit"), check_every=1)
    b = simulate(homo, jobs, load_policy("volcano-binpack"))
    assert np.array_equal(a.first_start, b.first_start)
    # HETERO (node 0: 16 GPUs, node 1: 4 GPUs). B 1x1 at t=0 on the empty cluster: free after 15 (6.25%
    # allocated) vs 3 (75%) -> both put it on node 1. A 1x12 at t=0 fits only node 0 (4 left). C 1x2 at
    # t=1: node 0 -> 2 left (87.5%), node 1 -> 1 left (75%): binpack node 0, best-fit node 1. D 1x4 at
    # t=2: after best-fit node 0 still has 4 free -> starts at 2; after binpack neither node has 4 free
    # -> waits for C to end at 1 + 10 = 11.
    b2 = JobTableBuilder()
    b2.add("B", submit=0, duration=100, gpus_per_worker=1)
    b2.add("A", submit=0, duration=100, gpus_per_worker=12)
    b2.add("C", submit=1, duration=10, gpus_per_worker=2)
    b2.add("D", submit=2, duration=10, gpus_per_worker=4)
    jobs = b2.build()
    assert simulate(HETERO, jobs, load_policy("best-fit")).first_start.tolist() == [0, 0, 1, 2]
    assert simulate(HETERO, jobs, load_policy("volcano-binpack")).first_start.tolist() == [0, 0, 1, 11]


# --- random ---------------------------------------------------------------------------------------------
def test_random_scores_deterministic_with_seed() -> None:
    cluster = Cluster.uniform(10, 8)
    nodes = np.arange(10, dtype=np.int64)
    draws = []
    for seed in (3, 3, 4):
        ctx, _ = make_ctx(cluster, [{"gpus_per_worker": 1}], {}, [], seed=seed)
        draws.append(RandomScore().score(ctx, 0, nodes))
    assert np.all((draws[0] >= 0) & (draws[0] < 100))
    assert np.array_equal(draws[0], draws[1])  # same seed, same scores
    assert not np.array_equal(draws[0], draws[2])


def test_random_policy_replays_with_seed() -> None:
    cluster = Cluster.uniform(8, 8, nodes_per_leaf=2, leaves_per_spine=2)
    jobs = _jobs(300, 13, [(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (2, 4)])
    policy = load_policy("random")
    a = simulate(cluster, jobs, policy, seed=1, check_every=1)
    b = simulate(cluster, jobs, policy, seed=1)
    c = simulate(cluster, jobs, policy, seed=2)
    assert np.array_equal(a.first_start, b.first_start) and np.array_equal(a.span_leaves, b.span_leaves)
    assert not (np.array_equal(a.first_start, c.first_start) and np.array_equal(a.span_nodes, c.span_nodes))
    # random placement spreads 1-GPU jobs: it fragments more than binpack (node GFR)
    binpack = summarize(simulate(cluster, jobs, load_policy("volcano-binpack")))
    assert summarize(a).counts.finished == 300
    assert summarize(a).gfr.nodes > binpack.gfr.nodes  # type: ignore[operator]


# --- bundled policy files ------------------------------------------------------------------------------------
NEW_POLICIES = ["kant-nobackfill", "random", "best-fit", "topology-hard", "topology-soft"]


@pytest.mark.parametrize("name", NEW_POLICIES)
def test_policy_loads_and_runs(name: str) -> None:
    policy = load_policy(name)
    assert policy.name == name
    cluster = Cluster.uniform(8, 8, nodes_per_leaf=2, leaves_per_spine=2)
    jobs = _jobs(100, 17, [(1, 1), (1, 4), (2, 8), (3, 8)])
    assert summarize(simulate(cluster, jobs, policy, check_every=1)).counts.finished == 100


def test_kant_policy(tmp_path: Path) -> None:
    path = bundled_policies()["kant"]
    doc = yaml.safe_load(path.read_text())
    assert [a["name"] for a in doc["actions"]] == ["allocate", "backfill"]
    assert doc["actions"][0]["args"] == {"blocking": True}
    assert [p["name"] for p in doc["plugins"]] == ["priority", "fifo", "e-binpack"]
    cluster = Cluster.uniform(8, 8, nodes_per_leaf=2, leaves_per_spine=2)
    jobs = _jobs(100, 19, [(1, 1), (1, 4), (2, 8), (3, 8)])
    if action_class("backfill") is None:
        # the backfill action is not in this tree yet: run the policy without it
        doc["actions"] = doc["actions"][:1]
        copy = tmp_path / "kant.yaml"
        copy.write_text(yaml.safe_dump(doc))
        policy = load_policy(copy)
    else:
        policy = load_policy("kant")
    assert summarize(simulate(cluster, jobs, policy, check_every=1)).counts.finished == 100
