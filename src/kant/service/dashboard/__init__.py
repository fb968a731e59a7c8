"""The web dashboard of ``kant serve`` (docs/dashboard.md): :mod:`.routes` serves the page and its
aggregate routes; the time series it draws is :class:`kant.service.history.History`, which the loop
feeds."""
