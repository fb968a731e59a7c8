"""Per-job results: one row per job of a finished run, as an Arrow table written to Parquet.

Every ``kant simulate``, ``compare`` and ``sweep`` run writes one (``jobs.parquet``); the columns and
how to load them with pandas or Polars are in ``docs/results.md``. Times are trace seconds; a value
that does not exist (the start of a job that never started, the end of one that did not finish, the
span of one never placed, the reason of one that could run) is null, never NaN or 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from kant.metrics.recorder import JobStatus, SimResult
from kant.model.job import JobKind

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
    return pa.array(a, type=pa.float64(), mask=~np.isfinite(a))


def _ints(x: npt.ArrayLike, present: npt.NDArray[np.bool_] | None = None) -> pa.Array:
    a = np.asarray(x, dtype=np.int64)
    return pa.array(a, type=pa.int64(), mask=None if present is None else ~present)


def _names(codes: npt.ArrayLike, vocab: tuple[str, ...]) -> pa.Array:
    """Strings from vocabulary codes (a dictionary column decoded, so every reader sees plain strings)."""
    c = np.asarray(codes, dtype=np.int64)
    return pa.DictionaryArray.from_arrays(pa.array(c, type=pa.int64()), pa.array(list(vocab), type=pa.string())) \
        .cast(pa.string())


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
    reasons = [result.reasons.get(j) for j in range(n)] if result.reasons else [None] * n
    columns: dict[str, pa.Array] = {
        "id": pa.array(list(jobs.names), type=pa.string()),
        "kind": pa.array([_KINDS.get(int(k), str(int(k))) for k in jobs.kind], type=pa.string()),
        "tenant": _names(jobs.tenant, jobs.tenant_names),
        "user": _names(jobs.user, jobs.user_names),
        "submit": _floats(jobs.submit),
        "start": _floats(result.first_start),
        "end": _floats(result.end),
        "wait": _floats(result.first_start - jobs.submit),
        "gpus": _ints(jobs.total_gpus),
        "workers": _ints(jobs.workers),
        "gpu_type": pa.array([gpu_types[c] if ok else None for c, ok in zip(type_codes.tolist(), has_type.tolist(),
                                                                            strict=True)], type=pa.string()),
        "nodes": _ints(result.span_nodes, started),
        "leaves": _ints(result.span_leaves, started),
        "spines": _ints(result.span_spines, started),
        "preemptions": _ints(result.preemptions),
        "runs": _ints(result.runs),
        "duration": _floats(jobs.duration),
        "estimate": _floats(planned_estimates(result, estimates)),
        "state": pa.array([_STATES.get(int(s), str(int(s))) for s in result.status], type=pa.string()),
        "reason": pa.array(reasons, type=pa.string()),
    }
    assert tuple(columns) == JOB_COLUMNS
    return pa.table(columns)


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
