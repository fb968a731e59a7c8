"""The one duration parser and formatter (kant.text): what each style prints, and every error message."""

from __future__ import annotations

import math

import pytest

from kant.text import format_duration, parse_duration, parse_window


def test_durations() -> None:
    assert [parse_duration(v) for v in ("90", "90s", "15m", "2h", "1d", "1.5h", " 2H ", "15min", ".5m", "1e3",
                                        "5.", "90 m", "0", "-0")] == [
        90, 90, 900, 7200, 86400, 5400, 7200, 900, 30, 1000, 5, 5400, 0, 0]
    assert math.copysign(1.0, parse_duration("-0")) == 1.0  # -0 reads 0
    for bad in ("", "h", "5x", "inf", "nan", "1_000", "2 hours", "1:30"):
        with pytest.raises(ValueError, match=r"is not a duration \(e\.g\. 90, 90s, 15m, 2h, 1d\)$"):
            parse_duration(bad)
    with pytest.raises(ValueError, match=r"^'-1m' is not a duration: it must be finite and not negative$"):
        parse_duration("-1m")
    with pytest.raises(ValueError, match=r"^'1e999' is not a finite time$"):
        parse_duration("1e999")


def test_windows() -> None:
    assert parse_window("0:7d") == (0.0, 7 * 86400.0)
    assert parse_window("2h:") == (7200.0, None)
    assert parse_window(" : 30d") == (None, 30 * 86400.0)
    with pytest.raises(ValueError, match=r"^expected START:END \(e\.g\. 0:7d\), got '7d'$"):
        parse_window("7d")
    with pytest.raises(ValueError, match=r"^'x' is not a duration"):
        parse_window("x:1d")


def test_the_three_styles() -> None:
    # unit (headline tables): whole seconds under 2 min, then one decimal of min / h / d
    assert [format_duration(s) for s in (0.4, 59.6, 119.4, 200, 7199, 7200, 154_080, 172_800, 1_000 * 86400.0)] == [
        "0 s", "60 s", "119 s", "3.3 min", "120.0 min", "2.0 h", "42.8 h", "2.0 d", "1000.0 d"]
    assert [format_duration(s) for s in (None, math.inf, math.nan, -30.0, -900.0)] == [
        "n/a", "n/a", "n/a", "-30 s", "-15.0 min"]
    # fine (kant trace info): three significant digits under 2 min, thousands separators, inf
    assert [format_duration(s, "fine") for s in (0.25, 12.345, 119.4, 200, 1_000 * 86400.0, math.inf)] == [
        "0.25 s", "12.3 s", "119 s", "3.3 min", "1,000.0 d", "inf"]
    # compact (the client): rounded to the second; 200 s = 3 min 20 s, 7,500 s = 2 h 5 min, 273,600 s = 3 d 4 h
    assert [format_duration(s, "compact") for s in (-5, 44.6, 200, 7_500, 273_600, None)] == [
        "0s", "45s", "3m20s", "2h05m", "3d04h", "n/a"]


def test_the_compact_cases_the_dashboard_shares() -> None:
    """The cases the dashboard's port of the compact style is checked against too (tests/browser)."""
    import json
    from pathlib import Path

    cases = json.loads((Path(__file__).parent / "data" / "durations.json").read_text())["compact"]
    assert [format_duration(s, "compact") for s, _ in cases] == [text for _, text in cases]
