"""Inference services: create one (``replicas`` long-running replicas, running ``command`` when it
has one), list them, read one, change its command (a rolling update) or autoscaler, scale it within
its bounds, delete it. A tenant sees its own services only (another's is 404)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from kant.service import admission
from kant.service.api.deps import Id, Svc, Who
from kant.service.auth import Principal
from kant.service.db.services import ServiceRow
from kant.service.errors import NotFound, Rejected
from kant.service.schemas import ScaleIn, ServiceIn, ServiceOut, ServicePatch, ServiceStatsOut
from kant.service.server import Service

__all__ = ["router"]

router = APIRouter(tags=["services"])


def visible_service(svc: Service, service_id: int, p: Principal) -> ServiceRow:
    """The service, if ``p`` may see it (:class:`NotFound` otherwise, as if it did not exist)."""
    row = svc.db.services.get(service_id)
    if row is None or not p.sees(row.tenant):
        raise NotFound(f"no service {service_id}")
    return row


def service_out(svc: Service, row: ServiceRow) -> ServiceOut:
    """The service with the leader's live figures of its replicas (none on a standby)."""
    loop = svc.loop
    stats = loop.serving.stats(row.id) if loop is not None and loop.alive and row.state == "active" else None
    return ServiceOut.of(row, stats)


def _changed(svc: Service) -> None:
    loop = svc.loop
    if loop is not None:
        loop.serving.changed()


@router.post("/v1/services", status_code=201, response_model=ServiceOut)
def create_service(body: ServiceIn, p: Who, svc: Svc) -> ServiceOut:
    """An inference service: ``replicas`` long-running replicas of ``gpus_per_replica`` GPUs."""
    loop = svc.leading()
    tenant = admission.service_tenant(body, p, svc.tenants, loop.view)
    row = svc.db.services.create(tenant=tenant, name=body.name, gpus_per_replica=body.gpus_per_replica,
                                gpu_type=body.gpu_type, priority=body.priority, replicas=0,
                                min_replicas=body.min_replicas, max_replicas=body.max_replicas,
                                **body.serving())
    loop.serving.changed()
    loop.scale(row.id, body.replicas)
    return service_out(svc, svc.db.services.get(row.id))  # type: ignore[arg-type]


@router.get("/v1/services", response_model=list[ServiceOut])
def list_services(p: Who, svc: Svc) -> list[ServiceOut]:
    return [service_out(svc, r) for r in svc.db.services.list(p.scope())]


@router.get("/v1/services/{service_id}", response_model=ServiceOut)
def get_service(service_id: Id, p: Who, svc: Svc) -> ServiceOut:
    return service_out(svc, visible_service(svc, service_id, p))


@router.patch("/v1/services/{service_id}", response_model=ServiceOut)
def patch_service(service_id: Id, body: ServicePatch, p: Who, svc: Svc) -> ServiceOut:
    """Change what the replicas run (a new command rolls them one at a time), how they are probed,
    the autoscaler or the bounds; the fields not given stay."""
    row = visible_service(svc, service_id, p)
    if row.state != "active":
        raise NotFound(f"no active service {service_id}")
    loop = svc.leading()
    changes = body.changes()
    low = changes.get("min_replicas", row.min_replicas)
    high = changes.get("max_replicas", row.max_replicas)
    if low > high:
        raise Rejected("min_replicas", f"{low} is above max_replicas ({high})")
    autoscaled = changes.get("autoscaler", row.autoscaler) is not None
    if autoscaled and changes.get("capacity_rps", row.capacity_rps) is None \
            and changes.get("concurrency", row.concurrency) is None:
        raise Rejected("autoscaler", "needs capacity_rps or concurrency (the load it scales on)")
    svc.db.services.update(service_id, **changes)
    _changed(svc)
    if not low <= row.replicas <= high:
        loop.scale(service_id, min(max(row.replicas, low), high))
    return service_out(svc, svc.db.services.get(service_id))  # type: ignore[arg-type]


@router.post("/v1/services/{service_id}/scale", response_model=ServiceOut)
def scale_service(service_id: Id, body: ScaleIn, p: Who, svc: Svc) -> ServiceOut:
    """Set the number of replicas (within min and max): new replicas queue, extra ones stop."""
    row = visible_service(svc, service_id, p)
    if not row.min_replicas <= body.replicas <= row.max_replicas:
        raise Rejected("", f"replicas must be within [{row.min_replicas}, {row.max_replicas}]")
    svc.leading().scale(service_id, body.replicas)
    return service_out(svc, svc.db.services.get(service_id))  # type: ignore[arg-type]


@router.delete("/v1/services/{service_id}", response_model=ServiceOut)
def delete_service(service_id: Id, p: Who, svc: Svc) -> ServiceOut:
    """Stop every replica and retire the service."""
    visible_service(svc, service_id, p)
    svc.leading().scale(service_id, 0)
    svc.db.services.update(service_id, state="deleted")
    _changed(svc)
    return service_out(svc, svc.db.services.get(service_id))  # type: ignore[arg-type]


@router.get("/v1/services/{service_id}/stats", response_model=ServiceStatsOut)
def service_stats(service_id: Id, p: Who, svc: Svc,
                  window: Annotated[float, Query(gt=0, le=3600, description="seconds")] = 60.0) -> ServiceStatsOut:
    """The service's traffic through its request route (``/v1/services/{service}/serve/...``): arrival
    rate, requests in flight and at each replica, P50/P99 of queue and response time over ``window``
    seconds, tokens, status codes and SLO attainment."""
    row = visible_service(svc, service_id, p)
    s = svc.traffic.stats(service_id, window)
    return ServiceStatsOut(
        service=service_id, window_s=s.window_s, arrival_rate=s.arrival_rate, inflight=s.inflight, queued=s.queued,
        outstanding={str(k): v for k, v in sorted(s.outstanding.items())}, answered=s.answered,
        queue_p50_ms=s.queue_p50_ms, queue_p99_ms=s.queue_p99_ms, response_p50_ms=s.response_p50_ms,
        response_p99_ms=s.response_p99_ms, slo_ms=row.slo_ms, slo_attainment=s.slo_attainment,
        total_requests=s.total_requests, codes={str(k): v for k, v in sorted(s.codes.items())},
        prompt_tokens=s.prompt_tokens, completion_tokens=s.completion_tokens,
        slo_attainment_total=s.slo_attainment_total)
