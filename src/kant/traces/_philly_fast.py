"""The fast path of :func:`kant.traces.philly.read_philly`: a well-formed Philly CSV in one typed
``pyarrow.csv`` read, with no ``pyarrow.compute``, pandas or pydantic import.

The general reader (:mod:`kant.traces.mapping`) reads every column as text and checks it with Arrow
compute kernels, which is right for any file but costs 0.3-0.6 s of imports before the first row (a
``kant simulate --limit 1000`` spent more on that than on simulating). A Philly file as shipped is
plain: no quotes, no carriage returns, no blank line before the last row, every value present and
valid. This reader takes such a file in one typed read and returns exactly the table the general
reader builds (the same Arrow parsers for the timestamps and numbers, the same arithmetic after);
for anything else (a bad or empty value, a quoted field, a blank line in the middle, a stray
space, a zone offset, invalid UTF-8) it returns ``None`` and the general reader takes the file, so
errors, skipped rows and their line numbers are reported exactly as before.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.csv as pcsv

from kant.model.job import JobTable
from kant.traces._csv import split_gangs
from kant.traces.arrow import numbers_of
from kant.traces.schema import Coded, build_job_table

__all__ = ["read_philly_fast"]

_MAX_INT = float(2**53)

IntArray = npt.NDArray[np.int64]


def _read(path: Path) -> bytes | None:
    try:
        raw = path.read_bytes()
        return gzip.decompress(raw) if path.suffix.lower() == ".gz" else raw
    except (OSError, EOFError, zlib.error):
        return None  # the general reader says what is wrong


def _vocab(col: pa.ChunkedArray) -> tuple[IntArray, list[str]] | None:
    """Each row's code into one list of virtual-cluster names (None if a name is empty or padded)."""
    ids: dict[str, int] = {}
    parts: list[IntArray] = []
    for chunk in col.chunks:
        names = chunk.dictionary.to_pylist()
        if any(not v or v != v.strip() for v in names):
            return None
        local = np.array([ids.setdefault(v, len(ids)) for v in names], dtype=np.int64)
        parts.append(local[numbers_of(chunk.indices, np.int32)])
    codes = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return codes, list(ids)


def _first_appearance(codes: IntArray, vocab: list[str]) -> Coded:
    """``codes`` renumbered in order of first appearance, as :func:`kant.traces.schema.encode` numbers."""
    uniq, first = np.unique(codes, return_index=True)
    seen = uniq[np.argsort(first, kind="stable")]
    renumber = np.full(len(vocab), -1, dtype=np.int64)
    renumber[seen] = np.arange(len(seen), dtype=np.int64)
    return Coded(renumber[codes], tuple(vocab[i] for i in seen.tolist()))


def read_philly_fast(path: Path, columns: tuple[str, str, str, str], max_gpus_per_worker: int,
                     limit: int | None = None) -> JobTable | None:
    """The job table of a well-formed Philly CSV (``columns``: timestamp, duration, GPUs, virtual
    cluster), or ``None`` when the file needs the general reader. ``limit`` keeps the first jobs by
    submit time only, as ``take`` of the whole table would (the same origin and tenant vocabulary)."""
    data = _read(path)
    if data is None or data.startswith(b"\xef\xbb\xbf") or b'"' in data or b"\r" in data:
        return None
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    start = data.find(b"\n") + 1
    if start == 0:
        return None
    header = [h.strip() for h in data[:start - 1].decode("utf-8").split(",")]
    if len(set(header)) != len(header) or not set(columns) <= set(header):
        return None
    stop = len(data)
    while stop > start and data[stop - 1] == 10:  # blank lines at the end are skipped, and number nothing
        stop -= 1
    if stop == start:
        return None
    rows = data.count(b"\n", start, stop) + 1  # every line a row: a blank one in the middle fails the read
    ts, dur, gpus, vc = columns
    try:
        table = pcsv.read_csv(
            pa.BufferReader(pa.py_buffer(data)[start:stop]),
            read_options=pcsv.ReadOptions(column_names=[f"c{i}" for i in range(len(header))], block_size=1 << 26,
                                          use_threads=False),
            parse_options=pcsv.ParseOptions(delimiter=",", quote_char=False, ignore_empty_lines=False,
                                            newlines_in_values=False),
            convert_options=pcsv.ConvertOptions(
                column_types={f"c{header.index(ts)}": pa.timestamp("ns"), f"c{header.index(dur)}": pa.float64(),
                              f"c{header.index(gpus)}": pa.float64(),
                              f"c{header.index(vc)}": pa.dictionary(pa.int32(), pa.string())},
                include_columns=[f"c{header.index(c)}" for c in columns],
                null_values=[], true_values=[], false_values=[], strings_can_be_null=False,
                quoted_strings_can_be_null=False, check_utf8=True),
        )
    except (pa.ArrowInvalid, pa.ArrowException):
        return None
    if table.num_rows != rows or any(c.null_count for c in table.columns):
        return None
    t_col, d_col, g_col, vc_col = (table.column(f"c{header.index(c)}") for c in columns)
    ns = numbers_of(t_col, np.int64)  # timestamp[ns] values are int64 nanoseconds
    d = numbers_of(d_col, np.float64)
    g = numbers_of(g_col, np.float64)
    if not (np.isfinite(d).all() and (d >= 0).all() and np.isfinite(g).all()):
        return None
    if (g != np.floor(g)).any() or (np.abs(g) > _MAX_INT).any() or (g < 1).any():
        return None
    coded = _vocab(vc_col)
    if coded is None:
        return None
    codes, vocab = coded
    t = ns.astype(np.float64) / 1e9  # as the general reader: nanoseconds, then seconds
    origin = float(t.min())
    order = np.argsort(t, kind="stable")
    tenants = _first_appearance(codes[order], vocab)  # over the whole file, as take() keeps it
    if limit is not None:
        order = order[:limit]
        tenants = Coded(tenants.codes[:limit], tenants.names)
    workers, per = split_gangs(g.astype(np.int64)[order], max_gpus_per_worker)
    return build_job_table(
        names=[f"philly-{ln}" for ln in (order + 2).tolist()],
        submit=t[order] - origin,
        duration=d[order],
        workers=workers,
        gpus_per_worker=per,
        tenant=tenants,
        source=str(path),
        origin_epoch=origin,
        sort=False,
    )
