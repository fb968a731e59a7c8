"""Answers of the dashboard's aggregate routes (``/v1/dashboard/...``), as pydantic models for the
OpenAPI document."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = ["LeafOut", "MapJob", "MapNode", "MapOut", "NodeCounts", "PredictionsOut", "QueueOut", "QueueRow",
           "ReasonCount", "SeriesOut", "ServiceRowOut", "ServicesOut", "TenantRow", "TenantsOut", "WhoOut"]


class WhoOut(BaseModel):
    role: str = Field(description="admin or tenant")
    tenant: str | None


class NodeCounts(BaseModel):
    """Nodes by how they are used: ``full``, ``partial`` (some GPUs held, some free: fragmentation),
    ``empty`` (up, nothing held), ``cordoned`` (cordoned, draining or drained) and ``down``."""

    full: int = 0
    partial: int = 0
    empty: int = 0
    cordoned: int = 0
    down: int = 0


class LeafOut(BaseModel):
    leaf: str
    spine: str
    nodes: int
    gpus: int
    used_gpus: int
    counts: NodeCounts
    tenants: dict[str, int] = Field(description="GPUs held per tenant (for a tenant: its own and 'others')")
    kinds: dict[str, int] = Field(description="GPUs held per job kind (training, inference)")


class MapJob(BaseModel):
    id: int | None = Field(description="null for another tenant's job (a tenant's view)")
    tenant: str
    kind: str
    gpus: int


class MapNode(BaseModel):
    name: str
    leaf: str
    spine: str
    gpu_type: str
    gpus: int
    used_gpus: int
    state: str
    jobs: list[MapJob]


class MapOut(BaseModel):
    nodes: int
    gpus: int
    used_gpus: int
    counts: NodeCounts
    detail: bool = Field(description="whether node_rows holds nodes (a small cluster, or one leaf asked for)")
    leaf: str | None = Field(description="the leaf whose nodes are in node_rows, when one was asked for")
    leaves: list[LeafOut]
    node_rows: list[MapNode]
    headline: dict[str, float | int | None] = Field(
        description="GAR, SOR, GFR, GPUs allocated of total_gpus, queue_len, running_jobs and the service "
                    "clock (now) of the same instant as the map")


class TenantRow(BaseModel):
    tenant: str
    guaranteed_gpus: int | None
    max_gpus: int | None
    used_gpus: int
    borrowed_gpus: int = Field(description="max(0, used - guaranteed); guaranteed is 0 when not set (the quota "
                                           "plugin's default)")
    lent_gpus: int = Field(description="idle guarantee that others' borrowing uses, shared out in proportion to "
                                       "the idle guarantees")
    pending_jobs: int
    pending_gpus: int = Field(description="GPUs the tenant's waiting jobs ask for (waiting demand)")
    wait_p90_s: float | None = Field(default=None, description="P90 of how long its waiting jobs have waited so "
                                                               "far (None: none waits)")


class TenantsOut(BaseModel):
    quota_enforced: bool
    total_gpus: int = Field(default=0, description="GPUs of the cluster (a tenant's share is used_gpus over it)")
    tenants: list[TenantRow]
    others: TenantRow | None = Field(default=None, description="for a tenant: every other tenant together")


class SeriesOut(BaseModel):
    seq: int = Field(description="the newest sample's seq: pass it as `after` for what comes next")
    samples: list[dict[str, object]]


class PredictionsOut(BaseModel):
    now: float
    predictions: dict[str, dict[str, float | int | str | None]]


class QueueRow(BaseModel):
    """A pending job in the scheduler's order, with why it waits and the twin's predicted start."""

    id: int
    name: str
    tenant: str
    position: int = Field(description="jobs before it in the scheduler's order (0: first)")
    workers: int
    gpus_per_worker: int
    gpu_milli: int
    gpus: int
    submit_time: float
    reason: str = Field(description="why it waits, as `kant why` says it")
    head: bool = Field(description="first in the scheduler's order")
    p10: float | None = Field(default=None, description="predicted start, service clock (the twin's P10)")
    p50: float | None = None
    p90: float | None = None
    as_of: float | None = Field(default=None, description="service time of the twin's run that predicted it")
    runs: int | None = None
    covers: str | None = Field(default=None, description="what the band covers, as `kant why`'s prediction says "
                                                         "(kant.twin.predict.covers)")


class ReasonCount(BaseModel):
    reason: str = Field(description="a reason with its numbers written N (like reasons count together)")
    jobs: int


class QueueOut(BaseModel):
    now: float
    clock: str
    queue_len: int = Field(description="pending jobs in the scheduler's queue (all tenants)")
    matching: int = Field(description="of them, those the caller sees (and the tenant asked for)")
    head: int | None = Field(description="the first job of the queue (a tenant: only when it is its own)")
    behind_head: int = Field(description="jobs the last cycle did not reach because it stopped at the head")
    reasons: list[ReasonCount] = Field(description="the matching jobs' reasons, most frequent first")
    rows: list[QueueRow]


class ServiceRowOut(BaseModel):
    """One inference service as the dashboard's Services panel shows it."""

    id: int
    tenant: str
    name: str
    state: str = Field(description="active or degraded (degraded_reason says why)")
    degraded_reason: str | None
    ready_replicas: int = Field(description="replicas whose readiness path answers 2xx")
    starting_replicas: int
    target_replicas: int = Field(description="the replica count kant keeps (the autoscaler's or a user's)")
    min_replicas: int
    max_replicas: int
    gpus_per_replica: int
    autoscaled: bool
    arrival_rate: float = Field(description="requests per second through the route over the window")
    inflight: int
    response_p50_ms: float | None
    response_p99_ms: float | None
    slo_ms: float | None
    slo_attainment: float | None = Field(description="share of the window's requests answered 2xx within the SLO")
    slo_attainment_total: float | None
    total_requests: int
    headroom_gpus: int = Field(description="max_replicas x gpus_per_replica less target_replicas x gpus_per_replica")
    lent_gpus: int = Field(description="GPUs of this service's headroom that training holds now (docs/dashboard.md)")
    reclaims: int
    reclaim_p50_s: float | None
    reclaim_p99_s: float | None


class ServicesOut(BaseModel):
    window_s: float
    total_gpus: int
    training_gpus: int = Field(description="GPUs training jobs hold now")
    training_share_gpus: int = Field(description="total GPUs less every service at max_replicas")
    loaned_gpus: int = Field(description="max(0, training_gpus - training_share_gpus): GPUs lent to training")
    services: list[ServiceRowOut] = Field(description="the services the caller may see")
