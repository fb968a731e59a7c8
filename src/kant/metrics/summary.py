"""The metrics of a finished run: :func:`summarize` and the records it returns (:class:`Metrics`,
its parts, :func:`json_safe`), and the headline table (:func:`summary_rows`).

``summarize`` computes every metric of :data:`kant.metrics.registry.METRICS` on one
:class:`~kant.metrics.view.RunView` of the run's :class:`~kant.metrics.recorder.SimResult`: the
built-in ones fill the typed fields of :class:`Metrics` (computed in :mod:`kant.metrics.cluster`:
GAR, SOR, GFR, the queue; :mod:`kant.metrics.waits`: JWTD, total queueing, JCT, JTTED;
:mod:`kant.metrics.counts`: counts, topology, the run's figures), any other one goes in
``Metrics.extra``. Everything works after the run, on NumPy arrays; the cluster series are step
functions (:class:`~kant.metrics.timeline.Timeline`). Percentiles use NumPy's default (linear
interpolation) method. The exact definitions are in ``docs/metrics.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from kant.metrics.recorder import SimResult
from kant.metrics.registry import METRICS, compute_metrics
from kant.metrics.view import RunView

__all__ = [
    "BUCKETS",
    "DAY",
    "Counts",
    "DailyGar",
    "Dist",
    "GarStats",
    "GfrStats",
    "JctStats",
    "JttedStats",
    "JwtdStats",
    "Metrics",
    "QueueStats",
    "QueuedStats",
    "RunInfo",
    "TopologyStats",
    "Window",
    "finite",
    "format_number",
    "format_percent",
    "gang_bucket",
    "json_safe",
    "summarize",
    "summary_rows",
]

IntArray = npt.NDArray[np.int64]

#: seconds in a day, the unit of the daily GAR distribution
DAY = 86_400.0

#: gang-size buckets of a job's total GPUs, as (label, lowest, highest) inclusive
_BUCKET_BOUNDS: tuple[tuple[str, int, float], ...] = (
    ("1", -1, 1),  # includes CPU-only (0-GPU) jobs
    ("2-4", 2, 4),
    ("5-8", 5, 8),
    ("9-16", 9, 16),
    ("17-32", 17, 32),
    ("33-64", 33, 64),
    (">64", 65, math.inf),
)
#: bucket labels, in order
BUCKETS: tuple[str, ...] = tuple(b[0] for b in _BUCKET_BOUNDS)
_BUCKET_UPPER = np.array([1, 4, 8, 16, 32, 64], dtype=np.int64)


def gang_bucket(total_gpus: npt.ArrayLike) -> IntArray:
    """Index into :data:`BUCKETS` for each total GPU count (0 and 1 both fall in ``"1"``)."""
    g = np.asarray(total_gpus, dtype=np.int64)
    return np.searchsorted(_BUCKET_UPPER, g, side="left").astype(np.int64)


def finite(x: float | np.floating[Any] | None) -> float | None:
    """A finite Python float, or None."""
    if x is None:
        return None
    v = float(x)
    return v if math.isfinite(v) else None


# --- result types ------------------------------------------------------------------------------
class _ToDict:
    """Mixin: ``to_dict()`` turns a (nested) dataclass into JSON-safe values."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe nested dict: NaN/inf become None, tuples become lists, keys are strings."""
        out = json_safe(self)
        assert isinstance(out, dict)
        return out


def json_safe(obj: Any) -> Any:
    """Convert dataclasses, dicts, sequences, NumPy scalars and arrays into JSON-safe values.

    Non-finite floats become ``None``; dict keys become strings; unknown objects become ``str``.
    """
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return finite(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: json_safe(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, np.ndarray):
        return [json_safe(v) for v in obj.tolist()]
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return str(obj)


@dataclass(frozen=True)
class Dist(_ToDict):
    """Summary of a sample: count, mean, P50/P90/P99 (linear interpolation) and max."""

    count: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: npt.ArrayLike) -> Dist:
        """Summarise the finite values of ``values`` (an empty sample gives count 0, rest None)."""
        x = np.asarray(values, dtype=np.float64)
        x = x[np.isfinite(x)]
        if x.size == 0:
            return cls(count=0)
        p50, p90, p99 = np.percentile(x, [50, 90, 99])
        return cls(
            count=int(x.size),
            mean=finite(x.mean()),
            p50=finite(p50),
            p90=finite(p90),
            p99=finite(p99),
            max=finite(x.max()),
        )


