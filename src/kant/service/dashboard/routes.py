"""The web dashboard of ``kant serve`` (docs/dashboard.md): the page at ``/``, its static assets at
``/dashboard/static`` (HTML, JS, CSS and the vendored uPlot; nothing from a CDN), and the aggregate
routes it reads besides the ``/v1`` API: the cluster map by leaf and node, the tenants' use and
borrowing, the time series (and a server-sent stream of it), predicted starts of a page of jobs.

Every ``/v1/dashboard`` route takes the API's bearer token and its scoping: a tenant sees its own jobs
in detail and other tenants only as the total ``others``. The map and the per-tenant sums are taken
on the scheduling loop's thread in one pass (:class:`Layout`) and kept until the loop's state changes
(:class:`LayoutCache`), so many open pages cost one pass per change.
"""

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Response
from fastapi.responses import FileResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles

from kant.model.job import JobKind
from kant.service.api import _principal
from kant.service.auth import Principal
from kant.service.dashboard.models import (
    LeafOut,
    MapJob,
    MapNode,
    MapOut,
    NodeCounts,
    PredictionsOut,
    SeriesOut,
    TenantRow,
    TenantsOut,
    WhoOut,
)
from kant.service.twin import describe_prediction
from kant.stamp import Stamped

if TYPE_CHECKING:
    from kant.service.loop import ServiceLoop
    from kant.service.server import Service

__all__ = ["Layout", "LayoutCache", "mount", "STATIC"]

#: the page and its assets, shipped in the package
STATIC = Path(str(files("kant.service.dashboard") / "static"))

#: nodes drawn one by one when no leaf is asked for; a larger cluster is drawn per leaf (drill down)
DETAIL_MAX_NODES = 512

OTHERS = "others"

#: how often the stream looks for new samples and state changes
STREAM_POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class _Node:
    name: str
    leaf: str
    spine: str
    gpu_type: str
    gpus: int
    used: int
    state: str
    jobs: tuple[tuple[int, str, str, int], ...]  # (job id, tenant, kind, GPUs on this node)

    @property
    def use(self) -> str:
        """full, partial, empty (up nodes), cordoned or down (docs/metrics.md: GFR counts up nodes)."""
        if self.state == "down":
            return "down"
        if self.state != "up":
            return "cordoned"
        if self.used == 0:
            return "empty"
        return "full" if self.used >= self.gpus else "partial"


@dataclass(frozen=True, slots=True)
class _Leaf:
    """A leaf's nodes and sums: GPUs, GPUs held, nodes by use, GPUs held per tenant and per job kind."""

    name: str
    spine: str
    nodes: tuple[_Node, ...]
    gpus: int
    used: int
    counts: dict[str, int]
    tenants: dict[str, int]
    kinds: dict[str, int]


@dataclass(frozen=True, slots=True)
class _Raw:
    """What :meth:`Layout.capture` copies on the loop's thread: references to immutable parts (the
    cluster, the node rows, the placements) and small sums, so that the loop waits as little as it can."""

    cluster: Any  # kant.model.cluster.Cluster (immutable; a rebuild makes a new one)
    rows: list[Any]  # the loop's NodeRow per node, in cluster order (immutable rows)
    used: list[int]
    jobs: list[tuple[int, str, int, Any]]  # (job id, tenant, kind code, Placement) of each running job
    pending_jobs: dict[str, int]
    pending_gpus: dict[str, int]
    cpu_s: float  # CPU time the copy took on the loop's thread


