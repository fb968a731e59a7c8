"""kant's normalised trace schema (Arrow schemas), how readers build its tables, and row validation.

Three tables (see docs/traces.md for the reference):

* **jobs** (:data:`JOB_SCHEMA`, one row per job, a :class:`~kant.model.job.JobTable`): training
  gangs (``workers`` x ``gpus_per_worker``) and inference replicas (``kind == "inference"``,
  ``duration`` may be ``inf``).
* **nodes** (:data:`NODE_SCHEMA`, one row per node, a :class:`~kant.model.cluster.Cluster`): GPU
  type, GPUs, CPU, memory and the leaf/spine topology labels.
* **load** (:data:`LOAD_SCHEMA`, one row per request or rate sample, a
  :class:`~kant.traces.load.LoadSeries`).

Categorical columns (GPU type, tenant, user, kind, stream, leaf, spine) are dictionary-encoded
strings, so any Parquet tool shows names, not codes. Storing the tables (Arrow tables, Parquet files)
is :mod:`kant.traces.parquet`.

Readers build tables with :func:`build_job_table` and :func:`build_load_series` from columns
(categorical ones as :class:`Coded`, from :func:`encode`).

A job's ``gpu_type`` is either a single type (``"V100"``) or a set of allowed types written
``"V100M16|V100M32"`` (the form of the openb trace's ``gpu_spec``): the job may run on a node of any
of them. :func:`gpu_type_alternatives` splits such a name and :func:`gpu_type_compatibility`
resolves a job table's type vocabulary against a cluster's types in one matrix.

:class:`RowCheck` is the shared per-row validator the readers use: vectorised checks flag bad
rows, and :meth:`RowCheck.finish` either raises the error on the earliest bad line or, with
``Problems(skip=True)``, records every dropped row with its reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from kant.errors import InputError
from kant.model.deps import JobDeps
from kant.model.elastic import ElasticSpec
from kant.model.job import FULL_GPU_MILLI, JobKind, JobTable
from kant.traces._csv import Problems
from kant.traces.load import LoadSeries


def _pc() -> Any:
    """``pyarrow.compute``, imported on first use: it costs 0.1 s of CPU, and building a job table
    from a reader's columns (the Philly trace's fast path) needs none of it."""
    import pyarrow.compute

    return pyarrow.compute


__all__ = [
    "JOB_DEPENDENCY_FIELDS",
    "JOB_ELASTIC_FIELDS",
    "JOB_SCHEMA",
    "LOAD_SCHEMA",
    "NODE_SCHEMA",
    "SCHEMA_VERSION",
    "Coded",
    "RowCheck",
    "build_job_table",
    "build_load_series",
    "encode",
    "gpu_type_alternatives",
    "gpu_type_compatibility",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

SCHEMA_VERSION = "1"

_DICT = pa.dictionary(pa.int32(), pa.string())

#: Arrow schema of the jobs table (field metadata holds each column's meaning and unit).
JOB_SCHEMA = pa.schema(
    [
        pa.field("name", pa.string(), nullable=False, metadata={"doc": "job name, unique in the trace"}),
        pa.field("submit", pa.float64(), nullable=False, metadata={"doc": "submit time, s from origin"}),
        pa.field("duration", pa.float64(), nullable=False,
                 metadata={"doc": "run time in s once started; inf = runs until the end (services)"}),
        pa.field("workers", pa.int64(), nullable=False, metadata={"doc": "gang size (workers, all or nothing)"}),
        pa.field("gpus_per_worker", pa.int64(), nullable=False, metadata={"doc": "GPUs per worker, on one node"}),
        pa.field("gpu_milli", pa.int64(), nullable=False,
                 metadata={"doc": "share of one GPU per 1-GPU worker in 1/1000 (1000 = whole GPU)"}),
        pa.field("cpu_milli", pa.int64(), nullable=False, metadata={"doc": "CPU per worker, 1/1000 cores; 0 = n/a"}),
        pa.field("memory_mib", pa.int64(), nullable=False, metadata={"doc": "memory per worker, MiB; 0 = n/a"}),
        pa.field("gpu_type", _DICT, nullable=True,
                 metadata={"doc": "required GPU type, 'A|B' = any of A, B; null = any type"}),
        pa.field("priority", pa.int64(), nullable=False, metadata={"doc": "higher runs first"}),
        pa.field("tenant", _DICT, nullable=False, metadata={"doc": "tenant / virtual cluster"}),
        pa.field("user", _DICT, nullable=False, metadata={"doc": "user (defaults to the tenant)"}),
        pa.field("estimate", pa.float64(), nullable=False, metadata={"doc": "user run-time estimate, s; NaN = none"}),
        pa.field("kind", _DICT, nullable=False, metadata={"doc": "'training' or 'inference'"}),
    ]
)

#: optional columns of the jobs table, written only when some job has a dependency (kant.model.deps)
JOB_DEPENDENCY_FIELDS = (
    pa.field("depends_on", pa.string(), nullable=True,
             metadata={"doc": "dependency on other jobs by name, Slurm's form: afterok:a:b,afterany:c"}),
    pa.field("kill_on_invalid_dep", pa.bool_(), nullable=True,
             metadata={"doc": "cancel the job when its dependency can never be met"}),
)

#: optional columns of the jobs table, written only when some job is elastic (kant.model.elastic)
JOB_ELASTIC_FIELDS = (
    pa.field("min_workers", pa.int64(), nullable=True,
             metadata={"doc": "elastic gang: fewest workers it runs on (null: rigid)"}),
    pa.field("max_workers", pa.int64(), nullable=True,
             metadata={"doc": "elastic gang: most workers it runs on (null: rigid)"}),
    pa.field("speedup", pa.string(), nullable=True,
             metadata={"doc": "elastic gang: throughput by size, 'SIZE:THROUGHPUT,...' (null: linear)"}),
)

#: Arrow schema of the nodes table.
NODE_SCHEMA = pa.schema(
    [
        pa.field("name", pa.string(), nullable=False, metadata={"doc": "node name, unique"}),
        pa.field("gpu_type", _DICT, nullable=False, metadata={"doc": "GPU model ('CPU' for CPU-only nodes)"}),
        pa.field("gpus", pa.int64(), nullable=False, metadata={"doc": "GPUs on the node"}),
        pa.field("cpu_milli", pa.int64(), nullable=False, metadata={"doc": "CPU, 1/1000 cores; 0 = not modelled"}),
        pa.field("memory_mib", pa.int64(), nullable=False, metadata={"doc": "memory, MiB; 0 = not modelled"}),
        pa.field("leaf", _DICT, nullable=False, metadata={"doc": "leaf (top-of-rack) switch label"}),
        pa.field("spine", _DICT, nullable=False, metadata={"doc": "spine switch label"}),
    ]
)

#: Arrow schema of the load table.
LOAD_SCHEMA = pa.schema(
    [
        pa.field("time", pa.float64(), nullable=False, metadata={"doc": "arrival or sample start, s from origin"}),
        pa.field("rate", pa.float64(), nullable=False, metadata={"doc": "requests/s (rate series); NaN for requests"}),
        pa.field("stream", _DICT, nullable=False, metadata={"doc": "client / model / request type"}),
        pa.field("input_tokens", pa.int64(), nullable=False, metadata={"doc": "prompt size; -1 = unknown"}),
        pa.field("output_tokens", pa.int64(), nullable=False, metadata={"doc": "generated size; -1 = unknown"}),
        pa.field("duration", pa.float64(), nullable=False, metadata={"doc": "service time, s; NaN = unknown"}),
        pa.field("cv", pa.float64(), nullable=False, metadata={"doc": "inter-arrival CV of the window; NaN = n/a"}),
    ]
)



# ---------------------------------------------------------------------------------------------
# Row validation shared by all readers
# ---------------------------------------------------------------------------------------------
class RowCheck:
    """Collects per-row errors from vectorised checks; the first error per row wins.

    ``lines`` gives each row's line number in ``source`` (for Parquet: the 1-based row number).
    ``earlier`` are errors found while splitting the file into rows (wrong field count, bad UTF-8,
    bad JSON); they compete for "earliest line" with the column checks.
    """

    def __init__(
        self,
        source: str,
        lines: IntArray,
        problems: Problems | None = None,
        earlier: Sequence[InputError] = (),
    ) -> None:
        self.source = source
        self.lines = lines
        self.problems = problems if problems is not None else Problems()
        self.bad = np.zeros(len(lines), dtype=bool)
        self._errors: list[InputError] = list(earlier)

    def __len__(self) -> int:
        return len(self.lines)

    def flag(
        self, mask: BoolArray, column: str | None, message: str, values: pa.Array | Sequence[Any] | None = None
    ) -> None:
        """Mark rows where ``mask`` is true as bad (unless already bad) with ``message``.

        ``values`` are the raw values of ``column`` (an Arrow array or a sequence) for the message.
        """
        new = np.flatnonzero(mask & ~self.bad)
        if not new.size:
            return
        self.bad[new] = True
        # without skipping only the earliest error is ever shown: make just that one
        rows = new if self.problems.skip else new[:1]
        for i in rows.tolist():
            value = _value_at(values, i) if values is not None else None
            self._errors.append(InputError(self.source, message, line=int(self.lines[i]), column=column, value=value))

    def finish(self) -> BoolArray:
        """Raise the earliest error (strict mode) or record all of them; return the keep-mask."""
        if self._errors:
            self._errors.sort(key=lambda e: (e.line if e.line is not None else 0))
            if not self.problems.skip:
                raise self._errors[0]
            for err in self._errors:
                self.problems.add(err)
            self._errors = []
        return ~self.bad


def _value_at(values: pa.Array | Sequence[Any], i: int) -> Any:
    v = values[i].as_py() if isinstance(values, pa.Array | pa.ChunkedArray) else values[i]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, str) and len(v) > 80:
        v = v[:77] + "..."
    return "" if v is None else v


# ---------------------------------------------------------------------------------------------
# Building tables from columns
# ---------------------------------------------------------------------------------------------
class Coded(NamedTuple):
    """A categorical column already encoded: ``codes`` into ``names`` (-1 allowed where documented)."""

    codes: IntArray
    names: tuple[str, ...]


def encode(values: Sequence[str] | npt.NDArray[Any] | pa.Array, *, missing: tuple[str, ...] = ()) -> Coded:
    """Codes in order of first appearance; values in ``missing`` (e.g. ``""``) get code -1."""
    arr = values if isinstance(values, pa.Array) else pa.array(list(values) if not isinstance(values, np.ndarray)
                                                               else values.tolist(), type=pa.string())
    if len(arr) == 0:
        return Coded(np.zeros(0, dtype=np.int64), ())
    if missing:
        pc = _pc()
        arr = pc.if_else(pc.is_in(arr, value_set=pa.array(list(missing), pa.string())), pa.scalar(None, pa.string()),
                         arr)
    enc = arr.dictionary_encode()
    codes = enc.indices.to_numpy(zero_copy_only=False)
    codes = np.where(enc.indices.is_null().to_numpy(zero_copy_only=False), -1, codes).astype(np.int64)
    return Coded(codes, tuple(enc.dictionary.to_pylist()))


def _coded(values: Coded | Sequence[str] | npt.NDArray[Any] | pa.Array | None, n: int, default: str,
           missing: tuple[str, ...] = ()) -> Coded:
    if values is None:
        return Coded(np.zeros(n, dtype=np.int64), (default,))
    if isinstance(values, Coded):
        return Coded(np.asarray(values.codes, dtype=np.int64), tuple(values.names))
    return encode(values, missing=missing)


def _take_coded(c: Coded, order: IntArray | None) -> Coded:
    return c if order is None else Coded(c.codes[order], c.names)


def build_job_table(
    *,
    names: Sequence[str] | npt.NDArray[Any],
    submit: npt.ArrayLike,
    duration: npt.ArrayLike,
    workers: npt.ArrayLike | None = None,
    gpus_per_worker: npt.ArrayLike | None = None,
    gpu_milli: npt.ArrayLike | None = None,
    cpu_milli: npt.ArrayLike | None = None,
    memory_mib: npt.ArrayLike | None = None,
    gpu_type: Coded | Sequence[str] | npt.NDArray[Any] | None = None,
    priority: npt.ArrayLike | None = None,
    tenant: Coded | Sequence[str] | npt.NDArray[Any] | None = None,
    user: Coded | Sequence[str] | npt.NDArray[Any] | None = None,
    estimate: npt.ArrayLike | None = None,
    kind: npt.ArrayLike | None = None,
    source: str = "",
    origin_epoch: float | None = None,
    sort: bool = True,
    deps: JobDeps | None = None,
    elastic: ElasticSpec | None = None,
) -> JobTable:
    """A :class:`JobTable` from whole columns (the vectorised counterpart of ``JobTableBuilder``).

    String columns are encoded in order of first appearance after sorting; ``gpu_type`` values
    ``""`` mean "any type" (code -1). ``user`` defaults to the tenant. With ``sort`` (default) rows
    are ordered by submit time, ties in input order. Values are trusted: readers validate first.
    """
    n = len(names)
    sub = np.asarray(submit, dtype=np.float64)
    order: IntArray | None = None
    if sort and n > 1 and np.any(np.diff(sub) < 0):
        order = np.argsort(sub, kind="stable")

    def col(values: npt.ArrayLike | None, default: float | int, dtype: type) -> Any:
        arr: Any = np.full(n, default, dtype=dtype) if values is None else np.asarray(values, dtype=dtype)
        if arr.shape != (n,):
            raise ValueError(f"column has shape {arr.shape}, expected ({n},)")
        return arr[order] if order is not None else arr.copy()

    def coded(values: Coded | Sequence[str] | npt.NDArray[Any] | None, default: str,
              missing: tuple[str, ...] = ()) -> Coded:
        if values is None or isinstance(values, Coded):
            return _take_coded(_coded(values, n, default), order)
        seq = values if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)
        return _coded(seq[order] if order is not None else seq, n, default, missing)

    name_list = list(names) if not isinstance(names, np.ndarray) else names.tolist()
    if order is not None:
        name_list = [name_list[i] for i in order.tolist()]
    tenants = coded(tenant, "default")
    users = coded(user, "default") if user is not None else tenants
    types = Coded(np.full(n, -1, dtype=np.int64), ()) if gpu_type is None else coded(gpu_type, "", missing=("",))
    return JobTable(
        names=tuple(map(str, name_list)),
        submit=col(submit, 0.0, np.float64),
        duration=col(duration, 0.0, np.float64),
        workers=col(workers, 1, np.int64),
        gpus_per_worker=col(gpus_per_worker, 1, np.int64),
        gpu_milli=col(gpu_milli, FULL_GPU_MILLI, np.int64),
        cpu_milli=col(cpu_milli, 0, np.int64),
        memory_mib=col(memory_mib, 0, np.int64),
        gpu_type=types.codes,
        priority=col(priority, 0, np.int64),
        tenant=tenants.codes,
        user=users.codes,
        estimate=col(estimate, math.nan, np.float64),
        kind=col(kind, int(JobKind.TRAINING), np.int64),
        gpu_type_names=types.names,
        tenant_names=tenants.names or ("default",),
        user_names=users.names or ("default",),
        source=source,
        origin_epoch=origin_epoch,
        deps=deps if deps is None or order is None else deps.take(order),
        elastic=elastic if elastic is None or order is None else elastic.take(order),
    )


def build_load_series(
    *,
    kind: str,
    time: npt.ArrayLike,
    rate: npt.ArrayLike | None = None,
    stream: Coded | Sequence[str] | npt.NDArray[Any] | None = None,
    input_tokens: npt.ArrayLike | None = None,
    output_tokens: npt.ArrayLike | None = None,
    duration: npt.ArrayLike | None = None,
    cv: npt.ArrayLike | None = None,
    window: float = 0.0,
    source: str = "",
    origin_epoch: float | None = None,
    sort: bool = True,
) -> LoadSeries:
    """A :class:`LoadSeries` from whole columns, sorted by time (stable); unknowns take defaults."""
    t = np.asarray(time, dtype=np.float64)
    n = len(t)
    order: IntArray | None = None
    if sort and n > 1 and np.any(np.diff(t) < 0):
        order = np.argsort(t, kind="stable")

    def col(values: npt.ArrayLike | None, default: float | int, dtype: type) -> Any:
        arr: Any = np.full(n, default, dtype=dtype) if values is None else np.asarray(values, dtype=dtype)
        return arr[order] if order is not None else arr.copy()

    if stream is None or isinstance(stream, Coded):
        streams = _take_coded(_coded(stream, n, "default"), order)
    else:
        seq = stream if isinstance(stream, np.ndarray) else np.asarray(stream, dtype=object)
        streams = _coded(seq[order] if order is not None else seq, n, "default")
    return LoadSeries(
        kind="rate" if kind == "rate" else "requests",
        time=col(t, 0.0, np.float64),
        rate=col(rate, math.nan, np.float64),
        stream=streams.codes,
        input_tokens=col(input_tokens, -1, np.int64),
        output_tokens=col(output_tokens, -1, np.int64),
        duration=col(duration, math.nan, np.float64),
        cv=col(cv, math.nan, np.float64),
        stream_names=streams.names or ("default",),
        window=float(window),
        source=source,
        origin_epoch=origin_epoch,
    )


# ---------------------------------------------------------------------------------------------
# GPU-type sets
# ---------------------------------------------------------------------------------------------
def gpu_type_alternatives(name: str) -> tuple[str, ...]:
    """The GPU types a job's ``gpu_type`` name allows: ``"V100M16|V100M32"`` -> both; ``"T4"`` -> T4."""
    return tuple(part.strip() for part in name.split("|") if part.strip())


def gpu_type_compatibility(job_type_names: Sequence[str], cluster_type_names: Sequence[str]) -> BoolArray:
    """``M[code, t]``: may a job with type code ``code`` run on cluster GPU type ``t``?

    The matrix has one extra last row of all ``True`` so that ``M[jobs.gpu_type]`` works directly
    for the "any type" code -1.
    """
    index = {t: i for i, t in enumerate(cluster_type_names)}
    mat = np.zeros((len(job_type_names) + 1, len(cluster_type_names)), dtype=bool)
    for code, name in enumerate(job_type_names):
        for alt in gpu_type_alternatives(name):
            t = index.get(alt)
            if t is not None:
                mat[code, t] = True
    mat[-1, :] = True
    return mat