@dataclass(frozen=True)
class Window(_ToDict):
    """A measurement window ``[start, end]`` in trace seconds.

    ``kind`` says where it came from: ``"arrivals"`` (first to last submit), ``"given"`` (the caller's),
    ``"run"`` (first sample to end of run: used when all jobs arrive at one instant or there are none).
    ``covered`` is the length of the part of the window the run covers (the window clipped at
    ``end_time``): the denominator of every time-weighted mean.
    """

    start: float
    end: float
    kind: str
    covered: float


@dataclass(frozen=True)
class DailyGar(_ToDict):
    """GAR of each 86,400 s day of the window (day 0 starts at the window start; the last day may be
    partial), and the distribution of those values."""

    values: tuple[float, ...] = ()
    p10: float | None = None
    p50: float | None = None
    p90: float | None = None
    min: float | None = None
    max: float | None = None


@dataclass(frozen=True)
class GarStats(_ToDict):
    """GPU Allocation Ratio: time-weighted allocated / total GPUs."""

    window: float | None
    run: float | None  # over [first sample, end_time]
    run_window: tuple[float, float] | None
    daily: DailyGar
    #: over the instants of the window when some job waits (queue_len > 0): how much of the cluster
    #: is allocated while there is work waiting (None when no job ever waits in the window)
    busy: float | None = None
    #: the share of the window's covered time when some job waits
    busy_share: float | None = None


@dataclass(frozen=True)
class GfrStats(_ToDict):
    """GPU Node Fragmentation Ratio, node form and GPU-weighted form (time-weighted over the window)."""

    nodes: float | None  # partial nodes / up GPU nodes
    gpus: float | None  # free GPUs on partial nodes / free GPUs, over instants with free GPUs


@dataclass(frozen=True)
class QueueStats(_ToDict):
    """Waiting jobs and the GPUs they ask for: time-weighted mean and max over the window."""

    mean_len: float | None
    max_len: int | None
    mean_pending_gpus: float | None
    max_pending_gpus: int | None


@dataclass(frozen=True)
class JwtdStats(_ToDict):
    """Job Waiting Time Distribution of training jobs that started (wait = first start - submit)."""

    overall: Dist
    buckets: dict[str, Dist]
    never_started: int  # training jobs with no start, excluded from the distribution


@dataclass(frozen=True)
class QueuedStats(_ToDict):
    """Total queueing time of finished training jobs: every wait, the first and those after each
    interruption (queued = end - submit - time run over all runs)."""

    overall: Dist
    buckets: dict[str, Dist]
    requeued: int  # of those jobs, how many waited again after an interruption


@dataclass(frozen=True)
class JctStats(_ToDict):
    """Job Completion Time (end - submit) of finished training jobs."""

    overall: Dist
    buckets: dict[str, Dist]


@dataclass(frozen=True)
class JttedStats(_ToDict):
    """Job Training Time Estimation Distribution: relative error (estimate - actual) / actual of
    finished training jobs with a finite estimate."""

    with_estimate: int
    without_estimate: int
    p10: float | None = None
    p50: float | None = None
    p90: float | None = None
    mean_abs: float | None = None
    within_10: float | None = None  # share with |error| <= 0.1
    within_50: float | None = None  # share with |error| <= 0.5
    underestimated: float | None = None  # share with error < 0


@dataclass(frozen=True)
class Counts(_ToDict):
    """Job outcomes and conservation totals."""

    jobs: int
    training: int
    inference: int
    finished: int
    unschedulable: int
    unschedulable_reasons: dict[str, int]
    pending: int
    running_at_end: int
    preemptions: int
    makespan: float | None  # last end - first submit
    gpu_seconds_executed: float  # every run of every job, including interrupted runs
    gpu_seconds_executed_finished: float  # the same, finished jobs only
    gpu_seconds_demanded: float  # sum of duration * total GPUs of finished jobs


