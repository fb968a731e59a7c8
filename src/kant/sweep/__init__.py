"""Policy studies: a grid of runs from a study file, run in local processes or on Ray, resumable, with
one Parquet table of every run's metrics (``kant sweep``, docs/sweep.md)."""

from kant.sweep.driver import SweepSummary, run_study
from kant.sweep.study import Study, load_study, parse_study

__all__ = ["Study", "SweepSummary", "load_study", "parse_study", "run_study"]
