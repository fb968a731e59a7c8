"""Prometheus metrics of the live service (``GET /metrics``, text format, ``prometheus_client``).

Gauges are the cluster now: one ``kant_<key>`` per live metric of the registry
(:func:`kant.metrics.registry.live_values`: GAR, SOR, both GFR forms, with the definitions of
docs/metrics.md taken at one instant), GPUs by state, queue length by tenant, GPUs in use by tenant;
counters count jobs by outcome; histograms give the wait before a job's first start by gang size and
the scheduling cycle time. Per inference service (labelled by service id): reclaims
(``kant_service_reclaims_total``), their latency (scale decision to the new replica ready,
``kant_service_reclaim_seconds``) and replica failures (``kant_service_replica_failures_total``); the
request route's measurements of its traffic (:mod:`kant.service.serving.measure`), the other
``kant_service_*`` series.
Each service has its own registry (several services in one process, as in tests, do not clash).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from kant.metrics.registry import live_values

if TYPE_CHECKING:
    from kant.service.live.view import LiveView

__all__ = ["ServiceMetrics", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_WAIT_BUCKETS = (1, 10, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 259200, 604800)
_RECLAIM_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_CYCLE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class ServiceMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        #: one gauge per live metric, by key (NaN where the metric is not defined now)
        self.live = {v.key: Gauge(f"kant_{v.key}", v.help, registry=r) for v in live_values()}
        self.gpus = Gauge("kant_gpus", "GPUs by state", ["state"], registry=r)
        self.queue = Gauge("kant_queue_length", "Jobs waiting, by tenant", ["tenant"], registry=r)
        self.running_gpus = Gauge("kant_running_gpus", "GPUs held by running jobs, by tenant", ["tenant"],
                                  registry=r)
        self.cycles = Gauge("kant_cycles", "Scheduling cycles run by this leader", registry=r)
        #: the tree of queues (kant serve --queues), by queue
        self.queue_gpus = Gauge("kant_queue_gpus", "GPUs of a queue: in_use, guaranteed, borrowed, capacity",
                                ["queue", "kind"], registry=r)
        self.queue_fair = Gauge("kant_queue_fair_share", "Fair share of a queue: share, usage (decayed, over the "
                                "cluster's) and factor (2^(-usage/share))", ["queue", "kind"], registry=r)
        self.queue_type_gpus = Gauge("kant_queue_type_gpus", "GPUs of one type of a queue with per-GPU-type limits: "
                                     "in_use, guaranteed, borrowed, capacity", ["queue", "gpu_type", "kind"],
                                     registry=r)
        self._queue_series: set[tuple[Gauge, tuple[str, ...]]] = set()  # (a tree changed by an admin drops some)
        self.submitted = Counter("kant_jobs_submitted", "Jobs accepted", registry=r)
        self.started = Counter("kant_jobs_started", "Job starts (runs)", registry=r)
        self.finished = Counter("kant_jobs_finished", "Jobs that ended with exit code 0", registry=r)
        self.failed = Counter("kant_jobs_failed", "Jobs that ended with another exit code", registry=r)
        self.requeued = Counter("kant_jobs_requeued", "Runs that ended and went back to the queue, by cause",
                                ["cause"], registry=r)
        self.tenant_gpu_seconds = Counter("kant_tenant_gpu_seconds", "GPU-seconds of ended runs, by tenant (added "
                                          "when a run ends: kant acct has the same figure)", ["tenant"], registry=r)
        self.wait_seconds = Histogram("kant_wait_seconds", "Wait from submit to first start, by gang size (GPUs)",
                                      ["gang"], buckets=_WAIT_BUCKETS, registry=r)
        self.commits = Counter("kant_db_commits", "Database transactions that wrote, by writer (submits, loop)",
                               ["writer"], registry=r)
        self.loop_turns = Counter("kant_loop_turns", "Turns of the scheduling loop", registry=r)
        self.whatif_requests = Gauge("kant_whatif_requests", "What-if requests admitted, by state: running (in the "
                                     "twin's worker) or waiting for it", ["state"], registry=r)
        self.twin_seconds = Histogram("kant_twin_prediction_seconds",
                                      "Wall time of one prediction of the pending jobs' starts "
                                      "(the twin's workers' runs, joined)",
                                      buckets=(0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800), registry=r)
        self.cycle_seconds = Histogram("kant_cycle_seconds", "Wall time of one scheduling cycle",
                                       buckets=_CYCLE_BUCKETS, registry=r)
        # inference services' replicas (kant.service.serving.replicas), by service name
        self.service_reclaims = Counter("kant_service_reclaims", "Replicas started by taking GPUs back from "
                                        "training (an eviction in the same turn), by service id", ["service"],
                                        registry=r)
        self.service_reclaim_seconds = Histogram("kant_service_reclaim_seconds", "Scale decision to the new "
                                                 "replica ready, for replicas started by reclaim, by service id",
                                                 ["service"], buckets=_RECLAIM_BUCKETS, registry=r)
        self.service_replica_failures = Counter("kant_service_replica_failures", "Replicas that exited, never "
                                                "became ready or stopped answering their readiness path, by "
                                                "service", ["service"], registry=r)
        # the request route (kant.service.serving.measure), by service id
        self.serve_requests = Counter("kant_service_requests", "Requests answered by an inference service's route, "
                                      "by status code", ["service", "code"], registry=r)
        self.serve_inflight = Gauge("kant_service_inflight", "Requests of a service queued or at a replica now",
                                    ["service"], registry=r)
        self.serve_queue_seconds = Histogram("kant_service_queue_seconds", "Wait of a request for a replica",
                                             ["service"], buckets=_LATENCY_BUCKETS, registry=r)
        self.serve_service_seconds = Histogram("kant_service_service_seconds",
                                               "Time a replica took to answer a request", ["service"],
                                               buckets=_LATENCY_BUCKETS, registry=r)
        self.serve_response_seconds = Histogram("kant_service_response_seconds",
                                                "A request's time from arrival at kant to its answer", ["service"],
                                                buckets=_LATENCY_BUCKETS, registry=r)
        self.serve_tokens = Counter("kant_service_tokens", "Tokens of answered requests, by direction "
                                    "(prompt, completion)", ["service", "direction"], registry=r)
        self.serve_slo_attainment = Gauge("kant_service_slo_attainment", "Share of a service's answered requests "
                                          "that were 2xx within its SLO, since the start", ["service"], registry=r)
        self._tenants: set[str] = set()

    def observe_view(self, view: LiveView) -> None:
        nan = float("nan")
        for key, gauge in self.live.items():
            value = view.metrics.get(key)
            gauge.set(nan if value is None else value)
        self.gpus.labels("allocated").set(view.allocated_gpus)
        self.gpus.labels("down").set(view.down_gpus)
        self.gpus.labels("cordoned").set(view.cordoned_gpus)
        self.gpus.labels("free").set(view.total_gpus - view.allocated_gpus - view.down_gpus - view.cordoned_gpus)
        self.cycles.set(view.cycles)
        series: set[tuple[Gauge, tuple[str, ...]]] = set()

        def put(gauge: Gauge, labels: tuple[str, ...], value: float) -> None:
            gauge.labels(*labels).set(value)
            series.add((gauge, labels))

        for row in view.queues:
            name = str(row["name"])
            for kind in ("in_use", "guaranteed", "borrowed", "capacity"):
                put(self.queue_gpus, (name, kind), float(row[kind]))
            for kind in ("share", "usage", "factor"):
                if row.get(kind) is not None:
                    put(self.queue_fair, (name, kind), float(row[kind]))
            for gpu_type, cols in (row.get("per_type") or {}).items():
                for kind in ("in_use", "guaranteed", "borrowed", "capacity"):
                    put(self.queue_type_gpus, (name, str(gpu_type), kind), float(cols[kind]))
        for gauge, labels in self._queue_series - series:  # queues (or types) no longer in the tree
            gauge.remove(*labels)
        self._queue_series = series
        tenants = set(view.pending_by_tenant) | set(view.running_gpus_by_tenant) | self._tenants
        for t in tenants:
            self.queue.labels(t).set(view.pending_by_tenant.get(t, 0))
            self.running_gpus.labels(t).set(view.running_gpus_by_tenant.get(t, 0))
        self._tenants = tenants

    def render(self) -> bytes:
        return generate_latest(self.registry)
