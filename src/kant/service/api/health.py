"""Health and metrics: ``/healthz`` (the process answers), ``/readyz`` (this service leads and its
loop runs; for load balancers and supervisors, no token) and ``/metrics`` (Prometheus, an admin's)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from kant.service.api.deps import Admin, Svc
from kant.service.metrics import CONTENT_TYPE

__all__ = ["router"]

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=dict[str, str])
def healthz() -> dict[str, str]:
    """The process answers (no token needed)."""
    return {"status": "ok"}


@router.get("/readyz", response_model=dict[str, Any], responses={503: {"description": "standby or not ready"}})
def readyz(response: Response, svc: Svc) -> dict[str, Any]:
    """Ready to schedule: this service is the leader and its loop runs (no token needed)."""
    loop = svc.loop
    ready = loop is not None and loop.alive
    if not ready:
        response.status_code = 503
    return {"ready": ready, "role": "leader" if ready else "standby", "leader": svc.leader_url()}


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE: {}}}})
def metrics(p: Admin, svc: Svc) -> Response:
    """Prometheus text format (an admin token)."""
    return Response(svc.metrics.render(), media_type=CONTENT_TYPE)

