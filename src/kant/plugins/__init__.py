"""Built-in policy plugins; importing this package registers them by NAME."""

from kant.plugins import binpack, fifo, priority, spread

__all__ = ["binpack", "fifo", "priority", "spread"]
