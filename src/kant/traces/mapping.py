"""Bring your own trace: a small YAML mapping turns an unknown job log, inventory or request log into
kant's schema, and the fast column machinery every reader shares.

A mapping names the file, its format, which source column feeds which schema field, the units of
times, durations, CPU and memory, the time origin and defaults (see docs/traces.md)::

    kind: jobs                      # jobs | nodes | requests | rate
    file: philly-2000.jsonl         # relative to the mapping file
    format: jsonl                   # csv | tsv | jsonl | parquet (default: from the file name)
    columns:
      name: job_id
      submit: submitted_ms
      duration: runtime_ms
      gpus: gpu_count               # total GPUs, split into workers of <= max_gpus_per_worker
      tenant: virtual_cluster
    units: {time: ms, duration: ms}
    time_origin: first              # first | zero | <date-time> | <number in the time unit>
    defaults: {gpu_type: V100}

The mapping itself is validated with pydantic: a bad key or value raises
:class:`~kant.errors.ConfigError` naming the key path (``units.time``). Data problems raise
:class:`~kant.errors.InputError` naming the data file, line, column and value, or are dropped and
counted with ``Problems(skip=True)``.

The shared machinery: :func:`read_raw` splits a CSV/TSV/JSONL/Parquet file into string (or typed)
Arrow columns plus each row's line number — CSV through ``pyarrow.csv`` when the file has no
quotes, else through Python's ``csv`` module — and :func:`float_column`, :func:`int_column`,
:func:`time_column` and :func:`text_column` convert whole columns at once, flagging bad rows in a
:class:`~kant.traces.schema.RowCheck`.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kant.config.validation import KeyPathError, validate_document
from kant.config.yaml_file import read_yaml
from kant.errors import ConfigError, InputError
from kant.model.cluster import (
    DEFAULT_LEAVES_PER_SPINE,
    DEFAULT_NODES_PER_LEAF,
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    Cluster,
    NodeSpec,
)
from kant.model.job import FULL_GPU_MILLI, JobKind, JobTable
from kant.traces._csv import Problems, split_gangs
from kant.traces.load import LoadSeries
from kant.traces.schema import RowCheck, build_job_table, build_load_series

__all__ = [
    "MEMORY_UNITS",
    "TIME_UNITS",
    "RawTable",
    "TraceMapping",
    "float_column",
    "int_column",
    "load_mapping",
    "read_mapped",
    "read_raw",
    "read_with_mapping",
    "sniff_format",
    "split_gangs",
    "text_column",
    "time_column",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: seconds per unit for numeric times and durations
TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0, "d": 86400.0}
#: MiB per unit for memory
MEMORY_UNITS: dict[str, float] = {"mib": 1.0, "gib": 1024.0, "kib": 1 / 1024, "bytes": 1 / 1048576,
                                  "mb": 1e6 / 1048576, "gb": 1e9 / 1048576}
_CPU_UNITS: dict[str, float] = {"milli": 1.0, "cores": 1000.0}
_MAX_INT = float(2**53)


# ---------------------------------------------------------------------------------------------
# Raw tables
# ---------------------------------------------------------------------------------------------
@dataclass
class RawTable:
    """A file split into rows: one Arrow array per column and each row's line number.

    CSV and JSONL columns are strings (``""`` when absent); Parquet columns keep their types.
    ``errors`` are rows already dropped while splitting (wrong field count, bad UTF-8, bad JSON),
    waiting to be reported by a :class:`RowCheck`.
    """

    source: str
    columns: dict[str, pa.Array]
    lines: IntArray
    errors: list[InputError] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.lines)

    @property
    def header(self) -> tuple[str, ...]:
        return tuple(self.columns)

    def require(self, names: Sequence[str], why: dict[str, str] | None = None) -> None:
        """Raise naming every missing column (and the mapping key that wants it, if given)."""
        missing = list(dict.fromkeys(c for c in names if c not in self.columns))
        if missing:
            detail = ", ".join(c + (f" (for {why[c]})" if why and c in why else "") for c in missing)
            raise InputError(self.source, f"missing column(s) {detail}; header has {', '.join(self.header)}",
                             line=1)

    def check(self, problems: Problems | None) -> RowCheck:
        """A :class:`RowCheck` over these rows that also reports the rows dropped while splitting."""
        return RowCheck(self.source, self.lines, problems, self.errors)


def _read_bytes(path: Path) -> bytes:
    source = str(path)
    try:
        if path.suffix.lower() == ".gz":
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except FileNotFoundError:
        raise InputError(source, "file not found") from None
    except IsADirectoryError:
        raise InputError(source, "is a directory, not a file") from None
    except (gzip.BadGzipFile, EOFError, zlib.error):
        raise InputError(source, "not a valid gzip file (corrupt or truncated)") from None
    except OSError as exc:
        raise InputError(source, f"cannot read: {exc.strerror or exc}") from None


def _decode(data: bytes, source: str, errors: list[InputError]) -> bytes:
    """Strip a BOM and blank out lines that are not UTF-8 (recording them); returns valid UTF-8 bytes."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        data.decode("utf-8")
        return data
    except UnicodeDecodeError:
        pass
    out: list[bytes] = []
    for i, raw in enumerate(data.split(b"\n")):
        try:
            raw.decode("utf-8")
            out.append(raw)
        except UnicodeDecodeError as exc:
            snippet = raw[max(0, exc.start - 8): exc.end + 8]
            err = InputError(source, "not valid UTF-8 text", line=i + 1, value=snippet)
            if i == 0:
                raise err from None
            errors.append(err)
            out.append(b"")
    return b"\n".join(out)


def sniff_format(path: Path) -> str:
    """``csv``, ``tsv``, ``jsonl`` or ``parquet`` from the file name (``.gz`` ignored)."""
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if name.endswith((".tsv", ".tab", ".trace")):
        return "tsv"
    return "csv"


