"""Metrics added with one line in :data:`METRICS` (see docs/architecture.md, "Adding a metric").

A metric is a function of one finished run, ``compute(result: SimResult) -> value`` (JSON-safe:
numbers, strings, lists, dicts; None when it does not apply to the run, which leaves it out), and
optionally ``rows(value) -> [(label, text), ...]`` for the headline table. :func:`kant.metrics.summary.summarize`
puts each value in ``Metrics.extra[name]`` (so it is in ``--json`` output and ``metrics.json``) and its
rows in ``Metrics.extra_rows`` (the table ``kant simulate`` prints). Functions are named
``"module:function"`` and imported on first use, so the registry costs nothing at start-up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kant.metrics.recorder import SimResult

__all__ = ["METRICS", "Metric", "compute_metrics"]

Rows = tuple[tuple[str, str], ...]


def _resolve(ref: str) -> Callable[..., Any]:
    module, _, func = ref.partition(":")
    fn: Callable[..., Any] = getattr(import_module(module), func)
    return fn


@dataclass(frozen=True)
class Metric:
    """``name`` (its key in ``Metrics.extra``), ``compute`` and, optionally, ``rows``, each as
    ``"module:function"``."""

    name: str
    compute: str
    rows: str = ""


#: one line per added metric, e.g.
#: ``Metric("gpu-hours", "kant.metrics.gpu_hours:compute", "kant.metrics.gpu_hours:rows")``
METRICS: tuple[Metric, ...] = ()


def compute_metrics(result: SimResult, metrics: tuple[Metric, ...] | None = None) -> tuple[dict[str, Any], Rows]:
    """The registered metrics of one run: ``(extra, extra_rows)`` for :class:`~kant.metrics.summary.Metrics`."""
    extra: dict[str, Any] = {}
    rows: list[tuple[str, str]] = []
    for metric in METRICS if metrics is None else metrics:
        value = _resolve(metric.compute)(result)
        if value is None:
            continue
        extra[metric.name] = value
        if metric.rows:
            rows.extend((str(label), str(text)) for label, text in _resolve(metric.rows)(value))
    return extra, tuple(rows)
