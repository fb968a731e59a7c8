"""The live view: what the loop publishes after each turn for readers on other threads.

:class:`LiveView` is the cluster now (immutable): GPUs by state, every live metric of the registry
(:func:`kant.metrics.registry.live_metrics`: GAR, SOR and both GFR forms with the simulator's summary's
definitions, :mod:`kant.metrics.occupancy`, and any metric added with a ``live`` value), the queue and
the counters by tenant. :func:`publish` computes it and hands it to the Prometheus metrics and the dashboard's history.
:class:`NodeView` is one node as the API lists it (:meth:`kant.service.live.reads.Reads.node_views`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kant.metrics.occupancy import ClusterNow
from kant.metrics.registry import live_metrics
from kant.plugins.fair_share import FairShare
from kant.plugins.queues import Queues
from kant.scheduler import DOWN, Scheduler
from kant.service.live.state import LiveState

__all__ = ["LiveView", "NodeView", "publish", "queue_rows"]


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    gpu_type: str
    gpus: int
    used_gpus: int
    state: str  # up, cordoned, draining, drained, down
    leaf: str
    spine: str
    cpu_milli: int
    memory_mib: int


@dataclass(frozen=True)
class LiveView:
    """What the loop publishes after each turn, for readers on other threads (immutable)."""

    now: float
    total_gpus: int
    allocated_gpus: int
    down_gpus: int  # GPUs of failed nodes
    cordoned_gpus: int  # idle GPUs of cordoned or draining nodes (schedulable capacity they withhold)
    metrics: Mapping[str, float | None]  # every live metric by key (kant.metrics.registry.live_values)
    queue_len: int
    pending_gpus: int
    running_jobs: int
    cycles: int
    pending_by_tenant: Mapping[str, int]
    running_gpus_by_tenant: Mapping[str, int]
    gpu_types: tuple[str, ...]
    max_gpus_per_node: int
    leader: bool = True
    #: the tree of queues now, one mapping per queue (:func:`queue_rows`; empty without queues)
    queues: tuple[Mapping[str, Any], ...] = ()


def publish(live: LiveState, now: float) -> LiveView:
    """The view of ``live`` at ``now``, told to the metrics and the history (if any)."""
    sched = live.sched
    state, cluster, queue = sched.state, sched.cluster, sched.queue
    total = cluster.total_gpus
    failed = sum(int(cluster.gpus[n]) for n, f in sched.flagged_nodes().items() if f & DOWN)
    view = LiveView(
        now=now, total_gpus=total, allocated_gpus=state.allocated_gpus, down_gpus=failed,
        cordoned_gpus=state.down_gpus - failed,
        metrics=live_metrics(ClusterNow.of(state, queue.pending_gpus)),
        queue_len=len(queue), pending_gpus=queue.pending_gpus, running_jobs=len(sched.running), cycles=sched.cycles,
        pending_by_tenant={t: n for t, n in live.pending_by_tenant.items() if n},
        running_gpus_by_tenant={t: n for t, n in live.running_gpus_by_tenant.items() if n},
        gpu_types=cluster.gpu_type_names, max_gpus_per_node=cluster.max_gpus_per_node,
        queues=queue_rows(sched, now),
    )
    if live.metrics is not None:
        live.metrics.observe_view(view)
    if live.history is not None:
        live.history.observe(view)
    return view


def queue_rows(sched: Scheduler, now: float) -> tuple[Mapping[str, Any], ...]:
    """Each queue of the policy's tree (the ``queues`` plugin) with its guarantee, limits, GPUs in use,
    borrowed and its capacity now, and, with the ``fair-share`` plugin, its share, decayed usage and
    fair-share factor (None without it); empty when the policy has no queues."""
    plugin = sched.plugin(Queues)
    if plugin is None:
        return ()
    fair = sched.plugin(FairShare)
    shares = fair.report(now) if fair is not None else {}
    rows = []
    for name, row in plugin.report().items():
        fs = shares.get(name, {})
        rows.append({"name": name, **row, "share": fs.get("share"), "usage": fs.get("usage"),
                     "factor": fs.get("factor")})
    return tuple(rows)
