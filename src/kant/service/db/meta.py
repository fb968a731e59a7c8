"""The ``meta`` table: the service's own key/values (the leader epoch, the leader's URL, the clock)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from kant.service.db.base import Backend
from kant.service.db.schema import EPOCH_KEY, meta

__all__ = ["MetaRepo"]


class MetaRepo:
    """Key/values of the ``meta`` table (``db.meta``)."""

    def __init__(self, backend: Backend) -> None:
        self._db = backend

    def get(self, key: str) -> str | None:
        """The value stored under ``key``, or None."""
        with self._db.tx() as conn:
            v = conn.execute(sa.select(meta.c.value).where(meta.c.key == key)).scalar_one_or_none()
        return None if v is None else str(v)

    def set(self, key: str, value: str) -> None:
        """Store ``value`` under ``key``."""
        with self._db.tx(write=True) as conn:
            _upsert(conn, key, value)

    def delete(self, key: str) -> None:
        """Forget ``key`` (nothing if unset)."""
        with self._db.tx(write=True) as conn:
            conn.execute(meta.delete().where(meta.c.key == key))

    def bump_epoch(self) -> int:
        """Add one to meta['leader_epoch'] (0 when unset) and return it (a new leader's fencing token)."""
        with self._db.tx(write=True) as conn:
            q = sa.select(meta.c.value).where(meta.c.key == EPOCH_KEY)
            if self._db.dialect == "postgresql":
                q = q.with_for_update()
            old = conn.execute(q).scalar_one_or_none()
            epoch = (int(old) if old is not None else 0) + 1
            _upsert(conn, EPOCH_KEY, str(epoch))
        return epoch


def _upsert(conn: Connection, key: str, value: str) -> None:
    if conn.execute(meta.update().where(meta.c.key == key).values(value=value)).rowcount == 0:
        conn.execute(meta.insert().values(key=key, value=value))
