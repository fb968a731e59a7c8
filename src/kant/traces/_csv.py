"""Shared helpers for readers: opening (gzip or plain) CSV files, typed field parsing that raises
:class:`~kant.errors.InputError` naming file, line, column and value, and the skip-invalid policy."""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt

from kant.errors import InputError

IntArray = npt.NDArray[np.int64]

__all__ = ["open_text", "csv_rows", "Problems", "parse_int", "parse_float", "split_gangs"]


def open_text(path: Path) -> IO[str]:
    """Open a text file, transparently gunzipping ``*.gz``."""
    try:
        if path.suffix == ".gz":
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
        return open(path, encoding="utf-8", newline="")
    except FileNotFoundError:
        raise InputError(str(path), "file not found") from None
    except OSError as exc:
        raise InputError(str(path), f"cannot open: {exc.strerror or exc}") from None


def csv_rows(
    path: Path, required: Sequence[str], *, delimiter: str = ",", problems: Problems | None = None
) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line_number, row)`` for each non-blank data row; line numbers count the header as 1.

    Raises :class:`InputError` if a required column is missing. A row with the wrong field count
    goes to ``problems`` (raised at once unless it skips invalid rows).
    """
    with open_text(path) as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        try:
            header = next(reader)
        except StopIteration:
            raise InputError(str(path), "file is empty (no header line)") from None
        except (csv.Error, UnicodeDecodeError, OSError, EOFError) as exc:
            raise InputError(str(path), f"unreadable header: {exc}", line=1) from None
        header = [h.strip() for h in header]
        missing = [c for c in required if c not in header]
        if missing:
            raise InputError(
                str(path), f"missing column(s) {', '.join(missing)}; header has {', '.join(header)}", line=1
            )
        width = len(header)
        line = 1
        while True:
            try:
                fields = next(reader)
            except StopIteration:
                return
            except (csv.Error, UnicodeDecodeError, OSError, EOFError) as exc:
                raise InputError(str(path), f"unreadable row: {exc}", line=reader.line_num) from None
            line = reader.line_num
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                continue
            if len(fields) != width:
                err = InputError(str(path), f"expected {width} fields, found {len(fields)}", line=line)
                if problems is None:
                    raise err
                problems.add(err)
                continue
            yield line, dict(zip(header, fields, strict=True))


def parse_float(
    source: str, line: int, column: str, text: str, *, minimum: float | None = None, finite: bool = True
) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(source, "not a number", line=line, column=column, value=text) from None
    if finite and not math.isfinite(value):
        raise InputError(source, "must be a finite number", line=line, column=column, value=text)
    if minimum is not None and value < minimum:
        raise InputError(source, f"must be >= {minimum:g}", line=line, column=column, value=text)
    return value


def parse_int(source: str, line: int, column: str, text: str, *, minimum: int | None = None) -> int:
    try:
        f = float(text)
        value = int(f)
        if value != f:
            raise ValueError
    except (ValueError, OverflowError):
        raise InputError(source, "not an integer", line=line, column=column, value=text) from None
    if minimum is not None and value < minimum:
        raise InputError(source, f"must be >= {minimum}", line=line, column=column, value=text)
    return value


class Problems:
    """What a reader does with a bad row: raise at once (default) or, with ``skip=True``, drop it
    and remember why, so nothing is dropped silently."""

    def __init__(self, skip: bool = False) -> None:
        self.skip = skip
        self.errors: list[InputError] = []

    def add(self, error: InputError) -> None:
        if not self.skip:
            raise error
        self.errors.append(error)

    def __len__(self) -> int:
        return len(self.errors)

    def by_reason(self) -> Counter[str]:
        return Counter(f"{e.column or 'row'}: {e.reason}" for e in self.errors)

    def summary(self) -> str:
        if not self.errors:
            return "no rows dropped"
        reasons = "; ".join(f"{n} x {r}" for r, n in self.by_reason().most_common())
        return f"{len(self.errors)} row(s) dropped: {reasons}"


def split_gangs(total: IntArray, max_gpus_per_worker: int = 8) -> tuple[IntArray, IntArray]:
    """Vectorised :func:`kant.model.job.split_gang`: ``(workers, gpus_per_worker)`` for each total.

    The largest divisor of the total that is at most ``max_gpus_per_worker`` becomes the per-worker
    GPU count; a total of 0 is one worker with no GPU.
    """
    total = np.asarray(total, dtype=np.int64)
    if max_gpus_per_worker < 1:
        raise ValueError("max_gpus_per_worker must be >= 1")
    per = np.zeros_like(total)
    todo = total > 0
    for g in range(max_gpus_per_worker, 0, -1):
        hit = todo & (total % g == 0) & (total >= g)
        per[hit] = g
        todo &= ~hit
    workers = np.where(total > 0, total // np.maximum(per, 1), 1)
    return workers.astype(np.int64), per
