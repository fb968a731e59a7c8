"""Every metric of a run, one line each in :data:`METRICS` (see docs/architecture.md, "Adding a metric").

A metric is a function of one finished run, ``compute(run: RunView) -> value`` (``run.result`` is the
:class:`~kant.metrics.recorder.SimResult`; the view also has the measurement window, the cluster
timeline and the job masks, see :class:`~kant.metrics.view.RunView`), and optionally
``rows(value) -> [(label, text), ...]`` for the headline table. :func:`kant.metrics.summary.summarize`
puts a value whose name is a typed field of :class:`~kant.metrics.summary.Metrics` (the built-in
metrics) in that field, and any other in ``Metrics.extra[name]`` (so it is in ``--json`` output and
``result.json``; None leaves it out), with its rows in ``Metrics.extra_rows``;
:func:`~kant.metrics.summary.summary_rows` (the table ``kant simulate`` prints) shows the rows in
table order. Functions are named ``"module:function"`` and imported on first use, so the registry
costs nothing at start-up.

A metric the live service shows at each instant also has ``live`` values (:class:`Live`): each is a
function of the cluster's counts now (:class:`~kant.metrics.occupancy.ClusterNow`) with a key and a
one-line description. The live service computes every one after each turn of its loop
(:func:`live_metrics`) and shows them in ``GET /v1/cluster``'s ``metrics``, as the Prometheus gauge
``kant_<key>`` and in ``kant top``; nothing there names a metric.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kant.metrics.occupancy import ClusterNow
    from kant.metrics.view import RunView

__all__ = ["METRICS", "Live", "Metric", "compute_metrics", "live_metrics", "live_values"]

Rows = tuple[tuple[str, str], ...]


def _resolve(ref: str) -> Callable[..., Any]:
    module, _, func = ref.partition(":")
    fn: Callable[..., Any] = getattr(import_module(module), func)
    return fn


@dataclass(frozen=True)
class Live:
    """One value a metric shows live: ``key`` (in ``GET /v1/cluster``'s ``metrics``, and the Prometheus
    gauge ``kant_<key>``), ``help`` (one line) and ``compute``, ``"module:function"`` of a
    :class:`~kant.metrics.occupancy.ClusterNow` returning a float, or None where it is not defined."""

    key: str
    help: str
    compute: str

    def value(self, now: ClusterNow) -> float | None:
        result: float | None = _resolve(self.compute)(now)
        return result


@dataclass(frozen=True)
class Metric:
    """``name`` (a typed field of ``Metrics``, or its key in ``Metrics.extra``), ``compute`` and,
    optionally, ``rows``, each as ``"module:function"``, and the values it shows live (``live``)."""

    name: str
    compute: str
    rows: str = ""
    live: tuple[Live, ...] = ()

    def value(self, run: RunView) -> Any:
        """The metric of one run."""
        return _resolve(self.compute)(run)

    def table_rows(self, value: Any) -> Rows:
        """Its headline rows for ``value`` (none without ``rows``)."""
        if not self.rows:
            return ()
        return tuple((str(label), str(text)) for label, text in _resolve(self.rows)(value))


#: The metrics of every run, in the order of the headline table.
METRICS: tuple[Metric, ...] = (
    Metric("window", "kant.metrics.cluster:window"),
    Metric("gar", "kant.metrics.cluster:gar", "kant.metrics.cluster:gar_rows", live=(
        Live("gar", "GPU allocation ratio now: allocated GPUs / all GPUs", "kant.metrics.occupancy:gar_now"),)),
    Metric("sor", "kant.metrics.cluster:sor", "kant.metrics.cluster:sor_rows", live=(
        Live("sor", "Scheduling occupancy rate now: allocated / min(schedulable, demand)",
             "kant.metrics.occupancy:sor_now"),)),
    Metric("gfr", "kant.metrics.cluster:gfr", "kant.metrics.cluster:gfr_rows", live=(
        Live("gfr_nodes", "Share of up GPU nodes that are partly used", "kant.metrics.occupancy:gfr_nodes_now"),
        Live("gfr_gpus", "Share of free GPUs stranded on partly used nodes", "kant.metrics.occupancy:gfr_gpus_now"))),
    Metric("jwtd", "kant.metrics.waits:jwtd", "kant.metrics.waits:jwtd_rows"),
    Metric("queued", "kant.metrics.waits:queued", "kant.metrics.waits:queued_rows"),
    Metric("jct", "kant.metrics.waits:jct", "kant.metrics.waits:jct_rows"),
    Metric("queue", "kant.metrics.cluster:queue", "kant.metrics.cluster:queue_rows"),
    Metric("jtted", "kant.metrics.waits:jtted"),
    Metric("counts", "kant.metrics.counts:counts", "kant.metrics.counts:counts_rows"),
    Metric("topology", "kant.metrics.counts:topology", "kant.metrics.counts:topology_rows"),
    Metric("run", "kant.metrics.counts:run_info", "kant.metrics.counts:run_rows"),
)


def compute_metrics(run: RunView, typed: Collection[str]) -> tuple[dict[str, Any], dict[str, Any], Rows]:
    """Every metric of :data:`METRICS` for one run: the values of those named in ``typed`` (the typed
    fields of ``Metrics``), the others' values (``Metrics.extra``; None left out) and their rows
    (``Metrics.extra_rows``)."""
    fields: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    rows: list[tuple[str, str]] = []
    for metric in METRICS:
        value = metric.value(run)
        if metric.name in typed:
            fields[metric.name] = value
        elif value is not None:
            extra[metric.name] = value
            rows.extend(metric.table_rows(value))
    return fields, extra, tuple(rows)


def live_values() -> tuple[Live, ...]:
    """Every live value of :data:`METRICS`, in table order."""
    return tuple(value for metric in METRICS for value in metric.live)


def live_metrics(now: ClusterNow) -> dict[str, float | None]:
    """Every live value of :data:`METRICS` at one instant, by key."""
    return {value.key: value.value(now) for value in live_values()}
