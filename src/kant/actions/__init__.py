"""Built-in cycle algorithms; importing this package registers them by NAME."""

from kant.actions import allocate

__all__ = ["allocate"]
