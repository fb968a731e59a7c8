"""Scaling an inference service's replicas on the live path.

A replica is a job of kind INFERENCE with the service's id. Scaling up inserts new replica jobs (the
database first, then they arrive as any submit does); scaling down cancels replicas in the order the
simulated driver uses (:func:`kant.inference.replicas.scale_down_victims`): queued replicas first, then
the most recently started ones. The service's replica count is stored. A replica job carries the
service's command (what it runs; :mod:`kant.service.serving.replicas` adds where it listens).
"""

from __future__ import annotations

import time

from kant.inference.replicas import scale_down_victims
from kant.model.job import JobKind
from kant.service.db.database import Database
from kant.service.db.jobs import NewJob
from kant.service.db.services import ServiceRow
from kant.service.errors import NotFound
from kant.service.live.state import Arrival, LiveState

__all__ = ["add_replicas", "replica_ids", "scale"]


def replica_ids(live: LiveState, service_id: int) -> list[int]:
    """The service's pending and running replica jobs, in the order they were added."""
    return sorted(i for i, a in live.active.items() if a.service_id == service_id)


def add_replicas(live: LiveState, db: Database, svc: ServiceRow, count: int, now: float) -> list[int]:
    """``count`` new replica jobs of ``svc`` (the database first, then they arrive); their ids."""
    first = len(replica_ids(live, svc.id))
    new = [NewJob(tenant=svc.tenant, user=svc.tenant, name=f"{svc.name}/replica-{k}",
                  kind=int(JobKind.INFERENCE), service_id=svc.id, gpus_per_worker=svc.gpus_per_replica,
                  gpu_type=svc.gpu_type, priority=svc.priority, command=svc.command)
           for k in range(first, first + count)]
    if not new:
        return []
    ids = db.jobs.insert(new, now_time=now, now_wall=time.time())
    live.arrive([Arrival(i, j, now) for (i, _), j in zip(ids, new, strict=True)], now)
    return [i for i, _ in ids]


def scale(live: LiveState, db: Database, service_id: int, replicas: int, now: float) -> int:
    """Set service ``service_id``'s replicas to ``replicas``; returns that count."""
    svc = db.services.get(service_id)
    if svc is None or svc.state != "active":
        raise NotFound(f"no active service {service_id}")
    mine = replica_ids(live, service_id)  # ids: the order added
    if replicas > len(mine):
        add_replicas(live, db, svc, replicas - len(mine), now)
    else:
        running = live.sched.running
        rows = [live.active[i].row for i in mine]
        starts = [running[row].start if row in running else None for row in rows]
        for k in scale_down_victims(starts, len(mine) - replicas):
            live.cancel(mine[k], None, f"scale of service {svc.name} to {replicas}", now)
    if svc.replicas != replicas:
        db.services.update(service_id, replicas=replicas)
    return replicas
