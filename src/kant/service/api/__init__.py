"""The REST API of ``kant serve`` (FastAPI): jobs, inference services, nodes, tenants and tokens, the
cluster now, what-if, an event stream, the clock, health and Prometheus metrics. The OpenAPI document
is at ``/openapi.json`` (and browsable at ``/docs``); docs/service.md describes every route.

One router per resource (:mod:`.jobs`, :mod:`.services` (and :mod:`.serve`, the request route to a
service's replicas), :mod:`.nodes`, :mod:`.tenants`,
:mod:`.cluster`, :mod:`.whatif`, :mod:`.events`, :mod:`.clock`, :mod:`.health`), what they take in
:mod:`.deps` (the service, the caller, ids), every error's answer in :mod:`.errors`, the body cap in
:mod:`.body_limit`. The routes call the service's use cases (:mod:`kant.service.admission`,
:mod:`kant.service.queries`, :mod:`kant.service.whatif`) and raise domain errors; HTTP is only here.

Every route under ``/v1`` and ``/metrics`` needs a bearer token (:mod:`kant.service.auth`). A tenant
sees its own jobs and services only (others' are 404) and totals of other tenants; nodes, tenants,
quotas, tokens and the clock are changed by admins only. Writes go to the database first (a submit
is answered after its commit) and reach the scheduler through the loop's inbox; a standby service
(not the leader) answers them 503 and says where the leader is.
"""

from __future__ import annotations

import inspect
from typing import Any

from fastapi import FastAPI

import kant
from kant.service.api import (
    accounting,
    clock,
    cluster,
    errors,
    events,
    health,
    job_control,
    jobs,
    nodes,
    serve,
    services,
    tenants,
    whatif,
)
from kant.service.api.body_limit import BodyLimit
from kant.service.server import Service

__all__ = ["create_app"]

#: the routers, in the order of the OpenAPI document (and of /docs)
ROUTERS = (health, jobs, job_control, services, serve, nodes, tenants, accounting, cluster, whatif, events, clock)

#: the tags of the OpenAPI document, in order
TAGS = ("jobs", "services", "nodes", "tenants", "accounting", "cluster", "events", "health")


def _without_otel_hooks() -> dict[str, Any]:
    """FastAPI 0.16x looks for OpenTelemetry providers on every request (environment lookups); kant
    serves its own Prometheus metrics, so those hooks are off where FastAPI has the option."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}}


def create_app(svc: Service) -> FastAPI:
    """The API of ``svc`` (without the dashboard: :func:`kant.service.serve.build_app` adds it)."""
    app = FastAPI(
        **_without_otel_hooks(),
        title="kant",
        version=kant.__version__,
        description="The live kant scheduler: jobs (gangs), inference services, nodes, tenants, the cluster now.",
        openapi_tags=[{"name": n} for n in TAGS],
        lifespan=serve.lifespan,  # the request route's shared HTTP client
    )
    app.add_middleware(serve.ServeFirst)  # (the request route past the router; added first: inside the body limit)
    app.add_middleware(BodyLimit, limit=svc.config.max_body)
    app.state.svc = svc
    app.state.proxy = serve.Proxy(svc)
    errors.install(app)
    for module in ROUTERS:
        app.include_router(module.router)
    return app
