"""Bad input ends in a clear error naming file, line, column or key path -- never a traceback."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from kant.config import load_policy
from kant.errors import ConfigError, InputError
from kant.traces import Problems, load_cluster, parse_cluster_spec, read_inventory, read_philly

HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
GOOD = "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("2017-13-09 07:01:55,66.0,1,66.0,vc\n",
         r"x\.csv:3: column 'timestamp': not a date-time.*'2017-13-09 07:01:55'"),
        ("2017-10-09 07:01:55,-5,1,66.0,vc\n", r"x\.csv:3: column 'duration': must be >= 0 \(got '-5'\)"),
        ("2017-10-09 07:01:55,abc,1,66.0,vc\n", r"column 'duration': not a number"),
        ("2017-10-09 07:01:55,nan,1,66.0,vc\n", r"column 'duration': must be a finite number"),
        ("2017-10-09 07:01:55,5,0,66.0,vc\n", r"column 'num_gpus': a training job needs at least 1 GPU"),
        ("2017-10-09 07:01:55,5,1.5,66.0,vc\n", r"column 'num_gpus': not an integer"),
        ("2017-10-09 07:01:55,5,1,66.0,\n", r"column 'cluster': empty virtual cluster"),
        ("2017-10-09 07:01:55,5,1\n", r"x\.csv:3: expected 5 fields, found 3"),
    ],
)
def test_bad_philly_rows(tmp_path: Path, row: str, message: str) -> None:
    p = tmp_path / "x.csv"
    p.write_text(HEADER + GOOD + row + GOOD)
    with pytest.raises(InputError, match=message):
        read_philly(p)
    problems = Problems(skip=True)
    jobs = read_philly(p, problems=problems)
    assert len(jobs) == 2 and len(problems) == 1  # the bad row is dropped and reported
    assert "1 row(s) dropped" in problems.summary()


def test_philly_missing_column_and_empty_and_gz(tmp_path: Path) -> None:
    p = tmp_path / "x.csv"
    p.write_text("timestamp,duration,gpus,cluster\n" + GOOD)
    with pytest.raises(InputError, match=r"x\.csv:1: missing column\(s\) num_gpus"):
        read_philly(p)
    p.write_text("")
    with pytest.raises(InputError, match="file is empty"):
        read_philly(p)
    p.write_text(HEADER)
    with pytest.raises(InputError, match="no valid job rows"):
        read_philly(p)
    with pytest.raises(InputError, match="file not found"):
        read_philly(tmp_path / "missing.csv")
    gz = tmp_path / "x.csv.gz"
    gz.write_bytes(gzip.compress((HEADER + GOOD).encode()))
    assert len(read_philly(gz)) == 1
    bad_gz = tmp_path / "bad.csv.gz"
    bad_gz.write_bytes(b"not gzip at all")
    with pytest.raises(InputError):
        read_philly(bad_gz)


@pytest.mark.parametrize(
    ("spec", "nodes", "gpus", "leaves", "spines"),
    [
        ("64x8:V100,leaf=8,spine=4", 64, 512, 8, 2),
        ("100x8:H100+20x4:A10,leaf=16", 120, 880, 8, 1),  # 120 nodes / 16 per leaf -> 8 leaves
        ("1,000 nodes x 8 H100, 32 nodes per leaf, 8 leaves per spine", 1000, 8000, 32, 4),
        ("philly", 64, 512, 8, 2),
    ],
)
def test_cluster_specs(spec: str, nodes: int, gpus: int, leaves: int, spines: int) -> None:
    c = load_cluster(spec)
    assert (c.n_nodes, c.total_gpus, c.n_leaves, c.n_spines) == (nodes, gpus, leaves, spines)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("philly-80", "80 nodes, 640 GPUs V100, 10 leaves, 2 spines"),
        ("100x8:H100+20x4:A10,leaf=16",
         "120 nodes, 880 GPUs (100 nodes / 800 GPUs H100; 20 nodes / 80 GPUs A10), 8 leaves, 1 spine"),
        ("1x1:V100", "1 node, 1 GPU V100, 1 leaf, 1 spine"),
    ],
)
def test_cluster_description(spec: str, words: str) -> None:
    """The report's and the run's one-line description: one GPU type named once, several split by type."""
    assert load_cluster(spec).describe() == words


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty cluster spec"),
        ("64y8", "bad node group"),
        ("64x8:V100,leafs=8", "unknown option 'leafs=8'"),
        ("64x8:V100,leaf=0", "leaf must be >= 1"),
        ("0x8", "node count must be >= 1"),
    ],
)
def test_bad_cluster_specs(spec: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_cluster_spec(spec)


def test_inventory_files(tmp_path: Path) -> None:
    p = tmp_path / "inv.csv"
    p.write_text("name,gpu_type,gpus,leaf\nn1,A100,8,l1\nn2,A100,8,l1\nn3,H100,4,l2\ncpu,,0,l2\n")
    c = read_inventory(p)
    assert c.n_nodes == 3 and c.n_leaves == 2 and c.total_gpus == 20
    p.write_text("name,gpu_type,gpus\nn1,A100,8\nn1,A100,8\n")
    with pytest.raises(InputError, match=r"inv\.csv:3: column 'name': duplicate node name \(first on line 2\)"):
        read_inventory(p)
    p.write_text("name,gpu_type,gpus\nn1,A100,-8\n")
    with pytest.raises(InputError, match=r"inv\.csv:2: column 'gpus': must be >= 0"):
        read_inventory(p)
    y = tmp_path / "c.yaml"
    y.write_text("nodes:\n  - {count: 4, gpus: 8, gpu_type: H100}\ntopology: {nodes_per_leaf: 2}\n")
    assert load_cluster(str(y)).n_leaves == 2
    y.write_text("nodes:\n  - {count: 4, gpu: 8}\n")
    with pytest.raises(InputError, match=r"nodes\[0\]: unknown key\(s\) \['gpu'\]"):
        load_cluster(str(y))


def test_openb_node_list(tmp_path: Path) -> None:
    from kant.traces.registry import shared_traces_dir

    base = shared_traces_dir()
    if base is None:
        pytest.skip("shared traces not available")
    c = read_inventory(base / "alibaba-openb-gpu-v2023" / "openb_node_list_gpu_node.csv")
    assert c.n_nodes == 1213 and c.total_gpus == 6212


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "policy.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: x\nactions: [allocate]\nplugins:\n  - name: nope\n",
         r"policy\.yaml: plugins\[0\]\.name: unknown plugin 'nope'; known: .*binpack"),
        ("name: x\nactions: [allocate]\nplugins:\n  - name: binpack\n    weight: heavy\n",
         r"plugins\[0\]\.weight: Input should be a valid number"),
        ("name: x\nactions: [{name: allocate, args: {blocking: maybe}}]\n",
         r"actions\[0\]\.args\.blocking: Input should be a valid boolean"),
        ("name: x\nactions: [{name: allocate, args: {blok: true}}]\n",
         r"actions\[0\]\.args\.blok: Extra inputs are not permitted"),
        ("name: x\nactions: [allocat]\n", r"actions\[0\]: unknown action 'allocat'"),
        ("name: x\nactions: []\n", r"actions: List should have at least 1 item"),
        ("name: x\nactions: [allocate]\nplugins:\n  - name: binpack\n    args: {foo: 1}\n",
         r"plugins\[0\]\.args\.foo: Extra inputs are not permitted"),
        ("name: x\nactions: [allocate]\nplugins:\n  - name: binpack\n  - name: binpack\n",
         r"plugins\[1\]\.name: plugin 'binpack' already listed at plugins\[0\]"),
        ("name: x\nactions: [allocate]\nsurprise: 1\n", r"surprise: Extra inputs are not permitted"),
        ("name: x\nactions: [allocate\n", r"line \d+: not valid YAML"),
        ("- just a list\n", r"a policy file must be a mapping"),
        ("name: x\nactions: [allocate]\nplugins:\n  - name: binpack\n    weight: -1\n",
         r"plugins\[0\]\.weight: Input should be greater than or equal to 0"),
    ],
)
def test_bad_policy_files(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_policy(_write(tmp_path, text))


def test_unknown_policy_name() -> None:
    with pytest.raises(ConfigError, match=r"no such policy file or bundled policy; bundled: .*k8s-default"):
        load_policy("does-not-exist")


def test_every_bundled_policy_loads() -> None:
    from kant.config import bundled_policies

    names = bundled_policies()
    assert {"k8s-default", "volcano-binpack", "fifo-strict"} <= set(names)
    for name in names:
        assert load_policy(name).name


# --- issue 17: bad input that crashed, hung or was accepted silently ---------------------------------------
def _kant(args: list[str]) -> tuple[int, str]:
    """Run the CLI; return the exit code and its output."""
    from click.testing import CliRunner

    from kant.cli.main import cli

    r = CliRunner().invoke(cli, args)
    return r.exit_code, r.output


def _one_error_line(code: int, output: str) -> str:
    lines = [ln for ln in output.splitlines() if ln.strip()]
    assert code == 2, output
    assert "Traceback" not in output
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    return lines[0]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("4x0:V100", r"cluster spec: the cluster has no GPUs"),  # crashed (IndexError) in the simulator
        ("4 nodes x 0 V100", r"cluster spec: the cluster has no GPUs"),
        ("99999999x8:V100", r"node group '99999999x8:V100': at most 1,000,000 nodes in a cluster"),  # hung
        ("600000x8+600000x8", r"at most 1,000,000 nodes in a cluster \(got 1200000\)"),
        ("2000000 nodes x 8 H100", r"at most 1,000,000 nodes in a cluster"),
        ("4x99999:V100", r"node group '4x99999:V100': at most 1,024 GPUs per node \(got 99999\)"),  # was accepted
    ],
)
def test_absurd_cluster_specs(tmp_path: Path, spec: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_cluster_spec(spec)
    line = _one_error_line(*_kant(["simulate", "--cluster", spec, "--out", str(tmp_path / "o")]))
    assert line.startswith("error: cluster spec: ")


def test_cpu_only_nodes_next_to_gpu_nodes() -> None:
    c = parse_cluster_spec("4x8:V100+2x0:CPU")  # 0 GPUs per node: a CPU-only node group (docs/clusters.md)
    assert (c.n_nodes, c.total_gpus, c.n_gpu_nodes) == (6, 32, 4)


def test_absurd_cluster_yaml(tmp_path: Path) -> None:
    y = tmp_path / "c.yaml"
    for text, message in [
        ("nodes:\n  - {count: 4, gpus: 0}\n", r"c\.yaml: the cluster has no GPUs"),
        ("nodes:\n  - {count: 99999999, gpus: 8}\n", r"c\.yaml: nodes\[0\]: at most 1,000,000 nodes"),
        ("nodes:\n  - {count: 4, gpus: 8}\n  - {count: 999999, gpus: 8}\n", r"nodes\[1\]: at most 1,000,000 nodes"),
        ("nodes:\n  - {count: 4, gpus: 99999}\n", r"nodes\[0\]: at most 1,024 GPUs per node"),
    ]:
        y.write_text(text)
        with pytest.raises(InputError, match=message):
            load_cluster(str(y))
        _one_error_line(*_kant(["simulate", "--cluster", str(y), "--out", str(tmp_path / "o")]))


def test_inventory_leaf_under_two_spines(tmp_path: Path) -> None:
    p = tmp_path / "inv.csv"
    p.write_text("name,gpu_type,gpus,leaf,spine\nn1,A100,8,l1,s1\nn2,A100,8,l2,s1\nn3,A100,8,l1,s2\n")
    message = r"inv\.csv:4: column 'spine': leaf 'l1' is already under spine 's1' \(line 2\)"
    with pytest.raises(InputError, match=message):
        read_inventory(p)
    line = _one_error_line(*_kant(["simulate", "--cluster", str(p), "--out", str(tmp_path / "o")]))
    assert "inv.csv:4" in line
    p.write_text("name,gpu_type,gpus,leaf,spine\nn1,A100,8,l1,s1\nn2,A100,8,l1,\nn3,A100,9999,l2,s1\n")
    with pytest.raises(InputError, match=r"inv\.csv:4: column 'gpus': at most 1,024 GPUs per node"):
        read_inventory(p)
    p.write_text("name,gpu_type,gpus,leaf,spine\nn1,A100,8,l1,s1\nn2,A100,8,l1,\n")  # no spine: the leaf's
    assert read_inventory(p).n_spines == 1


def test_mapped_nodes_leaf_under_two_spines_and_limits(tmp_path: Path) -> None:
    data = tmp_path / "nodes.csv"
    m = tmp_path / "m.yaml"
    m.write_text("kind: nodes\nfile: nodes.csv\n"
                 "columns: {name: n, gpus: g, gpu_type: t, leaf: l, spine: s, count: c}\n")
    for text, message in [
        ("n,g,t,l,s,c\nn1,8,A100,l1,s1,1\nn2,8,A100,l1,s2,1\n",
         r"nodes\.csv:3: column 's': a leaf sits under one spine"),
        ("n,g,t,l,s,c\nn1,2000,A100,l1,s1,1\n", r"nodes\.csv:2: column 'g': at most 1,024 GPUs per node"),
        ("n,g,t,l,s,c\n" + "".join(f"n{i},8,A,l{i},s1,100000\n" for i in range(11)),
         r"nodes\.csv:12: column 'c': at most 1,000,000 nodes in a cluster"),
    ]:
        data.write_text(text)
        with pytest.raises(InputError, match=message):
            load_nodes_any(str(m))
        _one_error_line(*_kant(["simulate", "--cluster", str(m), "--out", str(tmp_path / "o")]))


def load_nodes_any(arg: str) -> object:
    from kant.traces.registry import load_nodes

    return load_nodes(arg)


def test_duplicate_job_names(tmp_path: Path) -> None:
    p = tmp_path / "jobs.csv"
    p.write_text("name,submit,duration,workers\na,0,100,1\nb,10,100,1\na,20,100,1\nb,30,100,1\n")
    from kant.traces.registry import load_trace

    with pytest.raises(InputError, match=r"jobs\.csv:4: column 'name': duplicate job name \(first on line 2\)"):
        load_trace(str(p))
    problems = Problems(skip=True)
    jobs = load_trace(str(p), problems=problems)
    assert list(jobs.names) == ["a", "b"] and len(problems) == 2
    line = _one_error_line(*_kant(["simulate", "--trace", str(p), "--cluster", "tiny", "--out", str(tmp_path / "o")]))
    assert line == "error: " + str(p) + ":4: column 'name': duplicate job name (first on line 2) (got 'a')"
    m = tmp_path / "m.yaml"  # the same through a mapping file with renamed columns
    (tmp_path / "j.csv").write_text("j,s,d\nx,0,10\ny,1,10\nx,2,10\n")
    m.write_text("file: j.csv\ncolumns: {name: j, submit: s, duration: d}\n")
    with pytest.raises(InputError, match=r"j\.csv:4: column 'j': duplicate job name \(first on line 2\)"):
        load_trace(str(m))


@pytest.mark.parametrize(
    "args",
    [
        ["simulate", "--cross-leaf-penalty", "{v}"],  # nan crashed mid-run ("event time is NaN")
        ["simulate", "--cross-spine-penalty", "{v}"],
        ["simulate", "--restart-cost", "{v}"],
        ["simulate", "--checkpoint-interval", "{v}"],
        ["compare", "--policy", "kant", "--cross-leaf-penalty", "{v}"],
        ["trace", "convert", "tiresias", "{out}/x.parquet", "--scale-load", "{v}"],
        ["trace", "convert", "tiresias", "{out}/x.parquet", "--sample", "{v}"],
        ["trace", "convert", "tiresias", "{out}/x.parquet", "--resize-mean", "{v}"],
        ["experiment", "fgd", "--inflate", "{v}"],  # nan and inf crashed (ValueError, OverflowError)
        ["serve", "--clock-start", "{v}"],
        ["serve", "--speed", "{v}"],
        ["serve", "--predict-every", "{v}"],
        ["top", "--interval", "{v}"],
    ],
)
@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999"])
def test_float_flags_reject_nan_and_inf(tmp_path: Path, args: list[str], value: str) -> None:
    argv = [a.format(v=value, out=tmp_path) for a in args]
    if args[0] in ("simulate", "compare"):  # small, should a flag ever be let through again
        argv += ["--cluster", "tiny", "--limit", "5", "--out", str(tmp_path / "o")]
    line = _one_error_line(*_kant(argv))
    option = args[-2]
    assert line.startswith(f"error: Invalid value for '{option}': '{value}' ")
    assert line.endswith("--help')")
    assert ("is not a number" if "nan" in value.lower() else "must be a finite number") in line


def test_window_rejects_an_infinite_time(tmp_path: Path) -> None:
    line = _one_error_line(*_kant(["trace", "convert", "philly", str(tmp_path / "x.parquet"), "--window", "0:1e999"]))
    assert line == "error: command line: --window: '1e999' is not a finite time"


@pytest.mark.parametrize(
    "args",
    [
        ["simulate", "--cluster", "tiny", "--limit", "5", "--out", "{out}/o"],
        ["compare", "--policy", "kant", "--cluster", "tiny", "--limit", "5", "--out", "{out}/o"],
        ["trace", "convert", "tiresias", "{out}/x.parquet", "--sample", "0.5"],
        ["experiment", "fgd", "--out", "{out}/o"],
        ["serve"],
    ],
)
def test_a_negative_seed_is_refused(tmp_path: Path, args: list[str]) -> None:
    """NumPy's generators take no negative seed: `kant simulate --seed -1` ended in a traceback."""
    line = _one_error_line(*_kant([a.format(out=tmp_path) for a in args] + ["--seed", "-1"]))
    assert line.startswith("error: Invalid value for '--seed': -1 is not in the range x>=0")
