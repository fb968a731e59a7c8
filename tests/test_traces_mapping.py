"""Bring your own trace: YAML mappings, the shipped examples, and their errors."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kant.errors import ConfigError, InputError
from kant.model.cluster import Cluster
from kant.model.job import JobKind, JobTable
from kant.traces._csv import Problems, split_gangs
from kant.traces.load import LoadSeries
from kant.traces.mapped import read_with_mapping
from kant.traces.mapping import load_mapping
from kant.traces.parquet import clusters_equal
from kant.traces.raw import read_raw
from kant.traces.registry import load_any, load_nodes, load_trace, shared_traces_dir

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "mappings"


def _write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text)
    return p


# --- the shipped examples --------------------------------------------------------------------------
def test_philly_jsonl_example_equals_the_philly_reader(tmp_path: Path) -> None:
    """The example re-lays 2,000 Philly jobs as JSONL with ms times; the mapping recovers them exactly."""
    from kant.traces.philly import bundled_philly_path, read_philly

    mapped = load_trace(str(EXAMPLES / "philly-jsonl.yaml"))
    with gzip.open(bundled_philly_path(), "rt", newline="") as fh:
        lines = fh.read().splitlines()[:2001]
    csv_path = _write(tmp_path, "philly-2000.csv", "\n".join(lines) + "\n")
    direct = read_philly(csv_path)
    assert len(mapped) == len(direct) == 2000
    assert mapped.names == direct.names
    for col in ("submit", "duration", "workers", "gpus_per_worker", "gpu_milli", "tenant", "user", "priority", "kind"):
        assert np.array_equal(getattr(mapped, col), getattr(direct, col)), col
    assert mapped.tenant_names == direct.tenant_names and mapped.origin_epoch == direct.origin_epoch


def test_openb_nodes_tsv_example_equals_the_openb_reader() -> None:
    from kant.traces.openb import read_openb_nodes

    mapped = load_nodes(str(EXAMPLES / "openb-nodes-tsv.yaml"))
    base = shared_traces_dir()
    if base is None or not (base / "alibaba-openb-gpu-v2023").is_dir():
        assert mapped.n_nodes == 1213
        return
    direct = read_openb_nodes(base / "alibaba-openb-gpu-v2023" / "openb_node_list_gpu_node.csv", nodes_per_leaf=16,
                              leaves_per_spine=4)
    assert clusters_equal(mapped, direct)


def test_mapped_trace_runs_through_kant_simulate(tmp_path: Path) -> None:
    pytest.importorskip("kant.sim")
    from click.testing import CliRunner

    from kant.cli.main import cli

    result = CliRunner().invoke(cli, ["simulate", "--trace", str(EXAMPLES / "philly-jsonl.yaml"), "--cluster",
                                      "philly", "--limit", "300", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "result.json").exists()
    report = json.loads((tmp_path / "out" / "result.json").read_text())
    assert "300" in json.dumps(report)


# --- formats and fields ----------------------------------------------------------------------------
def test_csv_without_header_datetime_end_times_and_value_maps(tmp_path: Path) -> None:
    _write(tmp_path, "log.txt", "j1;01/10/2023 10:00;01/10/2023 11:30;4;high;A100\n\n"
                                "j2;01/10/2023 10:05;01/10/2023 10:06;16;low;\n")
    m = _write(tmp_path, "m.yaml", """
file: log.txt
format: csv
delimiter: ";"
header: false
column_names: [id, start_at, end_at, gpus, prio, model]
columns: {name: id, submit: start_at, end: end_at, gpus: gpus, priority: prio, gpu_type: model}
units: {time: "%d/%m/%Y %H:%M"}
values: {priority: {high: 10, low: 0}}
defaults: {tenant: lab}
""")
    jobs = read_with_mapping(m)
    assert isinstance(jobs, JobTable)
    assert list(jobs.submit) == [0, 300] and list(jobs.duration) == [5400, 60]
    assert list(jobs.priority) == [10, 0] and list(jobs.workers) == [1, 2] and list(jobs.gpus_per_worker) == [4, 8]
    assert jobs.gpu_type_name(0) == "A100" and jobs.gpu_type_name(1) is None
    assert jobs.tenant_names == ("lab",) and jobs.origin_epoch is not None


def test_parquet_input_with_fractions_units_and_kinds(tmp_path: Path) -> None:
    pq.write_table(pa.table({
        "id": ["a", "b", "c"], "t_min": [0.0, 1.0, 2.5], "len_h": [1.0, 0.5, math.inf], "share": [0.25, 1.0, 1.0],
        "mem_gb": [16, 32, 8], "cores": [4, 8, 1], "what": ["train", "train", "serving"],
    }), tmp_path / "d.parquet")
    m = _write(tmp_path, "m.yaml", """
