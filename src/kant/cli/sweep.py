"""``kant sweep STUDY.yaml``: run a policy study (docs/sweep.md)."""

from __future__ import annotations

import os
from pathlib import Path

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from kant.cli._common import OneLineCommand, console, fail
from kant.errors import KantError

__all__ = ["sweep"]


@click.command(cls=OneLineCommand)
@click.argument("study_file", metavar="STUDY.yaml", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Study folder (default: kant-sweep/<study name>). Runs already there are not run again.")
@click.option("--ray", "ray_address", is_flag=False, flag_value="", default=None, metavar="[ADDRESS]",
              help="Run on Ray: a local Ray without ADDRESS, else ray.init(address=ADDRESS) (auto, ray://...).")
@click.option("--jobs", "workers", type=click.IntRange(min=1), default=None,
              help="Local processes (default: one per core). Ignored with --ray.")
@click.option("--force", is_flag=True, help="Run again the runs already done.")
@click.option("--max-retries", type=click.IntRange(min=0), default=3, show_default=True,
              help="With --ray: retries of a run whose worker or node died.")
def sweep(study_file: Path, out_dir: Path | None, ray_address: str | None, workers: int | None, force: bool,
          max_retries: int) -> None:
    """Run every point of a study's grid; write results.parquet, report.html and per-run results."""
    from kant.sweep import load_study, run_study

    try:
        study = load_study(study_file)
        out = out_dir if out_dir is not None else Path("kant-sweep") / study.name
        bar = Progress(TextColumn("[bold]sweep[/] {task.description}"), BarColumn(),
                       TextColumn("{task.fields[done]} done, {task.fields[failed]} failed, {task.fields[left]} left"),
                       TimeElapsedColumn(), console=console, transient=True)
        task = bar.add_task(study.name, total=None, done=0, failed=0, left="?")

        def progress(done: int, failed: int, left: int) -> None:
            bar.start()  # once the runs are planned (an error before that is one line, no bar)
            bar.update(task, completed=done + failed, total=done + failed + left, done=done, failed=failed,
                       left=left)

        try:
            summary = run_study(study, out, ray=ray_address or None, use_ray=ray_address is not None,
                                workers=workers or os.cpu_count() or 1, force=force, max_retries=max_retries,
                                progress=progress)
        finally:
            if bar.live.is_started:  # Progress.stop() prints a newline on a console that is not a terminal
                bar.stop()
    except KantError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{exc.filename or study_file}: {exc.strerror or exc}")
    console.print(f"{summary.runs} runs: {summary.skipped} already done, {summary.done} done now, "
                  f"{len(summary.failed)} failed", highlight=False)
    for key, error in summary.failed.items():
        console.print(f"failed {key[:12]}: {error}", highlight=False, markup=False)
    console.print(f"wrote {summary.table} and {summary.report}", highlight=False)
    if summary.failed:
        raise SystemExit(1)
