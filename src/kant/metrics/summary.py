"""Cluster and job metrics computed from a finished run's :class:`~kant.metrics.recorder.SimResult`.

Everything here works after the run, on NumPy arrays: the cluster series are step functions (sample
``k`` holds on ``[times[k], times[k+1])``, the last sample holds until ``end_time``, and before the
first sample the cluster is empty), so a time-weighted mean is an integral computed with
``np.diff`` of clipped sample times, never a Python loop over samples. Percentiles use NumPy's
default (linear interpolation) method. The exact definitions are in ``docs/metrics.md``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from kant.metrics import occupancy
from kant.metrics.recorder import JobStatus, SimResult
from kant.metrics.registry import compute_metrics
from kant.model.job import JobKind

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
    "Timeline",
    "TopologyStats",
    "Window",
    "format_duration",
    "gang_bucket",
    "job_queued",
    "job_waits",
    "json_safe",
    "summarize",
    "summary_rows",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

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


def _opt(x: float | np.floating[Any] | None) -> float | None:
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
        return _opt(obj)
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
            mean=_opt(x.mean()),
            p50=_opt(p50),
            p90=_opt(p90),
            p99=_opt(p99),
            max=_opt(x.max()),
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


# --- step-function integration -----------------------------------------------------------------
class Timeline:
    """The cluster series of a run as step functions over ``edges``.

    ``edges`` has one more entry than each series: sample ``k`` holds on ``[edges[k], edges[k+1])``
    and ``edges[-1]`` is the run's end. If ``start`` is before the first sample, an "empty cluster"
    sample (nothing allocated, down or queued; every GPU node empty) is put in front at ``start``.
    Besides the recorded series, ``series["down_nodes"]`` holds the down GPU nodes of each sample
    (from the result's record of node changes).
    """

    def __init__(self, result: SimResult, start: float | None = None) -> None:
        times = np.asarray(result.times, dtype=np.float64)
        cluster = result.cluster
        n = times.size
        series = {name: np.asarray(v, dtype=np.float64) for name, v in result.series.items()}
        # each sample's down GPU nodes: the last change at or before its time (samples follow changes)
        at = np.searchsorted(result.down_node_times, times, side="right") - 1
        down = np.asarray(result.down_nodes, dtype=np.float64)
        series["down_nodes"] = np.where(at >= 0, down[np.maximum(at, 0)], 0.0) if down.size else np.zeros(n)
        end = float(result.end_time)
        if n:
            end = max(end, float(times[-1]))
        first = float(times[0]) if n else end
        if start is not None and start < first:
            empty = {name: 0.0 for name in series}
            empty["empty_nodes"] = float(cluster.n_gpu_nodes)
            times = np.concatenate(([start], times))
            series = {name: np.concatenate(([empty.get(name, 0.0)], v)) for name, v in series.items()}
        self.result = result
        self.edges: FloatArray = np.append(times, end)
        self.series: dict[str, FloatArray] = series
        self.end = end
        self.has_samples = n > 0

    def __len__(self) -> int:
        return int(self.edges.size - 1)

    def weights(self, lo: float, hi: float) -> FloatArray:
        """Seconds each sample holds inside ``[lo, hi]``."""
        return np.diff(np.clip(self.edges, lo, hi))

    def cumulative(self, values: FloatArray, points: npt.ArrayLike) -> FloatArray:
        """Integral of the step function ``values`` from the first edge up to each point."""
        edges = self.edges
        x = np.clip(np.asarray(points, dtype=np.float64), edges[0], edges[-1])
        if len(self) == 0:
            return np.zeros_like(x)
        cum = np.concatenate(([0.0], np.cumsum(values * np.diff(edges))))
        k = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(self) - 1)
        out: FloatArray = cum[k] + values[k] * (x - edges[k])
        return out

    def binned_mean(
        self, values: FloatArray, lo: float, hi: float, bins: int, mask: BoolArray | None = None
    ) -> tuple[FloatArray, FloatArray]:
        """Time-weighted mean of ``values`` in ``bins`` equal bins of ``[lo, hi]`` (for plots).

        Only instants where ``mask`` is true count; a bin with no counted time is NaN. Returns
        ``(bin midpoints, means)``.
        """
        bounds = np.linspace(lo, hi, bins + 1)
        if mask is None:
            num = np.diff(self.cumulative(values, bounds))
            den = np.diff(np.clip(bounds, self.edges[0], self.edges[-1]))
        else:
            m = mask.astype(np.float64)
            num = np.diff(self.cumulative(np.where(mask, values, 0.0), bounds))
            den = np.diff(self.cumulative(m, bounds))
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
        return (bounds[:-1] + bounds[1:]) / 2, mean

    # --- derived step functions (kant.metrics.occupancy: the live service's definitions too) ---
    def gar(self) -> FloatArray:
        """Allocated / total GPUs per sample."""
        return occupancy.gar(self.series["allocated_gpus"], self.result.cluster.total_gpus)[0]

    def sor(self) -> tuple[FloatArray, BoolArray]:
        """SOR per sample and the mask of samples with demand (denominator > 0)."""
        s = self.series
        return occupancy.sor(s["allocated_gpus"], s["pending_gpus"], s["down_gpus"], self.result.cluster.total_gpus)

    def gfr_nodes(self) -> tuple[FloatArray, BoolArray]:
        """Partial nodes / up GPU nodes per sample, and the mask of samples with a GPU node up."""
        s = self.series
        return occupancy.gfr_nodes(s["partial_nodes"], s["down_nodes"], self.result.cluster.n_gpu_nodes)

    def gfr_gpus(self) -> tuple[FloatArray, BoolArray]:
        """Free GPUs on partial nodes / free GPUs per sample, and the mask of samples with free GPUs."""
        s = self.series
        return occupancy.gfr_gpus(s["free_on_partial"], s["allocated_gpus"], s["down_gpus"],
                                  self.result.cluster.total_gpus)


def _weighted_mean(values: FloatArray, w: FloatArray, mask: BoolArray | None = None) -> float | None:
    if mask is not None:
        w = np.where(mask, w, 0.0)
    total = float(w.sum())
    if total <= 0:
        return None
    # NumPy's own pairwise sum, not np.dot: BLAS's dot sums in an order that depends on its thread count
    return _opt(float((values * w).sum()) / total)


def _weighted_max(values: FloatArray, w: FloatArray) -> int | None:
    held = w > 0
    if not held.any():
        return None
    return int(values[held].max())


def _daily_gar(tl: Timeline, lo: float, hi: float) -> DailyGar:
    total = tl.result.cluster.total_gpus
    if hi <= lo or total == 0:
        return DailyGar()
    n_days = max(1, math.ceil((hi - lo) / DAY))
    bounds = np.minimum(lo + DAY * np.arange(n_days + 1), hi)
    alloc = np.diff(tl.cumulative(tl.series["allocated_gpus"], bounds))
    covered = np.diff(np.clip(bounds, tl.edges[0], tl.end))
    keep = covered > 0
    if not keep.any():
        return DailyGar()
    vals = alloc[keep] / (total * covered[keep])
    p10, p50, p90 = np.percentile(vals, [10, 50, 90])
    return DailyGar(
        values=tuple(float(v) for v in vals),
        p10=_opt(p10),
        p50=_opt(p50),
        p90=_opt(p90),
        min=_opt(vals.min()),
        max=_opt(vals.max()),
    )


# --- per-job helpers ---------------------------------------------------------------------------
def job_waits(result: SimResult) -> tuple[FloatArray, IntArray]:
    """Waits (first start - submit) of training jobs that started, and their gang bucket indices."""
    jobs = result.jobs
    started = (jobs.kind == JobKind.TRAINING) & np.isfinite(result.first_start)
    waits = result.first_start[started] - jobs.submit[started]
    return waits, gang_bucket(jobs.total_gpus[started])


def job_queued(result: SimResult) -> tuple[FloatArray, IntArray, BoolArray]:
    """Total queueing time (end - submit - time run over all runs) of finished training jobs, their
    gang bucket indices, and whether each ran more than once (waited again after an interruption)."""
    jobs = result.jobs
    done = (jobs.kind == JobKind.TRAINING) & (result.status == JobStatus.FINISHED)
    if result.run_seconds is not None:
        ran = result.run_seconds[done]
    else:  # derived from GPU-seconds (exact for jobs with GPUs; a CPU-only job counts as never running)
        gpus = jobs.total_gpus[done].astype(np.float64)
        ran = np.where(gpus > 0, result.gpu_seconds[done] / np.where(gpus > 0, gpus, 1.0), 0.0)
    queued = np.maximum(result.end[done] - jobs.submit[done] - ran, 0.0)
    return queued, gang_bucket(jobs.total_gpus[done]), result.runs[done] > 1


def _by_bucket(values: FloatArray, buckets: IntArray) -> dict[str, Dist]:
    return {label: Dist.of(values[buckets == i]) for i, label in enumerate(BUCKETS)}


def _jtted(result: SimResult, estimates: FloatArray, finished_training: BoolArray) -> JttedStats:
    jobs = result.jobs
    actual = jobs.duration
    has = finished_training & np.isfinite(estimates)
    usable = has & (actual > 0) & np.isfinite(actual)
    without = int((finished_training & ~has).sum())
    if not usable.any():
        return JttedStats(with_estimate=0, without_estimate=without)
    err = (estimates[usable] - actual[usable]) / actual[usable]
    p10, p50, p90 = np.percentile(err, [10, 50, 90])
    absolute = np.abs(err)
    return JttedStats(
        with_estimate=int(usable.sum()),
        without_estimate=without,
        p10=_opt(p10),
        p50=_opt(p50),
        p90=_opt(p90),
        mean_abs=_opt(absolute.mean()),
        within_10=_opt((absolute <= 0.1).mean()),
        within_50=_opt((absolute <= 0.5).mean()),
        underestimated=_opt((err < 0).mean()),
    )


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


# --- the summary -------------------------------------------------------------------------------
def summarize(
    result: SimResult,
    *,
    window: tuple[float, float] | None = None,
    estimates: npt.ArrayLike | None = None,
) -> Metrics:
    """Compute every metric of one run.

    ``window`` is the measurement window ``(start, end)`` for the time-weighted cluster metrics (GAR,
    daily GAR, SOR, GFR, queue); by default ``[first submit, last submit]`` of all jobs. ``estimates``
    (one value per job, NaN = none) replaces the job table's ``estimate`` column for JTTED.
    """
    jobs = result.jobs
    n_jobs = len(jobs)
    if estimates is None:
        est = np.asarray(jobs.estimate, dtype=np.float64)
    else:
        est = np.asarray(estimates, dtype=np.float64)
        if est.shape != (n_jobs,):
            raise ValueError(f"estimates has shape {est.shape}, expected ({n_jobs},)")

    times = np.asarray(result.times, dtype=np.float64)
    run_window: tuple[float, float] | None = None
    if times.size:
        run_window = (float(times[0]), max(float(result.end_time), float(times[-1])))

    # the measurement window
    lo_hi: tuple[float, float] | None
    if window is not None:
        lo, hi = float(window[0]), float(window[1])
        if not (math.isfinite(lo) and math.isfinite(hi)) or hi < lo:
            raise ValueError(f"window must be finite with start <= end, got {window}")
        lo_hi, kind = (lo, hi), "given"
    elif n_jobs and float(jobs.submit.max()) > float(jobs.submit.min()):
        lo_hi, kind = (float(jobs.submit.min()), float(jobs.submit.max())), "arrivals"
    else:
        lo_hi, kind = run_window, "run"

    start = lo_hi[0] if lo_hi is not None else None
    tl = Timeline(result, start)

    win: Window | None = None
    gar_w = sor = gfr_n = gfr_g = gar_busy = busy_share = None
    q_mean = p_mean = None
    q_max = p_max = None
    daily = DailyGar()
    if lo_hi is not None:
        lo, hi = lo_hi
        w = tl.weights(lo, hi)
        win = Window(start=lo, end=hi, kind=kind, covered=float(w.sum()))
        gar_w = _weighted_mean(tl.gar(), w)
        waiting = tl.series["queue_len"] > 0
        gar_busy = _weighted_mean(tl.gar(), w, waiting)
        if win.covered > 0:
            busy_share = _opt(float(w[waiting].sum()) / win.covered)
        r, m = tl.sor()
        sor = _weighted_mean(r, w, m)
        r, m = tl.gfr_nodes()
        gfr_n = _weighted_mean(r, w, m)
        r, m = tl.gfr_gpus()
        gfr_g = _weighted_mean(r, w, m)
        q_mean = _weighted_mean(tl.series["queue_len"], w)
        p_mean = _weighted_mean(tl.series["pending_gpus"], w)
        q_max = _weighted_max(tl.series["queue_len"], w)
        p_max = _weighted_max(tl.series["pending_gpus"], w)
        daily = _daily_gar(tl, lo, hi)

    gar_run = None
    if run_window is not None:
        gar_run = _weighted_mean(tl.gar(), tl.weights(*run_window))

    # jobs
    training = jobs.kind == JobKind.TRAINING
    status = result.status
    finished = status == JobStatus.FINISHED
    finished_training = finished & training
    waits, wait_buckets = job_waits(result)
    never_started = int((training & ~np.isfinite(result.first_start)).sum())
    jct = result.end[finished_training] - jobs.submit[finished_training]
    jct_buckets = gang_bucket(jobs.total_gpus[finished_training])

    unsched = status == JobStatus.UNSCHEDULABLE
    reasons = Counter(r for j, r in result.reasons.items() if 0 <= j < n_jobs and unsched[j])
    reason_counts = dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
    ends = result.end[np.isfinite(result.end)]
    makespan = float(ends.max() - jobs.submit.min()) if ends.size and n_jobs else None
    demanded = float((jobs.duration[finished] * jobs.total_gpus[finished]).sum())

    multi = result.span_nodes > 1
    n_multi = int(multi.sum())
    n_leaf = int((multi & (result.span_leaves > 1)).sum())
    n_spine = int((multi & (result.span_spines > 1)).sum())

    by_wait = _by_bucket(waits, wait_buckets)
    queued, queued_buckets, requeued = job_queued(result)
    notes = result.info.get("notes", ())
    jwtd = JwtdStats(overall=Dist.of(waits), buckets=by_wait, never_started=never_started)
    wall = float(result.wall_seconds)
    extra, extra_rows = compute_metrics(result)  # metrics added in kant.metrics.registry
    return Metrics(
        window=win,
        gar=GarStats(window=gar_w, run=gar_run, run_window=run_window, daily=daily, busy=gar_busy,
                     busy_share=busy_share),
        sor=sor,
        gfr=GfrStats(nodes=gfr_n, gpus=gfr_g),
        queue=QueueStats(mean_len=q_mean, max_len=q_max, mean_pending_gpus=p_mean, max_pending_gpus=p_max),
        jwtd=jwtd,
        jct=JctStats(overall=Dist.of(jct), buckets=_by_bucket(jct, jct_buckets)),
        jtted=_jtted(result, est, finished_training),
        counts=Counts(
            jobs=n_jobs,
            training=int(training.sum()),
            inference=int((jobs.kind == JobKind.INFERENCE).sum()),
            finished=int(finished.sum()),
            unschedulable=int(unsched.sum()),
            unschedulable_reasons=reason_counts,
            pending=int((status == JobStatus.PENDING).sum()),
            running_at_end=int((status == JobStatus.RUNNING).sum()),
            preemptions=int(result.preemptions.sum()),
            makespan=_opt(makespan),
            gpu_seconds_executed=float(result.gpu_seconds.sum()),
            gpu_seconds_executed_finished=float(result.gpu_seconds[finished].sum()),
            gpu_seconds_demanded=demanded,
        ),
        topology=TopologyStats(
            multi_node=n_multi,
            cross_leaf=n_leaf,
            cross_spine=n_spine,
            cross_leaf_share=_share(n_leaf, n_multi),
            cross_spine_share=_share(n_spine, n_multi),
        ),
        run=RunInfo(
            policy=result.policy,
            seed=int(result.seed),
            wall_seconds=wall,
            events=int(result.events),
            cycles=int(result.cycles),
            samples=int(times.size),
            end_time=float(result.end_time),
            jobs_per_second=n_jobs / wall if wall > 0 else None,
        ),
        queued=QueuedStats(overall=Dist.of(queued), buckets=_by_bucket(queued, queued_buckets),
                           requeued=int(requeued.sum())),
        notes=tuple(str(n) for n in notes) if isinstance(notes, (list, tuple)) else (),
        extra=extra,
        extra_rows=extra_rows,
    )


# --- headline table ----------------------------------------------------------------------------
def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def format_duration(seconds: float | None) -> str:
    """Human-readable duration: s, min, h or d."""
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    s = float(seconds)
    if abs(s) < 120:
        return f"{s:.0f} s"
    if abs(s) < 7200:
        return f"{s / 60:.1f} min"
    if abs(s) < 2 * DAY:
        return f"{s / 3600:.1f} h"
    return f"{s / DAY:.1f} d"


def _num(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{x:,.{digits}f}"


def _by_gang_size(stats: JwtdStats, which: str) -> str:
    """``1: 20.1 h, 2-4: 23.2 h, ...``: one percentile per gang-size bucket that has jobs ("n/a" if none)."""
    parts = [f"{b}: {format_duration(getattr(d, which))}" for b, d in stats.buckets.items() if d.count]
    return ", ".join(parts) if parts else "n/a"


def summary_rows(m: Metrics) -> list[tuple[str, str]]:
    """The headline lines ``(label, formatted value)`` the CLI prints as a table."""
    c = m.counts
    d = m.gar.daily
    daily = "n/a" if d.p50 is None else f"{_pct(d.p10)} / {_pct(d.p50)} / {_pct(d.p90)}"
    queue_max = "n/a" if m.queue.max_len is None else str(m.queue.max_len)
    busy = _pct(m.gar.busy) if m.gar.busy_share is None else f"{_pct(m.gar.busy)} ({_pct(m.gar.busy_share)} of window)"
    q = m.queued.overall if m.queued is not None else None
    queued = "n/a" if q is None else f"{format_duration(q.p50)} / {format_duration(q.p99)}"
    work = "n/a" if not c.gpu_seconds_demanded else f"{c.gpu_seconds_executed_finished / c.gpu_seconds_demanded:.2f}x"
    return [
        ("GAR (window)", _pct(m.gar.window)),
        ("GAR while jobs wait", busy),
        ("GAR (whole run)", _pct(m.gar.run)),
        ("GAR daily P10 / P50 / P90", daily),
        ("SOR", _pct(m.sor)),
        ("GFR (nodes)", _pct(m.gfr.nodes)),
        ("GFR (GPUs)", _pct(m.gfr.gpus)),
        ("JWTD P50", format_duration(m.jwtd.overall.p50)),
        ("JWTD P90", format_duration(m.jwtd.overall.p90)),
        ("JWTD P99", format_duration(m.jwtd.overall.p99)),
        ("JWTD P90 by gang size (GPUs)", _by_gang_size(m.jwtd, "p90")),
        ("Queued in total P50 / P99", queued),
        ("JCT mean", format_duration(m.jct.overall.mean)),
        ("JCT P99", format_duration(m.jct.overall.p99)),
        ("Queue length mean / max", f"{_num(m.queue.mean_len)} / {queue_max}"),
        ("Finished / unschedulable / jobs", f"{c.finished:,} / {c.unschedulable:,} / {c.jobs:,}"),
        ("Preemptions", f"{c.preemptions:,}"),
        ("Work executed / demanded", work),
        ("Cross-leaf share of multi-node gangs", _pct(m.topology.cross_leaf_share)),
        ("Jobs simulated per second", _num(m.run.jobs_per_second, 0)),
        *m.extra_rows,
        *(("Note", note) for note in m.notes),
    ]
