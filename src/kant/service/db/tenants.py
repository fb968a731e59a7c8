"""The ``tenants`` table: tenants and their GPU quotas."""

from __future__ import annotations

import builtins
import time
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from kant.service.db.base import Backend
from kant.service.db.schema import UNSET, Unset, tenants
from kant.service.errors import Conflict, NotFound

__all__ = ["TenantRepo", "TenantRow"]


@dataclass(frozen=True, slots=True)
class TenantRow:
    """One tenant, its GPU quota (``None``: no guarantee / no cap) and its jobs' time limits (a job
    without ``--time`` gets ``default_time_limit_s``; none may ask more than ``max_time_limit_s``;
    ``None``: no default, no maximum)."""

    name: str
    guaranteed_gpus: int | None
    max_gpus: int | None
    created_wall: float
    default_time_limit_s: float | None = None
    max_time_limit_s: float | None = None


class TenantRepo:
    """Tenants (``db.tenants``)."""

    def __init__(self, backend: Backend) -> None:
        self._db = backend

    def create(
        self, name: str, guaranteed_gpus: int | None = None, max_gpus: int | None = None, *,
        now_wall: float | None = None, default_time_limit_s: float | None = None,
        max_time_limit_s: float | None = None,
    ) -> TenantRow:
        """Create a tenant; :class:`Conflict` if it exists."""
        row = TenantRow(name, guaranteed_gpus, max_gpus, time.time() if now_wall is None else now_wall,
                        default_time_limit_s, max_time_limit_s)
        try:
            with self._db.tx(write=True) as conn:
                if conn.execute(sa.select(tenants.c.name).where(tenants.c.name == name)).first() is not None:
                    raise Conflict(f"tenant {name!r} already exists")
                conn.execute(tenants.insert().values(
                    name=name, guaranteed_gpus=guaranteed_gpus, max_gpus=max_gpus, created_wall=row.created_wall,
                    default_time_limit_s=default_time_limit_s, max_time_limit_s=max_time_limit_s,
                ))
        except sa_exc.IntegrityError:
            raise Conflict(f"tenant {name!r} already exists") from None
        return row

    def update(
        self, name: str, *, guaranteed_gpus: int | Unset | None = UNSET, max_gpus: int | Unset | None = UNSET,
        default_time_limit_s: float | Unset | None = UNSET, max_time_limit_s: float | Unset | None = UNSET,
    ) -> TenantRow:
        """Change a tenant's quota or time limits (``None`` clears one); :class:`NotFound` if missing."""
        values = {k: v for k, v in (("guaranteed_gpus", guaranteed_gpus), ("max_gpus", max_gpus),
                                    ("default_time_limit_s", default_time_limit_s),
                                    ("max_time_limit_s", max_time_limit_s)) if v is not UNSET}
        with self._db.tx(write=True) as conn:
            if values:
                conn.execute(tenants.update().where(tenants.c.name == name).values(values))
            r = conn.execute(sa.select(tenants).where(tenants.c.name == name)).first()
        if r is None:
            raise NotFound(f"tenant {name!r} does not exist")
        return TenantRow(*r)

    def get(self, name: str) -> TenantRow | None:
        """The tenant ``name``, or None."""
        with self._db.tx() as conn:
            r = conn.execute(sa.select(tenants).where(tenants.c.name == name)).first()
        return None if r is None else TenantRow(*r)

    def list(self) -> builtins.list[TenantRow]:
        """Every tenant, by name."""
        with self._db.tx() as conn:
            return [TenantRow(*r) for r in conn.execute(sa.select(tenants).order_by(tenants.c.name))]
