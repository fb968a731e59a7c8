"""Workload transforms and synthetic generators: seeded, deterministic, and doing what they say."""

from __future__ import annotations

import time

import numpy as np
import pytest

from kant.errors import ConfigError, InputError
from kant.model.cluster import Cluster, NodeSpec
from kant.model.job import JobTable, JobTableBuilder
from kant.traces._csv import Problems
from kant.traces.parquet import jobs_equal
from kant.traces.synthetic import SyntheticSpec, generate_jobs, parse_synthetic
from kant.traces.transforms import (
    ACME_KALOS_MEAN_GPUS,
    ACME_SEREN_MEAN_GPUS,
    assign_tenants,
    gpu_hours,
    mean_gpus_per_job,
    require_gpu_types,
    resize_gangs,
    sample,
    scale_load,
    tenant_quotas,
    tenants_from_vcs,
    window,
    with_topology,
)


@pytest.fixture(scope="module")
def philly() -> JobTable:
    from kant.traces.philly import read_philly

    return read_philly()


def test_window_rebases_and_keeps_durations(philly: JobTable) -> None:
    day = 86400
    w = window(philly, 30 * day, 31 * day)
    assert len(w) > 100 and w.submit.min() >= 0 and w.submit.max() < day
    assert w.origin_epoch == (philly.origin_epoch or 0) + 30 * day
    inside = (philly.submit >= 30 * day) & (philly.submit < 31 * day)
    assert len(w) == int(inside.sum()) and np.array_equal(w.duration, philly.duration[inside])
    kept = window(philly, 30 * day, None, rebase=False)
    assert kept.submit.min() >= 30 * day and kept.origin_epoch == philly.origin_epoch
    with pytest.raises(ConfigError, match="window"):
        window(philly, 10, 5)


def test_scale_load_compresses_arrivals(philly: JobTable) -> None:
    fast = scale_load(philly, 2.0)
    assert np.allclose(fast.submit * 2, philly.submit) and np.array_equal(fast.duration, philly.duration)
    assert gpu_hours(fast) == pytest.approx(gpu_hours(philly))
    with pytest.raises(ConfigError, match="factor"):
        scale_load(philly, 0)


def test_sample_is_seeded_and_ordered(philly: JobTable) -> None:
    a, b, c = sample(philly, fraction=0.1, seed=7), sample(philly, fraction=0.1, seed=7), sample(philly, n=100, seed=8)
    assert jobs_equal(a, b) and len(a) == round(0.1 * len(philly)) and len(c) == 100
    assert np.all(np.diff(a.submit) >= 0)
    assert not jobs_equal(a, sample(philly, fraction=0.1, seed=9))
    with pytest.raises(ConfigError):
        sample(philly, fraction=1.5)
    with pytest.raises(ConfigError):
        sample(philly)


def test_tenants_from_vcs_and_quotas(philly: JobTable) -> None:
    top = tenants_from_vcs(philly, top=4)
    assert len(top.tenant_names) == 5 and "other" in top.tenant_names
    assert np.array_equal(top.submit, philly.submit) and top.names == philly.names
    renamed = tenants_from_vcs(philly, mapping={"6214e9": "research", "11cb48": "research"})
    assert "research" in renamed.tenant_names and len(renamed.tenant_names) == 14
    with pytest.raises(ConfigError, match="unknown virtual cluster"):
        tenants_from_vcs(philly, mapping={"nope": "x"})
    quotas = tenant_quotas(top, 512)
    assert sum(quotas.values()) == 512 and set(quotas) == set(top.tenant_names)
    drawn = assign_tenants(philly, 8, seed=1)
    assert len(drawn.tenant_names) == 8 and jobs_equal(drawn, assign_tenants(philly, 8, seed=1))
    counts = np.bincount(drawn.tenant)
    assert counts[0] > counts[-1]  # Zipf: tenant-0 is the largest


@pytest.mark.parametrize("target", [ACME_SEREN_MEAN_GPUS, ACME_KALOS_MEAN_GPUS])
def test_resize_gangs_toward_llm_era_means(philly: JobTable, target: float) -> None:
    r = resize_gangs(philly, target, seed=0)
    assert mean_gpus_per_job(r) == pytest.approx(target, rel=0.005)
    assert jobs_equal(r, resize_gangs(philly, target, seed=0))
    assert np.median(r.total_gpus) == 1  # most jobs stay small, as in AcmeTrace
    assert r.total_gpus.max() <= 1024 and np.all(r.gpus_per_worker <= 8)
    assert np.array_equal(r.duration, philly.duration) and r.names == philly.names
    same_work = resize_gangs(philly, target, seed=0, preserve_gpu_time=True)
    assert gpu_hours(same_work) == pytest.approx(gpu_hours(philly), rel=1e-9)


