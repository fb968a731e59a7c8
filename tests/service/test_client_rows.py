"""The client's long listings (:class:`kant.cli.client.common.Rows`) print into a pipe the same text
rich prints for the same table, laid out without rich (``kant queue --limit 100000``: a second, not a
minute); a name with a line break or a control character stays on its job's line."""

from __future__ import annotations

from rich.console import Console

from kant.cli.client.common import Rows


def _rich_text(rows: Rows) -> list[str]:
    wide = Console(width=100_000, color_system=None, force_terminal=False, highlight=False)
    with wide.capture() as cap:
        wide.print(rows.table())
    return [line.rstrip() for line in cap.get().splitlines()]


def test_plain_rows_are_what_rich_prints() -> None:
    rows = Rows("JOBID", "NAME", "STATE", "NODES/REASON")
    rows.add("1", "a", ("pending", "yellow"), ("why not", "dim"))
    rows.add("100", "long name here", "running", "")
    rows.add("2", "", "x", "ünï ✓ 漢字")
    rows.add("3", "漢字漢字漢字漢字漢字", ("x", "red"), "")
    assert rows.plain() == _rich_text(rows)
    assert rows.plain()[1] == "1      a                     pending  why not"


def test_a_line_break_in_a_name_stays_on_its_line() -> None:
    rows = Rows("JOBID", "NAME")
    rows.add("7", "two\nlines\x1b[31m")
    assert rows.plain() == ["JOBID  NAME", "7      two lines[31m"]