def read_raw(
    path: str | Path,
    *,
    format: str | None = None,
    delimiter: str | None = None,
    header: bool | Sequence[str] = True,
) -> RawTable:
    """Split a file into columns and rows (see :class:`RawTable`).

    ``header=True`` takes column names from the first line; a sequence of names reads a file
    without a header line. Missing columns are not an error here (see :meth:`RawTable.require`).
    """
    p = Path(path)
    fmt = format or sniff_format(p)
    if fmt == "parquet":
        return _parquet_raw(p)
    errors: list[InputError] = []
    data = _decode(_read_bytes(p), str(p), errors)
    if fmt == "jsonl":
        return _jsonl_raw(data, str(p), errors)
    if fmt not in ("csv", "tsv"):
        raise InputError(str(p), f"unknown format {fmt!r}; expected csv, tsv, jsonl or parquet")
    delim = delimiter or ("\t" if fmt == "tsv" else ",")
    names = None if header is True else (list(header) if header is not False else None)
    if header is False:
        raise InputError(str(p), "a file without a header needs column names")
    return _csv_raw(data, str(p), delim, names, errors)


def _csv_header(first: str, delim: str, source: str) -> list[str]:
    try:
        row = next(csv.reader([first], delimiter=delim))
    except (csv.Error, StopIteration) as exc:
        raise InputError(source, f"unreadable header: {exc}", line=1) from None
    header = [h.strip() for h in row]
    seen: set[str] = set()
    for h in header:
        if h in seen and h:
            raise InputError(source, "duplicate column name in header", line=1, value=h)
        seen.add(h)
    return header


def _csv_raw(data: bytes, source: str, delim: str, names: list[str] | None, errors: list[InputError]) -> RawTable:
    if len(delim) != 1 or delim in "\r\n\"":
        raise InputError(source, "the delimiter must be one character (not a quote or newline)", value=delim)
    if names is None:
        end = data.find(b"\n")
        first = (data if end < 0 else data[:end]).decode("utf-8").rstrip("\r")
        if not first.strip():
            raise InputError(source, "file is empty (no header line)", line=1)
        header = _csv_header(first, delim, source)
        body_start = len(data) if end < 0 else end + 1
        first_line = 2
    else:
        header = list(names)
        body_start = 0
        first_line = 1
    width = len(header)
    body = data[body_start:]
    if b'"' in body:
        return _csv_raw_slow(body.decode("utf-8"), source, delim, header, first_line, errors)
    # Fast path: no quoting, so every line is one row. Count delimiters per line with numpy.
    buf = np.frombuffer(body, dtype=np.uint8)
    nl = np.flatnonzero(buf == 10)
    starts = np.concatenate([[0], nl + 1])
    ends = np.concatenate([nl, [len(buf)]])
    if ends[-1] == starts[-1]:  # file ends with a newline: no row after it
        starts, ends = starts[:-1], ends[:-1]
    content_end = ends - ((ends > starts) & (buf[np.maximum(ends - 1, 0)] == 13)).astype(np.int64)
    length = content_end - starts
    dl = np.flatnonzero(buf == ord(delim))
    per_line = np.bincount(np.searchsorted(starts, dl, side="right") - 1, minlength=len(starts))[: len(starts)]
    fields = per_line + 1
    line_no = np.arange(first_line, first_line + len(starts), dtype=np.int64)
    blank = length == 0
    odd = ~blank & (fields != width)
    if odd.any():
        for i in np.flatnonzero(odd).tolist():
            text = body[starts[i]: content_end[i]].decode("utf-8")
            if not text.strip():
                blank[i] = True
                continue
            errors.append(InputError(source, f"expected {width} fields, found {int(fields[i])}", line=int(line_no[i])))
    keep = ~blank & (fields == width)
    n = int(keep.sum())
    if n == 0:
        cols = {h: pa.array([], type=pa.string()) for h in header}
        return RawTable(source, cols, np.zeros(0, dtype=np.int64), errors)
    if keep.all() or not odd.any():
        payload = body  # blank lines only: pyarrow skips them itself
    else:
        payload = b"\n".join(body[s:e] for s, e in zip(starts[keep].tolist(), content_end[keep].tolist(), strict=True))
    tmp_names = [f"c{i}" for i in range(width)]
    try:
        table = pcsv.read_csv(
            io.BytesIO(payload),
            read_options=pcsv.ReadOptions(column_names=tmp_names, block_size=1 << 24,
                                          use_threads=len(payload) > (64 << 20)),
            parse_options=pcsv.ParseOptions(delimiter=delim, quote_char=False, ignore_empty_lines=True,
                                            newlines_in_values=False),
            convert_options=pcsv.ConvertOptions(column_types=dict.fromkeys(tmp_names, pa.string()),
                                                strings_can_be_null=False),
        )
    except (pa.ArrowInvalid, pa.ArrowException):
        table = None
    if table is None or table.num_rows != n:
        return _csv_raw_slow(body.decode("utf-8"), source, delim, header, first_line, [])
    cols = {}
    for h, t in zip(header, tmp_names, strict=True):
        if h not in cols:
            cols[h] = table.column(t).combine_chunks()
    return RawTable(source, cols, line_no[keep], errors)


def _csv_raw_slow(text: str, source: str, delim: str, header: list[str], first_line: int,
                  errors: list[InputError]) -> RawTable:
    width = len(header)
    values: list[list[str]] = [[] for _ in header]
    lines: list[int] = []
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delim)
    prev_end = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise InputError(source, f"unreadable row: {exc}", line=first_line - 1 + reader.line_num) from None
        start = first_line + prev_end
        prev_end = reader.line_num
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != width:
            errors.append(InputError(source, f"expected {width} fields, found {len(row)}", line=start))
            continue
        for k in range(width):
            values[k].append(row[k])
        lines.append(start)
    cols: dict[str, pa.Array] = {}
    for h, v in zip(header, values, strict=True):
        if h not in cols:
            cols[h] = pa.array(v, type=pa.string())
    return RawTable(source, cols, np.asarray(lines, dtype=np.int64), errors)


