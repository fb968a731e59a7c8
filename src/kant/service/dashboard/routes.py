"""The web dashboard of ``kant serve`` (docs/dashboard.md): the page at ``/``, its static assets at
``/dashboard/static`` (HTML, JS, CSS and the vendored uPlot; nothing from a CDN), and the aggregate
routes it reads besides the ``/v1`` API: the cluster map by leaf and node, the tenants' use and
borrowing, the inference services, the time series (and a server-sent stream of it), predicted
starts of a page of jobs.

Every ``/v1/dashboard`` route takes the API's bearer token and its scoping (:data:`Who`). The map
and the tenants come from the app's :class:`~kant.service.dashboard.layout.LayoutCache`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response
from fastapi.responses import HTMLResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles

from kant.metrics.report import metric_rows_json
from kant.service.api.deps import Svc, Who
from kant.service.dashboard.layout import LayoutCache, tenant_rows
from kant.service.dashboard.models import (
    MapOut,
    PredictionsOut,
    QueueOut,
    SeriesOut,
    ServicesOut,
    TenantsOut,
    WhoOut,
)
from kant.service.dashboard.queue import MAX_ROWS, QueueCache
from kant.service.dashboard.services import service_rows
from kant.service.errors import NotLeader
from kant.service.server import Service
from kant.service.twin import describe_prediction

__all__ = ["STATIC", "mount", "router"]

#: the page and its assets, shipped in the package
STATIC = Path(str(files("kant.service.dashboard") / "static"))

#: nodes drawn one by one when no leaf is asked for; a larger cluster is drawn per leaf (drill down)
DETAIL_MAX_NODES = 512

#: how often the stream looks for new samples and state changes
STREAM_POLL_S = 0.5

# (kept out of the OpenAPI document: they are the page's own reads, not the API's contract; the
# API's tests and fuzzer walk that document, and /stream never ends)
router = APIRouter(prefix="/v1/dashboard", tags=["dashboard"], include_in_schema=False)


async def layout_cache(request: Request) -> LayoutCache:
    """The app's layout cache (:func:`mount` keeps it in ``app.state``)."""
    cache: LayoutCache = request.app.state.layout
    return cache


Cache = Annotated[LayoutCache, Depends(layout_cache)]


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


@router.get("/whoami", response_model=WhoOut)
def whoami(p: Who) -> WhoOut:
    """The token's role and tenant (the page shows a tenant its own jobs)."""
    return WhoOut(role=p.role, tenant=p.tenant)


@router.get("/map", response_model=MapOut)
def map_(p: Who, response: Response, cache: Cache, leaf: Annotated[str | None, Query(max_length=256)] = None,
         max_nodes: Annotated[int, Query(ge=0, le=100_000)] = DETAIL_MAX_NODES) -> MapOut:
    """Nodes by leaf: per leaf the GPUs held (per tenant and job kind) and the nodes full, partly
    used, empty, cordoned and down; every node with its jobs when the cluster has at most
    ``max_nodes`` nodes, or those of ``leaf``."""
    fresh = cache.fresh()
    out = cache.map(p, leaf, max_nodes)
    response.headers["Server-Timing"] = cache.timing(fresh)
    return out


@router.get("/tenants", response_model=TenantsOut)
def tenants(p: Who, response: Response, svc: Svc, cache: Cache) -> TenantsOut:
    """Per tenant: quota, GPUs used, borrowed and lent, jobs waiting and the GPUs they ask for."""
    fresh = cache.fresh()
    out = tenant_rows(svc, cache.get(), p)
    response.headers["Server-Timing"] = cache.timing(fresh)
    return out


@router.get("/queue", response_model=QueueOut)
def queue(p: Who, svc: Svc, request: Request, response: Response,
          tenant: Annotated[str | None, Query(max_length=256)] = None,
          limit: Annotated[int, Query(ge=1, le=MAX_ROWS)] = 200) -> QueueOut:
    """What starts next: the pending jobs the caller may see in the scheduler's order, with their
    place, reason and predicted start, and the reasons counted."""
    cache: QueueCache = request.app.state.queue
    out, fresh = cache.rows(svc, p, tenant, limit)
    response.headers["Server-Timing"] = cache.timing(fresh)
    return out


