"""What the dashboard draws, taken from the scheduling loop: the cluster at one turn of the loop
(:class:`Layout`: every node with its jobs, per leaf and per tenant sums), taken on the loop's thread
in one pass and kept until the loop's state changes (:class:`LayoutCache`), so many open pages cost
one pass per change; and what one caller may see of it (:func:`cluster_map`, :func:`tenant_rows`: a
tenant sees its own jobs in detail and other tenants only as the total ``others``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from kant.metrics.occupancy import ClusterNow
from kant.metrics.registry import live_metrics
from kant.model.job import JobKind
from kant.service.auth import Principal
from kant.service.dashboard.models import LeafOut, MapJob, MapNode, MapOut, NodeCounts, TenantRow, TenantsOut
from kant.service.errors import NotFound, NotLeader
from kant.service.loop import ServiceLoop
from kant.service.server import Service
from kant.stamp import Stamped

__all__ = ["OTHERS", "Layout", "LayoutCache", "cluster_map", "lent_gpus", "tenant_rows"]

#: how another tenant is named to a tenant
OTHERS = "others"


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
    pending_waits: dict[str, list[float]]  # per tenant, how long each waiting job has waited so far
    headline: dict[str, Any]  # the headline numbers of the same instant (:func:`_headline`)
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
    #: per tenant, the P90 of how long its waiting jobs have waited so far (None: none waits)
    wait_p90: dict[str, float]
    #: the headline of the same instant: GAR, SOR, GFR, GPUs allocated of all, jobs waiting and running,
    #: and the clock then (the page shows them beside the map: one snapshot, the same numbers)
    headline: dict[str, Any]

    @staticmethod
    def capture(lp: ServiceLoop) -> _Raw:
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
        waits: dict[str, list[float]] = {}
        now = lp.clock.now()
        for row in sched.queue:
            info = active.get(ids[row])
            if info is not None:
                pending_jobs[info.tenant] = pending_jobs.get(info.tenant, 0) + 1
                pending_gpus[info.tenant] = pending_gpus.get(info.tenant, 0) + info.total_gpus
                waits.setdefault(info.tenant, []).append(now - info.submit_time)
        cluster = sched.cluster
        return _Raw(cluster, [lp.nodes[n] for n in cluster.names], sched.state.used_gpus().tolist(), jobs,
                    pending_jobs, pending_gpus, waits, _headline(lp), time.thread_time() - cpu0)

    @staticmethod
    def build(raw: _Raw) -> Layout:
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
        wait_p90 = {t: float(np.percentile(w, 90)) for t, w in raw.pending_waits.items() if w}
        return Layout(tuple(nodes), leaves, running, raw.pending_jobs, raw.pending_gpus, wait_p90, raw.headline)


def _headline(lp: ServiceLoop) -> dict[str, Any]:
    """GAR, SOR, GFR (the live metrics of ``/v1/cluster``, :func:`~kant.metrics.registry.live_metrics`),
    GPUs allocated of all, jobs waiting and running, taken on the loop's thread with the map's copy."""
    sched = lp.sched
    state, queue = sched.state, sched.queue
    metrics = live_metrics(ClusterNow.of(state, queue.pending_gpus))
    return {"now": lp.clock.now(), "gar": metrics.get("gar"), "sor": metrics.get("sor"),
            "gfr_nodes": metrics.get("gfr_nodes"), "gfr_gpus": metrics.get("gfr_gpus"),
            "total_gpus": int(sched.cluster.total_gpus), "allocated_gpus": int(state.allocated_gpus),
            "queue_len": len(queue), "pending_gpus": int(queue.pending_gpus), "running_jobs": len(sched.running)}


class LayoutCache:
    """The one :class:`Layout` of the loop's current state, taken again when the state changed (the
    loop's ``state_version``: every start, end, arrival and node change), and the maps drawn from it
    (per caller scope, leaf and size), so that many open pages cost one pass per change."""

    def __init__(self, svc: Service) -> None:
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
            raise NotLeader("this service is a standby, not the leader", retry_after=1.0)
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
    return tenant if p.sees(tenant) else OTHERS


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
        raise NotFound(f"no leaf {leaf!r}")
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
                  detail=detail or leaf is not None, leaf=leaf, leaves=leaves, headline=dict(layout.headline),
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


def tenant_rows(svc: Service, layout: Layout, p: Principal) -> TenantsOut:
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
                              pending_gpus=layout.pending_gpus.get(n, 0), wait_p90_s=layout.wait_p90.get(n)))
    others = None
    if not p.admin:
        rest = [r for r in rows if r.tenant != p.tenant]
        others = TenantRow(tenant=OTHERS, guaranteed_gpus=None, max_gpus=None,
                           used_gpus=sum(r.used_gpus for r in rest), borrowed_gpus=sum(r.borrowed_gpus for r in rest),
                           lent_gpus=sum(r.lent_gpus for r in rest), pending_jobs=sum(r.pending_jobs for r in rest),
                           pending_gpus=sum(r.pending_gpus for r in rest))
        rows = [r for r in rows if r.tenant == p.tenant]
    total = sum(lf.gpus for lf in layout.leaves.values())
    return TenantsOut(quota_enforced=svc.quota_enforced, total_gpus=total, tenants=rows, others=others)
