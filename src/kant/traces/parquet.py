"""kant's tables stored: Arrow tables and Parquet files in the schemas of :mod:`kant.traces.schema`.

:func:`write_parquet` / :func:`read_parquet` store and load a :class:`~kant.model.job.JobTable`, a
:class:`~kant.model.cluster.Cluster` or a :class:`~kant.traces.load.LoadSeries`;
``jobs_to_arrow`` / ``jobs_from_arrow`` (and the cluster and load pairs) convert in memory. The
file's schema metadata keeps what the rows alone cannot (the table kind, the source, the time origin
and every vocabulary in its exact order), so ``read -> write -> read`` gives back an identical
object (:func:`jobs_equal`, :func:`clusters_equal`, :func:`loads_equal`). Reading checks every row
as a reader does (:class:`~kant.traces.schema.RowCheck`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kant.errors import InputError
from kant.model.cluster import Cluster
from kant.model.deps import JobDeps
from kant.model.elastic import ElasticSpec, check_row, format_speedup
from kant.model.job import FULL_GPU_MILLI, JOB_COLUMNS, JobTable
from kant.traces._csv import Problems
from kant.traces.load import LOAD_COLUMNS, LoadSeries
from kant.traces.raw import read_parquet_table
from kant.traces.schema import (
    JOB_DEPENDENCY_FIELDS,
    JOB_ELASTIC_FIELDS,
    JOB_SCHEMA,
    LOAD_SCHEMA,
    NODE_SCHEMA,
    SCHEMA_VERSION,
    Coded,
    RowCheck,
    encode,
)

__all__ = [
    "cluster_from_arrow",
    "cluster_to_arrow",
    "clusters_equal",
    "jobs_equal",
    "jobs_from_arrow",
    "jobs_to_arrow",
    "load_from_arrow",
    "load_to_arrow",
    "loads_equal",
    "read_parquet",
    "write_parquet",
]

IntArray = npt.NDArray[np.int64]

_KIND_NAMES = ("training", "inference")
_INT_JOB_COLUMNS = ("workers", "gpus_per_worker", "gpu_milli", "cpu_milli", "memory_mib", "priority")


def _dict_array(codes: IntArray, vocab: Sequence[str]) -> pa.DictionaryArray:
    idx = pa.array(codes.astype(np.int32), mask=codes < 0, type=pa.int32())
    return pa.DictionaryArray.from_arrays(idx, pa.array(list(vocab), type=pa.string()))


def _meta(table: str, source: str, origin: float | None, vocab: dict[str, Sequence[str]],
          extra: dict[str, Any] | None = None) -> dict[bytes, bytes]:
    body: dict[str, Any] = {
        "table": table,
        "version": SCHEMA_VERSION,
        "source": source,
        "origin_epoch": origin,
        "vocab": {k: list(v) for k, v in vocab.items()},
    }
    if extra:
        body.update(extra)
    return {b"kant": json.dumps(body).encode()}


def _read_meta(table: pa.Table) -> dict[str, Any]:
    raw = (table.schema.metadata or {}).get(b"kant")
    if raw is None:
        return {}
    try:
        meta = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return {}
    return meta if isinstance(meta, dict) else {}


def jobs_to_arrow(jobs: JobTable) -> pa.Table:
    """The jobs table in :data:`JOB_SCHEMA`, vocabularies and origin in the schema metadata."""
    cols: dict[str, pa.Array] = {
        "name": pa.array(list(jobs.names), type=pa.string()),
        "submit": pa.array(jobs.submit),
        "duration": pa.array(jobs.duration),
        "workers": pa.array(jobs.workers),
        "gpus_per_worker": pa.array(jobs.gpus_per_worker),
        "gpu_milli": pa.array(jobs.gpu_milli),
        "cpu_milli": pa.array(jobs.cpu_milli),
        "memory_mib": pa.array(jobs.memory_mib),
        "gpu_type": _dict_array(jobs.gpu_type, jobs.gpu_type_names),
        "priority": pa.array(jobs.priority),
        "tenant": _dict_array(jobs.tenant, jobs.tenant_names),
        "user": _dict_array(jobs.user, jobs.user_names),
        "estimate": pa.array(jobs.estimate),
        "kind": _dict_array(jobs.kind, _KIND_NAMES),
    }
    meta = _meta("jobs", jobs.source, jobs.origin_epoch,
                 {"gpu_type": jobs.gpu_type_names, "tenant": jobs.tenant_names, "user": jobs.user_names})
    schema = JOB_SCHEMA
    if jobs.deps is not None:  # the optional columns, only when some job has a dependency
        cols["depends_on"] = pa.array([s or None for s in jobs.deps.spec], type=pa.string())
        cols["kill_on_invalid_dep"] = pa.array(jobs.deps.kill_on_invalid)
        for fld in JOB_DEPENDENCY_FIELDS:
            schema = schema.append(fld)
    if jobs.elastic is not None:  # the optional columns, only when some job is elastic
        spec = jobs.elastic
        rigid = np.array([not spec.is_elastic(i) for i in range(len(jobs))], dtype=bool)
        cols["min_workers"] = pa.array(spec.min_workers, mask=rigid)
        cols["max_workers"] = pa.array(spec.max_workers, mask=rigid)
        cols["speedup"] = pa.array([format_speedup(t) for t in spec.speedup], type=pa.string())
        for fld in JOB_ELASTIC_FIELDS:
            schema = schema.append(fld)
    return pa.Table.from_arrays(list(cols.values()), schema=schema.with_metadata(meta))


def _elastic_from_arrow(table: pa.Table, source: str, workers: IntArray, milli: IntArray,
                        check: RowCheck) -> tuple[list[int | None], list[int | None], list[Any]]:
    """The optional elastic columns: bounds (null: rigid) and speed-up tables, each row checked."""
    n = table.num_rows

    def ints(name: str) -> list[int | None]:
        if name not in table.column_names:
            return [None] * n
        return [None if v is None else int(v) for v in _column(table, name, source).to_pylist()]

    lo, hi = ints("min_workers"), ints("max_workers")
    texts = (_strings(_column(table, "speedup", source)).to_pylist() if "speedup" in table.column_names
             else [None] * n)
    tables: list[Any] = [None] * n
    for i in range(n):
        lo[i], hi[i], tables[i], why = check_row(int(workers[i]), lo[i], hi[i], int(milli[i]), texts[i])
        if why is not None:
            one = np.zeros(n, dtype=bool)
            one[i] = True
            fld, _, text = why.partition(": ")
            check.flag(one, fld, text, pa.array(lo))
    return lo, hi, tables


def _deps_from_arrow(table: pa.Table, source: str, check: RowCheck) -> tuple[list[str], Any]:
    """The optional dependency columns: texts (syntax checked per row) and kill flags."""
    from kant.model.deps import format_dependency, parse_dependency

    n = table.num_rows
    arr = _strings(_column(table, "depends_on", source))
    texts = [""] * n
    for i, v in enumerate(arr.to_pylist()):
        try:
            texts[i] = format_dependency(parse_dependency(v or ""))
        except ValueError as exc:
            one = np.zeros(n, dtype=bool)
            one[i] = True
            check.flag(one, "depends_on", f"bad dependency: {exc}", arr)
    if "kill_on_invalid_dep" in table.column_names:
        k = _column(table, "kill_on_invalid_dep", source)
        kill = np.asarray(pc.fill_null(pc.cast(k, pa.bool_()), False).to_numpy(zero_copy_only=False), dtype=bool)
    else:
        kill = np.zeros(n, dtype=bool)
    return texts, kill


def _column(table: pa.Table, name: str, source: str) -> pa.Array:
    if name not in table.column_names:
        raise InputError(source, f"missing column {name!r}; columns are {', '.join(table.column_names)}", line=1)
    col = table.column(name)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _strings(arr: pa.Array) -> pa.Array:
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        arr = pc.cast(arr, pa.string())
    return arr


def _numbers(arr: pa.Array, name: str, source: str, check: RowCheck, *, integer: bool) -> npt.NDArray[Any]:
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    try:
        vals = pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise InputError(source, f"column {name!r} has type {arr.type}, expected numbers", line=1) from None
    null = arr.is_null().to_numpy(zero_copy_only=False)
    check.flag(null, name, "empty value", arr)
    vals = np.where(null, 0.0 if integer else math.nan, vals)
    if integer:
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(vals) | (vals != np.floor(vals)) | (np.abs(vals) > 2**53)
        check.flag(bad, name, "not an integer", arr)
        return np.where(bad, 0, vals).astype(np.int64)
    return vals


def _decode_vocab(arr: pa.Array, vocab: Sequence[str] | None, name: str, source: str, check: RowCheck,
                  *, nullable: bool) -> Coded:
    strings = _strings(arr)
    null = strings.is_null().to_numpy(zero_copy_only=False)
    if not nullable:
        check.flag(null, name, "empty value", strings)
    if vocab is None:
        return encode(strings)
    value_set = pa.array(list(vocab), type=pa.string())
    idx = pc.index_in(strings, value_set=value_set)
    codes = np.where(idx.is_null().to_numpy(zero_copy_only=False), -1,
                     idx.fill_null(0).to_numpy(zero_copy_only=False)).astype(np.int64)
    check.flag((codes < 0) & ~null, name, "value not in the file's vocabulary", strings)
    return Coded(codes, tuple(vocab))


def jobs_from_arrow(table: pa.Table, *, source: str = "<arrow>", problems: Problems | None = None) -> JobTable:
    """A :class:`JobTable` from a table in :data:`JOB_SCHEMA` (kant's or any tool's), validated.

    Only ``name``, ``submit`` and ``duration`` are required; other columns take the schema
    defaults. Rows are numbered from 1 in error messages. Without kant metadata, vocabularies are
    built in order of first appearance.
    """
    meta = _read_meta(table)
    vocab: dict[str, Any] = meta.get("vocab") if isinstance(meta.get("vocab"), dict) else {}  # type: ignore[assignment]
    n = table.num_rows
    check = RowCheck(source, np.arange(1, n + 1, dtype=np.int64), problems)
    names_arr = _strings(_column(table, "name", source))
    check.flag(names_arr.is_null().to_numpy(zero_copy_only=False), "name", "empty job name", names_arr)
    submit = _numbers(_column(table, "submit", source), "submit", source, check, integer=False)
    duration = _numbers(_column(table, "duration", source), "duration", source, check, integer=False)
    check.flag(~np.isfinite(submit), "submit", "must be a finite number", submit)
    with np.errstate(invalid="ignore"):
        check.flag(np.isnan(duration) | (duration < 0), "duration", "must be >= 0 (negative duration)", duration)
    ints: dict[str, IntArray] = {}
    defaults = {"workers": 1, "gpus_per_worker": 1, "gpu_milli": FULL_GPU_MILLI, "cpu_milli": 0, "memory_mib": 0,
                "priority": 0}
    for c in _INT_JOB_COLUMNS:
        if c in table.column_names:
            ints[c] = _numbers(_column(table, c, source), c, source, check, integer=True)
        else:
            ints[c] = np.full(n, defaults[c], dtype=np.int64)
    check.flag(ints["workers"] < 1, "workers", "must be >= 1", ints["workers"])
    check.flag(ints["gpus_per_worker"] < 0, "gpus_per_worker", "must be >= 0", ints["gpus_per_worker"])
    milli = ints["gpu_milli"]
    check.flag((milli < 0) | (milli > FULL_GPU_MILLI), "gpu_milli", "must be within 0..1000", milli)
    check.flag((ints["gpus_per_worker"] >= 1) & (milli == 0), "gpu_milli", "zero GPU share for a GPU job", milli)
    check.flag((ints["gpus_per_worker"] > 1) & (milli != FULL_GPU_MILLI), "gpu_milli",
               "a multi-GPU worker needs whole GPUs (1000)", milli)
    for c in ("cpu_milli", "memory_mib"):
        check.flag(ints[c] < 0, c, "must be >= 0", ints[c])
    estimate = (_numbers(_column(table, "estimate", source), "estimate", source, check, integer=False)
                if "estimate" in table.column_names else np.full(n, math.nan))
    with np.errstate(invalid="ignore"):
        check.flag(estimate < 0, "estimate", "must be >= 0", estimate)
    gpu_type = (_decode_vocab(_column(table, "gpu_type", source), vocab.get("gpu_type"), "gpu_type", source, check,
                              nullable=True)
                if "gpu_type" in table.column_names else Coded(np.full(n, -1, dtype=np.int64), ()))
    tenant = (_decode_vocab(_column(table, "tenant", source), vocab.get("tenant"), "tenant", source, check,
                            nullable=False)
              if "tenant" in table.column_names else Coded(np.zeros(n, dtype=np.int64), ("default",)))
    user = (_decode_vocab(_column(table, "user", source), vocab.get("user"), "user", source, check, nullable=False)
            if "user" in table.column_names else tenant)
    if "kind" in table.column_names:
        kinds = _decode_vocab(_column(table, "kind", source), _KIND_NAMES, "kind", source, check, nullable=False)
        kind = kinds.codes
    else:
        kind = np.zeros(n, dtype=np.int64)
    dep_texts, dep_kill = (_deps_from_arrow(table, source, check) if "depends_on" in table.column_names
                           else (None, None))
    elastic = (_elastic_from_arrow(table, source, ints["workers"], milli, check)
               if {"min_workers", "max_workers", "speedup"} & set(table.column_names) else None)
    keep = check.finish()
    origin = meta.get("origin_epoch")
    rows = np.flatnonzero(keep)
    all_rows = len(rows) == n
    name_list = names_arr.to_pylist()

    def pick(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return a if all_rows else a[rows]

    return JobTable(
        names=tuple(name_list) if all_rows else tuple(name_list[i] for i in rows.tolist()),
        submit=pick(submit).astype(np.float64),
        duration=pick(duration).astype(np.float64),
        workers=pick(ints["workers"]),
        gpus_per_worker=pick(ints["gpus_per_worker"]),
        gpu_milli=pick(ints["gpu_milli"]),
        cpu_milli=pick(ints["cpu_milli"]),
        memory_mib=pick(ints["memory_mib"]),
        gpu_type=pick(gpu_type.codes),
        priority=pick(ints["priority"]),
        tenant=pick(tenant.codes),
        user=pick(user.codes),
        estimate=pick(estimate).astype(np.float64),
        kind=pick(kind),
        gpu_type_names=gpu_type.names,
        tenant_names=tenant.names or ("default",),
        user_names=user.names or ("default",),
        source=str(meta.get("source", source)) if meta else source,
        origin_epoch=float(origin) if isinstance(origin, int | float) else None,
        deps=_checked_deps(dep_texts, dep_kill, rows, all_rows, name_list, source),
        elastic=None if elastic is None else ElasticSpec.of(
            pick(ints["workers"]), [elastic[0][i] for i in rows.tolist()], [elastic[1][i] for i in rows.tolist()],
            [elastic[2][i] for i in rows.tolist()]),
    )


def _checked_deps(texts: list[str] | None, kill: Any, rows: IntArray, all_rows: bool, names: list[Any],
                  source: str) -> JobDeps | None:
    """The kept rows' dependencies, their references checked (unknown job, itself, cycle)."""
    if texts is None:
        return None
    deps = JobDeps.of(texts if all_rows else [texts[i] for i in rows.tolist()], kill[rows])
    if deps is not None:
        kept = names if all_rows else [names[i] for i in rows.tolist()]
        try:
            deps.resolve(kept)
        except ValueError as exc:
            raise InputError(source, str(exc), column="depends_on") from None
    return deps


