"""Reader for Gavel's Philly-derived per-virtual-cluster traces (Gavel, OSDI'20).

Each ``<vc>.trace.tsv`` is tab-separated without a header, 7 fields per job::

    job_type  command  num_steps_arg  needs_data_dir  total_steps  arrival_time_s  scale_factor

Kept: the arrival (``arrival_time_s``, seconds from the start, shared by all VC files), the gang
size (``scale_factor`` GPUs, split into workers by :func:`~kant.model.job.split_gang`), the virtual
cluster (the file name) as tenant and user, and the model (``job_type``) with its step count
(``total_steps``) in :class:`GavelTrace` (the job table has no model column).

Gavel measures a job in training steps, not seconds: the time a job takes is
``total_steps / throughput``, and the throughput depends on the model and the GPU. kant's jobs
need seconds, so ``duration = total_steps / steps_per_second[job_type]``. Pass measured
throughputs (steps/s on the reference GPU) as ``steps_per_second``; without them each model's
throughput is *calibrated* so that its median job runs :data:`PHILLY_MEDIAN_DURATION_S` seconds,
the median run time of the Philly trace the jobs were drawn from (Gavel draws the model
independently of the job's length, so each model's step counts are the Philly lengths scaled by
one throughput). This keeps the Philly length distribution and the relative lengths within a
model, but it is an approximation, and the docs say so.

Dropped: ``command``, ``num_steps_arg`` and ``needs_data_dir`` (how Gavel launches the job on a
physical cluster; meaningless to a simulator). The traces have no GPU type, priority, CPU,
memory or user estimate; those take defaults.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kant.errors import InputError
from kant.model.job import JobTable
from kant.traces._csv import Problems, split_gangs
from kant.traces.columns import float_column, int_column, text_column
from kant.traces.raw import read_raw
from kant.traces.schema import Coded, build_job_table, encode

__all__ = ["GAVEL_COLUMNS", "PHILLY_MEDIAN_DURATION_S", "GavelTrace", "gavel_files", "is_gavel", "read_gavel",
           "read_gavel_detail"]

#: field names of Gavel's 7-field trace format
GAVEL_COLUMNS = ("job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time_s",
                 "scale_factor")
#: median run time of the Philly trace in seconds (philly-jobs-pollux README: "duration s: p50 1,144")
PHILLY_MEDIAN_DURATION_S = 1144.0


@dataclass(frozen=True, eq=False)
class GavelTrace:
    """The jobs plus what the job table cannot hold: each row's model and step count.

    ``job_type[i]`` and ``total_steps[i]`` belong to row ``i`` of ``jobs``;
    ``steps_per_second`` is the throughput used per model name.
    """

    jobs: JobTable
    job_type: npt.NDArray[np.int64]
    job_type_names: tuple[str, ...]
    total_steps: npt.NDArray[np.int64]
    steps_per_second: dict[str, float]


def gavel_files(path: str | Path) -> list[Path]:
    """The ``*.trace.tsv`` / ``*.trace`` files of a folder (sorted), or the one file given."""
    p = Path(path)
    if p.is_dir():
        files = sorted([*p.glob("*.trace.tsv"), *p.glob("*.trace")])
        if not files:
            raise InputError(str(p), "no Gavel trace files (*.trace.tsv) in this folder")
        return files
    return [p]


def is_gavel(path: Path, first_line: str | None) -> bool:
    """Is ``path`` a Gavel trace: a folder with ``*.trace.tsv`` / ``*.trace`` files (``first_line``
    None), or a file whose first line has the format's 7 tab-separated fields?"""
    if first_line is None:
        return bool(list(path.glob("*.trace.tsv")) or list(path.glob("*.trace")))
    return "\t" in first_line and len(first_line.split("\t")) == len(GAVEL_COLUMNS)


def _vc_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".tsv", ".trace"):
        name = name.removesuffix(suffix)
    return name