file: d.parquet
columns: {name: id, submit: t_min, duration: len_h, gpu_fraction: share, memory: mem_gb, cpu: cores, kind: what}
units: {time: min, duration: h, memory: gib, cpu: cores}
time_origin: zero
""")
    jobs = load_trace(str(m))
    assert list(jobs.submit) == [0, 60, 150] and jobs.duration[0] == 3600 and math.isinf(jobs.duration[2])
    assert list(jobs.gpu_milli) == [250, 1000, 1000] and list(jobs.memory_mib) == [16384, 32768, 8192]
    assert list(jobs.cpu_milli) == [4000, 8000, 1000]
    assert list(jobs.kind) == [int(JobKind.TRAINING), int(JobKind.TRAINING), int(JobKind.INFERENCE)]


def test_requests_rate_and_nodes_mappings(tmp_path: Path) -> None:
    _write(tmp_path, "r.jsonl", '{"ts": "2024-01-01T00:00:01Z", "in": 10, "out": 3, "model": "m1"}\n'
                                '{"ts": "2024-01-01T00:00:00Z", "in": 7, "model": "m2"}\n')
    m = _write(tmp_path, "r.yaml", "kind: requests\nfile: r.jsonl\ncolumns: {time: ts, input_tokens: in, "
                                   "output_tokens: out, stream: model}\nunits: {time: datetime}\n"
                                   "defaults: {output_tokens: 0}\n")
    load = load_any(str(m))
    assert isinstance(load, LoadSeries) and load.kind == "requests"
    assert list(load.time) == [0, 1] and list(load.input_tokens) == [7, 10] and list(load.output_tokens) == [0, 3]
    assert load.origin_epoch == 1704067200.0
    _write(tmp_path, "rate.csv", "t,rps\n0,2\n60,4\n")
    m = _write(tmp_path, "rate.yaml", "kind: rate\nfile: rate.csv\ncolumns: {time: t, rate: rps}\nwindow: 60\n")
    rate = load_any(str(m))
    assert isinstance(rate, LoadSeries) and rate.total_requests() == 360
    _write(tmp_path, "n.csv", "rack,model,gpus,n\nr1,H100,8,3\nr2,A10,1,2\nr3,,0,5\n")
    m = _write(tmp_path, "n.yaml", "kind: nodes\nfile: n.csv\ncolumns: {name: rack, gpu_type: model, gpus: gpus, "
                                   "count: n, leaf: rack}\n")
    c = load_any(str(m))
    assert isinstance(c, Cluster) and c.n_nodes == 5 and c.total_gpus == 26 and c.n_leaves == 2


def test_split_gangs_matches_split_gang() -> None:
    from kant.model.job import split_gang

    totals = np.arange(0, 200)
    w, g = split_gangs(totals, 8)
    assert [(int(a), int(b)) for a, b in zip(w, g, strict=True)] == [split_gang(int(t), 8) for t in totals]


# --- errors -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("yaml_text", "path", "message"),
    [
        ("file: x.csv\ncolumns: {submit: a, duration: b}\nunits: {time: weeks}\n", "units.time", "unknown time unit"),
        ("file: x.csv\ncolumns: {submit: a, duration: b}\nbogus: 1\n", "bogus", "Extra inputs"),
        ("file: x.csv\ncolumns: {submit: a}\n", "columns", "must map 'duration' or 'end'"),
        ("file: x.csv\ncolumns: {submit: a, duration: b, colour: c}\n", "columns.colour", "unknown field 'colour'"),
        ("file: x.csv\ncolumns: {submit: a, duration: b}\ndefaults: {size: 1}\n", "defaults.size", "unknown field"),
        ("file: x.csv\ncolumns: {submit: a, duration: b, gpus: g, workers: w}\n", "columns", "not both"),
        ("columns: {submit: a, duration: b}\n", "file", "Field required"),
        ("file: x.csv\ncolumns: {submit: a, duration: b}\nmax_gpus_per_worker: 0\n", "max_gpus_per_worker",
         "greater than or equal to 1"),
        ("file: x.csv\ncolumns: [1, 2]\n", "columns", "valid dictionary"),
        ("- just a list\n", "", "expected a mapping"),
        ("file: [unclosed\n", "", "not valid YAML"),
        ("file: x.csv\ncolumns: {submit: a, duration: b}\ntime_origin: someday\n", "time_origin", "'first', 'zero'"),
        ("file: x.csv\nheader: false\ncolumns: {submit: a, duration: b}\n", "column_names", "needs column_names"),
    ],
)
def test_bad_mapping_names_the_key_path(tmp_path: Path, yaml_text: str, path: str, message: str) -> None:
    m = _write(tmp_path, "m.yaml", yaml_text)
    with pytest.raises(ConfigError) as err:
        load_mapping(m)
    assert err.value.path == path and message in str(err.value)
    assert str(m) in str(err.value)


def test_missing_column_names_mapping_key(tmp_path: Path) -> None:
    _write(tmp_path, "x.csv", "a,b\n1,2\n")
    m = _write(tmp_path, "m.yaml", "file: x.csv\ncolumns: {submit: a, duration: dur}\n")
    with pytest.raises(InputError, match=r"x\.csv:1: missing column\(s\) dur \(for columns\.duration\)"):
        read_with_mapping(m)
    m = _write(tmp_path, "m2.yaml", "file: nothere.csv\ncolumns: {submit: a, duration: b}\n")
    with pytest.raises(InputError, match=r"nothere\.csv: file not found"):
        read_with_mapping(m)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("j,abc,5,1", r"x\.csv:3: column 'sub': not a number \(got 'abc'\)"),
        ("j,1,-5,1", r"x\.csv:3: column 'dur': negative duration \(got '-5'\)"),
        ("j,1,5,-2", r"x\.csv:3: column 'g': must be >= 0 \(got '-2'\)"),
        ("j,1,5,1.5", r"x\.csv:3: column 'g': not an integer \(got '1.5'\)"),
        ("j,1,5,1,extra", r"x\.csv:3: expected 4 fields, found 5"),
        (",1,5,1", r"x\.csv:3: column 'id': empty name"),
        ("j,1,5,1,H100", None),
    ],
)
def test_bad_rows_name_file_line_column_value(tmp_path: Path, row: str, message: str | None) -> None:
    if message is None:
        _write(tmp_path, "x.csv", "id,sub,dur,g,model\nk,0,5,1,A100\n" + row + "\n")
        m = _write(tmp_path, "m.yaml", "file: x.csv\ncolumns: {name: id, submit: sub, duration: dur, gpus: g, "
                                       "gpu_type: model}\ngpu_types: [A100, V100]\n")
        with pytest.raises(InputError, match=r"x\.csv:3: column 'model': a GPU type no node has .*\(got 'H100'\)"):
            read_with_mapping(m)
        return
    _write(tmp_path, "x.csv", "id,sub,dur,g\nk,0,5,1\n" + row + "\nl,2,5,1\n")
    m = _write(tmp_path, "m.yaml", "file: x.csv\ncolumns: {name: id, submit: sub, duration: dur, gpus: g}\n")
    with pytest.raises(InputError, match=message):
        read_with_mapping(m)
    problems = Problems(skip=True)
    jobs = read_with_mapping(m, problems=problems)
    assert isinstance(jobs, JobTable) and len(jobs) == 2 and len(problems) == 1


def test_zero_gpus_for_a_gpu_job_and_bad_share(tmp_path: Path) -> None:
    _write(tmp_path, "x.csv", "s,d,g,milli\n0,1,1,0\n0,1,2,500\n0,1,0,0\n")
    m = _write(tmp_path, "m.yaml", "file: x.csv\ncolumns: {submit: s, duration: d, gpus: g, gpu_milli: milli}\n")
    problems = Problems(skip=True)
    jobs = read_with_mapping(m, problems=problems)
    assert isinstance(jobs, JobTable) and len(jobs) == 1 and jobs.total_gpus[0] == 0
    reasons = problems.by_reason()
    assert reasons["milli: zero GPUs for a GPU job (GPU share is 0)"] == 1
    assert reasons["milli: a GPU share below 1000 needs a 1-GPU worker"] == 1


def test_raw_reader_paths_agree(tmp_path: Path) -> None:
    """The pyarrow fast path and the csv-module path (taken when quotes appear) give the same rows."""
    fast = _write(tmp_path, "a.csv", "x,y\n1,hello\n\n2,world\n")
    slow = _write(tmp_path, "b.csv", 'x,y\n1,"hello"\n\n2,world\n')
    ra, rb = read_raw(fast), read_raw(slow)
    assert ra.columns["y"].to_pylist() == rb.columns["y"].to_pylist() == ["hello", "world"]
    assert list(ra.lines) == list(rb.lines) == [2, 4]
    bad = tmp_path / "c.csv"
    bad.write_bytes(b"x,y\n1,ok\n2,\xff\xfe\n3,ok\n")
    raw = read_raw(bad)
    assert list(raw.lines) == [2, 4] and raw.errors[0].line == 3 and "UTF-8" in str(raw.errors[0])
