"""`kant sweep` in local processes: study validation, run keys, resuming, the results table, failures."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

import kant
from kant.cli.main import cli
from kant.errors import ConfigError
from kant.sweep import load_study, run_study
from kant.sweep.results import TIMING_COLUMNS, RunStore, results_table
from kant.sweep.runners import run_local
from kant.sweep.runs import RunOutcome, RunTask, plan_runs
from sweep_helpers import SMALL_STUDY, write_study


@pytest.fixture(scope="module")
def local_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small study run once in this process (its folder)."""
    root = tmp_path_factory.mktemp("local")
    study = load_study(write_study(root))
    summary = run_study(study, root / "out", workers=1)
    assert summary.runs == 8 and summary.done == 8 and not summary.failed
    return root / "out"


# --- validation: one line naming the key path ----------------------------------------------------
@pytest.mark.parametrize(("change", "needle"), [
    ({"traces": [{"name": "philly", "limt": 5}]}, "traces[0].limt: Extra inputs are not permitted"),
    ({"seeds": [0, 1, 0]}, "seeds[2]: 0 is already listed at seeds[0]"),
    ({"seeds": [0, -1]}, "seeds[1]: Input should be greater than or equal to 0"),  # every run failed
    ({"cross_leaf_penalty": [-0.1]}, "cross_leaf_penalty[0]: must be >= 0"),
    ({"clusters": ["64y8"]}, "clusters[0]:"),
    ({"policies": ["no-such-policy"]}, "policies[0].name: no-such-policy: no such policy file or bundled policy"),
    ({"policies": [{"name": "volcano-binpack", "set": {"plugins.binpak.weight": [1]}}]},
     "policies[0].set.plugins.binpak.weight: the policy has no plugin 'binpak'"),
    ({"policies": [{"name": "volcano-binpack", "set": {"plugins.binpack.args.nope": [1]}}]},
     "policies[0].set.plugins.binpack.args.nope: volcano-binpack[plugins.binpack.args.nope=1]: plugins["),
    ({"policies": [{"name": "volcano-binpack", "set": {"binpack": [1]}}]},
     "policies[0].set.binpack: expected plugins."),
    ({"traces": [{"name": "philly", "window": "7d"}]}, "traces[0].window: expected START:END"),
])
def test_bad_study_is_one_line_naming_the_key(tmp_path: Path, change: dict[str, object], needle: str) -> None:
    path = write_study(tmp_path, yaml.safe_dump({**yaml.safe_load(SMALL_STUDY), **change}))
    with pytest.raises(ConfigError) as info:
        load_study(path)
    assert needle in str(info.value), str(info.value)
    r = CliRunner().invoke(cli, ["sweep", str(path), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.output.startswith("error: ") and needle in r.output.replace("\n", "")


def test_an_unreadable_trace_is_one_line_naming_its_entry(tmp_path: Path) -> None:
    path = write_study(tmp_path, SMALL_STUDY.replace("{name: philly, limit: 200}", "no-such-trace.csv"))
    r = CliRunner().invoke(cli, ["sweep", str(path), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.output.startswith(f"error: {path}: traces[0]: no-such-trace.csv"), r.output


def test_policy_variants_expand_the_grid(tmp_path: Path) -> None:
    variants = "{plugins.binpack.weight: [1, 10], actions.allocate.args.blocking: [true]}"
    path = write_study(tmp_path, SMALL_STUDY.replace("label: binpack", f"label: binpack\n    set: {variants}"))
    study = load_study(path)
    labels = [p.label for p in study.policies]
    assert labels == ["kant", "binpack[plugins.binpack.weight=1,actions.allocate.args.blocking=true]",
                      "binpack[plugins.binpack.weight=10,actions.allocate.args.blocking=true]"]
    weights = [next(p["weight"] for p in v.doc["plugins"] if p["name"] == "binpack") for v in study.policies[1:]]
    assert weights == [1.0, 10.0]
    assert len(study) == 3 * 2 * 2 == len(list(study.points()))


# --- run keys -------------------------------------------------------------------------------------
def test_run_keys_follow_the_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    study = load_study(write_study(tmp_path))
    keys = [t.key for t in plan_runs(study, tmp_path / "inputs")]
    assert len(set(keys)) == 8  # every point differs (policy, cluster or seed)
    assert [t.key for t in plan_runs(study, tmp_path / "inputs2")] == keys  # stable, wherever prepared
    other = load_study(write_study(tmp_path / "b", SMALL_STUDY.replace("limit: 200", "limit: 201")))
    assert not set(keys) & {t.key for t in plan_runs(other, tmp_path / "inputs3")}  # trace content
    monkeypatch.setattr(kant, "__version__", "99.0")
    assert not set(keys) & {t.key for t in plan_runs(study, tmp_path / "inputs4")}  # kant version


# --- results --------------------------------------------------------------------------------------
def test_table_has_one_row_per_run_and_the_comparison_columns(local_study: Path, tmp_path: Path) -> None:
    table = pq.read_table(local_study / "results.parquet")
    assert table.num_rows == 8
    rows = table.to_pylist()
    assert {r["status"] for r in rows} == {"done"}
    assert [(r["policy"], r["cluster"][0], r["seed"]) for r in rows[:4]] == [
        ("kant", "2", 0), ("kant", "2", 1), ("binpack", "2", 0), ("binpack", "2", 1)]
    # metric columns are named as in `kant compare`'s CSV (less the wall-clock ones)
    r = CliRunner().invoke(cli, ["compare", "--limit", "200", "--cluster", "2x8:V100,leaf=1,spine=1", "--policy",
                                 "kant", "--jobs", "1", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    with (tmp_path / "comparison.csv").open() as f:
        csv_row = next(csv.DictReader(f))
    metric_columns = set(csv_row) - {"name"} - TIMING_COLUMNS
    assert metric_columns <= set(table.column_names)
    # and hold the same values as that comparison's run (kant, first cluster, seed 0)
    for col in ("gar.window", "jwtd.overall.p90", "counts.finished", "jct.overall.mean"):
        assert float(csv_row[col]) == pytest.approx(rows[0][col], rel=1e-12), col


def test_per_run_files_agree_with_the_table(local_study: Path) -> None:
    rows = pq.read_table(local_study / "results.parquet").to_pylist()
    for row in rows:
        folder = local_study / "runs" / row["key"]
        report = json.loads((folder / "result.json").read_text())
        assert (report["study"]["seed"], report["study"]["policy"]) == (row["seed"], row["policy"])
        jobs = pq.read_table(folder / "jobs.parquet").to_pandas()
        waits = jobs.loc[(jobs.kind == "training") & jobs.start.notna(), "wait"].to_numpy()
        assert np.percentile(waits, [50, 90, 99]).tolist() == [
            row["jwtd.overall.p50"], row["jwtd.overall.p90"], row["jwtd.overall.p99"]]


def test_rerun_skips_every_done_run_and_force_redoes_them(local_study: Path, tmp_path: Path) -> None:
    before = (local_study / "results.parquet").read_bytes()
    study = load_study(write_study(tmp_path))
    seen: list[tuple[int, int, int]] = []
    summary = run_study(study, local_study, workers=1, progress=lambda *a: seen.append(a))
    assert (summary.skipped, summary.done, summary.failed) == (8, 0, {})
    assert seen == [(0, 0, 0)]
    assert (local_study / "results.parquet").read_bytes() == before
    # --force in 2 processes: every run again, the same table bit for bit
    r = CliRunner().invoke(cli, ["sweep", str(tmp_path / "study.yaml"), "--out", str(local_study), "--force",
                                 "--jobs", "2"])
    assert r.exit_code == 0, r.output
    assert "8 runs: 0 already done, 8 done now, 0 failed" in r.output
    assert (local_study / "results.parquet").read_bytes() == before
    assert "<img" in (local_study / "report.html").read_text()


def test_a_failing_run_is_reported_and_the_others_go_on(tmp_path: Path) -> None:
    study = load_study(write_study(tmp_path))
    tasks = plan_runs(study, tmp_path / "inputs")[:2]
    doc = {**tasks[0].policy_doc, "plugins": [{"name": "binpack", "args": {"weight": -1}}]}
    bad = RunTask("bad" + tasks[0].key[3:], tasks[0].params, tasks[0].trace, tasks[0].cluster, None, doc)
    outcomes: list[RunOutcome] = []
    run_local([tasks[0], bad, tasks[1]], outcomes.append, workers=1)
    errors = {o.key: o.error for o in outcomes}
    assert errors[tasks[0].key] is None and errors[tasks[1].key] is None
    assert "plugins[0].args.weight" in str(errors[bad.key])
    store = RunStore(tmp_path / "out")
    for o in outcomes:
        store.save(o)
    rows = results_table([tasks[0], bad, tasks[1]], store).to_pylist()
    assert [r["status"] for r in rows] == ["done", "failed", "done"]
    assert rows[1]["error"] == errors[bad.key] and rows[1]["gar.window"] is None


def test_file_inputs_are_keyed_by_content_and_named_as_written(tmp_path: Path) -> None:
    nodes = "name,gpu_type,gpus\n" + "".join(f"n{i},V100,8\n" for i in range(3))
    text = SMALL_STUDY.replace('clusters: ["2x8:V100,leaf=1,spine=1", "4x8:V100,leaf=2,spine=1"]',
                               "clusters: [nodes.csv]")
    plans = []
    for where in ("a", "b/c"):  # the same study and files in two folders
        path = write_study(tmp_path / where, text)
        (path.parent / "nodes.csv").write_text(nodes)
        plans.append(plan_runs(load_study(path), tmp_path / where / "inputs"))
    assert [t.key for t in plans[0]] == [t.key for t in plans[1]]
    assert {t.params["cluster"] for t in plans[0]} == {"nodes.csv"}
    (tmp_path / "a" / "nodes.csv").write_text(nodes + "n3,V100,8\n")  # another cluster: other keys
    assert not {t.key for t in plan_runs(load_study(tmp_path / "a" / "study.yaml"), tmp_path / "i")} & {
        t.key for t in plans[0]}
