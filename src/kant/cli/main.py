"""The ``kant`` command line: simulate, compare, list policies."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kant import __version__
from kant.cli._common import DEFAULT_CLUSTER, SEED, FiniteFloat, OneLineCommand, console, fail, out
from kant.errors import KantError

if TYPE_CHECKING:
    from rich.progress import Progress
    from rich.table import Table

    from kant.runs import RunSpec

__all__ = ["LAZY_COMMANDS", "cli", "main"]


def _table(title: str, *, show_header: bool = True) -> Table:
    """A results table (rich.table is imported here: `kant --version` and errors need none)."""
    from rich.table import Table

    return Table(title=title, show_header=show_header, title_justify="left")


def _print_table(title: str, rows: Sequence[tuple[str, str]]) -> None:
    table = _table(title, show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    for label, value in rows:
        table.add_row(label, value)
    out.print(table)


def _progress(title: str, *, arrivals: bool = False) -> Progress | None:
    """A transient progress bar on stderr, or None when stderr is not a terminal (nothing to draw:
    and rich would still print an empty line when it stops, before an ``error:`` line)."""
    if not console.is_terminal:
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    counts = (MofNCompleteColumn(), TextColumn("jobs arrived")) if arrivals else (MofNCompleteColumn(),)
    return Progress(TextColumn(title), BarColumn(), *counts, TimeElapsedColumn(), console=console, transient=True)


def _drawn(bar: Progress | None) -> AbstractContextManager[Any]:
    return bar if bar is not None else nullcontext()


def _updates(bar: Progress, description: str) -> Callable[[int, int], None]:
    """A simulation's progress callback that moves a new task of ``bar``."""
    task = bar.add_task(description, total=None)

    def progress(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return progress


def _steps(bar: Progress, description: str, total: int) -> Callable[[], None]:
    """A callback that moves a new task of ``bar`` (``total`` steps) one step."""
    task = bar.add_task(description, total=total)
    return lambda: bar.advance(task)


def _common_options(f: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--trace", default="philly", show_default=True,
                     help="Trace name (philly, ...) or file path."),
        click.option("--cluster", default=DEFAULT_CLUSTER, show_default=True,
                     help="Built-in cluster (philly-80, philly, tiny), node trace (openb-nodes, pai-machines), "
                     "spec like '64x8:V100,leaf=8,spine=4', or inventory CSV/YAML."),
        click.option("--seed", default=0, show_default=True, type=SEED, help="Seed for every random choice."),
        click.option("--skip-invalid", is_flag=True,
                     help="Drop malformed trace rows (and report them) instead of failing."),
        click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N jobs by submit time."),
        click.option("--cross-leaf-penalty", type=FiniteFloat(min=0), default=0.0, show_default=True,
                     help="Run-time stretch of a gang spanning leaf switches (0.1 = 10% slower)."),
        click.option("--cross-spine-penalty", type=FiniteFloat(min=0), default=0.0, show_default=True,
                     help="Run-time stretch of a gang spanning spines."),
        click.option("--restart-cost", type=FiniteFloat(min=0), default=0.0, show_default=True,
                     help="Seconds an interrupted job pays when it starts again."),
        click.option("--checkpoint-interval", type=FiniteFloat(min=0, min_open=True), default=None,
                     help="Seconds of progress between checkpoints (default: none, restart from scratch)."),
        click.option("--resize-cost", type=FiniteFloat(min=0), default=30.0, show_default=True,
                     help="Seconds an elastic job pays to restart at another size (docs/elastic.md)."),
        click.option("--check-every", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Re-verify the cluster state's invariants every N cycles (debug; 0 = never)."),
        click.option("--services", type=click.Path(dir_okay=False), default=None,
                     help="Inference services YAML to run next to the training trace (see docs/inference.md)."),
        click.option("--queues", type=click.Path(dir_okay=False), default=None,
                     help="Queues YAML: a tree of queues with guarantees and borrowing/lending limits that the "
                     "trace's tenants map to, applied to the policy (see docs/policy-quotas.md)."),
        click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("kant-out"),
                     show_default=True, help="Folder for the JSON result and HTML report."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _spec(policy: str, kw: dict[str, Any], jobs_out: Path | None = None) -> RunSpec:
    from kant.runs import RunSpec  # (here, not at the top: `kant --version` loads no run's module)

    return RunSpec(
        trace=kw["trace"],
        cluster=kw["cluster"],
        policy=policy,
        seed=kw["seed"],
        skip_invalid=kw["skip_invalid"],
        limit=kw["limit"],
        cross_leaf_penalty=kw["cross_leaf_penalty"],
        cross_spine_penalty=kw["cross_spine_penalty"],
        restart_cost_s=kw["restart_cost"],
        checkpoint_interval_s=kw["checkpoint_interval"],
        resize_cost_s=kw.get("resize_cost", 30.0),
        check_every=kw["check_every"],
        services=kw.get("services"),
        queues=kw.get("queues"),
        jobs_out=None if jobs_out is None else str(jobs_out),
    )


#: subcommands defined in other modules, imported when first used (``kant simulate`` imports none)
LAZY_COMMANDS: dict[str, str] = {
    "experiment": "kant.cli.experiment",
    "serve": "kant.cli.serve",
    "sweep": "kant.cli.sweep",
    "trace": "kant.cli.trace",
    # the client of `kant serve` (docs/cli.md)
    **dict.fromkeys(("submit", "queue", "jobs", "show", "cancel", "why", "logs"), "kant.cli.client.jobs"),
    **dict.fromkeys(("nodes", "drain", "cordon", "uncordon"), "kant.cli.client.nodes"),
    **dict.fromkeys(("hold", "release", "update", "requeue"), "kant.cli.client.control"),
    **dict.fromkeys(("tenants", "tokens"), "kant.cli.client.tenants"),
    "acct": "kant.cli.client.acct",
    "queues": "kant.cli.client.queues",
    "top": "kant.cli.client.top",
    "load": "kant.cli.client.load",
    "whatif": "kant.cli.client.whatif",
}


class _LazyGroup(click.Group):
    """A group whose commands from :data:`LAZY_COMMANDS` are imported on first use; ``--help`` lists
    (and so imports) them all."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in LAZY_COMMANDS:
            command = getattr(importlib.import_module(LAZY_COMMANDS[cmd_name]), cmd_name)
            assert isinstance(command, click.Command) and command.name == cmd_name
            self.add_command(command)
        return super().get_command(ctx, cmd_name)


@click.group(cls=_LazyGroup)
@click.version_option(version=__version__)  # not package_name: looking that up imports importlib.metadata
def cli() -> None:
    """kant: a unified scheduler and trace-driven simulator for AI clusters."""


@cli.command(cls=OneLineCommand)
@click.option("--policy", default="kant", show_default=True,
              help="Bundled policy name (see `kant policies`) or a policy YAML file.")
@click.option("--no-report", is_flag=True, help="Skip the HTML report (result.json and jobs.parquet only).")
@_common_options
def simulate(policy: str, no_report: bool, **kw: Any) -> None:
    """Replay a trace on a cluster under one policy; print a summary, write JSON and HTML."""
    from kant.runs import run, write_run

    out_dir: Path = kw["out_dir"]
    spec = _spec(policy, kw, out_dir / "jobs.parquet")
    try:
        bar = _progress("[bold]simulating[/] {task.description}", arrivals=True)
        with _drawn(bar):
            finished = run(spec, None if bar is None else _updates(bar, policy))
        json_path, html_path = write_run(out_dir, finished, report=not no_report)
    except KantError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{exc.filename or out_dir}: {exc.strerror or exc}")
    from kant.metrics.summary import summary_rows

    result = finished.result
    title = f"{result.policy} on {spec.trace} / {result.info['cluster_description']}"
    _print_table(title, summary_rows(finished.metrics))
    if spec.skip_invalid:
        console.print(f"trace rows: {finished.dropped}")
    if result.reasons:
        console.print(f"{len(result.reasons)} job(s) could never run; reasons are in {json_path}")
    console.print(f"wrote {json_path}, {html_path} and {spec.jobs_out}" if html_path else
                  f"wrote {json_path} and {spec.jobs_out}")


@cli.command(cls=OneLineCommand)
@click.option("--policy", "policies", multiple=True, required=True,
              help="Policy name or YAML file; repeat for each policy to compare.")
@click.option("--jobs", "workers", type=click.IntRange(min=1), default=None,
              help="Parallel processes (default: one per core, at most one per policy).")
@_common_options
def compare(policies: tuple[str, ...], workers: int | None, **kw: Any) -> None:
    """Run several policies on the same trace and cluster; write one report and a table."""
    from kant.runs import check_inputs, labelled, per_policy, run_all, write_comparison

    if len(set(policies)) != len(policies):
        fail("a policy is listed twice")
    out_dir: Path = kw["out_dir"]
    specs = per_policy(_spec(policies[0], kw), policies, out_dir / "jobs")
    try:
        # fail fast on a bad policy, services or queues file, before any simulation starts
        check_inputs(policies, kw.get("services"), kw.get("queues"))
        bar = _progress("[bold]comparing[/]")
        with _drawn(bar):
            done = None if bar is None else _steps(bar, "policies", len(specs))
            runs = labelled(specs, run_all(specs, workers, done))
        html_path, csv_path, json_path = write_comparison(out_dir, runs)
    except KantError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{exc.filename or out_dir}: {exc.strerror or exc}")
    _print_comparison(runs)
    console.print(f"wrote {html_path}, {csv_path}, {json_path} and per-job results in {out_dir / 'jobs'}")


def _print_comparison(labelled: Sequence[tuple[str, Any, Any]]) -> None:
    from kant.metrics.summary import summary_rows

    table = _table("policy comparison")
    table.add_column("metric", style="bold")
    rows = [summary_rows(m) for _, _, m in labelled]
    for label, _, _ in labelled:
        table.add_column(label, justify="right")
    for i, (name, _) in enumerate(rows[0]):
        table.add_row(name, *[r[i][1] for r in rows])
    out.print(table)


@cli.command("policies")
def list_policies() -> None:
    """List bundled policies, plugins and actions."""
    from kant.config import bundled_policies, load_policy
    from kant.framework.registry import action_names, plugin_names

    table = _table("bundled policies")
    table.add_column("name", style="bold")
    table.add_column("description")
    for name in sorted(bundled_policies()):
        try:
            desc = load_policy(name).description.strip()
        except KantError as exc:
            desc = f"[red]invalid: {exc}[/]"
        table.add_row(name, desc)
    out.print(table)
    out.print(f"plugins: {', '.join(plugin_names())}")
    out.print(f"actions: {', '.join(action_names())}")


def main(argv: Sequence[str] | None = None) -> None:
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="kant", standalone_mode=True)
    except KeyboardInterrupt:
        console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
