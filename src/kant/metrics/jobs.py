"""Per-job results: one row per job of a finished run, as an Arrow table written to Parquet.

Every ``kant simulate``, ``compare`` and ``sweep`` run writes one (``jobs.parquet``); the columns and
how to load them with pandas or Polars are in ``docs/results.md``. Times are trace seconds; a value
that does not exist (the start of a job that never started, the end of one that did not finish, the
span of one never placed, the reason of one that could run) is null, never NaN or 0.

The columns are built from NumPy through Arrow buffers (:mod:`kant.traces.arrow`), never with
``pyarrow.array``, which imports pandas when it is installed (0.4-0.6 s of a short run's CPU).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from kant.metrics.recorder import JobStatus, SimResult
from kant.model.job import JobKind
from kant.traces.arrow import numbers, strings, strings_from_codes

__all__ = ["JOB_COLUMNS", "jobs_table", "parquet_bytes", "planned_estimates", "write_jobs"]

#: the columns of the per-job table, in order
JOB_COLUMNS = (
    "id",  # the job's name in the trace
    "kind",  # training / inference
    "tenant",
    "user",
    "submit",  # s
    "start",  # first start, s (null: never started)
    "end",  # s (null: did not finish)
    "wait",  # start - submit, s (null: never started); the JWTD sample for training jobs
    "gpus",  # total GPUs of the gang
    "workers",
    "gpu_type",  # null: any
    "nodes",  # nodes, leaf switches and spines the first placement spanned (null: never placed)
    "leaves",
    "spines",
    "preemptions",  # interruptions (preemptions, node failures)
    "runs",  # starts, restarts included
    "duration",  # true run time at full speed, s
    "estimate",  # the run-time estimate the scheduler planned with, s (null: none)
    "state",  # finished / unschedulable / pending / running / stopped, at the end of the run
    "reason",  # why the job could never run (unschedulable), else null
)

_STATES = {s.value: s.name.lower() for s in JobStatus}
_KINDS = {k.value: k.name.lower() for k in JobKind}


def _floats(x: npt.ArrayLike) -> pa.Array:
    """A float64 column with NaN as null."""
    a = np.asarray(x, dtype=np.float64)
    return numbers(a, pa.float64(), np.isfinite(a))


def _ints(x: npt.ArrayLike, present: npt.NDArray[np.bool_] | None = None) -> pa.Array:
    return numbers(x, pa.int64(), present)


def _labels(values: npt.ArrayLike, words: dict[int, str]) -> pa.Array:
    """Strings of integer enum values (``words``; an unknown value is written as its number)."""
    uniq, codes = np.unique(np.asarray(values, dtype=np.int64), return_inverse=True)
    return strings_from_codes(codes, [words.get(v, str(v)) for v in uniq.tolist()])


def planned_estimates(result: SimResult, estimates: npt.ArrayLike | None = None) -> npt.NDArray[np.float64]:
    """The estimate each job was planned with: a runtime estimator's (``estimates``, NaN = none) when the
    policy had one, else the trace's estimate, else the true duration (the simulator's oracle estimate)."""
    if estimates is not None:
        return np.asarray(estimates, dtype=np.float64)
    est = np.asarray(result.jobs.estimate, dtype=np.float64)
    return np.where(np.isfinite(est), est, np.asarray(result.jobs.duration, dtype=np.float64))


def jobs_table(result: SimResult, estimates: npt.ArrayLike | None = None) -> pa.Table:
    """One row per job of ``result`` with :data:`JOB_COLUMNS` (``estimates``: see :func:`planned_estimates`)."""
    jobs = result.jobs
    n = len(jobs)
    started = np.isfinite(result.first_start)
    gpu_types = jobs.gpu_type_names
    type_codes = np.asarray(jobs.gpu_type, dtype=np.int64)
    has_type = (type_codes >= 0) & (type_codes < len(gpu_types))
    reason_names = [None, *dict.fromkeys(result.reasons.values())]  # code 0: none (null)
    reason_code = {r: i for i, r in enumerate(reason_names)}
    reasons = np.zeros(n, dtype=np.int64)
    for j, why in result.reasons.items():
        reasons[j] = reason_code[why]
    columns: dict[str, pa.Array] = {
        "id": strings(jobs.names),
        "kind": _labels(jobs.kind, _KINDS),
        "tenant": strings_from_codes(jobs.tenant, jobs.tenant_names),
        "user": strings_from_codes(jobs.user, jobs.user_names),
        "submit": _floats(jobs.submit),
        "start": _floats(result.first_start),
        "end": _floats(result.end),
        "wait": _floats(result.first_start - jobs.submit),
        "gpus": _ints(jobs.total_gpus),
        "workers": _ints(jobs.workers),
        "gpu_type": strings_from_codes(np.where(has_type, type_codes, len(gpu_types)), [*gpu_types, None]),
        "nodes": _ints(result.span_nodes, started),
        "leaves": _ints(result.span_leaves, started),
        "spines": _ints(result.span_spines, started),
        "preemptions": _ints(result.preemptions),
        "runs": _ints(result.runs),
        "duration": _floats(jobs.duration),
        "estimate": _floats(planned_estimates(result, estimates)),
        "state": _labels(result.status, _STATES),
        "reason": strings_from_codes(reasons, reason_names),
    }
    assert tuple(columns) == JOB_COLUMNS
    return pa.Table.from_arrays(list(columns.values()), names=list(columns))


def write_jobs(path: str | Path, result: SimResult, estimates: npt.ArrayLike | None = None) -> Path:
    """Write :func:`jobs_table` to ``path`` as Parquet (zstd); the same run gives the same bytes."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(jobs_table(result, estimates), p, compression="zstd")
    return p


def parquet_bytes(table: pa.Table) -> bytes:
    """``table`` as Parquet file bytes (zstd), for sending a result across processes or machines."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return bytes(sink.getvalue().to_pybytes())
