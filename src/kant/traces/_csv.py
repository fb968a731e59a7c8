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

from kant.errors import InputError

__all__ = ["open_text", "csv_rows", "Problems", "parse_int", "parse_float"]


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
