"""The dashboard's Services panel (``GET /v1/dashboard/services``, docs/dashboard.md): each
inference service the caller may see, with its replicas (:meth:`ServingRoom.stats`), its traffic
over a window (:meth:`Traffic.stats`) and the GPUs it lends to training now.

GPUs lent follow the simulator's rule (:func:`kant.inference.unified.loaned_gpus`): training owns
the cluster less every service at ``max_replicas`` (:func:`~kant.inference.unified.training_share`);
what training holds above that is lent from the services' headroom, shared out over the services in
proportion to their headroom (:func:`~kant.inference.unified.share_loan`). The sums are taken over
every active service, whoever asks, so a tenant sees the same figure for its service as an admin.
"""

from __future__ import annotations

from kant.inference.unified import loaned_gpus, share_loan, training_share
from kant.service.auth import Principal
from kant.service.dashboard.layout import Layout
from kant.service.dashboard.models import ServiceRowOut, ServicesOut
from kant.service.server import Service

__all__ = ["service_rows"]


def service_rows(svc: Service, layout: Layout, p: Principal, window_s: float) -> ServicesOut:
    """The panel's rows for ``p``, from the services table, the replicas' and the route's stats."""
    loop = svc.loop
    assert loop is not None  # (the layout was taken from it)
    rows = [r for r in svc.db.services.list() if r.state == "active"]
    total = sum(lf.gpus for lf in layout.leaves.values())
    training = sum(lf.kinds.get("training", 0) for lf in layout.leaves.values())
    share = training_share(total, [(r.max_replicas, r.gpus_per_replica) for r in rows])
    loaned = int(loaned_gpus(training, share))
    headroom = {r.id: max(0, (r.max_replicas - r.replicas) * r.gpus_per_replica) for r in rows}
    lent = share_loan(loaned, headroom)
    out = []
    for r in rows:
        if not p.sees(r.tenant):
            continue
        rep = loop.serving.stats(r.id)
        t = svc.traffic.stats(r.id, window_s)
        out.append(ServiceRowOut(
            id=r.id, tenant=r.tenant, name=r.name, state=r.shown_state, degraded_reason=r.degraded,
            ready_replicas=rep["ready_replicas"], starting_replicas=rep["starting_replicas"],
            target_replicas=r.replicas, min_replicas=r.min_replicas, max_replicas=r.max_replicas,
            gpus_per_replica=r.gpus_per_replica, autoscaled=r.autoscaler is not None, arrival_rate=t.arrival_rate,
            inflight=t.inflight, response_p50_ms=t.response_p50_ms, response_p99_ms=t.response_p99_ms,
            slo_ms=r.slo_ms, slo_attainment=t.slo_attainment, slo_attainment_total=t.slo_attainment_total,
            total_requests=t.total_requests, headroom_gpus=headroom[r.id], lent_gpus=lent[r.id],
            reclaims=rep["reclaims"], reclaim_p50_s=rep["reclaim_p50_s"], reclaim_p99_s=rep["reclaim_p99_s"]))
    return ServicesOut(window_s=window_s, total_gpus=total, training_gpus=training, training_share_gpus=int(share),
                       loaned_gpus=loaned, services=out)