def _jsonl_raw(data: bytes, source: str, errors: list[InputError]) -> RawTable:
    text = data.decode("utf-8")
    keys: dict[str, list[str]] = {}
    lines: list[int] = []
    n = 0
    for i, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as exc:
            errors.append(InputError(source, f"not valid JSON: {str(exc).split(':')[0]}", line=i))
            continue
        if not isinstance(obj, dict):
            errors.append(InputError(source, "expected a JSON object per line", line=i, value=type(obj).__name__))
            continue
        for k, v in obj.items():
            col = keys.get(k)
            if col is None:
                col = keys[k] = [""] * n
            col.append(_json_text(v))
        n += 1
        for col in keys.values():
            if len(col) < n:
                col.append("")
        lines.append(i)
    cols = {k: pa.array(v, type=pa.string()) for k, v in keys.items()}
    return RawTable(source, cols, np.asarray(lines, dtype=np.int64), errors)


def _json_text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v
    if isinstance(v, int | float):
        return repr(v)
    return json.dumps(v)


def _parquet_raw(path: Path) -> RawTable:
    source = str(path)
    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise InputError(source, "file not found") from None
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(source, f"not a readable Parquet file: {str(exc).splitlines()[0] if str(exc) else exc}") \
            from None
    cols: dict[str, pa.Array] = {}
    for name in table.column_names:
        col = table.column(name)
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        cols[name] = arr
    return RawTable(source, cols, np.arange(1, table.num_rows + 1, dtype=np.int64), [])


# ---------------------------------------------------------------------------------------------
# Column parsers
# ---------------------------------------------------------------------------------------------
def _is_text(arr: pa.Array) -> bool:
    return bool(pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type))