def cluster_to_arrow(cluster: Cluster) -> pa.Table:
    """The node inventory in :data:`NODE_SCHEMA`; leaf->spine wiring and vocabularies in the metadata."""
    cols = [
        pa.array(list(cluster.names), type=pa.string()),
        _dict_array(cluster.gpu_type, cluster.gpu_type_names),
        pa.array(cluster.gpus),
        pa.array(cluster.cpu_milli),
        pa.array(cluster.memory_mib),
        _dict_array(cluster.leaf, cluster.leaf_names),
        _dict_array(cluster.spine, cluster.spine_names),
    ]
    meta = _meta("nodes", "", None,
                 {"gpu_type": cluster.gpu_type_names, "leaf": cluster.leaf_names, "spine": cluster.spine_names},
                 {"leaf_spine": cluster.leaf_spine.tolist()})
    return pa.Table.from_arrays(cols, schema=NODE_SCHEMA.with_metadata(meta))


def cluster_from_arrow(table: pa.Table, *, source: str = "<arrow>", problems: Problems | None = None) -> Cluster:
    """A :class:`Cluster` from a table in :data:`NODE_SCHEMA`, validated; exact when kant wrote it."""
    from kant.model.cluster import NodeSpec

    meta = _read_meta(table)
    vocab: dict[str, Any] = meta.get("vocab") if isinstance(meta.get("vocab"), dict) else {}  # type: ignore[assignment]
    n = table.num_rows
    check = RowCheck(source, np.arange(1, n + 1, dtype=np.int64), problems)
    names_arr = _strings(_column(table, "name", source))
    names = names_arr.to_pylist()
    check.flag(names_arr.is_null().to_numpy(zero_copy_only=False), "name", "empty node name", names_arr)
    dup = np.zeros(n, dtype=bool)
    seen: set[str] = set()
    for i, nm in enumerate(names):
        if nm in seen:
            dup[i] = True
        seen.add(nm)
    check.flag(dup, "name", "duplicate node name", names_arr)
    gpus = _numbers(_column(table, "gpus", source), "gpus", source, check, integer=True)
    check.flag(gpus < 0, "gpus", "must be >= 0", gpus)
    ints = {}
    for c in ("cpu_milli", "memory_mib"):
        ints[c] = (_numbers(_column(table, c, source), c, source, check, integer=True)
                   if c in table.column_names else np.zeros(n, dtype=np.int64))
        check.flag(ints[c] < 0, c, "must be >= 0", ints[c])
    gtype = _decode_vocab(_column(table, "gpu_type", source), vocab.get("gpu_type"), "gpu_type", source, check,
                          nullable=False)
    has_topo = "leaf" in table.column_names and "spine" in table.column_names
    leaf = spine = None
    if has_topo:
        leaf = _decode_vocab(_column(table, "leaf", source), vocab.get("leaf"), "leaf", source, check, nullable=False)
        spine = _decode_vocab(_column(table, "spine", source), vocab.get("spine"), "spine", source, check,
                              nullable=False)
    keep = check.finish()
    if not keep.any():
        raise InputError(source, "no valid node rows")
    leaf_spine = meta.get("leaf_spine")
    exact = (bool(keep.all()) and leaf is not None and spine is not None and isinstance(leaf_spine, list)
             and len(leaf_spine) == len(leaf.names) and len(gtype.names) > 0)
    if exact and leaf is not None and spine is not None:
        ls = np.asarray(leaf_spine, dtype=np.int64)
        consistent = (ls.size == 0 or (ls.min() >= 0 and ls.max() < len(spine.names))) and bool(
            np.array_equal(ls[leaf.codes], spine.codes) if n else True)
        if consistent:
            return Cluster(
                names=tuple(names),
                gpu_type_names=gtype.names,
                gpu_type=gtype.codes,
                gpus=gpus,
                cpu_milli=ints["cpu_milli"],
                memory_mib=ints["memory_mib"],
                leaf=leaf.codes,
                spine=spine.codes,
                leaf_spine=ls,
                leaf_names=leaf.names,
                spine_names=spine.names,
            )
    nodes = [
        NodeSpec(
            names[i],
            gtype.names[int(gtype.codes[i])],
            int(gpus[i]),
            int(ints["cpu_milli"][i]),
            int(ints["memory_mib"][i]),
            leaf=leaf.names[int(leaf.codes[i])] if leaf is not None else None,
            spine=spine.names[int(spine.codes[i])] if spine is not None else None,
        )
        for i in np.flatnonzero(keep).tolist()
    ]
    return Cluster.from_nodes(nodes)