def read_gavel_detail(
    paths: str | Path | Sequence[str | Path],
    *,
    steps_per_second: Mapping[str, float] | float | None = None,
    reference_median_s: float = PHILLY_MEDIAN_DURATION_S,
    max_gpus_per_worker: int = 8,
    problems: Problems | None = None,
) -> GavelTrace:
    """Read one or more Gavel VC traces (a file, a folder or a list) into a :class:`GavelTrace`."""
    files: list[Path] = []
    for item in [paths] if isinstance(paths, str | Path) else list(paths):
        files.extend(gavel_files(item))
    names: list[str] = []
    types: list[str] = []
    steps_l: list[npt.NDArray[np.int64]] = []
    arrival_l: list[npt.NDArray[np.float64]] = []
    gpus_l: list[npt.NDArray[np.int64]] = []
    vcs: list[str] = []
    for f in files:
        raw = read_raw(f, format="tsv", header=list(GAVEL_COLUMNS))
        check = raw.check(problems)
        jt = text_column(raw, "job_type")
        check.flag(np.array([not t for t in jt], dtype=bool), "job_type", "empty job type", raw.columns["job_type"])
        steps = int_column(raw, check, "total_steps", minimum=1)
        arrival = float_column(raw, check, "arrival_time_s", minimum=0)
        gpus = int_column(raw, check, "scale_factor", minimum=1)
        keep = check.finish()
        rows = np.flatnonzero(keep)
        vc = _vc_name(f)
        lines = raw.lines[rows].tolist()
        names.extend(f"{vc}-{ln}" for ln in lines)
        types.extend(jt[i] for i in rows.tolist())
        steps_l.append(steps[rows])
        arrival_l.append(arrival[rows])
        gpus_l.append(gpus[rows])
        vcs.extend([vc] * rows.size)
    if not names:
        raise InputError(str(files[0]) if files else str(paths), "no valid job rows")
    steps_all = np.concatenate(steps_l)
    arrival_all = np.concatenate(arrival_l)
    gpus_all = np.concatenate(gpus_l)
    coded = encode(types)
    if steps_per_second is None:
        if reference_median_s <= 0:
            raise ValueError("reference_median_s must be positive")
        thr = {name: float(np.median(steps_all[coded.codes == k])) / reference_median_s
               for k, name in enumerate(coded.names)}
    elif isinstance(steps_per_second, int | float):
        if steps_per_second <= 0:
            raise ValueError("steps_per_second must be positive")
        thr = dict.fromkeys(coded.names, float(steps_per_second))
    else:
        missing = [t for t in coded.names if t not in steps_per_second]
        if missing:
            raise InputError(str(files[0]), f"no throughput for job type(s) {', '.join(missing)}")
        thr = {t: float(steps_per_second[t]) for t in coded.names}
        bad = [t for t, v in thr.items() if not v > 0]
        if bad:
            raise ValueError(f"throughputs must be positive: {', '.join(bad)}")
    per_code = np.array([thr[t] for t in coded.names], dtype=np.float64)
    duration = steps_all / per_code[coded.codes]
    workers, per = split_gangs(gpus_all, max_gpus_per_worker)
    order = np.argsort(arrival_all, kind="stable")
    jobs = build_job_table(
        names=[names[i] for i in order.tolist()],
        submit=arrival_all[order],
        duration=duration[order],
        workers=workers[order],
        gpus_per_worker=per[order],
        tenant=np.asarray(vcs, dtype=object)[order],
        source=str(files[0].parent if len(files) > 1 else files[0]),
        origin_epoch=None,
        sort=False,
    )
    return GavelTrace(
        jobs=jobs,
        job_type=Coded(coded.codes[order], coded.names).codes,
        job_type_names=coded.names,
        total_steps=steps_all[order],
        steps_per_second=thr,
    )


def read_gavel(
    paths: str | Path | Sequence[str | Path],
    *,
    steps_per_second: Mapping[str, float] | float | None = None,
    reference_median_s: float = PHILLY_MEDIAN_DURATION_S,
    max_gpus_per_worker: int = 8,
    problems: Problems | None = None,
) -> JobTable:
    """Read Gavel VC traces into a :class:`JobTable` sorted by arrival (see the module docstring)."""
    return read_gavel_detail(paths, steps_per_second=steps_per_second, reference_median_s=reference_median_s,
                             max_gpus_per_worker=max_gpus_per_worker, problems=problems).jobs
