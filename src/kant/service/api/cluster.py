"""The cluster now (``GET /v1/cluster``): GAR, SOR, GFR at this instant, the queue, and use per
tenant against quota (a tenant sees its own and the others' total)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import APIRouter

from kant.service.api.deps import Svc, Who
from kant.service.auth import Principal
from kant.service.schemas import ClusterOut, QueueOut, TenantUse

__all__ = ["router"]

router = APIRouter(tags=["cluster"])


@router.get("/v1/cluster", response_model=ClusterOut)
def cluster(p: Who, svc: Svc) -> ClusterOut:
    """The cluster now: GAR, SOR, GFR (docs/metrics.md at one instant), the queue, and use per
    tenant against quota (a tenant sees its own and the others' total)."""
    view = svc.leading().view
    assert view is not None
    quotas = {t.name: t for t in svc.db.tenants.list()}
    names = set(view.pending_by_tenant) | set(view.running_gpus_by_tenant) | set(quotas)

    def use(name: str) -> TenantUse:
        q = quotas.get(name)
        return TenantUse(running_gpus=view.running_gpus_by_tenant.get(name, 0),
                         pending_jobs=view.pending_by_tenant.get(name, 0),
                         guaranteed_gpus=q.guaranteed_gpus if q else None, max_gpus=q.max_gpus if q else None)

    tenants = {n: use(n) for n in sorted(names)}
    others = None
    if not p.admin:
        rest = [u for n, u in tenants.items() if n != p.tenant]
        others = TenantUse(running_gpus=sum(u.running_gpus for u in rest), pending_jobs=sum(u.pending_jobs
                                                                                             for u in rest))
        tenants = {n: u for n, u in tenants.items() if n == p.tenant}
    return ClusterOut(now=view.now, clock=svc.config.clock, policy=svc.policy_name,
                      quota_enforced=svc.quota_enforced, total_gpus=view.total_gpus,
                      allocated_gpus=view.allocated_gpus, down_gpus=view.down_gpus,
                      cordoned_gpus=view.cordoned_gpus,
                      free_gpus=view.total_gpus - view.allocated_gpus - view.down_gpus - view.cordoned_gpus,
                      gar=view.metrics.get("gar"), sor=view.metrics.get("sor"),
                      gfr_nodes=view.metrics.get("gfr_nodes"), gfr_gpus=view.metrics.get("gfr_gpus"),
                      metrics=dict(view.metrics), queue_len=view.queue_len,
                      pending_gpus=view.pending_gpus, running_jobs=view.running_jobs, cycles=view.cycles,
                      tenants=tenants, others=others,
                      queues=visible_queues(view.queues, p))


@router.get("/v1/queues", response_model=list[QueueOut])
def queues(p: Who, svc: Svc) -> list[QueueOut]:
    """The tree of queues now (``kant serve --queues``): each queue's guarantee, limits, GPUs in use,
    borrowed and its capacity, and its fair share (share, decayed usage, factor) where the policy
    orders by it. Empty without queues. A tenant sees its own leaf and the queues above it only."""
    view = svc.leading().view
    assert view is not None
    return visible_queues(view.queues, p)


def visible_queues(rows: Sequence[Mapping[str, Any]], p: Principal) -> list[QueueOut]:
    """The queues ``p`` may see: all for an admin; for a tenant its own leaf and the queues above it
    (as ``/v1/cluster`` shows a tenant its own use, and the others' only as a total)."""
    if p.tenant is not None:
        by_name = {r["name"]: r for r in rows}
        mine = next((r for r in rows if p.tenant in r["tenants"]), None)
        path = []
        while mine is not None:
            path.append({**mine, "tenants": [p.tenant] if mine["tenants"] else []})
            mine = by_name.get(mine["parent"]) if mine["parent"] is not None else None
        rows = tuple(reversed(path))
    return [QueueOut.model_validate(dict(row)) for row in rows]