@dataclass(frozen=True, slots=True)
class Layout:
    """The cluster at one turn of the loop: every node with the jobs on it, and per tenant the GPUs
    held, the jobs waiting and the GPUs they ask for."""

    nodes: tuple[_Node, ...]
    leaves: dict[str, _Leaf]
    running_gpus: dict[str, int]
    pending_jobs: dict[str, int]
    pending_gpus: dict[str, int]

    @staticmethod
    def capture(lp: "ServiceLoop") -> _Raw:
        """Run on the loop's thread (:meth:`ServiceLoop.call`): O(nodes + jobs) copying, no building."""
        cpu0 = time.thread_time()
        sched = lp.sched
        kinds = sched.jobs.kind
        active = lp.active
        ids = lp.ids
        jobs = []
        for row, placement in sched.state.allocations.items():
            info = active.get(ids[row])
            jobs.append((ids[row], info.tenant if info is not None else "?", int(kinds[row]), placement))
        pending_jobs: dict[str, int] = {}
        pending_gpus: dict[str, int] = {}
        for row in sched.queue:
            info = active.get(ids[row])
            if info is not None:
                pending_jobs[info.tenant] = pending_jobs.get(info.tenant, 0) + 1
                pending_gpus[info.tenant] = pending_gpus.get(info.tenant, 0) + info.total_gpus
        cluster = sched.cluster
        return _Raw(cluster, [lp.nodes[n] for n in cluster.names], sched.state.used_gpus().tolist(), jobs,
                    pending_jobs, pending_gpus, time.thread_time() - cpu0)

    @staticmethod
    def build(raw: _Raw) -> "Layout":
        """The layout of a capture (off the loop's thread)."""
        c = raw.cluster
        on_node: list[list[tuple[int, str, str, int]]] = [[] for _ in c.names]
        running: dict[str, int] = {}
        inference = int(JobKind.INFERENCE)
        for job_id, tenant, kind, placement in raw.jobs:
            name = "inference" if kind == inference else "training"
            _add(running, tenant, placement.total_gpus)
            for n, count in placement.per_node.items():
                on_node[n].append((job_id, tenant, name, count * placement.gpus))
        leaf_names, spine_names = c.leaf_names, c.spine_names
        leaf, spine, gpus = c.leaf.tolist(), c.spine.tolist(), c.gpus.tolist()
        nodes = []
        by_leaf: dict[str, list[_Node]] = {}
        for i, name in enumerate(c.names):
            row, used = raw.rows[i], raw.used[i]
            # (a draining node that holds nothing shows drained, as GET /v1/nodes says)
            state = "drained" if row.state == "draining" and used == 0 else row.state
            node = _Node(name, leaf_names[leaf[i]], spine_names[spine[i]], row.gpu_type, gpus[i], used, state,
                         tuple(sorted(on_node[i])))
            nodes.append(node)
            by_leaf.setdefault(node.leaf, []).append(node)
        leaves = {}
        for name, members in by_leaf.items():
            counts: dict[str, int] = {}
            tenants: dict[str, int] = {}
            kinds: dict[str, int] = {}
            for n in members:
                use = n.use
                counts[use] = counts.get(use, 0) + 1
                for _, owner, job_kind, g in n.jobs:
                    tenants[owner] = tenants.get(owner, 0) + g
                    kinds[job_kind] = kinds.get(job_kind, 0) + g
            leaves[name] = _Leaf(name, members[0].spine, tuple(members), sum(n.gpus for n in members),
                                 sum(n.used for n in members), counts, tenants, kinds)
        return Layout(tuple(nodes), leaves, running, raw.pending_jobs, raw.pending_gpus)


class LayoutCache:
    """The one :class:`Layout` of the loop's current state, taken again when the state changed (the
    loop's ``state_version``: every start, end, arrival and node change), and the maps drawn from it
    (per caller scope, leaf and size), so that many open pages cost one pass per change."""

    def __init__(self, svc: "Service") -> None:
        self.svc = svc
        self._layout: Stamped[Layout | None] = Stamped(None)  # of the loop (by identity) at its state_version
        self._maps: dict[tuple[str | None, str | None, bool], MapOut] = {}
        self._lock = threading.Lock()
        #: milliseconds of the last refresh: waiting for the loop's thread and copying there (wall, and
        #: the copy's CPU time), building (wall, CPU)
        self.last_ms: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)

    def get(self) -> Layout:
        loop = self.svc.loop
        if loop is None or not loop.alive:
            raise HTTPException(503, "this service is a standby, not the leader", headers={"Retry-After": "1"})
        version = loop.state_version
        with self._lock:
            cached = self._layout.value
            if cached is not None and self._layout.fresh(loop, version):
                return cached
            t0 = time.perf_counter()
            raw: _Raw = loop.call(Layout.capture)
            t1, cpu1 = time.perf_counter(), time.thread_time()
            layout = Layout.build(raw)
            self._layout.keep(loop, version, layout)
            self._maps = {}
            self.last_ms = (1000 * (t1 - t0), 1000 * raw.cpu_s, 1000 * (time.perf_counter() - t1),
                            1000 * (time.thread_time() - cpu1))
            return layout

    def timing(self, fresh: bool) -> str:
        """A ``Server-Timing`` header value: the refresh this request made, if it made one."""
        if not fresh:
            return "cache;desc=\"layout from the cache\""
        loop_ms, copy_cpu, build_ms, build_cpu = self.last_ms
        return (f"loop;dur={loop_ms:.1f};desc=\"wait for the loop and copy\", copy-cpu;dur={copy_cpu:.1f}, "
                f"build;dur={build_ms:.1f}, build-cpu;dur={build_cpu:.1f}")

    def fresh(self) -> bool:
        """Whether the next :meth:`get` takes a new layout (for the timing header)."""
        loop = self.svc.loop
        return loop is None or not self._layout.fresh(loop, loop.state_version)

    def map(self, p: Principal, leaf: str | None, max_nodes: int) -> MapOut:
        layout = self.get()
        detail = leaf is not None or len(layout.nodes) <= max_nodes
        key = (p.scope(), leaf, detail)
        out = self._maps.get(key)
        if out is None or self._layout.value is not layout:
            out = cluster_map(layout, p, leaf, detail)
            with self._lock:
                if self._layout.value is layout and len(self._maps) < 256:
                    self._maps[key] = out
        return out


