"""The ``services`` table: inference services (their replicas are jobs of kind inference)."""

from __future__ import annotations

import builtins
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from kant.service.db.base import Backend
from kant.service.db.schema import UNSET, Unset, services, tenants
from kant.service.errors import Conflict, NotFound

__all__ = ["SERVING_FIELDS", "ServiceRepo", "ServiceRow"]


@dataclass(frozen=True, slots=True)
class ServiceRow:
    """One inference service (``replicas``: desired count)."""

    id: int
    tenant: str
    name: str
    gpus_per_replica: int
    gpu_type: str | None
    priority: int
    replicas: int
    min_replicas: int
    max_replicas: int
    state: str
    created_wall: float
    command: str | None = None  # what each replica runs (None: replicas hold GPUs and run nothing)
    port: int = 0  # the port a replica listens on (0: kant picks a free one per replica)
    ready_path: str = "/health"  # a replica serves once this HTTP path answers 2xx
    ready_timeout_s: float = 30.0  # seconds a new replica has to become ready
    slo_ms: float | None = None
    capacity_rps: float | None = None  # requests/s one replica serves (the autoscaler's load signal)
    concurrency: int | None = None  # requests one replica serves at once (the load signal without capacity_rps)
    autoscaler: str | None = None  # HpaConfig as JSON (None: the replica count is set by hand)
    degraded: str | None = None  # why the service is degraded (None: it is not)

    @property
    def shown_state(self) -> str:
        """``degraded`` while a reason is recorded, else the stored state."""
        return "degraded" if self.degraded is not None and self.state == "active" else self.state


#: the serving fields of a service (columns of migration 0003), as create() and update() take them
SERVING_FIELDS = ("command", "port", "ready_path", "ready_timeout_s", "slo_ms", "capacity_rps", "concurrency",
                  "autoscaler", "degraded")


class ServiceRepo:
    """Inference services (``db.services``)."""

    def __init__(self, backend: Backend) -> None:
        self._db = backend

    def create(
        self, *, tenant: str, name: str, gpus_per_replica: int, replicas: int, min_replicas: int,
        max_replicas: int, gpu_type: str | None = None, priority: int = 0, now_wall: float | None = None,
        **serving: Any,
    ) -> ServiceRow:
        """Create an active service; :class:`Conflict` if the tenant has an active one of that name.
        ``serving``: any of :data:`SERVING_FIELDS`."""
        unknown = set(serving) - set(SERVING_FIELDS)
        if unknown:
            raise TypeError(f"unknown service fields: {sorted(unknown)}")
        created = time.time() if now_wall is None else now_wall
        try:
            with self._db.tx(write=True) as conn:
                if conn.execute(sa.select(tenants.c.name).where(tenants.c.name == tenant)).first() is None:
                    raise NotFound(f"tenant {tenant!r} does not exist")
                if conn.execute(sa.select(services.c.id).where(
                        services.c.tenant == tenant, services.c.name == name, services.c.state == "active")
                ).first() is not None:
                    raise Conflict(f"service {name!r} of tenant {tenant!r} already exists")
                sid = conn.execute(services.insert().values(
                    tenant=tenant, name=name, gpus_per_replica=gpus_per_replica, gpu_type=gpu_type,
                    priority=priority, replicas=replicas, min_replicas=min_replicas, max_replicas=max_replicas,
                    state="active", created_wall=created, **serving,
                ).returning(services.c.id)).scalar_one()
                r = conn.execute(sa.select(services).where(services.c.id == sid)).one()
        except sa_exc.IntegrityError:
            raise Conflict(f"service {name!r} of tenant {tenant!r} already exists") from None
        return ServiceRow(*r)

    def update(
        self, service_id: int, *, replicas: int | Unset = UNSET, min_replicas: int | Unset = UNSET,
        max_replicas: int | Unset = UNSET, state: str | Unset = UNSET, **serving: Any,
    ) -> ServiceRow:
        """Change a service's replica counts, state or serving fields (:data:`SERVING_FIELDS`; None
        clears a nullable one); :class:`NotFound` if missing."""
        unknown = set(serving) - set(SERVING_FIELDS)
        if unknown:
            raise TypeError(f"unknown service fields: {sorted(unknown)}")
        values = {k: v for k, v in (("replicas", replicas), ("min_replicas", min_replicas),
                                    ("max_replicas", max_replicas), ("state", state)) if v is not UNSET}
        values.update({k: v for k, v in serving.items() if v is not UNSET})
        try:
            with self._db.tx(write=True) as conn:
                if values:
                    conn.execute(services.update().where(services.c.id == service_id).values(values))
                r = conn.execute(sa.select(services).where(services.c.id == service_id)).first()
        except sa_exc.IntegrityError:
            raise Conflict(f"service {service_id}: another active service has its name") from None
        if r is None:
            raise NotFound(f"service {service_id} does not exist")
        return ServiceRow(*r)

    def get(self, service_id: int) -> ServiceRow | None:
        """The service ``service_id``, or None."""
        with self._db.tx() as conn:
            r = conn.execute(sa.select(services).where(services.c.id == service_id)).first()
        return None if r is None else ServiceRow(*r)

    def list(self, tenant: str | None = None, *, include_deleted: bool = False) -> builtins.list[ServiceRow]:
        """The services (of ``tenant`` if given; active ones unless ``include_deleted``), by id."""
        q = sa.select(services).order_by(services.c.id)
        if tenant is not None:
            q = q.where(services.c.tenant == tenant)
        if not include_deleted:
            q = q.where(services.c.state == "active")
        with self._db.tx() as conn:
            return [ServiceRow(*r) for r in conn.execute(q)]
