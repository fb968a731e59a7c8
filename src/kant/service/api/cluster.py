"""The cluster now (``GET /v1/cluster``): GAR, SOR, GFR at this instant, the queue, and use per
tenant against quota (a tenant sees its own and the others' total)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path

from kant.service.api.deps import Admin, Svc, Who
from kant.service.auth import Principal
from kant.service.errors import NotFound, Rejected
from kant.service.schemas import ClusterOut, QueueOut, QueuesDoc, TenantUse

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


# --- the tree itself (admins) ---------------------------------------------------------------------------
@router.get("/v1/queues/config", response_model=QueuesDoc)
def queues_config(p: Admin, svc: Svc) -> QueuesDoc:
    """The tree of queues in force as a queues file's JSON (admins), with its source: ``api`` (set
    here, kept in the database), ``file`` (``kant serve --queues FILE``) or None."""
    return QueuesDoc.model_validate(svc.queues.document())


@router.put("/v1/queues/config", response_model=QueuesDoc)
def put_queues_config(body: Annotated[dict[str, Any], Body()], p: Admin, svc: Svc) -> QueuesDoc:
    """Replace the tree of queues (admins): the body is a queues file as JSON (``queues``, optional
    ``fair_share``). Validated as the file is (422 naming the key; guarantees must nest in the
    cluster's GPUs, per GPU type too), applied from the next scheduling cycle, kept in the database
    (it wins over ``--queues FILE`` at the next start)."""
    args = svc.queues.parse(body)
    svc.queues.set(svc.db, svc.leading(), args, "api")
    return QueuesDoc.model_validate(svc.queues.document())


@router.patch("/v1/queues/{name}", response_model=QueuesDoc)
def patch_queue(name: Annotated[str, Path(max_length=64)], body: Annotated[dict[str, Any], Body()], p: Admin,
                svc: Svc) -> QueuesDoc:
    """Change some keys of one queue (admins): ``guaranteed``, ``borrowing_limit``, ``lending_limit``
    (a number, a per-GPU-type mapping, or null to clear), ``weight``, ``tenants``; the rest of the tree
    as it is. Validated and applied as PUT."""
    allowed = ("guaranteed", "borrowing_limit", "lending_limit", "weight", "tenants")
    for key in body:
        if key not in allowed:
            raise Rejected(key, f"not a key a queue's PATCH may set (one of {', '.join(allowed)})")
    doc = svc.queues.document()
    found = _find(doc["queues"], name)
    if found is None:
        raise NotFound(f"no queue {name!r}")
    for key, value in body.items():
        if value is None:
            found.pop(key, None)
        else:
            found[key] = value
    doc.pop("source", None)
    args = svc.queues.parse(doc)
    svc.queues.set(svc.db, svc.leading(), args, "api")
    return QueuesDoc.model_validate(svc.queues.document())


@router.delete("/v1/queues/config", response_model=QueuesDoc)
def delete_queues_config(p: Admin, svc: Svc) -> QueuesDoc:
    """Forget the tree set through the API (admins): back to ``--queues FILE``'s tree, or none."""
    cfg = svc.queues
    cfg.set(svc.db, svc.leading(), cfg.file_args, "file" if cfg.file_args is not None else None)
    return QueuesDoc.model_validate(cfg.document())


def _find(queues: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    for q in queues:
        if q.get("name") == name:
            return q
        found = _find(q.get("children", []), name)
        if found is not None:
            return found
    return None