def _scoped(tenant: str, p: Principal) -> str:
    return tenant if p.admin or tenant == p.tenant else OTHERS


def _add(d: dict[str, int], key: str, n: int) -> None:
    d[key] = d.get(key, 0) + n


def _map_node(n: _Node, p: Principal) -> MapNode:
    jobs: dict[tuple[int | None, str, str], int] = {}
    for job_id, tenant, kind, gpus in n.jobs:
        who = _scoped(tenant, p)
        _add(jobs, (job_id if who != OTHERS else None, who, kind), gpus)  # type: ignore[arg-type]
    return MapNode(name=n.name, leaf=n.leaf, spine=n.spine, gpu_type=n.gpu_type, gpus=n.gpus, used_gpus=n.used,
                   state=n.state, jobs=[MapJob(id=i, tenant=t, kind=k, gpus=g) for (i, t, k), g in jobs.items()])


def cluster_map(layout: Layout, p: Principal, leaf: str | None, detail: bool) -> MapOut:
    """The map a caller sees: leaf aggregates always, and every node of ``leaf`` (or of the cluster,
    with ``detail``) with its jobs; another tenant's jobs are ``others``, without ids."""
    if leaf is not None and leaf not in layout.leaves:
        raise HTTPException(404, f"no leaf {leaf!r}")
    leaves = []
    total: dict[str, int] = {}
    for lf in layout.leaves.values():
        tenants: dict[str, int] = {}
        for tenant, g in lf.tenants.items():
            _add(tenants, _scoped(tenant, p), g)
        for use, k in lf.counts.items():
            _add(total, use, k)
        leaves.append(LeafOut(leaf=lf.name, spine=lf.spine, nodes=len(lf.nodes), gpus=lf.gpus, used_gpus=lf.used,
                              counts=NodeCounts(**lf.counts), tenants=tenants, kinds=dict(lf.kinds)))
    shown = layout.leaves[leaf].nodes if leaf is not None else layout.nodes if detail else ()
    return MapOut(nodes=len(layout.nodes), gpus=sum(lf.gpus for lf in layout.leaves.values()),
                  used_gpus=sum(lf.used for lf in layout.leaves.values()), counts=NodeCounts(**total),
                  detail=detail or leaf is not None, leaf=leaf, leaves=leaves,
                  node_rows=[_map_node(n, p) for n in shown])


def lent_gpus(guaranteed: dict[str, int], used: dict[str, int]) -> dict[str, int]:
    """Each tenant's idle guarantee (``max(0, G - U)``) that others' borrowing (``max(0, U - G)``, G = 0
    for a tenant without a guarantee, the quota plugin's default) uses, the borrowing shared out over
    the idle guarantees in proportion to their size (floored)."""
    idle = {t: max(0, g - used.get(t, 0)) for t, g in guaranteed.items()}
    borrowed = sum(max(0, u - guaranteed.get(t, 0)) for t, u in used.items())
    total_idle = sum(idle.values())
    if total_idle == 0:
        return {t: 0 for t in guaranteed}
    share = min(1.0, borrowed / total_idle)
    return {t: int(i * share) for t, i in idle.items()}