def load_to_arrow(load: LoadSeries) -> pa.Table:
    """The load series in :data:`LOAD_SCHEMA`; kind, window and streams in the metadata."""
    cols = [
        pa.array(load.time),
        pa.array(load.rate),
        _dict_array(load.stream, load.stream_names),
        pa.array(load.input_tokens),
        pa.array(load.output_tokens),
        pa.array(load.duration),
        pa.array(load.cv),
    ]
    meta = _meta("load", load.source, load.origin_epoch, {"stream": load.stream_names},
                 {"kind": load.kind, "window": load.window})
    return pa.Table.from_arrays(cols, schema=LOAD_SCHEMA.with_metadata(meta))


def load_from_arrow(table: pa.Table, *, source: str = "<arrow>", problems: Problems | None = None) -> LoadSeries:
    """A :class:`LoadSeries` from a table in :data:`LOAD_SCHEMA`, validated."""
    meta = _read_meta(table)
    vocab: dict[str, Any] = meta.get("vocab") if isinstance(meta.get("vocab"), dict) else {}  # type: ignore[assignment]
    n = table.num_rows
    check = RowCheck(source, np.arange(1, n + 1, dtype=np.int64), problems)
    time = _numbers(_column(table, "time", source), "time", source, check, integer=False)
    check.flag(~np.isfinite(time), "time", "must be a finite number", time)

    def opt(name: str, integer: bool, default: float) -> npt.NDArray[Any]:
        if name not in table.column_names:
            return np.full(n, default, dtype=np.int64 if integer else np.float64)
        return _numbers(_column(table, name, source), name, source, check, integer=integer)

    rate = opt("rate", False, math.nan)
    kind = str(meta.get("kind") or ("rate" if np.isfinite(rate).any() else "requests"))
    if kind not in ("requests", "rate"):
        raise InputError(source, f"unknown load kind {kind!r} in the file's metadata")
    with np.errstate(invalid="ignore"):
        if kind == "rate":
            check.flag(~np.isfinite(rate) | (rate < 0), "rate", "must be a finite number >= 0", rate)
    inp = opt("input_tokens", True, -1)
    out = opt("output_tokens", True, -1)
    check.flag(inp < -1, "input_tokens", "must be >= 0 (or -1 for unknown)", inp)
    check.flag(out < -1, "output_tokens", "must be >= 0 (or -1 for unknown)", out)
    dur = opt("duration", False, math.nan)
    cv = opt("cv", False, math.nan)
    with np.errstate(invalid="ignore"):
        check.flag(dur < 0, "duration", "must be >= 0 (negative duration)", dur)
        check.flag(cv < 0, "cv", "must be >= 0", cv)
    stream = (_decode_vocab(_column(table, "stream", source), vocab.get("stream"), "stream", source, check,
                            nullable=False)
              if "stream" in table.column_names else Coded(np.zeros(n, dtype=np.int64), ("default",)))
    keep = check.finish()
    window = meta.get("window", 0.0)
    if not isinstance(window, int | float) or not math.isfinite(window) or window < 0:
        raise InputError(source, "bad 'window' in the file's metadata", value=window)
    origin = meta.get("origin_epoch")
    rows = np.flatnonzero(keep)
    return LoadSeries(
        kind="rate" if kind == "rate" else "requests",
        time=time[rows],
        rate=rate[rows],
        stream=stream.codes[rows],
        input_tokens=inp[rows],
        output_tokens=out[rows],
        duration=dur[rows],
        cv=cv[rows],
        stream_names=stream.names or ("default",),
        window=float(window),
        source=str(meta.get("source", source)) if meta else source,
        origin_epoch=float(origin) if isinstance(origin, int | float) else None,
    )


