"""The command line: a short simulate and compare run, and clear errors on bad input."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kant.cli.main import cli


def test_simulate_writes_json_and_html(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["simulate", "--limit", "400", "--policy", "k8s-default", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "GAR (window)" in r.output and "JWTD P99" in r.output
    data = json.loads((tmp_path / "result.json").read_text())
    assert data["policy"] == "k8s-default"
    assert data["metrics"]["counts"]["finished"] == 400
    html = (tmp_path / "report.html").read_text()
    assert 'id="plot-gar"' in html and "uPlot" in html and "GAR" in html  # plots drawn by the browser


def test_compare_runs_each_policy(tmp_path: Path) -> None:
    r = CliRunner().invoke(
        cli,
        ["compare", "--limit", "300", "--policy", "k8s-default", "--policy", "volcano-binpack", "--jobs", "1",
         "--out", str(tmp_path)],
    )
    assert r.exit_code == 0, r.output
    csv_text = (tmp_path / "comparison.csv").read_text()
    assert "k8s-default" in csv_text and "volcano-binpack" in csv_text
    assert (tmp_path / "comparison.html").exists()


def test_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nactions: [allocate]\nplugins: [{name: binpak}]\n")
    for args, needle in [
        (["simulate", "--policy", str(bad)], "plugins[0].name: unknown plugin 'binpak'"),
        (["simulate", "--cluster", "64y8"], "bad node group"),
        (["simulate", "--trace", str(tmp_path / "nope.csv")], "unknown trace"),
        (["compare", "--policy", "k8s-default", "--policy", "k8s-default"], "listed twice"),
    ]:
        r = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "o")])
        assert r.exit_code == 2, r.output
        assert needle in r.output
        assert "Traceback" not in r.output


def test_policies_lists_bundled() -> None:
    r = CliRunner().invoke(cli, ["policies"])
    assert r.exit_code == 0 and "volcano-binpack" in r.output and "binpack" in r.output
