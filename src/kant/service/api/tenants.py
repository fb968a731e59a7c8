"""Tenants and tokens: every tenant with its quota and use (a tenant: its own), and, for admins,
create a tenant, set its quota, make a tenant's or an admin's token (shown once), list and revoke
tokens."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query

from kant.service import queries
from kant.service.api.deps import Admin, Id, Svc, Who
from kant.service.errors import NotFound, Rejected
from kant.service.schemas import TenantIn, TenantOut, TenantPatch, TokenCreated, TokenIn, TokenOut
from kant.service.server import Service

__all__ = ["router"]

router = APIRouter(tags=["tenants"])


def tenant_out(svc: Service, name: str) -> TenantOut:
    """The tenant with its quota, the GPUs it runs on and the jobs it has waiting."""
    row = svc.db.tenants.get(name)
    if row is None:
        raise NotFound(f"no tenant {name!r}")
    view = queries.live_view(svc.loop)
    running = view.running_gpus_by_tenant.get(name, 0) if view else 0
    pending = view.pending_by_tenant.get(name, 0) if view else 0
    return TenantOut.of(row, svc.quota_enforced, running, pending)


@router.get("/v1/tenants", response_model=list[TenantOut])
def list_tenants(p: Who, svc: Svc) -> list[TenantOut]:
    """Every tenant (admins) or one's own, with quota and use."""
    names = [t.name for t in svc.db.tenants.list()] if p.admin else [p.tenant]
    return [tenant_out(svc, n) for n in names if n is not None]


@router.get("/v1/tenants/{name}", response_model=TenantOut)
def get_tenant(name: str, p: Who, svc: Svc) -> TenantOut:
    if not p.sees(name):
        raise NotFound(f"no tenant {name!r}")
    return tenant_out(svc, name)


@router.post("/v1/tenants", status_code=201, response_model=TenantOut)
def create_tenant(body: TenantIn, p: Admin, svc: Svc) -> TenantOut:
    if body.guaranteed_gpus is not None and body.max_gpus is not None and body.max_gpus < body.guaranteed_gpus:
        raise Rejected("", "max_gpus is below guaranteed_gpus")
    _check_limits(body.default_time_limit_s, body.max_time_limit_s)
    svc.db.tenants.create(body.name, guaranteed_gpus=body.guaranteed_gpus, max_gpus=body.max_gpus,
                          default_time_limit_s=body.default_time_limit_s, max_time_limit_s=body.max_time_limit_s)
    svc.tenants.changed()
    return tenant_out(svc, body.name)


@router.patch("/v1/tenants/{name}", response_model=TenantOut)
def update_tenant(name: str, body: TenantPatch, p: Admin, svc: Svc) -> TenantOut:
    """Set a tenant's quota (the fields given; null clears one). The scheduler applies it at once."""
    row = svc.db.tenants.get(name)
    if row is None:
        raise NotFound(f"no tenant {name!r}")
    fields = body.model_dump(exclude_unset=True)
    g = fields.get("guaranteed_gpus", row.guaranteed_gpus)
    m = fields.get("max_gpus", row.max_gpus)
    if g is not None and m is not None and m < g:
        raise Rejected("", "max_gpus is below guaranteed_gpus")
    d = fields.get("default_time_limit_s", row.default_time_limit_s)
    x = fields.get("max_time_limit_s", row.max_time_limit_s)
    _check_limits(d, x)
    svc.db.tenants.update(name, guaranteed_gpus=g, max_gpus=m, default_time_limit_s=d, max_time_limit_s=x)
    svc.tenants.changed()
    return tenant_out(svc, name)


def _check_limits(default: float | None, maximum: float | None) -> None:
    if default is not None and maximum is not None and default > maximum:
        raise Rejected("default_time_limit_s", "the default time limit is above the maximum time limit")


@router.post("/v1/tenants/{name}/tokens", status_code=201, response_model=TokenCreated)
def create_token(name: str, body: TokenIn, p: Admin, svc: Svc) -> TokenCreated:
    """A new token for the tenant; the answer holds the token itself, this once."""
    if svc.db.tenants.get(name) is None:
        raise NotFound(f"no tenant {name!r}")
    expires = time.time() + body.ttl_s if body.ttl_s is not None else None
    token, row = svc.db.tokens.create(role="tenant", tenant=name, name=body.name, expires_wall=expires)
    return TokenCreated(**TokenOut.of(row).model_dump(), token=token)


@router.post("/v1/tokens", status_code=201, response_model=TokenCreated)
def create_admin_token(body: TokenIn, p: Admin, svc: Svc) -> TokenCreated:
    """A new admin token."""
    expires = time.time() + body.ttl_s if body.ttl_s is not None else None
    token, row = svc.db.tokens.create(role="admin", name=body.name, expires_wall=expires)
    return TokenCreated(**TokenOut.of(row).model_dump(), token=token)


@router.get("/v1/tokens", response_model=list[TokenOut])
def list_tokens(p: Admin, svc: Svc, tenant: Annotated[str | None, Query(max_length=64)] = None) -> list[TokenOut]:
    return [TokenOut.of(t) for t in svc.db.tokens.list(tenant)]


@router.delete("/v1/tokens/{token_id}", response_model=dict[str, Any])
def revoke_token(token_id: Id, p: Admin, svc: Svc) -> dict[str, Any]:
    """Revoke a token (it stops working at once)."""
    if not svc.db.tokens.revoke(token_id, time.time()):
        raise NotFound(f"no active token {token_id}")
    return {"id": token_id, "revoked": True}
