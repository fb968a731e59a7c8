"""Accounting (``kant acct``): per job, and GPU-hours, jobs and waits per tenant or user over a window
of the service clock (:mod:`kant.service.accounting`). A tenant sees its own only."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from kant.service import accounting
from kant.service.api.deps import Svc, Who
from kant.service.auth import Principal
from kant.service.db.schema import JOB_STATES
from kant.service.errors import Forbidden, Rejected

__all__ = ["router"]

router = APIRouter(tags=["accounting"])

Time = Annotated[
    float | None,
    Query(
        ge=0,
        le=1e12,
        allow_inf_nan=False,
        description="service clock seconds (GET /v1/clock; a wall clock: POSIX time)",
    ),
]


def _scope(p: Principal, tenant: str | None) -> str | None:
    if p.admin:
        return tenant
    if tenant is not None and tenant != p.tenant:
        raise Forbidden("a tenant sees its own accounting only")
    return p.tenant


def _window(svc: Any, since: float | None, until: float | None) -> accounting.Window:
    if since is not None and until is not None and until <= since:
        raise Rejected("until", f"{until:g} is not after since ({since:g})")
    return accounting.Window(since, until, svc.clock.now())


@router.get("/v1/accounting/jobs", response_model=dict[str, Any])
def accounting_jobs(
    p: Who,
    svc: Svc,
    since: Time = None,
    until: Time = None,
    tenant: Annotated[str | None, Query(max_length=64)] = None,
    user: Annotated[str | None, Query(max_length=128)] = None,
    state: Annotated[list[str] | None, Query()] = None,
) -> dict[str, Any]:
    """Every job active in ``[since, until)`` (like sacct): its times, wait, runs, GPUs, GPU-seconds
    inside the window, exit code and nodes (``columns`` names the fields of each row)."""
    for s in state or ():
        if s not in JOB_STATES:
            raise Rejected("state", f"unknown state {s!r}; states: {', '.join(JOB_STATES)}")
    w = _window(svc, since, until)
    rows = accounting.job_rows(svc.db, w, tenant=_scope(p, tenant), user=user, states=state)
    return {"since": since, "until": until, "now": w.now, "columns": list(accounting.JOB_COLUMNS), "jobs": rows}


@router.get("/v1/accounting/usage", response_model=dict[str, Any])
def accounting_usage(
    p: Who,
    svc: Svc,
    since: Time = None,
    until: Time = None,
    by: Annotated[str, Query(pattern="^(tenant|user)$")] = "tenant",
    tenant: Annotated[str | None, Query(max_length=64)] = None,
) -> dict[str, Any]:
    """GPU-hours, runs, jobs submitted, jobs started with their wait (mean, P50, P90, max) and jobs
    ended by state, per tenant (or per tenant and user with ``by=user``) in ``[since, until)`` (like
    sreport)."""
    w = _window(svc, since, until)
    rows = accounting.usage_rows(svc.db, w, by=by, tenant=_scope(p, tenant))
    return {
        "since": since,
        "until": until,
        "now": w.now,
        "by": by,
        "columns": list(accounting.USAGE_COLUMNS),
        "usage": rows,
    }
