"""Durations as people write and read them: the one parser (``90``, ``15m``, ``2h``, ``1.5d``) and the one
formatter, shared by the CLI, the service, the reports and study files. The ground floor of the tree: no
heavy imports (the client of ``kant serve`` loads this)."""

from __future__ import annotations

import math
import re
from typing import Literal

__all__ = ["DurationStyle", "format_duration", "parse_duration", "parse_window", "plural"]

DAY = 86400.0
#: seconds per unit of a written duration (``m`` and ``min`` are minutes)
_UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": DAY}
_DURATION = re.compile(r"^\s*([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?)\s*(s|m|min|h|d)?\s*$",
                       re.IGNORECASE)

#: ``unit``: ``45 s``, ``3.3 min``, ``42.8 h``, ``3.1 d`` (the headline table, reports); ``fine``: the same
#: steps with three significant digits under two minutes and thousands separators (``kant trace info``);
#: ``compact``: ``45s``, ``3m20s``, ``2h05m``, ``3d04h`` (the client of ``kant serve``, the service's texts)
DurationStyle = Literal["unit", "fine", "compact"]


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 spine``, ``2 spines``: the count and the word, with an ``s`` (or ``many``: ``1 leaf``, ``2
    leaves``) unless the count is one."""
    return f"{count} {word}" if count == 1 else f"{count} {many or word + 's'}"


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``15m`` (or ``15min``), ``2h``, ``1d``; fractions and exponents are
    allowed (``1.5h``, ``1e3``), units in any case, blanks around. Raises :class:`ValueError` with the
    message to show when ``text`` is not a duration, is negative or is too large to be finite."""
    m = _DURATION.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a duration (e.g. 90, 90s, 15m, 2h, 1d)")
    seconds = float(m.group(1)) * _UNITS[(m.group(2) or "s").lower()]
    if seconds < 0:
        raise ValueError(f"{text!r} is not a duration: it must be finite and not negative")
    if not math.isfinite(seconds):
        raise ValueError(f"{text!r} is not a finite time")
    return seconds + 0.0  # -0 is 0


def parse_window(text: str) -> tuple[float | None, float | None]:
    """``START:END`` (``0:7d``, ``2h:``, ``:30d``) -> (start, end) in seconds, None where a side is empty;
    :class:`ValueError` as :func:`parse_duration`'s, or when there is no ``:``."""
    start, sep, end = text.partition(":")
    if not sep:
        raise ValueError(f"expected START:END (e.g. 0:7d), got {text!r}")
    return (parse_duration(start) if start.strip() else None, parse_duration(end) if end.strip() else None)


def format_duration(seconds: float | None, style: DurationStyle = "unit") -> str:
    """A duration read at a glance, in one of the :data:`DurationStyle` styles. None or a number that is not
    finite reads ``n/a`` (``inf`` in the ``fine`` style); ``compact`` rounds to the second and reads a
    negative duration as ``0s``."""
    if seconds is None or not math.isfinite(seconds):
        return "inf" if style == "fine" and seconds is not None else "n/a"
    if style == "compact":
        return _compact(seconds)
    s = float(seconds)
    if abs(s) < 120:
        return f"{s:,.3g} s" if style == "fine" else f"{s:.0f} s"
    if abs(s) < 7200:
        value, unit = s / 60, "min"
    elif abs(s) < 2 * DAY:
        value, unit = s / 3600, "h"
    else:
        value, unit = s / DAY, "d"
    return f"{value:,.1f} {unit}" if style == "fine" else f"{value:.1f} {unit}"


def _compact(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
