"""Scaling an inference service's replicas on the live path.

A replica is a job of kind INFERENCE with the service's id. Scaling up inserts new replica jobs (the
database first, then they arrive as any submit does); scaling down cancels replicas in the order the
simulated driver uses (:func:`kant.inference.replicas.scale_down_victims`): queued replicas first, then
the most recently started ones. The service's replica count is stored.
"""

from __future__ import annotations

import time

from kant.inference.replicas import scale_down_victims
from kant.model.job import JobKind
from kant.service.db.database import Database
from kant.service.db.jobs import NewJob
from kant.service.errors import NotFound
from kant.service.live.state import Arrival, LiveState

__all__ = ["scale"]


def scale(live: LiveState, db: Database, service_id: int, replicas: int, now: float) -> int:
    """Set service ``service_id``'s replicas to ``replicas``; returns that count."""
    svc = db.services.get(service_id)
    if svc is None or svc.state != "active":
        raise NotFound(f"no active service {service_id}")
    mine = sorted(i for i, a in live.active.items() if a.service_id == service_id)  # ids: the order added
    if replicas > len(mine):
        new = [NewJob(tenant=svc.tenant, user=svc.tenant, name=f"{svc.name}/replica-{k}",
                      kind=int(JobKind.INFERENCE), service_id=service_id, gpus_per_worker=svc.gpus_per_replica,
                      gpu_type=svc.gpu_type, priority=svc.priority)
               for k in range(len(mine), replicas)]
        ids = db.jobs.insert(new, now_time=now, now_wall=time.time())
        live.arrive([Arrival(i, j, now) for (i, _), j in zip(ids, new, strict=True)], now)
    else:
        running = live.sched.running
        rows = [live.active[i].row for i in mine]
        starts = [running[row].start if row in running else None for row in rows]
        for k in scale_down_victims(starts, len(mine) - replicas):
            live.cancel(mine[k], None, f"scale of service {svc.name} to {replicas}", now)
    if svc.replicas != replicas:
        db.services.update(service_id, replicas=replicas)
    return replicas
