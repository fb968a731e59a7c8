"""Per-job results (kant.metrics.jobs): the file every simulate / compare run writes agrees with the run's
summary metrics, loads in pandas and Polars, and is the same bytes for the same inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.cli.main import cli
from kant.metrics.jobs import JOB_COLUMNS
from kant.runs import RunSpec, run

# 600 Philly jobs on 4 nodes x 8 GPUs: most of them wait, so the wait percentiles are not all 0
_ARGS = ["--limit", "600", "--cluster", "4x8:V100,leaf=2,spine=1"]


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    r = CliRunner().invoke(cli, ["simulate", *_ARGS, "--policy", "priority-preempt", "--out", str(out)])
    assert r.exit_code == 0, r.output
    return out


def test_columns_and_counts_agree_with_the_report(simulated: Path) -> None:
    report = json.loads((simulated / "result.json").read_text())["metrics"]
    df = pd.read_parquet(simulated / "jobs.parquet")
    assert tuple(df.columns) == JOB_COLUMNS
    c = report["counts"]
    assert len(df) == c["jobs"] == 600
    assert (df.state == "finished").sum() == c["finished"]
    assert (df.state == "unschedulable").sum() == c["unschedulable"]
    assert int(df.preemptions.sum()) == c["preemptions"]
    assert df.id.is_unique
    started = df.start.notna()
    assert (df.wait[started] == df.start[started] - df.submit[started]).all()
    assert df.nodes[~started].isna().all() and (df.nodes[started] >= 1).all()
    # multi-node gangs spanning leaves, as the topology metrics count them
    multi = df.nodes > 1
    assert int(multi.sum()) == report["topology"]["multi_node"]
    assert int((multi & (df.leaves > 1)).sum()) == report["topology"]["cross_leaf"]


def test_jwtd_percentiles_recomputed_from_the_file_equal_the_report(simulated: Path) -> None:
    jwtd = json.loads((simulated / "result.json").read_text())["metrics"]["jwtd"]["overall"]
    expected = [jwtd["p50"], jwtd["p90"], jwtd["p99"]]
    assert jwtd["p90"] > 0  # the slice is loaded enough for waits to matter
    # NumPy on the column: the same computation as the report, so equal to the last bit
    table = pq.read_table(simulated / "jobs.parquet").to_pandas()
    waits = table.loc[(table.kind == "training") & table.start.notna(), "wait"].to_numpy()
    assert waits.size == jwtd["count"]
    assert np.percentile(waits, [50, 90, 99]).tolist() == expected
    # pandas and Polars as docs/results.md shows (linear interpolation, as NumPy's default)
    df = pd.read_parquet(simulated / "jobs.parquet")
    got_pd = df.query("kind == 'training'").wait.dropna().quantile([0.5, 0.9, 0.99]).tolist()
    assert got_pd == pytest.approx(expected, rel=1e-12)
    lf = pl.scan_parquet(simulated / "jobs.parquet").filter(pl.col("kind") == "training").drop_nulls("wait")
    got_pl = lf.select(pl.col("wait").quantile(q, interpolation="linear").alias(str(q)) for q in (0.5, 0.9, 0.99))
    assert list(got_pl.collect().row(0)) == pytest.approx(expected, rel=1e-12)


def test_compare_writes_one_file_per_policy_equal_to_simulate(simulated: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["compare", *_ARGS, "--policy", "priority-preempt", "--policy", "fifo",
                                 "--jobs", "1", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "jobs").iterdir()) == ["fifo.parquet", "priority-preempt.parquet"]
    # the same run gives the same file, bit for bit (determinism), whichever command ran it
    assert (tmp_path / "jobs" / "priority-preempt.parquet").read_bytes() == (simulated / "jobs.parquet").read_bytes()


@settings(max_examples=8)
@given(seed=st.integers(0, 10_000), nodes=st.integers(2, 6), policy=st.sampled_from(["priority-preempt", "kant"]))
def test_the_file_agrees_with_the_metrics_on_random_workloads(
    tmp_path_factory: pytest.TempPathFactory, seed: int, nodes: int, policy: str
) -> None:
    # seeded synthetic workloads with two priorities, so priority-preempt preempts some of them
    trace = f"synthetic:jobs=150,seed={seed},rate=40,priorities=0:3|5:1,gangs=1:6|2:2|8:2|16:1"
    path = tmp_path_factory.mktemp("h") / "jobs.parquet"
    spec = RunSpec(trace=trace, cluster=f"{nodes}x8:V100,leaf=2,spine=1", policy=policy, seed=seed,
                   skip_invalid=False, limit=None, cross_leaf_penalty=0.0, cross_spine_penalty=0.0,
                   restart_cost_s=0.0, checkpoint_interval_s=None, check_every=0, jobs_out=str(path))
    metrics = run(spec).metrics
    df = pd.read_parquet(path)
    c = metrics.counts
    assert (len(df), int((df.state == "finished").sum()), int(df.preemptions.sum())) == (
        c.jobs, c.finished, c.preemptions)
    assert int((df.state == "unschedulable").sum()) == c.unschedulable
    assert df.reason.notna().sum() == c.unschedulable
    waits = df.loc[(df.kind == "training") & df.start.notna(), "wait"].to_numpy()
    d = metrics.jwtd.overall
    assert waits.size == d.count
    if waits.size:
        assert np.percentile(waits, [50, 90, 99]).tolist() == [d.p50, d.p90, d.p99]
    assert int((df.nodes > 1).sum()) == metrics.topology.multi_node
