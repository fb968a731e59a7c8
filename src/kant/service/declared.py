"""The services of a services file (``kant serve --services FILE``, the file of ``kant simulate
--services``, :mod:`kant.inference.services`), created or brought up to date when this service
becomes the leader.

Each service of the file is its tenant's service of that name (the tenant is created if it does not
exist). A new one starts with ``min_replicas`` replicas; an existing one keeps its replica count
(within the file's bounds) and takes the file's command (a changed command rolls its replicas), port,
readiness path, load signal (``capacity_rps``, else ``concurrency``), SLO and autoscaler (the file's
effective settings: its ``autoscaler`` block over the file's defaults). ``traffic``,
``startup_delay_s`` and ``start_s`` are the simulator's and are not used live.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kant.errors import KantError
from kant.inference.autoscaler import HpaConfig
from kant.inference.services import ServicesConfig, ServiceSpec
from kant.service.db.database import Database
from kant.service.errors import Conflict
from kant.service.loop import ServiceLoop
from kant.service.tenants import Tenants

__all__ = ["apply_services", "serving_fields"]


def serving_fields(spec: ServiceSpec, hpa: HpaConfig) -> dict[str, Any]:
    """The serving columns of a service of the file."""
    return {"command": spec.command, "port": spec.port, "ready_path": spec.ready_path,
            "ready_timeout_s": spec.ready_timeout_s, "slo_ms": spec.slo_ms, "capacity_rps": spec.capacity_rps,
            "concurrency": spec.concurrency, "autoscaler": hpa.model_dump_json()}


def apply_services(config: ServicesConfig, db: Database, tenants: Tenants, loop: ServiceLoop) -> list[str]:
    """Create or update every service of ``config``; one line per service, saying what was done."""
    done: list[str] = []
    new_tenant = False
    for spec in config.services:
        if not tenants.exists(spec.tenant):
            with contextlib.suppress(Conflict):  # (created meanwhile)
                db.tenants.create(spec.tenant)
            new_tenant = True
    if new_tenant:
        tenants.changed()
    active = {(r.tenant, r.name): r for r in db.services.list()}
    for i, (spec, hpa) in enumerate(zip(config.services, config.autoscalers, strict=True)):
        fields = serving_fields(spec, hpa)
        row = active.get((spec.tenant, spec.name))
        try:
            if row is None:
                row = db.services.create(tenant=spec.tenant, name=spec.name, gpus_per_replica=spec.gpus_per_replica,
                                         gpu_type=spec.gpu_type, priority=spec.priority, replicas=0,
                                         min_replicas=spec.min_replicas, max_replicas=spec.max_replicas, **fields)
                loop.serving.changed()
                loop.scale(row.id, spec.min_replicas)
                done.append(f"service {spec.name} (tenant {spec.tenant}): created with {spec.min_replicas} replicas")
                continue
            if (row.gpus_per_replica, row.gpu_type) != (spec.gpus_per_replica, spec.gpu_type):
                raise KantError(f"{config.source}: services[{i}]: service {spec.name} exists with "
                                f"{row.gpus_per_replica} GPUs per replica of type {row.gpu_type or 'any'}; "
                                "delete it first to change its replicas' size")
            db.services.update(row.id, min_replicas=spec.min_replicas, max_replicas=spec.max_replicas, **fields)
            loop.serving.changed()
            replicas = min(max(row.replicas, spec.min_replicas), spec.max_replicas)
            if replicas != row.replicas:
                loop.scale(row.id, replicas)
            done.append(f"service {spec.name} (tenant {spec.tenant}): updated"
                        + (" (its command changed: rolling update)" if row.command != spec.command else ""))
        except Conflict as exc:
            raise KantError(f"{config.source}: services[{i}]: {exc}") from None
    return done