def tenant_rows(svc: "Service", layout: Layout, p: Principal) -> TenantsOut:
    quotas = {t.name: t for t in svc.db.tenants.list()}
    names = sorted(set(quotas) | set(layout.running_gpus) | set(layout.pending_jobs))
    guaranteed = {n: q.guaranteed_gpus for n, q in quotas.items() if q.guaranteed_gpus is not None}
    lent = lent_gpus(guaranteed, layout.running_gpus)
    rows = []
    for n in names:
        q = quotas.get(n)
        used = layout.running_gpus.get(n, 0)
        g = q.guaranteed_gpus if q is not None else None
        rows.append(TenantRow(tenant=n, guaranteed_gpus=g, max_gpus=q.max_gpus if q is not None else None,
                              used_gpus=used, borrowed_gpus=max(0, used - (g or 0)),
                              lent_gpus=lent.get(n, 0), pending_jobs=layout.pending_jobs.get(n, 0),
                              pending_gpus=layout.pending_gpus.get(n, 0)))
    others = None
    if not p.admin:
        rest = [r for r in rows if r.tenant != p.tenant]
        others = TenantRow(tenant=OTHERS, guaranteed_gpus=None, max_gpus=None,
                           used_gpus=sum(r.used_gpus for r in rest), borrowed_gpus=sum(r.borrowed_gpus for r in rest),
                           lent_gpus=sum(r.lent_gpus for r in rest), pending_jobs=sum(r.pending_jobs for r in rest),
                           pending_gpus=sum(r.pending_gpus for r in rest))
        rows = [r for r in rows if r.tenant == p.tenant]
    return TenantsOut(quota_enforced=svc.quota_enforced, tenants=rows, others=others)


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def mount(app: FastAPI, svc: "Service") -> None:
    """Serve the page at ``/``, its assets and the ``/v1/dashboard`` routes on ``app`` (the API's
    bearer tokens, :func:`kant.service.api._principal`)."""
    cache = LayoutCache(svc)
    history = svc.history
    # (kept out of the OpenAPI document: they are the page's own reads, not the API's contract; the
    # API's tests and fuzzer walk that document, and /stream never ends)
    router = APIRouter(prefix="/v1/dashboard", tags=["dashboard"], include_in_schema=False)
    Who = Annotated[Principal, Depends(_principal)]

    @router.get("/whoami", response_model=WhoOut)
    def whoami(p: Who) -> WhoOut:
        """The token's role and tenant (the page shows a tenant its own jobs)."""
        return WhoOut(role=p.role, tenant=p.tenant)

    @router.get("/map", response_model=MapOut)
    def map_(p: Who, response: Response, leaf: Annotated[str | None, Query(max_length=256)] = None,
             max_nodes: Annotated[int, Query(ge=0, le=100_000)] = DETAIL_MAX_NODES) -> MapOut:
        """Nodes by leaf: per leaf the GPUs held (per tenant and job kind) and the nodes full, partly
        used, empty, cordoned and down; every node with its jobs when the cluster has at most
        ``max_nodes`` nodes, or those of ``leaf``."""
        fresh = cache.fresh()
        out = cache.map(p, leaf, max_nodes)
        response.headers["Server-Timing"] = cache.timing(fresh)
        return out

    @router.get("/tenants", response_model=TenantsOut)
    def tenants(p: Who, response: Response) -> TenantsOut:
        """Per tenant: quota, GPUs used, borrowed and lent, jobs waiting and the GPUs they ask for."""
        fresh = cache.fresh()
        out = tenant_rows(svc, cache.get(), p)
        response.headers["Server-Timing"] = cache.timing(fresh)
        return out

    @router.get("/series", response_model=SeriesOut)
    def series(p: Who, after: Annotated[int, Query(ge=0)] = 0) -> SeriesOut:
        """Samples of GAR, SOR, GFR, the queue and the wait percentiles newer than ``after``."""
        seq = history.seq
        return SeriesOut(seq=seq, samples=history.since(after))

    @router.get("/predictions", response_model=PredictionsOut)
    def predictions(p: Who, ids: Annotated[str, Query(max_length=20_000, pattern=r"^[0-9]+(,[0-9]+)*$")]
                    ) -> PredictionsOut:
        """Predicted starts (P10, P50, P90 on the service clock, and in words from now, as ``kant why``)
        of the listed pending jobs the caller may see (the twin's latest prediction; none until it has
        run)."""
        wanted = [int(i) for i in ids.split(",")][:1000]
        loop = svc.loop
        if loop is None or not loop.alive:
            raise HTTPException(503, "this service is a standby, not the leader")
        owners: dict[int, str] = loop.call(lambda lp: {i: lp.active[i].tenant for i in wanted if i in lp.active})
        out: dict[str, dict[str, float | int | str | None]] = {}
        now = svc.clock.now()
        for job_id, tenant in owners.items():
            if not p.admin and tenant != p.tenant:
                continue
            pred = svc.twin.predicted(job_id)
            if pred is not None:
                out[str(job_id)] = {"p10": pred.p10, "p50": pred.p50, "p90": pred.p90, "as_of": pred.as_of,
                                    "runs": pred.runs, "text": describe_prediction(pred, now)}
        return PredictionsOut(now=now, predictions=out)

    @router.get("/stream", response_class=StreamingResponse, responses={200: {"content": {"text/event-stream": {}}}})
    async def stream(p: Who, after: Annotated[int, Query(ge=0)] = 0) -> StreamingResponse:
        """Server-sent events: ``samples`` (new time-series samples, as ``/series``) and ``state`` when
        the cluster's state changed (the page then reads the map, queue and tenants again), looked
        for every half second."""

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

    app.include_router(router)

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    app.mount("/dashboard/static", StaticFiles(directory=STATIC), name="dashboard-static")
