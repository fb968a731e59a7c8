"""The web dashboard of ``kant serve`` (docs/dashboard.md): :mod:`.routes` serves the page and its
aggregate routes, :mod:`.history` keeps the time series the loop feeds."""

from kant.service.dashboard.history import History

__all__ = ["History"]
