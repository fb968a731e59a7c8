"""What every command of the client shares: the decorator that gives a command its service
(``--url``, ``--token-file``, ``--json``) and turns an :class:`~kant.cli.client.http.ApiError` into one
``error:`` line, the service's clock, and the tables and values as the commands print them."""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from kant.cli._common import OneLineCommand, fail, out
from kant.cli.client.http import DEFAULT_URL, TOKEN_FILE, ApiError, Client, resolve_target
from kant.service.jobenv import parse_time
from kant.text import format_duration

__all__ = ["Clock", "Rows", "client_command", "emit", "job_id_arg", "or_dash", "percent", "print_json", "table",
           "time_limit_option"]


def job_id_arg(text: str) -> int:
    """A JOB argument: a job id, else ``error: JOB: 'x' is not a job id (a number)``."""
    if not re.fullmatch(r"\d{1,18}", text.strip()):
        fail(f"JOB: {text!r} is not a job id (a number)")
    return int(text)


def time_limit_option(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """A ``--time`` option's value in seconds (Slurm's forms, :func:`kant.service.jobenv.parse_time`)."""
    if value is None:
        return None
    try:
        return parse_time(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None

F = TypeVar("F", bound=Callable[..., Any])


def client_command(name: str, json_option: bool = True) -> Callable[[F], click.Command]:
    """``@cli.command`` for a client command: adds ``--url`` and ``--token-file`` (and ``--json``), opens a
    :class:`Client`, passes it as the first argument and turns an :class:`ApiError` into ``error:``."""

    def decorate(f: F) -> click.Command:
        @functools.wraps(f)
        def run(*args: Any, url: str | None, token_file: Path | None, **kw: Any) -> None:
            try:
                with Client(resolve_target(url, token_file)) as api:
                    f(api, *args, **kw)
            except ApiError as exc:
                fail(str(exc))

        options = [
            click.option("--url", default=None, metavar="URL",
                         help=f"The service (default: $KANT_URL, else {DEFAULT_URL})."),
            click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                         help=f"A file holding the token (default: $KANT_TOKEN, else ./{TOKEN_FILE})."),
        ]
        if json_option:
            options.append(click.option("--json", "as_json", is_flag=True, help="Print the API's JSON instead."))
        wrapped: Callable[..., Any] = run
        for option in reversed(options):
            wrapped = option(wrapped)
        command = click.command(name, cls=OneLineCommand)(wrapped)
        shared = {"url", "token_file", "as_json"}  # listed after the command's own options in --help
        command.params = ([p for p in command.params if p.name not in shared] +
                          [p for p in command.params if p.name in shared])
        return command

    return decorate


@dataclass(frozen=True)
class Clock:
    """The service's clock: ``now`` (service seconds) and its kind (wall, accelerated, manual)."""

    now: float
    kind: str

    def at(self, t: float | None, absolute: bool = False) -> str:
        """A service time: ``3m20s ago`` or (``absolute``) the clock reading."""
        if t is None:
            return "-"
        if absolute:
            return self.reading(t)
        return f"{format_duration(self.now - t, 'compact')} ago"

    def reading(self, t: float) -> str:
        if self.kind == "wall":
            return dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")
        s = max(0, round(t))
        days, rest = divmod(s, 86400)
        clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
        return f"{days}d {clock}" if days else clock


def percent(x: float | None) -> str:
    """``42.5%`` of a ratio (``-`` for none)."""
    return "-" if x is None else f"{100 * x:.1f}%"


def or_dash(x: Any) -> str:
    """A value as text, ``-`` for none."""
    return "-" if x is None else str(x)


def table(*columns: str, title: str | None = None) -> Table:
    """A borderless table with bold headers (ids, states, gangs, names and types never wrap)."""
    t = Table(box=None, pad_edge=False, header_style="bold", title=title, title_justify="left", title_style="bold")
    for name in columns:
        t.add_column(name, no_wrap=name in ("JOBID", "STATE", "GANG", "NAME", "TYPE"))
    return t


#: a listing longer than this is printed plain (aligned, no colours) on a terminal too: rich lays out
#: about 2,000 rows a second, and nobody reads 100,000 coloured rows
PLAIN_ROWS = 5000

Cell = str | tuple[str, str]  # text, or (text, rich style)


class Rows:
    """A listing of many rows (``kant queue``, ``kant acct``): plain strings, a style per cell where it
    has one. :func:`emit` prints it as a rich :func:`table` on a terminal, and lays it out itself
    into a pipe or when it is long: the same text rich prints into a pipe (left-aligned columns, two
    spaces apart, no trailing blanks), 100,000 rows in a second instead of a minute."""

    def __init__(self, *columns: str) -> None:
        self.columns = columns
        self.rows: list[tuple[Cell, ...]] = []

    def add(self, *cells: Cell) -> None:
        self.rows.append(cells)

    def table(self) -> Table:
        t = table(*self.columns)
        for row in self.rows:
            t.add_row(*(Text(c) if isinstance(c, str) else Text(c[0], style=c[1]) for c in row))
        return t

    def plain(self) -> list[str]:
        grid = [list(self.columns)] + [[_one_line(c if isinstance(c, str) else c[0]) for c in row]
                                       for row in self.rows]
        widths = [max(_width(r[i]) for r in grid) for i in range(len(self.columns))]
        return ["  ".join(c + " " * (w - _width(c)) for c, w in zip(r, widths, strict=True)).rstrip() for r in grid]


def _width(s: str) -> int:
    return len(s) if s.isascii() else cell_len(s)


def _one_line(s: str) -> str:
    """``s`` without control characters (escape sequences included), a line break or tab as a space."""
    if s.isprintable():
        return s
    return "".join(c for c in s.replace("\n", " ").replace("\t", " ") if c.isprintable())


def emit(renderable: RenderableType | Rows) -> None:
    """Print a table: on a terminal as rich lays it out; into a pipe or file unwrapped, plain, without
    trailing blanks (``kant queue | grep`` sees one line per job)."""
    if isinstance(renderable, Rows):
        if not out.is_terminal or len(renderable.rows) > PLAIN_ROWS:
            click.echo("\n".join(renderable.plain()))
            return
        renderable = renderable.table()
    if out.is_terminal:
        out.print(renderable)
        return
    wide = Console(width=100_000, color_system=None, force_terminal=False, highlight=False)
    with wide.capture() as cap:
        wide.print(renderable)
    click.echo("\n".join(line.rstrip() for line in cap.get().splitlines()))


def print_json(data: Any) -> None:
    """The API's answer as indented JSON (``--json``)."""
    click.echo(json.dumps(data, indent=2))
