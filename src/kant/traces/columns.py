"""Column parsers: whole columns of a :class:`~kant.traces.raw.RawTable` to numbers, times and text
at once (Arrow compute), flagging bad rows in a :class:`~kant.traces.schema.RowCheck` instead of
stopping at the first one.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from kant.traces.raw import RawTable
from kant.traces.schema import RowCheck

__all__ = ["MAX_EXACT_INT", "TIME_UNITS", "float_column", "int_column", "parse_datetime", "text_column", "time_column"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: seconds per unit for numeric times and durations
TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0, "d": 86400.0}
#: the largest whole number a float64 holds exactly: larger counts are refused
MAX_EXACT_INT = float(2**53)


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
        huge = np.isfinite(vals) & (np.abs(vals) > MAX_EXACT_INT)
    arr = raw.columns[name]
    check.flag(frac, col, "not an integer", arr)
    check.flag(huge, col, "number too large", arr)
    ints = np.where(np.isfinite(vals) & ~frac & ~huge, vals, 0).astype(np.int64)
    if minimum is not None:
        check.flag((ints < minimum) & ~empty, col, f"must be >= {minimum}", arr)
    return ints


def parse_datetime(text: str) -> float:
    """POSIX seconds of an ISO 8601 date-time (naive = UTC)."""
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
                    vals[i] = (parse_datetime(v) if unit == "datetime"
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
