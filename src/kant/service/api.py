"""The REST API of ``kant serve`` (FastAPI): jobs, inference services, nodes, tenants and tokens, the
cluster now, an event stream, the clock, health and Prometheus metrics. The OpenAPI document is at
``/openapi.json`` (and browsable at ``/docs``); docs/service.md describes every route.

Every route under ``/v1`` and ``/metrics`` needs a bearer token (:mod:`kant.service.auth`). A tenant
sees its own jobs and services only (others' are 404) and totals of other tenants; nodes, tenants,
quotas, tokens and the clock are changed by admins only. Writes go to the database first (a submit
is answered after its commit) and reach the scheduler through the loop's inbox; a standby service
(not the leader) answers them 503 and says where the leader is.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import Depends, FastAPI, Header, HTTPException, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kant.errors import KantError
from kant.model.cluster import NodeSpec
from kant.service.auth import Principal, bearer
from kant.service.db.jobs import NewJob
from kant.service.db.schema import JOB_STATES
from kant.service.errors import Conflict, DatabaseError, Fenced, Invalid, NotFound
from kant.service.loop import ServiceLoop
from kant.service.metrics import CONTENT_TYPE
from kant.service.schemas import (
    BatchOut,
    ClockIn,
    ClockOut,
    ClusterOut,
    EventOut,
    JobBatch,
    JobDetail,
    JobOut,
    JobPage,
    JobSubmit,
    LogsOut,
    NodeAction,
    NodeIn,
    NodeOut,
    ScaleIn,
    ServiceIn,
    ServiceOut,
    SubmitOut,
    TenantIn,
    TenantOut,
    TenantPatch,
    TenantUse,
    TokenCreated,
    TokenIn,
    TokenOut,
    WhatIfIn,
    WhyOut,
)

if TYPE_CHECKING:
    from kant.service.server import Service

__all__ = ["create_app"]

log = logging.getLogger("kant.serve")

NODE_OPS = ("cordon", "uncordon", "drain", "fail", "repair")


class _BodyLimit:
    """Refuse request bodies over ``limit`` bytes (413), declared or streamed."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                declared = value
                break
        if declared is not None:  # the HTTP server holds the body to its declared length
            try:
                too_big = int(declared) > self.limit
            except ValueError:
                too_big = True
            if too_big:
                await _plain(send, 413, f"request body over {self.limit} bytes")
            else:
                await self.app(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge
            return msg

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await _plain(send, 413, f"request body over {self.limit} bytes")


class _TooLarge(Exception):
    pass


async def _plain(send: Send, status: int, detail: str) -> None:
    body = json.dumps(_error(detail)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _principal(request: Request,
                     creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> Principal:
    # async: a sync dependency would cost a thread-pool hop per request (a cached token needs no I/O;
    # a miss, once per token per 2 s, is one indexed query)
    svc: Service = request.app.state.svc
    return svc.auth.principal(request, creds)


async def _admin(request: Request, p: Annotated[Principal, Depends(_principal)]) -> Principal:
    svc: Service = request.app.state.svc
    svc.auth.require_admin(p)
    return p


#: the caller (any valid token) and an admin caller, as route parameters
Who = Annotated[Principal, Depends(_principal)]
Admin = Annotated[Principal, Depends(_admin)]
#: the largest id a database holds (a 64-bit integer): a larger one in a path is a 422, not a driver error
MAX_ID = 2**63 - 1
#: a job, service or token id in a route's path
Id = Annotated[int, Path(ge=0, le=MAX_ID)]


def _error(detail: str) -> dict[str, str]:
    """Every error body: ``detail`` and a one-line ``message`` (a validation error's detail is the
    list of failures; its message names the first one's field)."""
    return {"detail": detail, "message": detail}


def _without_otel_hooks() -> dict[str, Any]:
    """FastAPI 0.16x looks for OpenTelemetry providers on every request (environment lookups); kant
    serves its own Prometheus metrics, so those hooks are off where FastAPI has the option."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}}


def create_app(svc: Service) -> FastAPI:
    app = FastAPI(
        **_without_otel_hooks(),
        title="kant",
        version=svc.version,
        description="The live kant scheduler: jobs (gangs), inference services, nodes, tenants, the cluster now.",
        openapi_tags=[{"name": n} for n in ("jobs", "services", "nodes", "tenants", "cluster", "events", "health")],
    )
    app.add_middleware(_BodyLimit, limit=svc.config.max_body)
    app.state.svc = svc

    def leader() -> ServiceLoop:
        loop = svc.loop
        if loop is None or not loop.alive:
            where = svc.leader_url()
            raise HTTPException(503, "this service is a standby, not the leader" + (f"; the leader is {where}"
                                                                                     if where else ""),
                                headers={"Retry-After": "1", **({"X-Kant-Leader": where} if where else {})})
        return loop

    # --- errors ---------------------------------------------------------------------------------
    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return JSONResponse(_error(detail), status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(NotFound)
    async def _not_found(request: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse(_error(str(exc)), status_code=404)

    @app.exception_handler(Conflict)
    async def _conflict(request: Request, exc: Conflict) -> JSONResponse:
        return JSONResponse(_error(str(exc)), status_code=409)

    @app.exception_handler(Invalid)
    async def _invalid(request: Request, exc: Invalid) -> JSONResponse:
        return JSONResponse(_error(str(exc)), status_code=409)

    @app.exception_handler(Fenced)
    async def _fenced(request: Request, exc: Fenced) -> JSONResponse:
        return JSONResponse(_error("this service lost the leadership"), status_code=503)

    @app.exception_handler(DatabaseError)
    async def _db_error(request: Request, exc: DatabaseError) -> JSONResponse:
        return JSONResponse(_error(f"database unavailable: {exc}"), status_code=503,
                            headers={"Retry-After": "1"})

    @app.exception_handler(KantError)
    async def _kant_error(request: Request, exc: KantError) -> JSONResponse:
        return JSONResponse(_error(str(exc)), status_code=503 if "not the leader" in str(exc) else 400)

    @app.exception_handler(TimeoutError)
    async def _timeout(request: Request, exc: TimeoutError) -> JSONResponse:
        return JSONResponse(_error("the scheduler did not answer in time"), status_code=504)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
                  for e in exc.errors()]
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        # a key the client sent may hold a line break: such parts are quoted, the message stays one line
        where = ".".join(p if isinstance(p, str) and p.isprintable() else str(p) if isinstance(p, int) else repr(p)
                         for p in first["loc"])
        msg = " ".join(str(first["msg"]).splitlines())
        return JSONResponse({"detail": errors, "message": f"{where}: {msg}"}, status_code=422)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:  # pragma: no cover - a bug
        log.error("internal error on %s %s: %s", request.method, request.url.path, type(exc).__name__, exc_info=exc)
        return JSONResponse(_error("internal error"), status_code=500)

    # --- health and metrics -----------------------------------------------------------------------
    @app.get("/healthz", tags=["health"], response_model=dict[str, str])
    def healthz() -> dict[str, str]:
        """The process answers (no token needed)."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], response_model=dict[str, Any],
             responses={503: {"description": "standby or not ready"}})
    def readyz(response: Response) -> dict[str, Any]:
        """Ready to schedule: this service is the leader and its loop runs (no token needed)."""
        loop = svc.loop
        ready = loop is not None and loop.alive
        if not ready:
            response.status_code = 503
        return {"ready": ready, "role": "leader" if ready else "standby", "leader": svc.leader_url()}

    @app.get("/metrics", tags=["health"], response_class=Response,
             responses={200: {"content": {CONTENT_TYPE: {}}}})
    def metrics(p: Admin) -> Response:
        """Prometheus text format (an admin token)."""
        return Response(svc.metrics.render(), media_type=CONTENT_TYPE)

    # --- jobs ----------------------------------------------------------------------------------
    def new_job(body: JobSubmit, p: Principal, key: str | None) -> NewJob:
        if p.admin:
            if body.tenant is None:
                raise HTTPException(422, "an admin's submit names the tenant (field 'tenant')")
            tenant = body.tenant
            if not svc.tenant_exists(tenant):
                raise HTTPException(422, f"no tenant {tenant!r}")
        else:
            if body.tenant is not None and body.tenant != p.tenant:
                raise HTTPException(403, "a tenant token submits jobs for its own tenant only")
            assert p.tenant is not None
            tenant = p.tenant
        svc.check_request(body)
        return body.to_new_job(tenant, key)

    @app.post("/v1/jobs", tags=["jobs"], status_code=201, response_model=SubmitOut,
              responses={200: {"model": SubmitOut, "description": "the same idempotency key was submitted before"}})
    async def submit_job(body: JobSubmit, p: Who, response: Response,
                         idempotency_key: Annotated[str | None, Header(max_length=128)] = None) -> SubmitOut:
        """Submit one gang. Answered once the job is committed to the database."""
        leader()
        job = new_job(body, p, idempotency_key)
        ((job_id, created),) = await svc.writer.submit([job])
        if not created:
            response.status_code = 200
        return SubmitOut(id=job_id, created=created)

    @app.post("/v1/jobs/batch", tags=["jobs"], status_code=201, response_model=BatchOut)
    async def submit_jobs(body: JobBatch, p: Who) -> BatchOut:
        """Submit up to 1,000 jobs in one request (one commit; each may carry its idempotency key)."""
        leader()
        jobs = [new_job(j, p, None) for j in body.jobs]
        results = await svc.writer.submit(jobs)
        return BatchOut(jobs=[SubmitOut(id=i, created=c) for i, c in results])

    def visible_job(job_id: int, p: Principal) -> Any:
        row = svc.db.jobs.get(job_id)
        if row is None or (not p.admin and row.tenant != p.tenant):
            raise NotFound(f"no job {job_id}")
        return row

    @app.get("/v1/jobs", tags=["jobs"], response_model=JobPage)
    def list_jobs(p: Who, state: Annotated[list[str] | None, Query()] = None,
                  tenant: Annotated[str | None, Query(max_length=64)] = None,
                  after: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
                  limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                  order: Annotated[str, Query(pattern="^(asc|desc)$")] = "asc") -> JobPage:
        """Jobs, oldest first (or newest with order=desc), filtered by state and (admins) tenant; pages by
        id: pass the answer's `next` as `after`."""
        for s in state or ():
            if s not in JOB_STATES:
                raise HTTPException(422, f"unknown state {s!r}; states: {', '.join(JOB_STATES)}")
        if not p.admin:
            if tenant is not None and tenant != p.tenant:
                raise HTTPException(403, "a tenant lists its own jobs only")
            tenant = p.tenant
        rows = svc.db.jobs.list(tenant=tenant, states=state, after_id=after, limit=limit + 1,
                                descending=order == "desc")
        more = len(rows) > limit
        rows = rows[:limit]
        reasons = svc.pending_reasons([r.id for r in rows if r.state == "pending"])
        return JobPage(items=[JobOut.of(r, reasons.get(r.id)) for r in rows], next=rows[-1].id if more else None)

    @app.get("/v1/jobs/{job_id}", tags=["jobs"], response_model=JobDetail)
    def get_job(job_id: Id, p: Who) -> JobDetail:
        """One job with its events and, while it waits, why."""
        row = visible_job(job_id, p)
        why = svc.why(job_id) if row.state == "pending" else None
        out = JobOut.of(row, why.reason if why is not None else None)
        events = [EventOut.of(e) for e in svc.db.events.of_job(job_id)]
        return JobDetail(**out.model_dump(), events=events, why=why)

    @app.get("/v1/jobs/{job_id}/why", tags=["jobs"], response_model=WhyOut)
    def why_job(job_id: Id, p: Who) -> WhyOut:
        """Why a job waits (the plugin's reason) and how many jobs are ahead of it."""
        row = visible_job(job_id, p)
        if row.state == "pending":
            why = svc.why(job_id)
            if why is not None:
                return why
        return WhyOut(id=job_id, state=row.state, reason=row.reason or row.state)

    @app.get("/v1/jobs/{job_id}/logs", tags=["jobs"], response_model=LogsOut)
    def job_logs(job_id: Id, p: Who, worker: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
                 run: Annotated[int | None, Query(ge=1, le=1_000_000_000)] = None,
                 offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
                 limit: Annotated[int, Query(ge=1, le=1 << 20)] = 1 << 20) -> LogsOut:
        """Output (stdout and stderr) of one worker of a job from byte `offset` (the latest run unless
        `run`); a follower passes the answer's `next_offset` until `complete`."""
        row = visible_job(job_id, p)
        chunk = leader().executor.read_logs(job_id, worker, run=run, offset=offset, limit=limit)
        ended = row.state not in ("pending", "running")
        if chunk is None:
            return LogsOut(id=job_id, run=0, worker=worker, workers=0, offset=0, next_offset=0, size=0, text="",
                           complete=ended, kept=False)
        return LogsOut(id=job_id, run=chunk.run, worker=worker, workers=chunk.workers, offset=chunk.offset,
                       next_offset=chunk.next_offset, size=chunk.size, text=chunk.text,
                       complete=ended and chunk.next_offset >= chunk.size, kept=True)

    @app.post("/v1/jobs/{job_id}/cancel", tags=["jobs"], response_model=JobOut)
    def cancel_job(job_id: Id, p: Who) -> JobOut:
        """Cancel a pending or running job (every worker stops)."""
        row = visible_job(job_id, p)
        if row.state not in ("pending", "running"):
            raise Invalid(f"job {job_id} is {row.state}: only pending or running jobs can be cancelled")
        leader().cancel(job_id, p.scope(), p.who)
        return JobOut.of(svc.db.jobs.get(job_id))  # type: ignore[arg-type]

    # --- inference services ----------------------------------------------------------------------
    def visible_service(service_id: int, p: Principal) -> Any:
        row = svc.db.services.get(service_id)
        if row is None or (not p.admin and row.tenant != p.tenant):
            raise NotFound(f"no service {service_id}")
        return row

    @app.post("/v1/services", tags=["services"], status_code=201, response_model=ServiceOut)
    def create_service(body: ServiceIn, p: Who) -> ServiceOut:
        """An inference service: ``replicas`` long-running replicas of ``gpus_per_replica`` GPUs."""
        loop = leader()
        tenant = body.tenant if p.admin else p.tenant
        if tenant is None:
            raise HTTPException(422, "an admin's service names the tenant (field 'tenant')")
        if not p.admin and body.tenant not in (None, p.tenant):
            raise HTTPException(403, "a tenant token creates services for its own tenant only")
        if not svc.tenant_exists(tenant):
            raise HTTPException(422, f"no tenant {tenant!r}")
        if not body.min_replicas <= body.replicas <= body.max_replicas:
            raise HTTPException(422, "need min_replicas <= replicas <= max_replicas")
        svc.check_request(JobSubmit(gpus_per_worker=body.gpus_per_replica, gpu_type=body.gpu_type))
        row = svc.db.services.create(tenant=tenant, name=body.name, gpus_per_replica=body.gpus_per_replica,
                                    gpu_type=body.gpu_type, priority=body.priority, replicas=0,
                                    min_replicas=body.min_replicas, max_replicas=body.max_replicas)
        loop.scale(row.id, body.replicas)
        return ServiceOut.of(svc.db.services.get(row.id))  # type: ignore[arg-type]

    @app.get("/v1/services", tags=["services"], response_model=list[ServiceOut])
    def list_services(p: Who) -> list[ServiceOut]:
        return [ServiceOut.of(r) for r in svc.db.services.list(p.scope())]

    @app.get("/v1/services/{service_id}", tags=["services"], response_model=ServiceOut)
    def get_service(service_id: Id, p: Who) -> ServiceOut:
        return ServiceOut.of(visible_service(service_id, p))

    @app.post("/v1/services/{service_id}/scale", tags=["services"], response_model=ServiceOut)
    def scale_service(service_id: Id, body: ScaleIn, p: Who) -> ServiceOut:
        """Set the number of replicas (within min and max): new replicas queue, extra ones stop."""
        row = visible_service(service_id, p)
        if not row.min_replicas <= body.replicas <= row.max_replicas:
            raise HTTPException(422, f"replicas must be within [{row.min_replicas}, {row.max_replicas}]")
        leader().scale(service_id, body.replicas)
        return ServiceOut.of(svc.db.services.get(service_id))  # type: ignore[arg-type]

    @app.delete("/v1/services/{service_id}", tags=["services"], response_model=ServiceOut)
    def delete_service(service_id: Id, p: Who) -> ServiceOut:
        """Stop every replica and retire the service."""
        visible_service(service_id, p)
        leader().scale(service_id, 0)
        svc.db.services.update(service_id, state="deleted")
        return ServiceOut.of(svc.db.services.get(service_id))  # type: ignore[arg-type]

    # --- nodes ---------------------------------------------------------------------------------
    @app.get("/v1/nodes", tags=["nodes"], response_model=list[NodeOut])
    def list_nodes(p: Who) -> list[NodeOut]:
        """Every node with its state and GPUs in use."""
        loop = svc.loop
        if loop is not None and loop.alive:
            views = loop.call(lambda lp: lp.node_views())
            reasons = {n.name: n.reason for n in svc.db.nodes.list()}
            return [NodeOut(name=v.name, gpu_type=v.gpu_type, gpus=v.gpus, used_gpus=v.used_gpus, state=v.state,
                            reason=reasons.get(v.name), leaf=v.leaf, spine=v.spine, cpu_milli=v.cpu_milli,
                            memory_mib=v.memory_mib) for v in views]
        return [NodeOut.of_row(r) for r in svc.db.nodes.list() if r.state != "removed"]

    @app.get("/v1/nodes/{name}", tags=["nodes"], response_model=NodeOut)
    def get_node(name: str, p: Who) -> NodeOut:
        for node in list_nodes(p):
            if node.name == name:
                return node
        raise NotFound(f"no node {name!r}")

    @app.post("/v1/nodes", tags=["nodes"], status_code=201, response_model=NodeOut)
    def add_node(body: NodeIn, p: Admin) -> NodeOut:
        """Register a node (the scheduler is rebuilt on the new inventory; running jobs stay)."""
        leader().add_node(NodeSpec(body.name, body.gpu_type, body.gpus, body.cpu_milli, body.memory_mib, body.leaf,
                                   body.spine))
        return get_node(body.name, p)

    @app.post("/v1/nodes/{name}/{op}", tags=["nodes"], response_model=NodeOut)
    def node_op(name: str, op: str, p: Admin, body: NodeAction | None = None) -> NodeOut:
        """cordon (no new work), drain (cordon; 'drained' once empty), uncordon, fail (its jobs go back to
        the queue) or repair (up and uncordoned)."""
        if op not in NODE_OPS:
            raise NotFound(f"no node operation {op!r}; operations: {', '.join(NODE_OPS)}")
        leader().node_op(name, op, reason=body.reason if body else None)
        return get_node(name, p)

    @app.delete("/v1/nodes/{name}", tags=["nodes"], response_model=dict[str, str])
    def remove_node(name: str, p: Admin, force: bool = False) -> dict[str, str]:
        """Remove a node: it must run nothing (drain it first) unless force, which requeues its jobs."""
        leader().node_op(name, "remove", force=force)
        return {"name": name, "state": "removed"}

    # --- tenants and tokens ----------------------------------------------------------------------
    def tenant_out(name: str) -> TenantOut:
        row = svc.db.tenants.get(name)
        if row is None:
            raise NotFound(f"no tenant {name!r}")
        view = svc.view()
        running = view.running_gpus_by_tenant.get(name, 0) if view else 0
        pending = view.pending_by_tenant.get(name, 0) if view else 0
        return TenantOut.of(row, svc.quota_enforced, running, pending)

    @app.get("/v1/tenants", tags=["tenants"], response_model=list[TenantOut])
    def list_tenants(p: Who) -> list[TenantOut]:
        """Every tenant (admins) or one's own, with quota and use."""
        names = [t.name for t in svc.db.tenants.list()] if p.admin else [p.tenant]
        return [tenant_out(n) for n in names if n is not None]

    @app.get("/v1/tenants/{name}", tags=["tenants"], response_model=TenantOut)
    def get_tenant(name: str, p: Who) -> TenantOut:
        if not p.admin and name != p.tenant:
            raise NotFound(f"no tenant {name!r}")
        return tenant_out(name)

    @app.post("/v1/tenants", tags=["tenants"], status_code=201, response_model=TenantOut)
    def create_tenant(body: TenantIn, p: Admin) -> TenantOut:
        if body.guaranteed_gpus is not None and body.max_gpus is not None and body.max_gpus < body.guaranteed_gpus:
            raise HTTPException(422, "max_gpus is below guaranteed_gpus")
        svc.db.tenants.create(body.name, guaranteed_gpus=body.guaranteed_gpus, max_gpus=body.max_gpus)
        svc.tenants_changed()
        return tenant_out(body.name)

    @app.patch("/v1/tenants/{name}", tags=["tenants"], response_model=TenantOut)
    def update_tenant(name: str, body: TenantPatch, p: Admin) -> TenantOut:
        """Set a tenant's quota (the fields given; null clears one). The scheduler applies it at once."""
        row = svc.db.tenants.get(name)
        if row is None:
            raise NotFound(f"no tenant {name!r}")
        fields = body.model_dump(exclude_unset=True)
        g = fields.get("guaranteed_gpus", row.guaranteed_gpus)
        m = fields.get("max_gpus", row.max_gpus)
        if g is not None and m is not None and m < g:
            raise HTTPException(422, "max_gpus is below guaranteed_gpus")
        svc.db.tenants.update(name, guaranteed_gpus=g, max_gpus=m)
        svc.tenants_changed()
        return tenant_out(name)

    @app.post("/v1/tenants/{name}/tokens", tags=["tenants"], status_code=201, response_model=TokenCreated)
    def create_token(name: str, body: TokenIn, p: Admin) -> TokenCreated:
        """A new token for the tenant; the answer holds the token itself, this once."""
        if svc.db.tenants.get(name) is None:
            raise NotFound(f"no tenant {name!r}")
        expires = time.time() + body.ttl_s if body.ttl_s is not None else None
        token, row = svc.db.tokens.create(role="tenant", tenant=name, name=body.name, expires_wall=expires)
        return TokenCreated(**TokenOut.of(row).model_dump(), token=token)

    @app.post("/v1/tokens", tags=["tenants"], status_code=201, response_model=TokenCreated)
    def create_admin_token(body: TokenIn, p: Admin) -> TokenCreated:
        """A new admin token."""
        expires = time.time() + body.ttl_s if body.ttl_s is not None else None
        token, row = svc.db.tokens.create(role="admin", name=body.name, expires_wall=expires)
        return TokenCreated(**TokenOut.of(row).model_dump(), token=token)

    @app.get("/v1/tokens", tags=["tenants"], response_model=list[TokenOut])
    def list_tokens(p: Admin, tenant: Annotated[str | None, Query(max_length=64)] = None) -> list[TokenOut]:
        return [TokenOut.of(t) for t in svc.db.tokens.list(tenant)]

    @app.delete("/v1/tokens/{token_id}", tags=["tenants"], response_model=dict[str, Any])
    def revoke_token(token_id: Id, p: Admin) -> dict[str, Any]:
        """Revoke a token (it stops working at once)."""
        if not svc.db.tokens.revoke(token_id, time.time()):
            raise NotFound(f"no active token {token_id}")
        return {"id": token_id, "revoked": True}

    # --- the cluster, events, clock --------------------------------------------------------------
    @app.get("/v1/cluster", tags=["cluster"], response_model=ClusterOut)
    def cluster(p: Who) -> ClusterOut:
        """The cluster now: GAR, SOR, GFR (docs/metrics.md at one instant), the queue, and use per
        tenant against quota (a tenant sees its own and the others' total)."""
        leader()
        view = svc.view()
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
                          gar=view.gar,
                          sor=view.sor, gfr_nodes=view.gfr_nodes, gfr_gpus=view.gfr_gpus, queue_len=view.queue_len,
                          pending_gpus=view.pending_gpus, running_jobs=view.running_jobs, cycles=view.cycles,
                          tenants=tenants, others=others)

    @app.post("/v1/whatif", tags=["cluster"], response_model=None,
              responses={200: {"content": {"application/json": {}, "text/html": {}}}})
    def whatif(body: WhatIfIn, p: Who,
               format: Annotated[Literal["json", "html"], Query()] = "json") -> dict[str, Any] | HTMLResponse:
        """Run the cluster as it is now, and under each scenario (another policy, more nodes, nodes
        drained, tenants' quotas), forward for ``horizon_h`` hours in the digital twin: GAR, GFR, the
        predicted waits of the jobs pending now and each one's predicted start, side by side
        (docs/whatif.md). A tenant sees its own jobs' predictions; the HTML page (all jobs) is for
        admins. Each request has a budget of simulation time (``kant serve --whatif-budget``): an
        answer cut short has ``runs`` below ``runs_asked`` and says why in ``cut``; one that cannot
        finish a run of each scenario is 422. One request per tenant (or admin token) at a time, a few
        in all (``--whatif-queue``): more is 429 with ``Retry-After``."""
        leader()
        if format == "html" and not p.admin:
            raise HTTPException(403, "the what-if page lists every tenant's jobs: admins only (a tenant gets JSON)")
        who = f"tenant {p.tenant}" if not p.admin else f"admin token {p.token_id}"
        out = svc.whatif(body, html=format == "html", who=who)
        if format == "html":
            return HTMLResponse(out["html"])
        if not p.admin:
            for sc in out["scenarios"]:
                sc["jobs"] = [j for j in sc["jobs"] if j["tenant"] == p.tenant]
        return out

    @app.get("/v1/snapshot", tags=["cluster"], response_model=dict[str, Any])
    def snapshot(p: Admin) -> dict[str, Any]:
        """The live state as a digital-twin snapshot (docs/whatif.md): save it and run what-ifs on it
        offline with ``kant whatif --snapshot FILE``."""
        leader()
        snap = svc.twin_snapshot()
        if snap is None:
            raise HTTPException(503, "this service is not the leader")
        return snap.to_dict()

    @app.get("/v1/events", tags=["events"], response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}}}})
    async def events(p: Who, last_event_id: Annotated[int | None, Header(ge=0, le=MAX_ID)] = None,
                     ) -> StreamingResponse:
        """Server-sent events: every job and node event (a tenant: its own jobs'), from the last id
        the client saw (``Last-Event-ID``) on."""
        assert svc.hub is not None
        return StreamingResponse(svc.hub.stream(p.scope(), last_event_id), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.get("/v1/clock", tags=["cluster"], response_model=ClockOut)
    def get_clock(p: Who) -> ClockOut:
        return ClockOut(now=svc.clock.now(), kind=svc.config.clock)

    @app.post("/v1/clock", tags=["cluster"], response_model=ClockOut)
    def set_clock(body: ClockIn, p: Admin) -> ClockOut:
        """Manual clock only: move time to ``to``, processing every event and cycle in between."""
        if svc.config.clock != "manual":
            raise Invalid(f"the clock is {svc.config.clock}: only a manual clock is moved by hand")
        leader().advance(body.to, hold=body.hold)
        return ClockOut(now=svc.clock.now(), kind=svc.config.clock)

    return app

