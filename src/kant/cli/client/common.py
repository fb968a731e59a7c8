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
from rich.console import Console, RenderableType
from rich.table import Table

from kant.cli._common import OneLineCommand, fail, out
from kant.cli.client.http import DEFAULT_URL, TOKEN_FILE, ApiError, Client, resolve_target
from kant.service.jobenv import parse_time
from kant.text import format_duration

__all__ = ["Clock", "client_command", "emit", "job_id_arg", "or_dash", "percent", "print_json", "table",
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


def emit(renderable: RenderableType) -> None:
    """Print a table: on a terminal as rich lays it out; into a pipe or file unwrapped, plain, without
    trailing blanks (``kant queue | grep`` sees one line per job)."""
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
