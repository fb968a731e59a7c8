"""Small text formats shared by the service and its CLI (no heavy imports: the client loads this)."""

from __future__ import annotations

__all__ = ["span"]


def span(seconds: float) -> str:
    """A duration read at a glance: ``45s``, ``3m20s``, ``2h05m``, ``3d04h`` (negative: ``0s``)."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
