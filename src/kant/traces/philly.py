"""Reader for the Microsoft Philly job trace as shipped with Pollux (``philly.csv[.gz]``).

Columns: ``timestamp,duration,num_gpus,gpu_time,cluster``.

Kept: submit time (``timestamp``, read as UTC; the origin is the earliest submit), true run time
(``duration``, seconds), gang size (``num_gpus``, split into workers as
:func:`kant.model.job.split_gang` does), and the
virtual cluster (``cluster``) as the tenant and user. Dropped: ``gpu_time`` (it is duration x
num_gpus, so it carries nothing new). The trace has no GPU type, priority, user estimate, status or
placement, so those take defaults (any type, priority 0, no estimate).

The reader is vectorised (``pyarrow`` splits the file, NumPy checks whole columns; see
:mod:`kant.traces.mapping`) and still reports every bad row by line. A well-formed file
(the bundled one) goes through a faster path first (:mod:`kant.traces._philly_fast`: one typed CSV
read, none of the general reader's imports), which gives the same table or hands the file on.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np

from kant.errors import InputError
from kant.model.job import JobTable
from kant.traces._csv import Problems

__all__ = ["PHILLY_COLUMNS", "bundled_philly_path", "read_philly"]

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")


def bundled_philly_path() -> Path:
    """The full Philly trace bundled with the package (82,247 jobs, CC BY 4.0)."""
    return Path(str(resources.files("kant.traces").joinpath("data/philly.csv.gz")))


def read_philly(
    path: str | Path | None = None,
    *,
    max_gpus_per_worker: int = 8,
    problems: Problems | None = None,
    limit: int | None = None,
) -> JobTable:
    """Read a Philly CSV into a :class:`JobTable`, sorted by submit time.

    ``path`` defaults to the bundled trace. Every bad row raises :class:`InputError` naming the file,
    line, column and value; pass ``problems=Problems(skip=True)`` to drop bad rows instead and read
    the reasons from it afterwards. Job names are ``philly-<line>`` so a job can be found in the file.
    ``limit`` keeps only the first ``limit`` jobs by submit time: the same table as ``take`` of the
    first rows of the whole one (the whole file's time origin and tenant vocabulary), built for those
    rows only.
    """
    from kant.traces._philly_fast import read_philly_fast

    if limit is not None and limit < 0:
        raise ValueError("limit must be >= 0")
    p = Path(path) if path is not None else bundled_philly_path()
    fast = read_philly_fast(p, PHILLY_COLUMNS, max_gpus_per_worker, limit)
    if fast is not None:  # a well-formed file (the bundled one): the same table, without compute imports
        return fast
    from kant.traces._csv import split_gangs
    from kant.traces.columns import float_column, int_column, text_column, time_column
    from kant.traces.raw import read_raw
    from kant.traces.schema import build_job_table

    source = str(p)
    raw = read_raw(p, format="csv")
    raw.require(PHILLY_COLUMNS)
    check = raw.check(problems)
    t = time_column(raw, check, "timestamp", unit="datetime")
    d = float_column(raw, check, "duration", minimum=0.0)
    g = int_column(raw, check, "num_gpus")
    check.flag(g < 1, "num_gpus", "a training job needs at least 1 GPU", raw.columns["num_gpus"])
    vcs = text_column(raw, "cluster")
    check.flag(np.array([not v for v in vcs], dtype=bool), "cluster", "empty virtual cluster", raw.columns["cluster"])
    keep = check.finish()
    rows = np.flatnonzero(keep)
    if not rows.size:
        raise InputError(source, "no valid job rows")
    t_rows = t[rows]
    origin = float(t_rows.min())
    order = rows[np.argsort(t_rows, kind="stable")]
    workers, per = split_gangs(g[order], max_gpus_per_worker)
    lines = raw.lines[order].tolist()
    jobs = build_job_table(
        names=[f"philly-{ln}" for ln in lines],
        submit=t[order] - origin,
        duration=d[order],
        workers=workers,
        gpus_per_worker=per,
        tenant=np.asarray(vcs, dtype=object)[order],
        source=source,
        origin_epoch=origin,
        sort=False,
    )
    return jobs if limit is None else jobs.take(np.arange(min(limit, len(jobs))))