def _trimmed(arr: pa.Array) -> tuple[pa.Array, BoolArray]:
    """Whitespace-trimmed strings with empty -> null, and the empty mask."""
    if not _is_text(arr):
        try:
            arr = pc.cast(arr, pa.string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            arr = pa.array([None if v is None else str(v) for v in arr.to_pylist()], type=pa.string())
    s = pc.utf8_trim_whitespace(arr)
    empty = pc.fill_null(pc.equal(s, ""), True).to_numpy(zero_copy_only=False)
    if empty.any():
        s = pc.if_else(pa.array(empty), pa.scalar(None, pa.string()), s)
    return s, empty


def text_column(raw: RawTable, name: str) -> list[str]:
    """The column as stripped Python strings (``""`` when empty)."""
    s, _ = _trimmed(raw.columns[name])
    return [v if v is not None else "" for v in s.to_pylist()]


def _float_values(arr: pa.Array) -> tuple[FloatArray, BoolArray, BoolArray]:
    """(values, empty, unparseable); values are NaN where empty or unparseable."""
    n = len(arr)
    if pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type) or pa.types.is_boolean(arr.type) \
            or pa.types.is_decimal(arr.type):
        empty = arr.is_null().to_numpy(zero_copy_only=False)
        vals = pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64)
        return np.where(empty, math.nan, vals), empty, np.zeros(n, dtype=bool)
    s, empty = _trimmed(arr)
    try:
        vals = pc.cast(s, pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64)
        return vals, empty, np.zeros(n, dtype=bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    vals = np.full(n, math.nan)
    bad = np.zeros(n, dtype=bool)
    for i, v in enumerate(s.to_pylist()):
        if v is None:
            continue
        try:
            vals[i] = float(v)
        except (ValueError, OverflowError):
            bad[i] = True
    return vals, empty, bad


def _floats(
    raw: RawTable, check: RowCheck, name: str, scale: float, default: float | None, allow_inf: bool, col: str
) -> tuple[FloatArray, BoolArray]:
    arr = raw.columns[name]
    vals, empty, bad = _float_values(arr)
    if default is None:
        check.flag(empty, col, "empty value", arr)
    check.flag(bad, col, "not a number", arr)
    finite = np.isfinite(vals) | (allow_inf & (vals == math.inf))
    check.flag(~finite & ~empty & ~bad, col, "must be a finite number", arr)
    out = vals * scale if scale != 1.0 else vals
    if default is not None:
        out = np.where(empty, default, out)
    return out, empty


def float_column(
    raw: RawTable,
    check: RowCheck,
    name: str,
    *,
    scale: float = 1.0,
    default: float | None = None,
    minimum: float | None = None,
    allow_inf: bool = False,
    label: str | None = None,
) -> FloatArray:
    """Parse a numeric column (times ``scale``); bad rows are flagged, their values are NaN.

    An empty value takes ``default`` (already in the result's unit, not scaled, and not checked
    against ``minimum``) or, without one, is an error. ``label`` names the column in messages
    when it differs from ``name``.
    """
    col = label or name
    out, empty = _floats(raw, check, name, scale, default, allow_inf, col)
    if minimum is not None:
        with np.errstate(invalid="ignore"):
            low = (out < minimum) & ~empty
        msg = "must be >= 0" if minimum == 0 else f"must be >= {minimum:g}"
        check.flag(low, col, msg, raw.columns[name])
    return out


def int_column(
    raw: RawTable,
    check: RowCheck,
    name: str,
    *,
    scale: float = 1.0,
    default: int | None = None,
    minimum: int | None = None,
    round_scaled: bool = False,
    label: str | None = None,
) -> IntArray:
    """Parse a whole-number column; ``2`` and ``2.0`` are fine, ``2.5`` is flagged.

    With ``scale`` != 1 the scaled value is rounded to the nearest integer when ``round_scaled``
    (e.g. GiB -> MiB), else it must come out whole. An empty value takes ``default`` (unchecked).
    """
    col = label or name
    vals, empty = _floats(raw, check, name, scale, None if default is None else float(default), False, col)
    with np.errstate(invalid="ignore"):
        if round_scaled:
            vals = np.round(vals)
        frac = np.isfinite(vals) & (vals != np.floor(vals))
        huge = np.isfinite(vals) & (np.abs(vals) > _MAX_INT)
    arr = raw.columns[name]
    check.flag(frac, col, "not an integer", arr)
    check.flag(huge, col, "number too large", arr)
    ints = np.where(np.isfinite(vals) & ~frac & ~huge, vals, 0).astype(np.int64)
    if minimum is not None:
        check.flag((ints < minimum) & ~empty, col, f"must be >= {minimum}", arr)
    return ints


def _parse_datetime(text: str) -> float:
    dt = datetime.fromisoformat(text.strip())
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def time_column(
    raw: RawTable,
    check: RowCheck,
    name: str,
    *,
    unit: str = "s",
    default: float | None = None,
    label: str | None = None,
) -> FloatArray:
    """Parse times to seconds: numeric in a :data:`TIME_UNITS` unit, ``datetime`` (ISO 8601, naive
    = UTC; result is POSIX seconds) or a ``strptime`` format such as ``%d/%m/%Y %H:%M``."""
    if unit in TIME_UNITS:
        return float_column(raw, check, name, scale=TIME_UNITS[unit], default=default, label=label)
    col = label or name
    arr = raw.columns[name]
    n = len(arr)
    if pa.types.is_timestamp(arr.type):
        empty = arr.is_null().to_numpy(zero_copy_only=False)
        ns = pc.cast(pc.cast(arr, pa.timestamp("ns", tz=arr.type.tz)), pa.int64()).to_numpy(zero_copy_only=False)
        vals = np.where(empty, math.nan, ns.astype(np.float64) / 1e9)
        bad = np.zeros(n, dtype=bool)
    else:
        s, empty = _trimmed(arr)
        vals = np.full(n, math.nan)
        bad = np.zeros(n, dtype=bool)
        parsed = None
        if unit == "datetime":
            for target in (pa.timestamp("ns"), pa.timestamp("ns", tz="UTC")):
                try:
                    parsed = pc.cast(s, target)
                    break
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    continue
        else:
            try:
                parsed = pc.strptime(s, format=unit, unit="us", error_is_null=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                parsed = None
        if parsed is not None:
            nulls = parsed.is_null().to_numpy(zero_copy_only=False)
            ints = pc.cast(parsed, pa.int64()).fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)
            scale = 1e9 if parsed.type.unit == "ns" else 1e6
            vals = np.where(nulls, math.nan, ints / scale)
            bad = nulls & ~empty
        else:
            for i, v in enumerate(s.to_pylist()):
                if v is None:
                    continue
                try:
                    vals[i] = (_parse_datetime(v) if unit == "datetime"
                               else datetime.strptime(v, unit).replace(tzinfo=UTC).timestamp()
                               if "%z" not in unit else datetime.strptime(v, unit).timestamp())
                except (ValueError, OverflowError, OSError):
                    bad[i] = True
    if default is None:
        check.flag(empty, col, "empty value", arr)
    else:
        vals = np.where(empty, default, vals)
    want = "a date-time (ISO 8601, e.g. 2017-10-09 07:01:55)" if unit == "datetime" else f"a time matching {unit!r}"
    check.flag(bad, col, f"not {want}", arr)
    return vals


# ---------------------------------------------------------------------------------------------
# The YAML mapping
# ---------------------------------------------------------------------------------------------
_JOB_FIELDS = ("name", "submit", "duration", "end", "start", "gpus", "workers", "gpus_per_worker", "gpu_milli",
               "gpu_fraction", "cpu", "memory", "gpu_type", "priority", "tenant", "user", "estimate", "kind")
_NODE_FIELDS = ("name", "gpu_type", "gpus", "cpu", "memory", "leaf", "spine", "count")
_REQUEST_FIELDS = ("time", "input_tokens", "output_tokens", "duration", "stream")
_RATE_FIELDS = ("time", "rate", "cv", "stream")
_FIELDS = {"jobs": _JOB_FIELDS, "nodes": _NODE_FIELDS, "requests": _REQUEST_FIELDS, "rate": _RATE_FIELDS}
_KIND_WORDS = {"training": JobKind.TRAINING, "train": JobKind.TRAINING, "inference": JobKind.INFERENCE,
               "serving": JobKind.INFERENCE, "service": JobKind.INFERENCE}

Scalar = str | int | float | bool


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Units(_Strict):
    """Units of the source columns."""

    time: str = Field(default="s", description="submit/start/end/time: s, ms, us, ns, min, h, d, 'datetime' or a "
                                       "strptime format")
    duration: str = Field(default="s", description="duration/estimate: s, ms, us, ns, min, h, d")
    memory: str = Field(default="mib", description="memory: mib, gib, kib, bytes, mb, gb")
    cpu: str = Field(default="milli", description="cpu: milli (1/1000 core) or cores")

    @field_validator("time")
    @classmethod
    def _time(cls, v: str) -> str:
        if v in TIME_UNITS or v == "datetime" or "%" in v:
            return v
        raise ValueError(f"unknown time unit {v!r}; use one of {', '.join(TIME_UNITS)}, 'datetime' or a strptime "
                         "format such as '%Y-%m-%d %H:%M:%S'")

    @field_validator("duration")
    @classmethod
    def _duration(cls, v: str) -> str:
        if v in TIME_UNITS:
            return v
        raise ValueError(f"unknown duration unit {v!r}; use one of {', '.join(TIME_UNITS)}")

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: str) -> str:
        if v.lower() in MEMORY_UNITS:
            return v.lower()
        raise ValueError(f"unknown memory unit {v!r}; use one of {', '.join(MEMORY_UNITS)}")

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, v: str) -> str:
        if v in _CPU_UNITS:
            return v
        raise ValueError(f"unknown cpu unit {v!r}; use 'milli' or 'cores'")


class Topology(_Strict):
    nodes_per_leaf: int = Field(default=DEFAULT_NODES_PER_LEAF, ge=1, le=1_000_000)
    leaves_per_spine: int = Field(default=DEFAULT_LEAVES_PER_SPINE, ge=1, le=1_000_000)