# --- Parquet files ---------------------------------------------------------------------------
def write_parquet(obj: JobTable | Cluster | LoadSeries, path: str | Path) -> Path:
    """Write a job table, cluster or load series to ``path`` as Parquet (zstd); returns the path."""
    if isinstance(obj, JobTable):
        table = jobs_to_arrow(obj)
    elif isinstance(obj, Cluster):
        table = cluster_to_arrow(obj)
    elif isinstance(obj, LoadSeries):
        table = load_to_arrow(obj)
    else:
        raise TypeError(f"cannot write {type(obj).__name__} as a kant trace")
    p = Path(path)
    try:
        if p.parent and not p.parent.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, p, compression="zstd")
    except OSError as exc:
        raise InputError(str(p), f"cannot write: {exc.strerror or exc}") from None
    return p


def read_parquet(path: str | Path, *, problems: Problems | None = None) -> JobTable | Cluster | LoadSeries:
    """Read a Parquet file in one of kant's schemas; the kind comes from the metadata or the columns."""
    p = Path(path)
    source = str(p)
    table = read_parquet_table(p)
    kind = _read_meta(table).get("table")
    cols = set(table.column_names)
    if kind is None:
        if {"name", "submit", "duration"} <= cols:
            kind = "jobs"
        elif {"name", "gpus", "gpu_type"} <= cols:
            kind = "nodes"
        elif "time" in cols:
            kind = "load"
    if kind == "jobs":
        return jobs_from_arrow(table, source=source, problems=problems)
    if kind == "nodes":
        return cluster_from_arrow(table, source=source, problems=problems)
    if kind == "load":
        return load_from_arrow(table, source=source, problems=problems)
    raise InputError(source, "not a kant table: expected jobs (name, submit, duration, ...), nodes (name, gpus, "
                     "gpu_type, ...) or load (time, ...) columns", line=1)


