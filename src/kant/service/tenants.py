"""The tenants that exist, as the service's requests ask about them: an admin's submit names its
tenant, and a name is looked up here (in memory; the database once for a name not seen yet), not with
a query per submit. A change of tenants or quotas is told here (:meth:`Tenants.changed`), which
reloads the scheduler's quotas."""

from __future__ import annotations

from collections.abc import Callable

from kant.service.db.database import Database
from kant.service.loop import ServiceLoop

__all__ = ["Tenants"]


class Tenants:
    """The tenant names of the database, kept; ``loop`` gives the running loop (None on a standby)."""

    def __init__(self, db: Database, loop: Callable[[], ServiceLoop | None]) -> None:
        self.db = db
        self._loop = loop
        self._names: set[str] = set()

    def load(self) -> None:
        """Read every tenant's name from the database."""
        self._names = {t.name for t in self.db.tenants.list()}

    def names(self) -> list[str]:
        return sorted(self._names)

    def exists(self, name: str) -> bool:
        if name in self._names:
            return True
        if self.db.tenants.get(name) is not None:
            self._names.add(name)
            return True
        return False

    def changed(self) -> None:
        """A tenant was created or its quota changed: read the names again and have the scheduler
        apply the quotas."""
        self.load()
        loop = self._loop()
        if loop is not None and loop.alive:
            loop.reload()
