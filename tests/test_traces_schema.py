"""The Arrow/Parquet schema: read -> convert -> read back loses nothing, on every real trace."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from kant.cli.trace import trace
from kant.errors import InputError
from kant.model.cluster import Cluster, NodeSpec
from kant.model.job import InferenceService, JobKind, JobTable, JobTableBuilder
from kant.traces._csv import Problems
from kant.traces.load import LoadSeries
from kant.traces.parquet import (
    clusters_equal,
    jobs_equal,
    jobs_from_arrow,
    jobs_to_arrow,
    loads_equal,
    read_parquet,
    write_parquet,
)
from kant.traces.registry import list_traces, load_any, shared_traces_dir
from kant.traces.schema import JOB_SCHEMA, LOAD_SCHEMA, NODE_SCHEMA, build_load_series, gpu_type_compatibility

NAMES = [e.name for e in list_traces()] if shared_traces_dir() is not None else ["philly"]


def _equal(a: object, b: object) -> bool:
    if isinstance(a, JobTable) and isinstance(b, JobTable):
        return jobs_equal(a, b)
    if isinstance(a, Cluster) and isinstance(b, Cluster):
        return clusters_equal(a, b)
    if isinstance(a, LoadSeries) and isinstance(b, LoadSeries):
        return loads_equal(a, b)
    return False


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_every_real_trace(tmp_path: Path, name: str) -> None:
    obj = load_any(name)
    path = write_parquet(obj, tmp_path / "t.parquet")
    back = read_parquet(path)
    assert _equal(obj, back), f"{name}: Parquet round trip changed the data"
    again = load_any(str(path))  # the registry reads kant Parquet by path too
    assert _equal(obj, again)


@pytest.mark.parametrize("name", ["philly", "openb:gpuspec25", "openb-nodes", "dlrm", "azure", "genai:qps"])
def test_cli_convert_round_trip(tmp_path: Path, name: str) -> None:
    if name != "philly" and shared_traces_dir() is None:
        pytest.skip("shared traces folder not found")
    out = tmp_path / "out.parquet"
    result = CliRunner().invoke(trace, ["convert", name, str(out)])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output
    assert _equal(load_any(name), read_parquet(out))


def test_convert_with_transforms_and_bad_options(tmp_path: Path) -> None:
    out = tmp_path / "w.parquet"
    r = CliRunner().invoke(trace, ["convert", "philly", str(out), "--window", "0:7d", "--sample", "0.5", "--seed", "3",
                                   "--scale-load", "2", "--tenants-top", "3", "--resize-mean", "5.68"])
    assert r.exit_code == 0, r.output
    jobs = read_parquet(out)
    assert isinstance(jobs, JobTable)
    assert jobs.submit.max() < 7 * 86400 / 2 and len(jobs.tenant_names) <= 4
    r = CliRunner().invoke(trace, ["convert", "philly", str(out), "--window", "bad"])
    assert r.exit_code == 2 and r.output.startswith("error: ")
    r = CliRunner().invoke(trace, ["convert", "philly", str(out), "--scale-load", "-1"])
    assert r.exit_code == 2 and "--scale-load" in r.output


def test_schema_metadata_and_column_types() -> None:
    b = JobTableBuilder(source="unit", origin_epoch=1.5e9)
    b.add("a", submit=0, duration=10, workers=2, gpus_per_worker=4, gpu_type="A100", tenant="t1", user="u1",
          estimate=20, priority=3, cpu_milli=4000, memory_mib=1024)
    b.add("b", submit=5, duration=1, gpu_milli=250, tenant="t2")
    b.add_service(InferenceService("svc", gpus_per_replica=1, min_replicas=2, max_replicas=4, gpu_type="A100|H100"))
    jobs = b.build()
    table = jobs_to_arrow(jobs)
    assert table.schema.equals(JOB_SCHEMA, check_metadata=False)
    assert table.column("gpu_type").to_pylist() == ["A100", None, "A100|H100", "A100|H100"]
    assert table.column("kind").to_pylist() == ["training", "training", "inference", "inference"]
    assert math.isinf(table.column("duration").to_pylist()[-1])
    assert math.isnan(table.column("estimate").to_pylist()[1])
    back = jobs_from_arrow(table)
    assert jobs_equal(jobs, back)
    assert back.kind[-1] == int(JobKind.INFERENCE)


def test_unused_vocabulary_entries_survive(tmp_path: Path) -> None:
    jobs = load_any("philly")
    assert isinstance(jobs, JobTable)
    one_vc = jobs.take(np.flatnonzero(jobs.tenant == 0)[:10])
    assert len(one_vc.tenant_names) == 15  # take() keeps the full vocabulary
    back = read_parquet(write_parquet(one_vc, tmp_path / "s.parquet"))
    assert isinstance(back, JobTable) and back.tenant_names == jobs.tenant_names and jobs_equal(one_vc, back)


def test_cluster_round_trip_keeps_labelled_topology(tmp_path: Path) -> None:
    nodes = [NodeSpec(f"n{i}", "A100" if i % 3 else "H100", 8, 64000, 512000, leaf=f"L{i // 3}",
                      spine="S1" if i < 6 else "S0") for i in range(9)]
    c = Cluster.from_nodes(nodes)
    t = read_parquet(write_parquet(c, tmp_path / "c.parquet"))
    assert isinstance(t, Cluster) and clusters_equal(c, t)
    assert pq.read_schema(tmp_path / "c.parquet").remove_metadata().equals(NODE_SCHEMA.remove_metadata())


def test_load_round_trip_and_rate_series(tmp_path: Path) -> None:
    load = build_load_series(kind="rate", time=[0, 0, 600, 600], rate=[1.0, 2.0, 0.5, 0.0], stream=["a", "b", "a", "b"],
                             window=600, origin_epoch=None)
    assert load.total_requests() == pytest.approx(600 * 3.5)
    starts, rps = load.rate_series(300)
    assert list(rps) == pytest.approx([3.0, 3.0, 0.5, 0.5]) and starts[1] == 300
    back = read_parquet(write_parquet(load, tmp_path / "l.parquet"))
    assert isinstance(back, LoadSeries) and loads_equal(load, back)
    assert pq.read_schema(tmp_path / "l.parquet").remove_metadata().equals(LOAD_SCHEMA.remove_metadata())
    req = build_load_series(kind="requests", time=[0.5, 0.2, 61.0], input_tokens=[5, 6, 7])
    assert list(req.time) == [0.2, 0.5, 61.0] and list(req.input_tokens) == [6, 5, 7]
    _, rps = req.rate_series(60)
    assert list(rps * 60) == [2, 1]


def test_parquet_from_another_tool_is_validated(tmp_path: Path) -> None:
    good = pa.table({"name": ["a", "b"], "submit": [0.0, 1.0], "duration": [5.0, 6.0], "gpus_per_worker": [1, 2],
                     "tenant": ["x", "y"]})
    pq.write_table(good, tmp_path / "g.parquet")
    jobs = read_parquet(tmp_path / "g.parquet")
    assert isinstance(jobs, JobTable) and list(jobs.gpus_per_worker) == [1, 2] and jobs.tenant_names == ("x", "y")
    bad = pa.table({"name": ["a", "b"], "submit": [0.0, 1.0], "duration": [5.0, -6.0]})
    pq.write_table(bad, tmp_path / "b.parquet")
    with pytest.raises(InputError, match=r"b\.parquet:2: column 'duration': must be >= 0 \(negative duration\)"):
        read_parquet(tmp_path / "b.parquet")
    problems = Problems(skip=True)
    kept = read_parquet(tmp_path / "b.parquet", problems=problems)
    assert isinstance(kept, JobTable) and len(kept) == 1 and len(problems) == 1
    pq.write_table(pa.table({"x": [1]}), tmp_path / "x.parquet")
    with pytest.raises(InputError, match="not a kant table"):
        read_parquet(tmp_path / "x.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match="not a readable Parquet file"):
        read_parquet(tmp_path / "junk.parquet")
    pq.write_table(pa.table({"name": ["a"], "submit": ["soon"], "duration": [1.0]}), tmp_path / "s.parquet")
    with pytest.raises(InputError, match="column 'submit'"):
        read_parquet(tmp_path / "s.parquet")


def test_gpu_type_compatibility_matrix() -> None:
    m = gpu_type_compatibility(("A|B", "C", "B"), ("A", "B"))
    assert m.tolist() == [[True, True], [False, False], [False, True], [True, True]]
    codes = np.array([-1, 0, 2])
    assert m[codes].tolist() == [[True, True], [True, True], [False, True]]
