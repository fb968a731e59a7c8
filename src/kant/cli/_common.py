"""What every ``kant`` subcommand shares: the two consoles, the one-line error exit, and the one rule
for number options (:class:`FiniteFloat`) and for duration options (:class:`Duration`)."""

from __future__ import annotations

import math
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.text import Text

__all__ = ["DEFAULT_CLUSTER", "SEED", "Duration", "FiniteFloat", "OneLineCommand", "console", "fail", "out"]

#: the cluster of ``kant simulate``, ``kant compare`` and ``kant serve`` (``--demo`` too) when none is given
#: (kant.traces.inventory.BUILTIN_CLUSTERS; docs/clusters.md)
DEFAULT_CLUSTER = "philly-80"

console = Console(stderr=True)  # progress, notes and errors
out = Console()  # results


def fail(message: str) -> NoReturn:
    """Print ``error: <message>`` on stderr (no markup is read from the message) and exit with 2."""
    console.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False, soft_wrap=True)
    raise SystemExit(2)


class OneLineCommand(click.Command):
    """A command whose bad options are one line ``error: ...`` (exit 2), like every other failure here."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            path = " ".join(["kant", *ctx.command_path.split()[1:]])
            fail(f"{exc.format_message().rstrip('.')} (see '{path} --help')")


#: the type of every ``--seed`` option: NumPy's generators take no negative seed
SEED = click.IntRange(min=0)


class FiniteFloat(click.FloatRange):
    """A number option: NaN is always refused, and so is +-inf unless ``allow_inf`` (for every float flag
    of the CLI; the bounds work as in :class:`click.FloatRange`)."""

    name = "number"

    def __init__(
        self,
        min: float | None = None,
        max: float | None = None,
        *,
        min_open: bool = False,
        max_open: bool = False,
        allow_inf: bool = False,
    ) -> None:
        super().__init__(min, max, min_open=min_open, max_open=max_open)
        self.allow_inf = allow_inf

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"{value!r} is not a number", param, ctx)
        if math.isinf(number) and not self.allow_inf:
            self.fail(f"{value!r} must be a finite number", param, ctx)
        return super().convert(number, param, ctx)


class Duration(click.ParamType[float]):
    """A duration option (``90``, ``90s``, ``15m``, ``2h``, ``1d``: :func:`kant.text.parse_duration`), in
    seconds; ``positive``: 0 is refused too (an estimate, a default estimate)."""

    name = "duration"

    def __init__(self, *, positive: bool = False) -> None:
        self.positive = positive

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        from kant.text import parse_duration  # (here: `kant --version` parses no duration)

        if isinstance(value, float):
            return value
        try:
            seconds = parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if self.positive and seconds == 0:
            self.fail(f"{value!r} is not a duration: it must be more than 0", param, ctx)
        return seconds
