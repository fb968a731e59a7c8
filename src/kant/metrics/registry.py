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
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kant.metrics.view import RunView

__all__ = ["METRICS", "Metric", "compute_metrics"]

Rows = tuple[tuple[str, str], ...]


def _resolve(ref: str) -> Callable[..., Any]:
    module, _, func = ref.partition(":")
    fn: Callable[..., Any] = getattr(import_module(module), func)
    return fn


@dataclass(frozen=True)
class Metric:
    """``name`` (a typed field of ``Metrics``, or its key in ``Metrics.extra``), ``compute`` and,
    optionally, ``rows``, each as ``"module:function"``."""

    name: str
    compute: str
    rows: str = ""

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
    Metric("gar", "kant.metrics.cluster:gar", "kant.metrics.cluster:gar_rows"),
    Metric("sor", "kant.metrics.cluster:sor", "kant.metrics.cluster:sor_rows"),
    Metric("gfr", "kant.metrics.cluster:gfr", "kant.metrics.cluster:gfr_rows"),
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