@router.get("/services", response_model=ServicesOut)
def services(p: Who, svc: Svc, cache: Cache,
             window: Annotated[float, Query(gt=0, le=3600, description="seconds of traffic measured")] = 60.0
             ) -> ServicesOut:
    """The Services panel: each inference service the caller may see (state, ready/target replicas,
    request rate, P99 against the SLO, GPUs lent to training, reclaims)."""
    return service_rows(svc, cache.get(), p, window)


@router.get("/series", response_model=SeriesOut)
def series(p: Who, svc: Svc, after: Annotated[int, Query(ge=0)] = 0) -> SeriesOut:
    """Samples of GAR, SOR, GFR, the queue and the wait percentiles newer than ``after``."""
    seq = svc.history.seq
    return SeriesOut(seq=seq, samples=svc.history.since(after))


@router.get("/predictions", response_model=PredictionsOut)
def predictions(p: Who, svc: Svc, ids: Annotated[str, Query(max_length=20_000, pattern=r"^[0-9]+(,[0-9]+)*$")]
                ) -> PredictionsOut:
    """Predicted starts (P10, P50, P90 on the service clock, and in words from now, as ``kant why``)
    of the listed pending jobs the caller may see (the twin's latest prediction; none until it has
    run)."""
    wanted = [int(i) for i in ids.split(",")][:1000]
    loop = svc.loop
    if loop is None or not loop.alive:
        raise NotLeader("this service is a standby, not the leader")
    owners: dict[int, str] = loop.call(lambda lp: {i: lp.active[i].tenant for i in wanted if i in lp.active})
    out: dict[str, dict[str, float | int | str | None]] = {}
    now = svc.clock.now()
    for job_id, tenant in owners.items():
        if not p.sees(tenant):
            continue
        pred = svc.twin.predicted(job_id)
        if pred is not None:
            out[str(job_id)] = {"p10": pred.p10, "p50": pred.p50, "p90": pred.p90, "as_of": pred.as_of,
                                "runs": pred.runs, "text": describe_prediction(pred, now)}
    return PredictionsOut(now=now, predictions=out)


@router.get("/stream", response_class=StreamingResponse, responses={200: {"content": {"text/event-stream": {}}}})
async def stream(p: Who, svc: Svc, after: Annotated[int, Query(ge=0)] = 0) -> StreamingResponse:
    """Server-sent events: ``samples`` (new time-series samples, as ``/series``) and ``state`` when
    the cluster's state changed (the page then reads the map, queue and tenants again), looked
    for every half second."""
    history = svc.history

    async def events() -> AsyncIterator[bytes]:
        seen, version, quiet = after, -1, 0
        while True:
            loop = svc.loop
            now_version = loop.state_version if loop is not None else -1
            if history.seq > seen:
                samples = history.since(seen)
                seen = history.seq
                yield _sse("samples", {"seq": seen, "samples": samples})
                quiet = 0
            if now_version != version:
                version = now_version
                yield _sse("state", {"version": version})
                quiet = 0
            quiet += 1
            if quiet >= 30:
                yield b": keep-alive\n\n"
                quiet = 0
            await asyncio.sleep(STREAM_POLL_S)

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def index_html() -> str:
    """The page, with the metric rows of the results page (kant.metrics.report.METRIC_ROWS: one source
    with kant compare's page) written into it as JSON."""
    return (STATIC / "index.html").read_text().replace("__METRIC_ROWS__", metric_rows_json())


def index(request: Request) -> HTMLResponse:
    return HTMLResponse(request.app.state.index_html, headers={"Cache-Control": "no-cache"})


def mount(app: FastAPI, svc: Service) -> None:
    """Serve the page at ``/``, its assets and the ``/v1/dashboard`` routes on ``app``, the API of
    ``svc`` (:func:`kant.service.api.create_app`)."""
    app.state.layout = LayoutCache(svc)
    app.state.queue = QueueCache(svc)
    app.state.index_html = index_html()
    app.include_router(router)
    app.add_api_route("/", index, methods=["GET"], include_in_schema=False)
    app.mount("/dashboard/static", StaticFiles(directory=STATIC), name="dashboard-static")
