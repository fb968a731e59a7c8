"""The command line: a short simulate and compare run, and clear errors on bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
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


def test_jtted_uses_the_policys_runtime_estimator(tmp_path: Path) -> None:
    """Philly has no user estimates; a policy with a runtime estimator (qssf) is judged on its own
    predictions, the same values ``estimates_used`` gives the library user."""
    r = CliRunner().invoke(cli, ["simulate", "--limit", "300", "--policy", "qssf", "--no-report",
                                 "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    jtted = json.loads((tmp_path / "result.json").read_text())["metrics"]["jtted"]
    assert jtted["with_estimate"] == 300 and jtted["without_estimate"] == 0
    assert jtted["p50"] is not None


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


def test_subcommands_of_other_modules_are_listed_and_load() -> None:
    import importlib
    import pkgutil

    import click

    from kant.cli import client
    from kant.cli.main import LAZY_COMMANDS

    for info in pkgutil.iter_modules(client.__path__):  # every client command is named, with its module
        module = importlib.import_module(f"{client.__name__}.{info.name}")
        commands = [c for c in vars(module).values() if isinstance(c, click.Command)]
        nested = {id(sub) for g in commands if isinstance(g, click.Group) for sub in g.commands.values()}
        defined = {c.name for c in commands if id(c) not in nested}  # (a group's subcommands are its own)
        assert defined == {n for n, m in LAZY_COMMANDS.items() if m == module.__name__}, module.__name__
    ctx = click.Context(cli)
    names = cli.list_commands(ctx)
    assert {"simulate", "compare", "policies", "trace", "sweep", "serve", "experiment", "submit"} <= set(names)
    for name in names:
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name
    r = CliRunner().invoke(cli, ["--help"])
    assert r.exit_code == 0 and all(name in r.output for name in names)


def test_error_is_the_first_line_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    """No progress bar without a terminal, and no empty line left by one before ``error:``."""
    r = CliRunner().invoke(cli, ["simulate", "--cluster", "64y8", "--out", str(tmp_path)])
    assert r.exit_code == 2 and r.output.startswith("error: "), repr(r.output)


def test_simulate_imports_nothing_it_does_not_need(tmp_path: Path) -> None:
    """`kant simulate` on the bundled trace: no pandas (pyarrow.array would import it), no
    pyarrow.compute, no plotting, and none of the other subcommands' modules (docs/performance.md)."""
    import os
    import subprocess
    import sys

    code = ("import sys\nfrom kant.cli.main import main\ntry:\n    main()\nexcept SystemExit as e:\n"
            "    assert not e.code, e.code\nprint(' '.join(sorted(sys.modules)))\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1] / "src"))
    proc = subprocess.run([sys.executable, "-c", code, "simulate", "--limit", "200", "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, check=True)
    loaded = set(proc.stdout.splitlines()[-1].split())
    unwanted = {"pandas", "pyarrow.compute", "matplotlib", "scipy", "rich.progress", "kant.traces.mapping",
                "kant.cli.client", "kant.cli.trace", "kant.cli.sweep", "kant.cli.serve", "kant.cli.experiment",
                "concurrent.futures.process"}
    assert "kant.sim" in loaded and not unwanted & loaded, sorted(unwanted & loaded)
    assert (tmp_path / "jobs.parquet").exists() and (tmp_path / "report.html").exists()


def test_a_run_loads_with_the_collector_off_and_leaves_it_as_it_was() -> None:
    import gc

    from kant.runs import loading

    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            with loading():
                assert not gc.isenabled()
            assert gc.isenabled() is enabled and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.enable()


def test_a_run_simulates_with_a_larger_first_threshold_and_leaves_it_as_it_was() -> None:
    import gc

    from kant.runs import RUN_GEN0, simulating

    old = gc.get_threshold()
    try:
        for first in (700, RUN_GEN0 * 2, 0):  # raised only from below: a larger one, or 0 (off), is kept
            gc.set_threshold(first, 11, 12)
            with pytest.raises(RuntimeError), simulating():
                assert gc.get_threshold() == (RUN_GEN0 if 0 < first < RUN_GEN0 else first, 11, 12)
                raise RuntimeError("a failed run restores it too")
            assert gc.get_threshold() == (first, 11, 12)
    finally:
        gc.set_threshold(*old)


def test_run_simulates_inside_simulating(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """kant.runs.run's simulation runs with RUN_GEN0 as the collector's first threshold."""
    import gc

    import kant.runs as runs
    from kant.sim import Simulator

    seen: list[int] = []
    real = Simulator.run

    def run(self: Simulator, *args: Any, **kwargs: Any) -> Any:
        seen.append(gc.get_threshold()[0])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Simulator, "run", run)
    spec = runs.RunSpec(trace="philly", cluster="philly-80", policy="fifo", seed=0, skip_invalid=False, limit=50,
                        cross_leaf_penalty=0.0, cross_spine_penalty=0.0, restart_cost_s=0.0,
                        checkpoint_interval_s=None, check_every=0)
    old = gc.get_threshold()
    try:
        gc.set_threshold(700, *old[1:])
        runs.run(spec)
        assert seen == [runs.RUN_GEN0] and gc.get_threshold()[0] == 700
    finally:
        gc.unfreeze()
        gc.set_threshold(*old)


def test_version_is_the_projects() -> None:
    """`kant --version` prints ``kant.__version__`` (no package metadata lookup): it must be the
    version pyproject.toml gives the package."""
    import tomllib

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    r = CliRunner().invoke(cli, ["--version"], prog_name="kant")
    assert r.exit_code == 0 and r.output == f"kant, version {project['version']}\n"