def test_resize_gangs_down_and_out_of_reach() -> None:
    b = JobTableBuilder()
    for i in range(4000):
        b.add(f"j{i}", submit=i, duration=10, workers=2, gpus_per_worker=8)
    jobs = b.build()
    down = resize_gangs(jobs, 8.0, seed=1)
    assert mean_gpus_per_job(down) == pytest.approx(8.0, rel=0.005)
    with pytest.raises(ConfigError, match="out of reach"):
        resize_gangs(jobs, 5000.0, max_gpus=64)
    with pytest.raises(ConfigError, match="target_mean"):
        resize_gangs(jobs, 0.5)


def test_require_gpu_types_and_with_topology() -> None:
    b = JobTableBuilder(source="t.csv")
    b.add("a", submit=0, duration=1, gpu_type="A100|H100")
    b.add("b", submit=0, duration=1, gpu_type="TPU")
    b.add("c", submit=0, duration=1)
    jobs = b.build()
    cluster = Cluster.from_nodes([NodeSpec(f"n{i}", "H100", 8) for i in range(10)])
    with pytest.raises(InputError, match=r"job 'b' needs a GPU type no node has.*\(got 'TPU'\)"):
        require_gpu_types(jobs, cluster)
    problems = Problems(skip=True)
    assert require_gpu_types(jobs, cluster, problems=problems).names == ("a", "c") and len(problems) == 1
    regrouped = with_topology(cluster, nodes_per_leaf=3, leaves_per_spine=2)
    assert regrouped.n_leaves == 4 and regrouped.n_spines == 2 and regrouped.total_gpus == 80


def test_synthetic_is_seeded_and_follows_its_spec() -> None:
    spec = SyntheticSpec(jobs=20_000, seed=3, rate_per_h=120, gpu_types={"A100": 3, "H100": 1}, tenants=5)
    a, b = generate_jobs(spec), generate_jobs(spec)
    assert jobs_equal(a, b) and not jobs_equal(a, generate_jobs(SyntheticSpec(jobs=20_000, seed=4)))
    assert len(a) == 20_000 and np.all(np.diff(a.submit) >= 0)
    assert len(a) / (a.submit.max() / 3600) == pytest.approx(120, rel=0.05)
    assert np.median(a.duration) == pytest.approx(1144, rel=0.1)
    share_a100 = np.mean(a.gpu_type == a.gpu_type_names.index("A100"))
    assert share_a100 == pytest.approx(0.75, abs=0.02)
    assert np.mean(a.total_gpus == 1) == pytest.approx(76_627 / 82_247, abs=0.01)
    bursty = generate_jobs(SyntheticSpec(jobs=20_000, seed=3, arrival_cv=4))
    gaps = np.diff(bursty.submit)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(4, rel=0.15)


def test_synthetic_million_jobs_is_fast() -> None:
    t0 = time.perf_counter()
    jobs = generate_jobs(SyntheticSpec(jobs=1_000_000, seed=0, mean_gpus=ACME_SEREN_MEAN_GPUS, tenants=50))
    elapsed = time.perf_counter() - t0
    assert len(jobs) == 1_000_000 and elapsed < 15  # about a second on one core; generous for loaded CI hosts
    assert mean_gpus_per_job(jobs) == pytest.approx(ACME_SEREN_MEAN_GPUS, rel=0.005)


def test_parse_synthetic_and_registry() -> None:
    from kant.traces.registry import load_trace

    spec = parse_synthetic("synthetic:jobs=500,seed=2,rate=60,types=A100:0.7|H100:0.3,gangs=1:9|8:1,tenants=3")
    assert spec.jobs == 500 and spec.gpu_types == {"A100": 0.7, "H100": 0.3} and spec.gang_mix == {1: 9.0, 8: 1.0}
    jobs = load_trace("synthetic:jobs=500,seed=2,rate=60,types=A100:0.7|H100:0.3,gangs=1:9|8:1,tenants=3")
    assert jobs_equal(jobs, generate_jobs(spec))
    for bad, key in (("synthetic:colour=red", "colour"), ("synthetic:jobs=x", "jobs"), ("synthetic:rate=-1", "rate"),
                     ("synthetic:gangs=0:1", "gangs")):
        with pytest.raises(ConfigError) as err:
            parse_synthetic(bad)
        assert err.value.path == key
