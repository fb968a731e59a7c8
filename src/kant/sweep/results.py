"""Where a study's results live, and its table of runs.

A study folder holds::

    inputs/trace-<label>-<hash>.parquet   the prepared traces (transforms and limit applied)
    runs/<key>/result.json                the per-run JSON report (written last: a run is done when it exists)
    runs/<key>/jobs.parquet               the per-job results of the run (kant.metrics.jobs)
    runs/<key>/error.txt                  the error of a run that failed (tried again on the next sweep)
    results.parquet                       one row per run: the run's parameters, then every metric
    report.html                           plots of each metric against each swept parameter

The results table's metric columns are named as in ``kant compare``'s CSV (dotted keys of the metrics,
``gar.window``, ``jwtd.overall.p50``...), except the run's wall time (``run.wall_seconds``,
``run.jobs_per_second``), a measurement of the machine that stays in ``result.json``: the same study
gives the same table, bit for bit, wherever it ran.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kant.metrics.columns import flatten
from kant.sweep.runs import RunOutcome, RunTask

__all__ = ["PARAM_COLUMNS", "TIMING_COLUMNS", "RunStore", "results_table"]

#: the first columns of the results table (then ``status``, ``error`` and the metrics)
PARAM_COLUMNS = ("key", "policy", "trace", "cluster", "services", "cross_leaf_penalty", "cross_spine_penalty",
                 "restart_cost", "checkpoint_interval", "seed")
#: metric columns left out of the table (wall-clock measurements)
TIMING_COLUMNS = frozenset({"run.wall_seconds", "run.jobs_per_second"})


class RunStore:
    """The ``runs/`` folder of a study: one sub-folder per run key."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runs = root / "runs"

    def folder(self, key: str) -> Path:
        return self.runs / key

    def done(self, key: str) -> bool:
        return (self.folder(key) / "result.json").is_file()

    def report(self, key: str) -> dict[str, Any] | None:
        path = self.folder(key) / "result.json"
        if not path.is_file():
            return None
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return data

    def error(self, key: str) -> str | None:
        path = self.folder(key) / "error.txt"
        return path.read_text(encoding="utf-8").strip() if path.is_file() else None

    def forget(self, key: str) -> None:
        """Remove a run's results (``--force``)."""
        folder = self.folder(key)
        for name in ("result.json", "jobs.parquet", "error.txt"):
            (folder / name).unlink(missing_ok=True)

    def save(self, outcome: RunOutcome) -> None:
        """Store an outcome: the jobs file, then the report (atomically, last); or the error."""
        folder = self.folder(outcome.key)
        folder.mkdir(parents=True, exist_ok=True)
        if outcome.report is None or outcome.jobs is None:
            _atomic(folder / "error.txt", (outcome.error or "unknown error").encode() + b"\n")
            return
        (folder / "error.txt").unlink(missing_ok=True)
        _atomic(folder / "jobs.parquet", outcome.jobs)
        text = json.dumps(outcome.report, indent=2, sort_keys=True, allow_nan=False) + "\n"
        _atomic(folder / "result.json", text.encode())


def _atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def metric_row(report: dict[str, Any]) -> dict[str, Any]:
    """The metric columns of one run's report."""
    return {k: v for k, v in flatten(report["metrics"]).items() if k not in TIMING_COLUMNS}


def _floats(name: str, values: list[Any]) -> bool:
    if name in ("cross_leaf_penalty", "cross_spine_penalty", "restart_cost", "checkpoint_interval"):
        return True
    numbers = all(v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in values)
    return numbers and any(isinstance(v, float) for v in values)


def results_table(tasks: Sequence[RunTask], store: RunStore) -> pa.Table:
    """One row per run, in the study's order: parameters, ``status`` (done / failed / not run), ``error``,
    then every metric column (null where a run has no value)."""
    rows: list[dict[str, Any]] = []
    metrics: dict[str, None] = {}
    for task in tasks:
        report = store.report(task.key)
        row: dict[str, Any] = {"key": task.key, **task.params}
        if report is not None:
            row["status"], row["error"] = "done", None
            measured = metric_row(report)
            metrics.update(dict.fromkeys(measured))
            row.update(measured)
        else:
            error = store.error(task.key)
            row["status"], row["error"] = ("failed", error) if error is not None else ("not run", None)
        rows.append(row)
    columns = [*PARAM_COLUMNS, "status", "error", *metrics]
    arrays: dict[str, pa.Array] = {}
    for name in columns:
        values = [r.get(name) for r in rows]
        if _floats(name, values):  # a float metric whose value is sometimes whole stays float64
            arrays[name] = pa.array([None if v is None else float(v) for v in values], type=pa.float64())
        else:
            arrays[name] = pa.array(values)
    return pa.table(arrays)


def write_table(table: pa.Table, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)
    return path
