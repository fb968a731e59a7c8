"""Arrow arrays to and from NumPy through their buffers, without ``pyarrow.array`` / ``Array.to_numpy``.

Both of those look for pandas objects first and so import pandas when it is installed (0.4-0.6 s of
CPU, more than a 1,000-job simulation), and casts import ``pyarrow.compute`` (0.1 s). The helpers
here build and read plain arrays (primitive numbers, UTF-8 strings) straight from their buffers,
which is all the per-job results and the Philly reader need. They hold no nulls in the data they
read (the caller checks ``null_count``); the ones that build take an optional validity mask.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = ["numbers", "numbers_of", "strings", "strings_from_codes"]

BoolArray = npt.NDArray[np.bool_]

#: NumPy dtypes of the Arrow types :func:`numbers` builds
_NUMPY: dict[str, type[np.generic]] = {"int64": np.int64, "int32": np.int32, "double": np.float64,
                                       "float": np.float32}


def _validity(valid: BoolArray | None, n: int) -> pa.Buffer | None:
    if valid is None or bool(valid.all()):
        return None
    if valid.shape != (n,):
        raise ValueError(f"validity mask has shape {valid.shape}, expected ({n},)")
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def numbers(values: npt.ArrayLike, type: pa.DataType, valid: BoolArray | None = None) -> pa.Array:
    """A primitive array (``int64``, ``float64``, ...) of ``values``; null where ``valid`` is False."""
    dtype = _NUMPY.get(str(type))
    if dtype is None:
        raise TypeError(f"not a supported primitive type: {type}")
    a = np.ascontiguousarray(values, dtype=dtype)
    if a.ndim != 1:
        raise ValueError(f"expected a 1-d array, got shape {a.shape}")
    n = len(a)
    return pa.Array.from_buffers(type, n, [_validity(valid, n), pa.py_buffer(a)])


def numbers_of(arr: pa.Array | pa.ChunkedArray, dtype: npt.DTypeLike) -> npt.NDArray[Any]:
    """The values of a primitive array without nulls as NumPy (``dtype`` must match its width): a
    read-only view of the Arrow buffer for one chunk, a new array for several."""
    if isinstance(arr, pa.ChunkedArray):
        parts = [numbers_of(c, dtype) for c in arr.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
    if arr.null_count:
        raise ValueError("array has nulls")
    dt = np.dtype(dtype)
    buf = arr.buffers()[1]
    if buf is None:
        return np.zeros(0, dtype=dt)
    return np.frombuffer(buf, dtype=dt, count=len(arr), offset=arr.offset * dt.itemsize)


def strings(values: Sequence[str | None]) -> pa.Array:
    """A ``string`` array; ``None`` is null."""
    n = len(values)
    valid: BoolArray | None = None
    texts: Sequence[str] = values  # type: ignore[assignment]  # (no None: checked first)
    if None in values:
        valid = np.fromiter((v is not None for v in values), dtype=bool, count=n)
        texts = ["" if v is None else v for v in values]
    joined = "".join(texts)
    if joined.isascii():  # one encode for all; characters are bytes
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=n)
        return _from_lengths(n, lengths, joined.encode("ascii"), valid)
    encoded = [t.encode("utf-8") for t in texts]
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
    return _from_lengths(n, lengths, b"".join(encoded), valid)


def strings_from_codes(codes: npt.ArrayLike, vocab: Sequence[str | None]) -> pa.Array:
    """A ``string`` array of ``vocab[code]`` for each code (a categorical column decoded); a ``None``
    entry of ``vocab`` gives a null. Codes must lie in ``0 .. len(vocab) - 1``."""
    c = np.asarray(codes, dtype=np.int64)
    n = len(c)
    if n and (int(c.min()) < 0 or int(c.max()) >= len(vocab)):
        raise IndexError("code out of the vocabulary's range")
    encoded = [b"" if v is None else v.encode("utf-8") for v in vocab]
    vocab_len = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    vocab_start = np.zeros(len(encoded), dtype=np.int64)
    np.cumsum(vocab_len[:-1], out=vocab_start[1:])
    lengths = vocab_len[c]
    ends = np.cumsum(lengths)
    # byte k of the output, in row i, is byte k - (start of row i) of vocab[c[i]]
    shift = np.repeat(vocab_start[c] - (ends - lengths), lengths)
    pool = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    data = pool[shift + np.arange(int(ends[-1]) if n else 0, dtype=np.int64)] if len(pool) else pool
    valid = np.fromiter((v is not None for v in vocab), dtype=bool, count=len(vocab))[c]
    return _from_lengths(n, lengths, data.tobytes(), valid)


def _from_lengths(n: int, lengths: npt.NDArray[np.int64], data: bytes, valid: BoolArray | None) -> pa.Array:
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise ValueError("strings too long for a string array (2 GiB)")
    return pa.Array.from_buffers(pa.string(), n, [_validity(valid, n), pa.py_buffer(offsets.astype(np.int32)),
                                                 pa.py_buffer(data)])
