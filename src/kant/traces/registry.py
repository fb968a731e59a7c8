"""Resolve a ``--trace`` argument (a known trace name or a file path) to a job table."""

from __future__ import annotations

import os
from pathlib import Path

from kant.errors import InputError
from kant.model.job import JobTable
from kant.traces._csv import Problems
from kant.traces.philly import read_philly

__all__ = ["load_trace", "shared_traces_dir", "TRACE_NAMES"]

TRACE_NAMES = ("philly",)


def shared_traces_dir() -> Path | None:
    """Where the public traces live: ``$KANT_TRACES_DIR``, else ``../shared/traces`` above the
    working directory or this checkout, if it exists."""
    env = os.environ.get("KANT_TRACES_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for base in (Path.cwd(), *here.parents):
        cand = base.parent / "shared" / "traces"
        if cand.is_dir():
            return cand
    return None


def load_trace(arg: str, *, problems: Problems | None = None) -> JobTable:
    """``philly`` is the bundled Philly trace; a path ending in .csv/.csv.gz is read as Philly format."""
    if arg == "philly":
        return read_philly(problems=problems)
    path = Path(arg)
    if path.exists():
        return read_philly(path, problems=problems)
    raise InputError(arg, f"unknown trace; expected one of {', '.join(TRACE_NAMES)} or a file path")
