"""Running a whole study: plan the runs, skip those already done, run the rest, write the table and the
report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kant.sweep.results import RunStore, results_table, write_table
from kant.sweep.runners import run_local, run_ray
from kant.sweep.runs import RunOutcome, RunTask, plan_runs
from kant.sweep.study import Study

__all__ = ["SweepSummary", "run_study"]


@dataclass(frozen=True)
class SweepSummary:
    runs: int  # runs in the study
    skipped: int  # already done, not run again
    done: int  # run now, successfully
    failed: dict[str, str]  # run key -> error, of the runs tried now
    table: Path
    report: Path


#: called after each run with (runs done, runs failed, runs left) of this sweep
Progress = Callable[[int, int, int], None]


def run_study(
    study: Study,
    out: Path,
    *,
    ray: str | None = None,
    use_ray: bool = False,
    workers: int = 1,
    force: bool = False,
    max_retries: int = 3,
    progress: Progress | None = None,
) -> SweepSummary:
    """Run ``study`` into the folder ``out`` (see :mod:`kant.sweep.results`); ``use_ray`` runs it on Ray at
    ``ray`` (``None``: a local Ray), else in ``workers`` local processes."""
    from kant.sweep.report import write_study_html

    out.mkdir(parents=True, exist_ok=True)
    store = RunStore(out)
    tasks = plan_runs(study, out / "inputs")
    keys = {t.key for t in tasks}
    todo: list[RunTask] = []
    seen: set[str] = set()
    for t in tasks:
        if t.key in seen:
            continue  # two grid points with identical inputs (e.g. the same policy under two labels) run once
        seen.add(t.key)
        if force:
            store.forget(t.key)
        if not store.done(t.key):
            todo.append(t)
    skipped = len(keys) - len(todo)
    counts = {"done": 0, "failed": 0}
    failed: dict[str, str] = {}

    def finished(outcome: RunOutcome) -> None:
        store.save(outcome)
        if outcome.error is not None:
            counts["failed"] += 1
            failed[outcome.key] = outcome.error
        else:
            counts["done"] += 1
        if progress is not None:
            progress(counts["done"], counts["failed"], len(todo) - counts["done"] - counts["failed"])

    if progress is not None:
        progress(0, 0, len(todo))
    if todo:
        if use_ray:
            run_ray(todo, finished, ray, max_retries=max_retries)
        else:
            run_local(todo, finished, workers)
    table = results_table(tasks, store)
    table_path = write_table(table, out / "results.parquet")
    report_path = write_study_html(out / "report.html", study, table)
    return SweepSummary(len(tasks), skipped, counts["done"], failed, table_path, report_path)