@dataclass(frozen=True)
class TopologyStats(_ToDict):
    """How multi-node gangs (first placement spans > 1 node) spread over the network."""

    multi_node: int
    cross_leaf: int
    cross_spine: int
    cross_leaf_share: float | None
    cross_spine_share: float | None


@dataclass(frozen=True)
class RunInfo(_ToDict):
    """Run metadata."""

    policy: str
    seed: int
    wall_seconds: float
    events: int
    cycles: int
    samples: int
    end_time: float
    jobs_per_second: float | None


@dataclass(frozen=True)
class Metrics(_ToDict):
    """All metrics of one run; see ``docs/metrics.md``."""

    window: Window | None
    gar: GarStats
    sor: float | None
    gfr: GfrStats
    queue: QueueStats
    jwtd: JwtdStats
    jct: JctStats
    jtted: JttedStats
    counts: Counts
    topology: TopologyStats
    run: RunInfo
    #: metrics added by extensions (e.g. ``{"inference": ...}`` from kant.inference), JSON-safe values
    extra: dict[str, Any] = field(default_factory=dict)
    #: headline rows those extensions add to :func:`summary_rows`
    extra_rows: tuple[tuple[str, str], ...] = ()
    #: total queueing time (all waits, after interruptions too) of finished training jobs
    queued: QueuedStats | None = None
    #: caveats about the run (``SimResult.info["notes"]``: approximations, lost work), one line each
    notes: tuple[str, ...] = ()

    def with_extra(self, name: str, value: Any, rows: tuple[tuple[str, str], ...] = ()) -> Metrics:
        """These metrics with one more extension metric (kept with those already in ``extra``)."""
        return replace(self, extra={**self.extra, name: value}, extra_rows=(*self.extra_rows, *rows))


# --- the summary -------------------------------------------------------------------------------
#: the fields of :class:`Metrics` that registered metrics fill (the others: extensions and notes)
_TYPED = frozenset(f.name for f in fields(Metrics)) - {"extra", "extra_rows", "notes"}


def summarize(
    result: SimResult,
    *,
    window: tuple[float, float] | None = None,
    estimates: npt.ArrayLike | None = None,
) -> Metrics:
    """Compute every metric of one run: each of :data:`kant.metrics.registry.METRICS`, on the run's
    :class:`~kant.metrics.view.RunView`.

    ``window`` is the measurement window ``(start, end)`` for the time-weighted cluster metrics (GAR,
    daily GAR, SOR, GFR, queue); by default ``[first submit, last submit]`` of all jobs. ``estimates``
    (one value per job, NaN = none) replaces the job table's ``estimate`` column for JTTED.
    """
    run = RunView(result, window=window, estimates=estimates)
    typed, extra, extra_rows = compute_metrics(run, _TYPED)
    notes = result.info.get("notes", ())
    return Metrics(**typed, extra=extra, extra_rows=extra_rows,
                   notes=tuple(str(n) for n in notes) if isinstance(notes, (list, tuple)) else ())


# --- headline table ----------------------------------------------------------------------------
def format_percent(x: float | None) -> str:
    """``0.261`` -> ``26.1 %`` (``n/a`` for None)."""
    return "n/a" if x is None else f"{100 * x:.1f} %"


def format_number(x: float | None, digits: int = 1) -> str:
    """``14.2`` with thousands separators (``n/a`` for None)."""
    return "n/a" if x is None else f"{x:,.{digits}f}"


def summary_rows(m: Metrics) -> list[tuple[str, str]]:
    """The headline lines ``(label, formatted value)`` the CLI prints as a table: each registered
    metric's rows in table order (the typed ones from their fields, the others as ``summarize``
    kept them, with those extensions added), then the notes."""
    rows = [row for metric in METRICS if metric.name in _TYPED for row in metric.table_rows(getattr(m, metric.name))]
    return [*rows, *m.extra_rows, *(("Note", note) for note in m.notes)]
