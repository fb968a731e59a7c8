"""The tenants that exist, as the service's requests ask about them: an admin's submit names its
tenant, and a name is looked up here (in memory; the database once for a name not seen yet), not with
a query per submit. A change of tenants or quotas is told here (:meth:`Tenants.changed`), which
reloads the scheduler's quotas."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from kant.service.db.database import Database
from kant.service.errors import Conflict
from kant.service.loop import ServiceLoop

__all__ = ["DEFAULT_TENANT", "Tenants"]

#: the tenant of an admin's job that names none (made on first use): `kant submit` works at once
DEFAULT_TENANT = "default"


class Tenants:
    """The tenant names of the database, kept; ``loop`` gives the running loop (None on a standby)."""

    def __init__(self, db: Database, loop: Callable[[], ServiceLoop | None]) -> None:
        self.db = db
        self._loop = loop
        self._names: set[str] = set()
        self._limits: dict[str, tuple[float | None, float | None]] = {}

    def load(self) -> None:
        """Read every tenant's name and time limits from the database."""
        rows = self.db.tenants.list()
        self._names = {t.name for t in rows}
        self._limits = {t.name: (t.default_time_limit_s, t.max_time_limit_s) for t in rows}

    def time_limits(self, name: str) -> tuple[float | None, float | None]:
        """(default, maximum) time limit of the tenant's jobs (None: none)."""
        if name not in self._limits and self.exists(name):
            row = self.db.tenants.get(name)
            if row is not None:
                self._limits[name] = (row.default_time_limit_s, row.max_time_limit_s)
        return self._limits.get(name, (None, None))

    def names(self) -> list[str]:
        return sorted(self._names)

    def exists(self, name: str) -> bool:
        if name in self._names:
            return True
        if self.db.tenants.get(name) is not None:
            self._names.add(name)
            return True
        return False

    def ensure(self, name: str) -> None:
        """Create tenant ``name`` (no quota) unless it exists."""
        if self.exists(name):
            return
        with contextlib.suppress(Conflict):  # (made meanwhile by another request)
            self.db.tenants.create(name)
        self.changed()

    def changed(self) -> None:
        """A tenant was created or its quota changed: read the names again and have the scheduler
        apply the quotas."""
        self.load()
        loop = self._loop()
        if loop is not None and loop.alive:
            loop.reload()
