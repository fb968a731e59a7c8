"""Answers of the dashboard's aggregate routes (``/v1/dashboard/...``), as pydantic models for the
OpenAPI document."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = ["LeafOut", "MapJob", "MapNode", "MapOut", "NodeCounts", "PredictionsOut", "SeriesOut", "TenantRow",
           "TenantsOut", "WhoOut"]


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


class TenantsOut(BaseModel):
    quota_enforced: bool
    tenants: list[TenantRow]
    others: TenantRow | None = Field(default=None, description="for a tenant: every other tenant together")


class SeriesOut(BaseModel):
    seq: int = Field(description="the newest sample's seq: pass it as `after` for what comes next")
    samples: list[dict[str, object]]


class PredictionsOut(BaseModel):
    now: float
    predictions: dict[str, dict[str, float | int | str | None]]
