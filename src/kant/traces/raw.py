"""Reading any tabular file into raw columns: :func:`read_raw` splits a CSV/TSV/JSONL/Parquet file
into string (or typed) Arrow columns plus each row's line number, a :class:`RawTable`.

CSV goes through ``pyarrow.csv`` when the file has no quotes, else through Python's ``csv`` module.
Rows that cannot be split (wrong field count, bad UTF-8, bad JSON) are kept as errors for the
table's :class:`~kant.traces.schema.RowCheck`. The column parsers are in
:mod:`kant.traces.columns`; mapping files (:mod:`kant.traces.mapping`) and the readers of the
built-in formats use both.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from kant.errors import InputError
from kant.traces._csv import Problems
from kant.traces.schema import RowCheck

__all__ = ["RawTable", "decode_utf8", "read_bytes", "read_parquet_table", "read_raw", "sniff_format"]

IntArray = npt.NDArray[np.int64]


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


def read_bytes(path: Path) -> bytes:
    """The file's bytes (gunzipped for ``.gz``); a missing, unreadable or corrupt file raises
    :class:`~kant.errors.InputError` naming it."""
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


def decode_utf8(data: bytes, source: str, errors: list[InputError]) -> bytes:
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
    data = decode_utf8(read_bytes(p), str(p), errors)
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


def read_parquet_table(path: Path) -> pa.Table:
    """The Arrow table of a Parquet file; a missing or unreadable file raises
    :class:`~kant.errors.InputError` naming it."""
    try:
        return pq.read_table(path)
    except FileNotFoundError:
        raise InputError(str(path), "file not found") from None
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(str(path), f"not a readable Parquet file: {str(exc).splitlines()[0] if str(exc) else exc}") \
            from None


def _parquet_raw(path: Path) -> RawTable:
    source = str(path)
    table = read_parquet_table(path)
    cols: dict[str, pa.Array] = {}
    for name in table.column_names:
        col = table.column(name)
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        cols[name] = arr
    return RawTable(source, cols, np.arange(1, table.num_rows + 1, dtype=np.int64), [])