class TraceMapping(_Strict):
    """A validated mapping file (see the module docstring and docs/traces.md)."""

    kind: Literal["jobs", "nodes", "requests", "rate"] = "jobs"
    file: str = Field(min_length=1)
    format: Literal["csv", "tsv", "jsonl", "parquet"] | None = None
    delimiter: str | None = Field(default=None, min_length=1, max_length=1)
    header: bool = True
    column_names: list[str] | None = None
    columns: dict[str, str]
    units: Units = Units()
    time_origin: str | float = "first"
    epoch: bool = False
    defaults: dict[str, Scalar] = {}
    values: dict[str, dict[str, Scalar]] = {}
    max_gpus_per_worker: int = Field(default=8, ge=1, le=1024)
    window: float = Field(default=0.0, ge=0, le=1e9)
    topology: Topology = Topology()
    gpu_nodes_only: bool = True
    gpu_types: list[str] | None = None
    name: str | None = None
    description: str | None = None

    @model_validator(mode="after")
    def _fields(self) -> TraceMapping:
        allowed = _FIELDS[self.kind]
        for section, keys in (("columns", self.columns), ("defaults", self.defaults), ("values", self.values)):
            for key in keys:
                if key not in allowed:
                    raise KeyPathError(f"{section}.{key}",
                                    f"unknown field {key!r} for kind {self.kind!r}; fields are {', '.join(allowed)}")
        have = set(self.columns) | set(self.defaults)
        needs: dict[str, list[tuple[str, ...]]] = {
            "jobs": [("submit",), ("duration", "end")],
            "nodes": [("gpus",), ("gpu_type",)],
            "requests": [("time",)],
            "rate": [("time",), ("rate",)],
        }
        need = needs[self.kind]
        for group in need:
            if not have & set(group):
                raise KeyPathError("columns", f"columns must map {' or '.join(repr(g) for g in group)}")
        if self.kind == "jobs" and "gpus" in have and ({"workers", "gpus_per_worker"} & have):
            raise KeyPathError("columns", "map either 'gpus' (total) or 'workers'/'gpus_per_worker', not both")
        if not self.header and not self.column_names:
            raise KeyPathError("column_names", "header: false needs column_names")
        if isinstance(self.time_origin, float | int) and not math.isfinite(self.time_origin):
            raise KeyPathError("time_origin", "must be a finite number")
        if isinstance(self.time_origin, str) and self.time_origin not in ("first", "zero"):
            try:
                _parse_datetime(self.time_origin)
            except ValueError:
                raise KeyPathError("time_origin", "must be 'first', 'zero', a date-time or a number") from None
        return self


def load_mapping(path: str | Path) -> TraceMapping:
    """Read and validate a mapping YAML; errors are :class:`ConfigError` naming the key path."""
    source = str(path)
    data = read_yaml(path)
    return validate_document(TraceMapping, data, source, "expected a mapping with at least 'file' and 'columns'")


def read_with_mapping(path: str | Path, *, problems: Problems | None = None) -> JobTable | Cluster | LoadSeries:
    """Load the data a mapping YAML describes (its ``file`` is relative to the YAML)."""
    p = Path(path)
    return read_mapped(load_mapping(p), base_dir=p.parent, problems=problems, mapping_source=str(p))


def read_mapped(
    mapping: TraceMapping,
    *,
    base_dir: str | Path = ".",
    problems: Problems | None = None,
    mapping_source: str = "mapping",
) -> JobTable | Cluster | LoadSeries:
    """Apply a validated mapping: a :class:`JobTable`, :class:`Cluster` or :class:`LoadSeries`."""
    data_path = Path(mapping.file)
    if not data_path.is_absolute():
        data_path = Path(base_dir) / data_path
    header: bool | list[str] = True if mapping.header else list(mapping.column_names or [])
    raw = read_raw(data_path, format=mapping.format, delimiter=mapping.delimiter, header=header)
    why = {col: f"columns.{fld}" for fld, col in mapping.columns.items()}
    raw.require(list(mapping.columns.values()), why)
    ctx = _Ctx(mapping, raw, raw.check(problems), mapping_source)
    if mapping.kind == "jobs":
        return ctx.jobs()
    if mapping.kind == "nodes":
        return ctx.nodes()
    return ctx.load()