# --- equality (for round-trip checks) ---------------------------------------------------------
def _arrays_equal(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> bool:
    if a.dtype.kind == "f":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def jobs_equal(a: JobTable, b: JobTable) -> bool:
    """Every column, name, vocabulary, source and origin identical (NaN equals NaN)."""
    return (
        a.names == b.names
        and all(_arrays_equal(getattr(a, c), getattr(b, c)) for c in JOB_COLUMNS)
        and a.gpu_type_names == b.gpu_type_names
        and a.tenant_names == b.tenant_names
        and a.user_names == b.user_names
        and a.source == b.source
        and a.origin_epoch == b.origin_epoch
        and (a.deps.equals(b.deps) if a.deps is not None else b.deps is None)
        and (a.elastic.equals(b.elastic) if a.elastic is not None else b.elastic is None)
    )


def clusters_equal(a: Cluster, b: Cluster) -> bool:
    """Every node attribute, topology array and vocabulary identical."""
    arrays = ("gpu_type", "gpus", "cpu_milli", "memory_mib", "leaf", "spine", "leaf_spine")
    return (
        a.names == b.names
        and a.gpu_type_names == b.gpu_type_names
        and a.leaf_names == b.leaf_names
        and a.spine_names == b.spine_names
        and all(_arrays_equal(getattr(a, c), getattr(b, c)) for c in arrays)
    )


def loads_equal(a: LoadSeries, b: LoadSeries) -> bool:
    """Every column, stream name and attribute identical (NaN equals NaN)."""
    return (
        a.kind == b.kind
        and a.stream_names == b.stream_names
        and a.window == b.window
        and a.source == b.source
        and a.origin_epoch == b.origin_epoch
        and all(_arrays_equal(getattr(a, c), getattr(b, c)) for c in LOAD_COLUMNS)
    )
