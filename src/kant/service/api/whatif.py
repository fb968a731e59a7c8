"""The digital twin over HTTP: a what-if of the cluster as it is now and under scenarios
(``POST /v1/whatif``, docs/whatif.md), and the live state as a twin snapshot to run what-ifs on
offline (``GET /v1/snapshot``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from kant.service import queries
from kant.service.api.deps import Admin, Svc, Who
from kant.service.errors import Forbidden, NotLeader
from kant.service.schemas import WhatIfIn
from kant.service.whatif import run_whatif

__all__ = ["router"]

router = APIRouter(tags=["cluster"])


@router.post("/v1/whatif", response_model=None,
             responses={200: {"content": {"application/json": {}, "text/html": {}}}})
def whatif(body: WhatIfIn, p: Who, svc: Svc,
           format: Annotated[Literal["json", "html"], Query()] = "json") -> dict[str, Any] | HTMLResponse:
    """Run the cluster as it is now, and under each scenario (another policy, more nodes, nodes
    drained, tenants' quotas), forward for ``horizon_h`` hours in the digital twin: GAR, GFR, the
    predicted waits of the jobs pending now and each one's predicted start, side by side
    (docs/whatif.md). A tenant sees its own jobs' predictions; the HTML page (all jobs) is for
    admins. Each request has a budget of simulation time (``kant serve --whatif-budget``): an
    answer cut short has ``runs`` below ``runs_asked`` and says why in ``cut``; one that cannot
    finish a run of each scenario is 422. One request per tenant (or admin token) at a time, a few
    in all (``--whatif-queue``): more is 429 with ``Retry-After``."""
    svc.leading()
    if format == "html" and not p.admin:
        raise Forbidden("the what-if page lists every tenant's jobs: admins only (a tenant gets JSON)")
    who = f"tenant {p.tenant}" if not p.admin else f"admin token {p.token_id}"
    out = run_whatif(svc.twin, svc.whatif_gate, body, html=format == "html", who=who)
    if format == "html":
        return HTMLResponse(out["html"])
    if not p.admin:
        for sc in out["scenarios"]:
            sc["jobs"] = [j for j in sc["jobs"] if j["tenant"] == p.tenant]
    return out


@router.get("/v1/snapshot", response_model=dict[str, Any])
def snapshot(p: Admin, svc: Svc) -> dict[str, Any]:
    """The live state as a digital-twin snapshot (docs/whatif.md): save it and run what-ifs on it
    offline with ``kant whatif --snapshot FILE``."""
    snap = queries.twin_snapshot(svc.leading())
    if snap is None:
        raise NotLeader("this service is not the leader")
    return snap.to_dict()
