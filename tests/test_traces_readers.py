"""Readers on the real shipped traces: what they keep, the numbers the READMEs state, bad rows, and
``kant trace info`` / ``list`` on every named trace."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from kant.cli.trace import trace
from kant.errors import InputError, KantError
from kant.model.cluster import Cluster
from kant.model.job import JobKind, JobTable
from kant.traces._csv import Problems
from kant.traces.load import LoadSeries
from kant.traces.registry import list_traces, load_any, load_load, load_nodes, load_trace, shared_traces_dir

SHARED = shared_traces_dir()
needs_shared = pytest.mark.skipif(SHARED is None or not SHARED.is_dir(), reason="shared traces folder not found")
OPENB = "alibaba-openb-gpu-v2023"


def shared(rel: str) -> Path:
    if SHARED is None:
        pytest.skip("shared traces folder not found")
    p = SHARED / rel
    if not p.exists():
        pytest.skip(f"{rel} not in the shared folder")
    return p


@cache
def loaded(name: str) -> JobTable | Cluster | LoadSeries:
    return load_any(name)


ALL_NAMES = [e.name for e in list_traces()] if SHARED is not None else ["philly"]


# --- every named trace --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL_NAMES)
def test_every_named_trace_loads_with_its_kind(name: str) -> None:
    entry = next(e for e in list_traces() if e.name == name)
    obj = loaded(name)
    kind = {"jobs": JobTable, "nodes": Cluster, "load": LoadSeries}[entry.kind]
    assert isinstance(obj, kind)
    assert (obj.n_nodes if isinstance(obj, Cluster) else len(obj)) > 0
    if isinstance(obj, JobTable):
        assert np.all(np.diff(obj.submit) >= 0), "jobs are sorted by submit time"
        assert np.all(obj.duration >= 0) and np.all(np.isfinite(obj.submit))
        assert np.all(obj.workers >= 1) and np.all(obj.gpus_per_worker >= 0)
        assert len(set(obj.names)) == len(obj), "job names are unique"
    if isinstance(obj, LoadSeries):
        assert np.all(np.diff(obj.time) >= 0)


def _info(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(trace, list(args), terminal_width=140)
    return result.exit_code, result.output


@needs_shared
@pytest.mark.parametrize("name", [e.name for e in list_traces(variants=False)])
def test_trace_info_cli_on_every_shipped_trace(name: str) -> None:
    code, out = _info("info", name)
    assert code == 0, out
    first_word = {"jobs": "jobs", "nodes": "nodes", "load": "requests"}[next(
        e.kind for e in list_traces() if e.name == name)]
    assert first_word in out


def test_trace_info_json_and_list() -> None:
    code, out = _info("info", "philly", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["kind"] == "jobs" and data["jobs"] == 82_247 and data["tenants"] == 15
    assert dict(data["gang_sizes"])["1"] == 76_627
    code, out = _info("list")
    assert code == 0 and "philly" in out and "openb" in out


def test_trace_info_bad_input_is_one_error_line(tmp_path: Path) -> None:
    code, out = _info("info", "no-such-trace")
    assert code == 2 and out.startswith("error: ") and out.count("\n") == 1
    bad = tmp_path / "x.csv"
    bad.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,-5,1,0,vc\n")
    code, out = _info("info", str(bad))
    assert code == 2
    assert "x.csv:2: column 'duration': must be >= 0 (got '-5')" in out


def test_trace_info_skip_invalid_reports_drops(tmp_path: Path) -> None:
    bad = tmp_path / "x.csv"
    bad.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,-5,1,0,vc\n"
                   "2017-10-09 07:01:56,5,1,0,vc\n2017-10-09 07:01:57,5,0,0,vc\n")
    result = CliRunner().invoke(trace, ["info", str(bad), "--skip-invalid"])
    assert result.exit_code == 0
    assert "2 row(s) dropped" in result.output
    assert "duration: must be >= 0" in result.output
    assert "num_gpus: a training job needs at least 1 GPU" in result.output


# --- Philly ------------------------------------------------------------------------------------
def test_philly_reader_by_hand(tmp_path: Path) -> None:
    from kant.traces.philly import read_philly

    p = tmp_path / "p.csv"
    p.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n"
                 "2017-10-09 07:02:00,60,16,0,vc2\n"   # line 2: 16 GPUs -> 2 workers x 8
                 "2017-10-09 07:01:55,5.5,3,0,vc1\n"   # line 3: the earliest submit, the origin
                 "2017-10-09 07:01:55,7,1,0,vc2\n")    # line 4: same time as line 3, kept after it
    jobs = read_philly(p)
    assert list(jobs.names) == ["philly-3", "philly-4", "philly-2"]
    assert jobs.submit.tolist() == [0.0, 0.0, 5.0]  # 07:01:55 -> 0, 07:02:00 -> 5 s
    assert jobs.duration.tolist() == [5.5, 7.0, 60.0]
    assert jobs.workers.tolist() == [1, 1, 2] and jobs.gpus_per_worker.tolist() == [3, 1, 8]
    assert [jobs.tenant_names[t] for t in jobs.tenant] == ["vc1", "vc2", "vc2"]
    assert jobs.origin_epoch == 1507532515.0  # 2017-10-09 07:01:55 UTC


def _general_philly(monkeypatch: pytest.MonkeyPatch, *args: object, **kw: object) -> JobTable:
    """read_philly with its fast path switched off (the general, pyarrow.compute reader)."""
    from kant.traces import _philly_fast
    from kant.traces.philly import read_philly

    with monkeypatch.context() as m:
        m.setattr(_philly_fast, "read_philly_fast", lambda *a, **k: None)
        return read_philly(*args, **kw)  # type: ignore[arg-type]


def test_philly_fast_path_reads_the_bundled_file_as_the_general_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    from kant.traces._philly_fast import read_philly_fast
    from kant.traces.parquet import jobs_equal
    from kant.traces.philly import PHILLY_COLUMNS, bundled_philly_path, read_philly

    fast = read_philly_fast(bundled_philly_path(), PHILLY_COLUMNS, 8)
    assert fast is not None  # the bundled file is well-formed: the CLI's default never pays the general reader
    assert jobs_equal(fast, _general_philly(monkeypatch))
    full = read_philly()
    for limit in (0, 1, 1000, 82_247, 10**6):  # --limit: the first rows of the whole table, whole-file vocabulary
        want = full.take(np.arange(min(limit, len(full))))
        assert jobs_equal(read_philly(limit=limit), want)
        assert jobs_equal(load_trace("philly", limit=limit), want)


_PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
_PHILLY_ROWS = "2017-10-09 07:01:55,66.0,1,66.0,vc1\n2017-10-09 06:13:03,2951.0,2,5902.0,vc2\n" \
               "2017-10-09 06:13:03,10.0,16,160.0,vc1\n2017-10-08 23:59:59,0.0,8,0,vc3\n"


@pytest.mark.parametrize("body, fast", [
    (_PHILLY_ROWS, True),
    (_PHILLY_ROWS + "\n\n", True),  # blank lines at the end number nothing
    (_PHILLY_ROWS.replace("66.0,1,", "66,1.0,"), True),
    (_PHILLY_ROWS.replace("07:01:55", "07:01:55.250"), True),
    (_PHILLY_ROWS.replace("\n2017-10-09 06:13:03,2951", "\n\n2017-10-09 06:13:03,2951"), False),  # numbering
    (_PHILLY_ROWS.replace("\n2017-10-09 06:13:03,2951", "\n \n2017-10-09 06:13:03,2951"), False),
    (_PHILLY_ROWS.replace("\n", "\r\n"), False),
    (_PHILLY_ROWS.replace("vc2", '"vc2"'), False),
    (_PHILLY_ROWS.replace("vc2", " vc2"), False),  # trimmed by the general reader
    (_PHILLY_ROWS.replace("vc2", "vc2 "), False),
    (_PHILLY_ROWS.replace("07:01:55", "07:01:55Z"), False),  # a zone: the general reader converts it
    (_PHILLY_ROWS.replace("07:01:55", "07:01:55+02:00"), False),
    (_PHILLY_ROWS.replace("2017-10-09 07", "2017-10-09T07"), True),
    (_PHILLY_ROWS.replace("vc1\n", "ve\u0301\n", 1), True),  # UTF-8 beyond ASCII
])
def test_philly_fast_path_equals_general_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str,
                                                fast: bool) -> None:
    from kant.traces._philly_fast import read_philly_fast
    from kant.traces.parquet import jobs_equal
    from kant.traces.philly import PHILLY_COLUMNS, read_philly

    path = tmp_path / "philly.csv"
    path.write_bytes((_PHILLY_HEADER + body).encode("utf-8"))
    assert (read_philly_fast(path, PHILLY_COLUMNS, 8) is not None) == fast
    want = _general_philly(monkeypatch, path)
    assert jobs_equal(read_philly(path), want)
    assert jobs_equal(read_philly(path, limit=2), want.take(np.arange(2)))


@pytest.mark.parametrize("body", [
    _PHILLY_ROWS.replace("66.0,1,", "-1,1,"),
    _PHILLY_ROWS.replace("66.0,1,", "nan,1,"),
    _PHILLY_ROWS.replace("66.0,1,", "inf,1,"),
    _PHILLY_ROWS.replace("66.0,1,", ",1,"),
    _PHILLY_ROWS.replace("66.0,1,", "66.0,0,"),
    _PHILLY_ROWS.replace("66.0,1,", "66.0,1.5,"),
    _PHILLY_ROWS.replace("66.0,1,", "66.0,x,"),
    _PHILLY_ROWS.replace("vc2", ""),
    _PHILLY_ROWS.replace("2017-10-09 07:01:55", "2017-10-09 25:01:55"),
    _PHILLY_ROWS.replace("2017-10-09 07:01:55", "yesterday"),
    _PHILLY_ROWS.replace(",vc2", ",vc2,extra"),
])
def test_philly_bad_rows_go_to_the_general_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    """A file the fast path does not take gets the general reader's error (file, line, column), or the
    same rows dropped with --skip-invalid."""
    from kant.traces._philly_fast import read_philly_fast
    from kant.traces.parquet import jobs_equal
    from kant.traces.philly import PHILLY_COLUMNS, read_philly

    path = tmp_path / "philly.csv"
    path.write_text(_PHILLY_HEADER + body)
    assert read_philly_fast(path, PHILLY_COLUMNS, 8) is None
    with pytest.raises(InputError) as got:
        read_philly(path)
    with pytest.raises(InputError) as want:
        _general_philly(monkeypatch, path)
    assert str(got.value) == str(want.value) and "philly.csv:" in str(got.value)
    skipped, expected = Problems(skip=True), Problems(skip=True)
    assert jobs_equal(read_philly(path, problems=skipped), _general_philly(monkeypatch, path, problems=expected))
    assert skipped.summary() == expected.summary() != "no rows dropped"


def test_philly_readme_numbers() -> None:
    jobs = loaded("philly")
    assert isinstance(jobs, JobTable)
    assert len(jobs) == 82_247 and len(jobs.tenant_names) == 15
    sizes, counts = np.unique(jobs.total_gpus, return_counts=True)
    assert dict(zip(sizes.tolist(), counts.tolist(), strict=True)) == {
        1: 76_627, 2: 1_818, 4: 1_870, 8: 1_643, 12: 7, 16: 199, 24: 7, 32: 67, 64: 6, 128: 3}
    assert np.percentile(jobs.duration, 50) == pytest.approx(1144, abs=1)
    assert jobs.duration.max() == 4_628_226


@needs_shared
def test_philly_shared_copy_equals_bundled() -> None:
    a, b = loaded("philly"), loaded("philly-pollux")
    assert isinstance(a, JobTable) and isinstance(b, JobTable)
    assert np.array_equal(a.submit, b.submit) and a.names == b.names


# --- Gavel -------------------------------------------------------------------------------------
@needs_shared
def test_gavel_readme_numbers_and_calibration() -> None:
    from kant.traces.gavel import PHILLY_MEDIAN_DURATION_S, read_gavel_detail

    g = read_gavel_detail(shared("gavel-philly-vc/seed0"))
    jobs = g.jobs
    assert len(jobs) == 15_264 and len(jobs.tenant_names) == 15
    share = np.mean(jobs.total_gpus == 1)
    assert share == pytest.approx(0.687, abs=0.001)
    assert len(g.job_type_names) == 26 and g.total_steps.shape == (len(jobs),)
    # calibrated throughputs: every model's median job lasts the Philly median
    for code in range(len(g.job_type_names)):
        assert np.median(jobs.duration[g.job_type == code]) == pytest.approx(PHILLY_MEDIAN_DURATION_S)
    fixed = read_gavel_detail(shared("gavel-philly-vc/seed0/23dbec.trace.tsv"), steps_per_second=2.0)
    assert np.allclose(fixed.jobs.duration, fixed.total_steps / 2.0)


@needs_shared
def test_gavel_bad_rows(tmp_path: Path) -> None:
    from kant.traces.gavel import read_gavel

    lines = shared("gavel-philly-vc/seed0/23dbec.trace.tsv").read_text().splitlines()
    fields = lines[1].split("\t")
    fields[6] = "0"
    p = tmp_path / "vc.trace.tsv"
    p.write_text("\n".join([lines[0], "\t".join(fields), lines[2]]) + "\n")
    with pytest.raises(InputError, match=r"vc\.trace\.tsv:2: column 'scale_factor': must be >= 1 \(got '0'\)"):
        read_gavel(p)
    problems = Problems(skip=True)
    assert len(read_gavel(p, problems=problems)) == 2 and len(problems) == 1


# --- openb -------------------------------------------------------------------------------------
@needs_shared
def test_openb_default_readme_numbers() -> None:
    jobs = loaded("openb")
    assert isinstance(jobs, JobTable) and len(jobs) == 8_152
    counts = dict(zip(*[a.tolist() for a in np.unique(jobs.gpus_per_worker, return_counts=True)], strict=True))
    assert counts == {0: 1_088, 1: 6_989, 2: 16, 4: 15, 8: 44}
    frac = (jobs.gpus_per_worker == 1) & (jobs.gpu_milli < 1000)
    assert int(frac.sum()) == 3_078
    assert np.all(jobs.workers == 1)
    qos = dict(zip(*[a.tolist() for a in np.unique(jobs.priority, return_counts=True)], strict=True))
    assert qos == {0: 3_398, 1: 100, 2: 4_647, 3: 7}  # BE, Burstable, LS, Guaranteed
    # README: deletion - creation has p50 540 s; kant's duration starts at scheduling, so it is a bit shorter
    assert 400 < np.percentile(jobs.duration, 50) <= 540


@needs_shared
def test_openb_gpuspec_keeps_allowed_type_sets() -> None:
    from kant.traces.schema import gpu_type_alternatives, gpu_type_compatibility

    jobs = loaded("openb:gpuspec25")
    nodes = loaded("openb-nodes")
    assert isinstance(jobs, JobTable) and isinstance(nodes, Cluster)
    assert "V100M16|V100M32" in jobs.gpu_type_names and "T4" in jobs.gpu_type_names
    for name in jobs.gpu_type_names:
        assert set(gpu_type_alternatives(name)) <= set(nodes.gpu_type_names)
    compat = gpu_type_compatibility(jobs.gpu_type_names, nodes.gpu_type_names)
    assert compat.shape == (len(jobs.gpu_type_names) + 1, len(nodes.gpu_type_names))
    assert compat[-1].all()  # code -1 (any type) fits every node type
    code = jobs.gpu_type_names.index("V100M16|V100M32")
    assert {nodes.gpu_type_names[t] for t in np.flatnonzero(compat[code])} == {"V100M16", "V100M32"}
    assert np.all(compat[jobs.gpu_type].any(axis=1))
    typed = int(np.count_nonzero(jobs.gpu_type >= 0))
    gpu_jobs = int(np.count_nonzero(jobs.gpus_per_worker > 0))
    assert 0.2 < typed / gpu_jobs < 0.3  # 25 % of GPU tasks carry a constraint


@needs_shared
def test_openb_multigpu_untimed_pods_arrive_at_zero_and_stay() -> None:
    jobs = loaded("openb:multigpu40")
    assert isinstance(jobs, JobTable) and len(jobs) == 8_746
    assert np.all(jobs.submit == 0) and np.all(np.isinf(jobs.duration))
    assert jobs.names[:3] == ("openb-pod-0000", "openb-pod-0001", "openb-pod-0002")  # file order kept


@needs_shared
@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda f: f.__setitem__(5, "H100"), r"column 'gpu_spec': a GPU type no node has .*\(got 'H100'\)"),
        (lambda f: f.__setitem__(9, "1"), r"column 'deletion_time': negative duration"),
        (lambda f: f.__setitem__(4, "0"), r"column 'gpu_milli': zero GPUs for a GPU pod"),
        (lambda f: f.__setitem__(6, "Gold"), r"column 'qos': unknown QoS class"),
        (lambda f: f.__setitem__(3, "-1"), r"column 'num_gpu': must be >= 0"),
    ],
)
def test_openb_bad_pods(tmp_path: Path, edit: object, message: str) -> None:
    from kant.traces.openb import read_openb_pods

    src = shared(f"{OPENB}/openb_pod_list_default.csv").read_text().splitlines()
    fields = src[3].split(",")
    edit(fields)  # type: ignore[operator]
    p = tmp_path / "pods.csv"
    p.write_text("\n".join([*src[:3], ",".join(fields), *src[4:10]]) + "\n")
    nodes = shared(f"{OPENB}/openb_node_list_gpu_node.csv")
    with pytest.raises(InputError, match=r"pods\.csv:4: " + message):
        read_openb_pods(p, node_list=nodes)
    problems = Problems(skip=True)
    assert len(read_openb_pods(p, node_list=nodes, problems=problems)) == 8 and len(problems) == 1


@needs_shared
def test_openb_nodes_equal_inventory_reader() -> None:
    from kant.traces.inventory import read_inventory
    from kant.traces.parquet import clusters_equal

    for name, gpu_only in (("openb_node_list_gpu_node.csv", True), ("openb_node_list_all_node.csv", False)):
        p = shared(f"{OPENB}/{name}")
        from kant.traces.openb import read_openb_nodes

        assert clusters_equal(read_openb_nodes(p, gpu_nodes_only=gpu_only), read_inventory(p, gpu_nodes_only=gpu_only))
    c = loaded("openb-nodes")
    assert isinstance(c, Cluster) and c.n_nodes == 1_213 and c.total_gpus == 6_212 and len(c.gpu_type_names) == 7
    assert loaded("openb-nodes:all").n_nodes == 1_523  # type: ignore[union-attr]


# --- PAI, DLRM, Tiresias -----------------------------------------------------------------------
@needs_shared
def test_pai_machines() -> None:
    from kant.traces.pai import read_pai_machines

    c = loaded("pai-machines")
    assert isinstance(c, Cluster)
    assert c.n_nodes == 1_897 - 83 and c.total_gpus == 6_742  # README: 83 CPU machines, 6742 GPUs
    everything = read_pai_machines(shared("alibaba-pai-gpu-v2020/pai_machine_spec.csv"), gpu_nodes_only=False)
    assert everything.n_nodes == 1_897
    assert int(c.cpu_milli[0]) % 1000 == 0 and int(c.memory_mib[0]) % 1024 == 0


@needs_shared
def test_dlrm_instances_are_inference_jobs() -> None:
    jobs = loaded("dlrm")
    assert isinstance(jobs, JobTable) and len(jobs) == 23_871
    assert np.all(jobs.kind == int(JobKind.INFERENCE))
    assert int(np.count_nonzero(jobs.gpus_per_worker == 1)) == 7_386  # HN rows
    assert int(np.count_nonzero(jobs.gpus_per_worker == 0)) == 16_485  # CN rows
    assert len(jobs.tenant_names) == 156
    assert np.isinf(jobs.duration).any() and np.all(jobs.duration >= 0)


@needs_shared
def test_dlrm_bad_rows(tmp_path: Path) -> None:
    import gzip

    from kant.traces.dlrm import read_dlrm

    lines = gzip.decompress(shared("alibaba-dlrm-gpu-v2025/disaggregated_DLRM_trace.csv.gz").read_bytes()
                            ).decode().splitlines()[:6]
    fields = lines[2].split(",")
    fields[5] = "0"  # an HN instance without GPU
    lines[2] = ",".join(fields)
    p = tmp_path / "dlrm.csv"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"dlrm\.csv:3: column 'gpu_request': zero GPUs for a GPU instance"):
        read_dlrm(p)


@needs_shared
def test_tiresias_jobs_and_clusters() -> None:
    jobs = loaded("tiresias")
    assert isinstance(jobs, JobTable) and len(jobs) == 60
    sizes, counts = np.unique(jobs.total_gpus, return_counts=True)
    assert dict(zip(sizes.tolist(), counts.tolist(), strict=True)) == {1: 30, 2: 10, 4: 10, 8: 10}
    assert jobs.duration.min() == 121 and jobs.duration.max() == 1800
    c = loaded("tiresias-cluster:n32g4")
    assert isinstance(c, Cluster)
    assert (c.n_nodes, c.total_gpus, c.n_leaves, c.n_spines) == (32, 128, 1, 1)
    assert int(c.cpu_milli[0]) == 40_000 and int(c.memory_mib[0]) == 256 * 1024
    big = loaded("tiresias-cluster:n256g8")
    assert isinstance(big, Cluster) and (big.n_nodes, big.n_leaves) == (256, 8)
    from kant.traces.tiresias import read_tiresias_gput

    assert len(read_tiresias_gput(shared("tiresias-sample/yarn-gput1000.csv"))) == 1_001


# --- load traces -------------------------------------------------------------------------------
@needs_shared
def test_azure_requests() -> None:
    code, conv = loaded("azure:code"), loaded("azure:conv")
    assert isinstance(code, LoadSeries) and isinstance(conv, LoadSeries)
    assert (len(code), len(conv)) == (8_819, 19_366)
    assert np.percentile(code.input_tokens, 50) == pytest.approx(1469, abs=1)
    assert np.percentile(conv.output_tokens, 50) == pytest.approx(129, abs=1)
    both = load_load("azure")
    assert len(both) == 8_819 + 19_366 and set(both.stream_names) == {"code", "conv"}
    assert both.origin_epoch == min(code.origin_epoch or 0, conv.origin_epoch or 0)
    assert 55 * 60 < code.span < 60 * 60


@needs_shared
def test_servegen_rates_and_tokens() -> None:
    from kant.traces.servegen import read_servegen_tokens

    s = loaded("servegen:language-m-small")
    assert isinstance(s, LoadSeries) and s.kind == "rate" and s.window == 600
    assert len(s) == 86_688 and len(s.stream_names) == 43
    assert s.span == pytest.approx(14 * 86400)
    toks = read_servegen_tokens(shared("servegen/multimodal-mm-image-datasets.jsonl.gz"),
                                fields=("text_tokens", "output_tokens"))
    assert {t.client for t in toks} <= set(range(35)) and len(toks) > 0
    assert all(abs(t.probabilities.sum() - 1) < 1e-6 for t in toks)


@needs_shared
def test_genai_requests_and_qps() -> None:
    r = loaded("genai")
    assert isinstance(r, LoadSeries) and len(r) == 26_823 and r.kind == "requests"
    assert np.nanpercentile(r.duration, 50) == pytest.approx(23, abs=1)
    q = loaded("genai:qps")
    assert isinstance(q, LoadSeries) and q.kind == "rate" and q.window == 57
    assert set(q.stream_names) == {"Generative Requests", "API Requests"}
    assert q.span == pytest.approx(22.3 * 3600, rel=0.01)


# --- registry ----------------------------------------------------------------------------------
def test_registry_kinds_and_errors(tmp_path: Path) -> None:
    assert len(load_trace("philly")) == 82_247
    with pytest.raises(InputError, match="unknown trace"):
        load_any("nope")
    if SHARED is not None:
        with pytest.raises(InputError, match="node inventory, not a job trace"):
            load_trace("openb-nodes")
        with pytest.raises(InputError, match="unknown variant"):
            load_any("openb:nope")
        assert load_nodes("openb-nodes").n_nodes == 1_213
    assert load_nodes("64x8:V100").total_gpus == 512  # spec strings still go to load_cluster
    odd = tmp_path / "odd.csv"
    odd.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="unrecognised trace layout"):
        load_any(str(odd))
    sch = tmp_path / "jobs.csv"
    sch.write_text("name,submit,duration,workers,gpus_per_worker,gpu_type,tenant\nj1,0,10,2,4,A100,t\nj2,5,1,1,1,,t\n")
    jobs = load_trace(str(sch))
    assert jobs.names == ("j1", "j2") and list(jobs.total_gpus) == [8, 1] and jobs.gpu_type_name(1) is None


def test_errors_are_kant_errors_not_tracebacks(tmp_path: Path) -> None:
    for content in (b"", b"\xff\xfe\x00garbage", b"timestamp,duration\n"):
        p = tmp_path / "t.csv"
        p.write_bytes(content)
        with pytest.raises(KantError):
            load_any(str(p))


# --- a reader added with one line (registry.READERS) -------------------------------------------
def test_a_reader_added_with_one_registry_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kant.traces import registry

    # the module: one function from a path to a job table
    (tmp_path / "tiny_reader.py").write_text(
        "from kant.model.job import JobTableBuilder\n"
        "def read_tiny(path, problems=None):\n"
        "    b = JobTableBuilder(source=str(path))\n"
        "    for line in open(path).read().split()[1:]:\n"
        "        name, gpus = line.split(',')\n"
        "        b.add(name, submit=0.0, duration=1.0, gpus_per_worker=int(gpus))\n"
        "    return b.build()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    data = tmp_path / "tiny.csv"
    data.write_text("tiny_job,tiny_gpus\na,1\nb,2\n")
    # the registry line
    line = registry.Reader("tiny", "jobs", str(data), "a two-job test format", "tiny_reader:read_tiny",
                           header=frozenset({"tiny_job", "tiny_gpus"}))
    monkeypatch.setattr(registry, "READERS", (*registry.READERS, line))
    assert [e.name for e in registry.list_traces()][-1] == "tiny"
    by_name = registry.load_trace("tiny")
    by_path = registry.load_trace(str(data))  # recognised by its header
    assert list(by_name.names) == list(by_path.names) == ["a", "b"]
    assert by_name.gpus_per_worker.tolist() == [1, 2]


def test_variants_of_an_added_reader_are_named_listed_and_checked(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``name:<variant>`` forms come from the same line: files found by a glob in the shared folder."""
    from kant.traces import registry

    for vc, gpus in (("a", 1), ("b", 4)):
        (tmp_path / "tiny").mkdir(exist_ok=True)
        (tmp_path / "tiny" / f"{vc}.csv").write_text(f"name,submit,duration,gpus_per_worker\n{vc}1,0,5,{gpus}\n")
    monkeypatch.setenv("KANT_TRACES_DIR", str(tmp_path))
    line = registry.Reader("tiny", "jobs", "tiny/a.csv", "tiny jobs", "kant.traces.registry:read_path",
                           variants=registry.Variants("tiny/{v}.csv", "tiny jobs of {v}", found="*"))
    monkeypatch.setattr(registry, "READERS", (*registry.READERS, line))
    assert [e.name for e in registry.list_traces()][-3:] == ["tiny", "tiny:a", "tiny:b"]
    assert [e.name for e in registry.list_traces(variants=False)][-1] == "tiny"
    assert registry.resolve_name("tiny:b") == registry.TraceEntry("tiny:b", "jobs", "tiny/b.csv", "tiny jobs of b")
    assert registry.load_trace("tiny:b").gpus_per_worker.tolist() == [4]
    with pytest.raises(InputError, match="unknown variant; expected one of tiny:a, tiny:b"):
        load_any("tiny:c")
    # the built-in traces are lines of the same table
    assert [r.name for r in registry.READERS][:3] == ["philly", "philly-pollux", "gavel"]