class _Ctx:
    """One application of a mapping to a raw table."""

    def __init__(self, m: TraceMapping, raw: RawTable, check: RowCheck, mapping_source: str) -> None:
        self.m = m
        self.raw = raw
        self.check = check
        self.n = len(raw)
        self.mapping_source = mapping_source

    # -- helpers ----------------------------------------------------------------------------------
    def has(self, fld: str) -> bool:
        return fld in self.m.columns

    def default(self, fld: str) -> Scalar | None:
        return self.m.defaults.get(fld)

    def _bad_default(self, fld: str, why: str) -> ConfigError:
        return ConfigError(self.mapping_source, f"defaults.{fld}", why)

    def number(self, fld: str, *, scale: float = 1.0, minimum: float | None = None, integer: bool = False,
               fallback: float | None = None, allow_inf: bool = False, round_scaled: bool = False) -> FloatArray:
        """A numeric field: mapped column (with value map), else default, else ``fallback``.

        Defaults and value maps are in the source unit (scaled like the column). An integer field
        whose default or mapped value is not a whole number in range is an error too.
        """
        d = self.default(fld)
        if d is not None and (isinstance(d, bool) or not isinstance(d, int | float)) and fld not in self.m.values:
            raise self._bad_default(fld, f"expected a number, got {d!r}")
        col = self.m.columns.get(fld)
        if col is None:
            if d is None:
                if fallback is None:
                    raise ConfigError(self.mapping_source, f"columns.{fld}", "required")
                return np.full(self.n, fallback, dtype=np.float64)
            value = self._mapped_scalar(fld, d) * scale
            if math.isnan(value) or (math.isinf(value) and not allow_inf):
                raise self._bad_default(fld, f"must be a finite number, got {d!r}")
            if integer and not (math.isfinite(value) and value == math.floor(value) and abs(value) <= _MAX_INT):
                raise self._bad_default(fld, f"must be a whole number, got {d!r}")
            if minimum is not None and value < minimum:
                raise self._bad_default(fld, f"must be >= {minimum:g}, got {d!r}")
            return np.full(self.n, value, dtype=np.float64)
        if fld in self.m.values:
            out = np.asarray(self._value_map(fld, col, numeric=True), dtype=np.float64) * scale
            with np.errstate(invalid="ignore"):
                bad = np.isnan(out) | (np.isinf(out) & (not allow_inf))
                if integer:
                    bad |= ~np.isfinite(out) | (out != np.floor(out)) | (np.abs(out) > _MAX_INT)
                if minimum is not None:
                    bad |= out < minimum
            self.check.flag(bad, col, f"the value from values.{fld} is out of range", self.raw.columns[col])
            return np.where(bad, 0.0, out)
        dflt = None if d is None else float(d) * scale
        if dflt is not None and integer and not (math.isfinite(dflt) and abs(dflt) <= _MAX_INT):
            raise self._bad_default(fld, f"must be a whole number, got {d!r}")
        if integer:
            return int_column(self.raw, self.check, col, scale=scale, default=None if dflt is None else round(dflt),
                              minimum=None if minimum is None else int(minimum),
                              round_scaled=round_scaled).astype(np.float64)
        return float_column(self.raw, self.check, col, scale=scale, default=dflt, minimum=minimum,
                            allow_inf=allow_inf)

    def _too_big(self, values: FloatArray, fld: str) -> None:
        with np.errstate(invalid="ignore"):
            big = values > _MAX_INT
        self.check.flag(big, self.m.columns.get(fld, fld), "number too large", pa.array(values))

    def _mapped_scalar(self, fld: str, d: Scalar) -> float:
        table = self.m.values.get(fld)
        if table is not None and str(d) in table:
            d = table[str(d)]
        try:
            return float(d)
        except (TypeError, ValueError):
            raise self._bad_default(fld, f"expected a number, got {d!r}") from None

    def _value_map(self, fld: str, col: str, *, numeric: bool) -> Any:
        table = self.m.values[fld]
        texts = text_column(self.raw, col)
        d = self.default(fld)
        out: list[Any] = []
        bad = np.zeros(self.n, dtype=bool)
        for i, t in enumerate(texts):
            if t in table:
                v: Any = table[t]
            elif t == "" and d is not None:
                v = table.get(str(d), d)
            else:
                bad[i] = True
                out.append(math.nan if numeric else "")
                continue
            if numeric:
                try:
                    v = float(v)
                except (TypeError, ValueError):
                    raise ConfigError(self.mapping_source, f"values.{fld}.{t}", f"expected a number, got {v!r}") \
                        from None
            out.append(v if numeric else str(v))
        choices = ", ".join(map(repr, list(table)[:8]))
        self.check.flag(bad, col, f"value not in values.{fld} ({choices})", self.raw.columns[col])
        return np.asarray(out, dtype=np.float64) if numeric else out

    def text(self, fld: str, fallback: str) -> list[str]:
        d = self.default(fld)
        if not self.has(fld):
            value = str(d) if d is not None else fallback
            if fld in self.m.values:
                value = str(self.m.values[fld].get(value, value))
            return [value] * self.n
        col = self.m.columns[fld]
        if fld in self.m.values:
            return list(self._value_map(fld, col, numeric=False))
        vals = text_column(self.raw, col)
        if d is not None:
            vals = [v or str(d) for v in vals]
        return vals

    def times(self, fld: str) -> FloatArray:
        u = self.m.units.time
        d = self.default(fld)
        if not self.has(fld):
            if d is None:
                raise ConfigError(self.mapping_source, f"columns.{fld}", "required")
            if isinstance(d, bool) or not isinstance(d, int | float) or not math.isfinite(d):
                raise self._bad_default(fld, f"expected a finite number, got {d!r}")
            return np.full(self.n, float(d) * TIME_UNITS.get(u, 1.0))
        if d is not None and not isinstance(d, bool) and isinstance(d, int | float) and not math.isfinite(d):
            raise self._bad_default(fld, f"expected a finite number, got {d!r}")
        return time_column(self.raw, self.check, self.m.columns[fld], unit=u,
                           default=None if d is None or isinstance(d, str) else float(d) * TIME_UNITS.get(u, 1.0))

    def absolute(self) -> bool:
        return self.m.units.time not in TIME_UNITS or self.m.epoch

    def origin(self, t: FloatArray, keep: BoolArray) -> tuple[float, float | None]:
        """(shift to subtract, origin_epoch)."""
        o = self.m.time_origin
        if o == "zero":
            return 0.0, (0.0 if self.absolute() else None)
        if o == "first":
            valid = t[keep & np.isfinite(t)]
            shift = float(valid.min()) if valid.size else 0.0
            return shift, (shift if self.absolute() else None)
        if isinstance(o, str):
            shift = _parse_datetime(o)
            if not self.absolute():
                raise ConfigError(self.mapping_source, "time_origin",
                                  "a date-time origin needs date-time times (units.time: datetime) or epoch: true")
            return shift, shift
        shift = float(o) * TIME_UNITS.get(self.m.units.time, 1.0)
        return shift, (shift if self.absolute() else None)

    def names(self, keep: BoolArray) -> list[str]:
        stem = Path(self.raw.source).name.split(".")[0]
        if self.has("name"):
            vals = self.text("name", "")
            empty = np.array([not v for v in vals], dtype=bool)
            self.check.flag(empty, self.m.columns["name"], "empty name", self.raw.columns[self.m.columns["name"]])
            return vals
        return [f"{stem}-{ln}" for ln in self.raw.lines.tolist()]

    # -- kinds ------------------------------------------------------------------------------------
    def jobs(self) -> JobTable:
        m = self.m
        dur_scale = TIME_UNITS[m.units.duration]
        submit = self.times("submit")
        if self.has("duration") or self.default("duration") is not None:
            duration = self.number("duration", scale=dur_scale, allow_inf=True)
            dcol = m.columns.get("duration", "duration")
        else:
            end = self.times("end")
            begin = self.times("start") if (self.has("start") or self.default("start") is not None) else submit
            duration = end - begin
            dcol = m.columns.get("end", "end")
        with np.errstate(invalid="ignore"):
            neg = duration < 0
        self.check.flag(neg, dcol, "negative duration",
                        self.raw.columns.get(dcol, pa.array(duration)))
        self.check.flag(np.isnan(duration) & ~self.check.bad, dcol, "duration is not a number",
                        pa.array(duration))
        if self.has("gpus") or self.default("gpus") is not None:
            total = self.number("gpus", integer=True, minimum=0).astype(np.int64)
            workers, per = split_gangs(total, m.max_gpus_per_worker)
            gcol = m.columns.get("gpus", "gpus")
        else:
            workers = self.number("workers", integer=True, minimum=1, fallback=1).astype(np.int64)
            per = self.number("gpus_per_worker", integer=True, minimum=0, fallback=1).astype(np.int64)
            gcol = m.columns.get("gpus_per_worker", "gpus_per_worker")
        if self.has("gpu_fraction") or self.default("gpu_fraction") is not None:
            frac = self.number("gpu_fraction", minimum=0)
            with np.errstate(invalid="ignore"):
                over = frac > 1
            self.check.flag(over, m.columns.get("gpu_fraction", "gpu_fraction"), "a GPU fraction must be <= 1",
                            pa.array(frac))
            milli = np.where(np.isfinite(frac) & (frac <= 1), np.round(frac * FULL_GPU_MILLI), 0).astype(np.int64)
            mcol = m.columns.get("gpu_fraction", "gpu_fraction")
        else:
            milli = self.number("gpu_milli", integer=True, minimum=0, fallback=FULL_GPU_MILLI).astype(np.int64)
            self.check.flag(milli > FULL_GPU_MILLI, m.columns.get("gpu_milli", "gpu_milli"),
                            "a GPU share must be <= 1000 milli", pa.array(milli))
            mcol = m.columns.get("gpu_milli", "gpu_milli")
        if self.has("gpu_fraction") or self.has("gpu_milli"):
            # a fractional request is one worker on one GPU: a share alone (no GPU count) means 1 GPU
            zero_gpu = (per == 0) & (milli > 0)
            self.check.flag(zero_gpu & (self.has("gpus") or self.has("gpus_per_worker")), gcol,
                            "GPU share given for a job with zero GPUs", self.raw.columns.get(gcol, pa.array(per)))
            self.check.flag((per >= 1) & (milli == 0), mcol, "zero GPUs for a GPU job (GPU share is 0)",
                            self.raw.columns.get(mcol, pa.array(milli)))
            self.check.flag((per > 1) & (milli < FULL_GPU_MILLI) & (milli > 0), mcol,
                            "a GPU share below 1000 needs a 1-GPU worker", self.raw.columns.get(mcol, pa.array(milli)))
        cpu = self.number("cpu", scale=_CPU_UNITS[m.units.cpu], minimum=0, fallback=0.0)
        mem = self.number("memory", scale=MEMORY_UNITS[m.units.memory], minimum=0, fallback=0.0)
        self._too_big(cpu, "cpu")
        self._too_big(mem, "memory")
        priority = self.number("priority", integer=True, fallback=0.0)
        estimate = self.number("estimate", scale=dur_scale, minimum=0, fallback=math.nan) \
            if (self.has("estimate") or self.default("estimate") is not None) else np.full(self.n, math.nan)
        tenants = self.text("tenant", "default")
        users = self.text("user", "") if (self.has("user") or self.default("user") is not None) else None
        gpu_types = self.text("gpu_type", "")
        if m.gpu_types is not None:
            allowed = set(m.gpu_types)
            from kant.traces.schema import gpu_type_alternatives

            unknown = np.array([bool(t) and not any(a in allowed for a in gpu_type_alternatives(t))
                                for t in gpu_types], dtype=bool)
            gt_col = m.columns.get("gpu_type", "gpu_type")
            self.check.flag(unknown, gt_col, f"a GPU type no node has (gpu_types: {', '.join(m.gpu_types)})",
                            gpu_types)
        kinds = self.text("kind", "training")
        kind_codes = np.array([int(_KIND_WORDS.get(k.lower(), -1)) for k in kinds], dtype=np.int64)
        self.check.flag(kind_codes < 0, m.columns.get("kind", "kind"), "kind must be training or inference",
                        kinds)
        names = self.names(np.ones(self.n, dtype=bool))
        self._duplicate_names(names)
        keep = self.check.finish()
        shift, origin_epoch = self.origin(submit, keep)
        rows = np.flatnonzero(keep)
        if not rows.size:
            raise InputError(self.raw.source, "no valid job rows")
        cpu_i = np.where(np.isfinite(cpu) & (cpu <= _MAX_INT), np.round(cpu), 0).astype(np.int64)
        mem_i = np.where(np.isfinite(mem) & (mem <= _MAX_INT), np.round(mem), 0).astype(np.int64)
        users_arr = None if users is None else np.asarray(users, dtype=object)[rows]
        if users_arr is not None:
            tenants_arr = np.asarray(tenants, dtype=object)[rows]
            users_arr = np.where(users_arr == "", tenants_arr, users_arr)
        return build_job_table(
            names=[names[i] for i in rows.tolist()],
            submit=submit[rows] - shift,
            duration=duration[rows],
            workers=workers[rows],
            gpus_per_worker=per[rows],
            gpu_milli=np.where(per[rows] == 0, np.minimum(milli[rows], FULL_GPU_MILLI), milli[rows]),
            cpu_milli=cpu_i[rows],
            memory_mib=mem_i[rows],
            gpu_type=np.asarray(gpu_types, dtype=object)[rows],
            priority=priority[rows].astype(np.int64),
            tenant=np.asarray(tenants, dtype=object)[rows],
            user=users_arr,
            estimate=estimate[rows],
            kind=kind_codes[rows],
            source=self.raw.source,
            origin_epoch=origin_epoch,
        )

    def _duplicate_names(self, names: list[str]) -> None:
        """A job name is unique in a trace: a later row that repeats a (good) row's name is bad."""
        first: dict[str, int] = {}
        dup = np.zeros(self.n, dtype=bool)
        for i in np.flatnonzero(~self.check.bad).tolist():
            nm = names[i]
            if nm in first:
                dup[i] = True
            else:
                first[nm] = i
        if not dup.any():
            return
        col = self.m.columns.get("name", "name")
        i = int(np.flatnonzero(dup)[0])  # the earliest gets the line of the name's first row
        one = np.zeros(self.n, dtype=bool)
        one[i] = True
        self.check.flag(one, col, f"duplicate job name (first on line {int(self.raw.lines[first[names[i]]])})", names)
        self.check.flag(dup, col, "duplicate job name", names)

    def nodes(self) -> Cluster:
        m = self.m
        gpus = self.number("gpus", integer=True, minimum=0).astype(np.int64)
        count = self.number("count", integer=True, minimum=1, fallback=1).astype(np.int64)
        cpu = self.number("cpu", scale=_CPU_UNITS[m.units.cpu], minimum=0, fallback=0.0)
        mem = self.number("memory", scale=MEMORY_UNITS[m.units.memory], minimum=0, fallback=0.0)
        self._too_big(cpu, "cpu")
        self._too_big(mem, "memory")
        self.check.flag(count > 100_000, m.columns.get("count", "count"), "more than 100,000 nodes in one row",
                        pa.array(count))
        self.check.flag(gpus > MAX_GPUS_PER_NODE, m.columns.get("gpus", "gpus"),
                        f"at most {MAX_GPUS_PER_NODE:,} GPUs per node", pa.array(gpus))
        with np.errstate(invalid="ignore"):
            total = np.cumsum(np.where(self.check.bad, 0, np.maximum(count, 0)))
        self.check.flag(total > MAX_NODES, m.columns.get("count", "count"),
                        f"at most {MAX_NODES:,} nodes in a cluster", pa.array(total))
        types = self.text("gpu_type", "")
        gt_col = m.columns.get("gpu_type", "gpu_type")
        no_type = np.array([not t for t in types], dtype=bool) & (gpus > 0)
        self.check.flag(no_type, gt_col, "empty GPU type on a GPU node", types)
        names = self.names(np.ones(self.n, dtype=bool))
        seen: dict[str, int] = {}
        dup = np.zeros(self.n, dtype=bool)
        for i, nm in enumerate(names):
            if nm in seen and count[i] == 1:
                dup[i] = True
            seen.setdefault(nm, i)
        self.check.flag(dup, m.columns.get("name", "name"), "duplicate node name", names)
        leaves = self.text("leaf", "") if (self.has("leaf") or self.default("leaf") is not None) else None
        spines = self.text("spine", "") if (self.has("spine") or self.default("spine") is not None) else None
        if leaves is not None and spines is not None:
            spine_of: dict[str, str] = {}
            clash = np.zeros(self.n, dtype=bool)
            kept = ~self.check.bad & (gpus > 0) if m.gpu_nodes_only else ~self.check.bad
            for i in np.flatnonzero(kept).tolist():
                if leaves[i] and spines[i]:
                    clash[i] = spine_of.setdefault(leaves[i], spines[i]) != spines[i]
            self.check.flag(clash, m.columns.get("spine", "spine"),
                            "a leaf sits under one spine; this leaf is already under another", spines)
        keep = self.check.finish()
        nodes: list[NodeSpec] = []
        for i in np.flatnonzero(keep).tolist():
            g = int(gpus[i])
            if g == 0 and m.gpu_nodes_only:
                continue
            c = int(count[i])
            for k in range(c):
                nodes.append(NodeSpec(
                    names[i] if c == 1 else f"{names[i]}-{k}",
                    types[i] or "CPU",
                    g,
                    round(float(cpu[i])),
                    round(float(mem[i])),
                    leaf=(leaves[i] or None) if leaves is not None else None,
                    spine=(spines[i] or None) if spines is not None else None,
                ))
        if not any(n.gpus for n in nodes):
            raise InputError(self.raw.source, "no GPU nodes in the inventory")
        return Cluster.from_nodes(nodes, nodes_per_leaf=m.topology.nodes_per_leaf,
                                  leaves_per_spine=m.topology.leaves_per_spine)

    def load(self) -> LoadSeries:
        m = self.m
        t = self.times("time")
        streams = self.text("stream", "default")
        inp: IntArray | None = None
        out: IntArray | None = None
        dur: FloatArray | None = None
        rate: FloatArray | None = None
        cv: FloatArray | None = None
        if m.kind == "requests":
            inp = self.number("input_tokens", integer=True, minimum=0, fallback=-1.0).astype(np.int64)
            out = self.number("output_tokens", integer=True, minimum=0, fallback=-1.0).astype(np.int64)
            dur = self.number("duration", scale=TIME_UNITS[m.units.duration], minimum=0, fallback=math.nan)
        else:
            rate = self.number("rate", minimum=0)
            cv = self.number("cv", minimum=0, fallback=math.nan)
        keep = self.check.finish()
        rows = np.flatnonzero(keep)
        if not rows.size:
            raise InputError(self.raw.source, "no valid rows")
        shift, origin_epoch = self.origin(t, keep)

        def pick(a: npt.NDArray[Any] | None) -> npt.NDArray[Any] | None:
            return None if a is None else a[rows]

        return build_load_series(
            kind=m.kind,
            time=t[rows] - shift,
            rate=pick(rate),
            stream=np.asarray(streams, dtype=object)[rows],
            input_tokens=pick(inp),
            output_tokens=pick(out),
            duration=pick(dur),
            cv=pick(cv),
            window=m.window,
            source=self.raw.source,
            origin_epoch=origin_epoch,
        )
