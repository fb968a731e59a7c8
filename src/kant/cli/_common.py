"""What every ``kant`` subcommand shares: the two consoles and the one-line error exit."""

from __future__ import annotations

from typing import NoReturn

from rich.console import Console
from rich.text import Text

__all__ = ["console", "fail", "out"]

console = Console(stderr=True)  # progress, notes and errors
out = Console()  # results


def fail(message: str) -> NoReturn:
    """Print ``error: <message>`` on stderr (no markup is read from the message) and exit with 2."""
    console.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False, soft_wrap=True)
    raise SystemExit(2)
