"""What is in a trace: statistics of a job table, cluster or load series, as a dataclass and a rich table.

:func:`trace_info` computes a :class:`JobInfo`, :class:`NodeInfo` or :class:`LoadInfo`;
:func:`render_info` turns it into rich renderables (what ``kant trace info`` prints) and
``as_dict()`` into plain data (``kant trace info --json``).
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from rich.console import Group, RenderableType
from rich.table import Table

from kant.model.cluster import Cluster
from kant.model.job import FULL_GPU_MILLI, JobKind, JobTable
from kant.text import format_duration
from kant.traces.load import LoadSeries
from kant.traces.transforms import gpu_hours

__all__ = ["JobInfo", "LoadInfo", "NodeInfo", "TraceInfo", "render_info", "trace_info"]

_PCTS = (50, 90, 99)


def _pcts(values: np.ndarray[Any, Any]) -> dict[str, float]:
    v = values[np.isfinite(values)]
    if not v.size:
        return {}
    out = {f"p{p}": float(np.percentile(v, p)) for p in _PCTS}
    out["max"] = float(v.max())
    out["mean"] = float(v.mean())
    return out


@dataclass(frozen=True)
class JobInfo:
    """Statistics of a job table (times in seconds, rates per hour)."""

    source: str
    jobs: int
    training: int
    inference: int
    cpu_only: int
    fractional: int
    first_submit: float
    last_submit: float
    origin: str | None
    arrival_rate_per_h: float
    gang_sizes: list[tuple[str, int]]
    mean_gpus_per_job: float
    gpu_hours: float
    never_ending: int
    duration: dict[str, float]
    gpu_types: list[tuple[str, int]]
    tenants: int
    top_tenants: list[tuple[str, int]]
    priorities: list[tuple[int, int]]
    #: elastic jobs (kant.model.elastic) and the range of their bounds (min of min_workers, max of max_workers)
    elastic: int = 0
    elastic_range: tuple[int, int] | None = None

    @property
    def span(self) -> float:
        return self.last_submit - self.first_submit

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "jobs", **asdict(self), "span_s": self.span}


@dataclass(frozen=True)
class NodeInfo:
    """Statistics of a cluster."""

    nodes: int
    gpus: int
    gpu_types: list[tuple[str, int, int]]
    gpus_per_node: list[tuple[int, int]]
    cpu_milli: int
    memory_mib: int
    leaves: int
    spines: int
    nodes_per_leaf: tuple[int, int]

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "nodes", **asdict(self)}


@dataclass(frozen=True)
class LoadInfo:
    """Statistics of a load series."""

    source: str
    series: str  # "requests" or "rate"
    rows: int
    streams: int
    top_streams: list[tuple[str, int]]
    span: float
    origin: str | None
    window: float
    requests: float
    mean_rps: float
    peak_rps_per_min: float
    input_tokens: dict[str, float]
    output_tokens: dict[str, float]
    duration: dict[str, float]
    rate: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "load", **asdict(self)}


TraceInfo = JobInfo | NodeInfo | LoadInfo


def _origin(epoch: float | None) -> str | None:
    if epoch is None or not math.isfinite(epoch):
        return None
    try:
        return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return None


def _gang_buckets(jobs: JobTable) -> list[tuple[str, int]]:
    total = jobs.total_gpus
    frac = (jobs.gpus_per_worker == 1) & (jobs.gpu_milli < FULL_GPU_MILLI) & (jobs.workers == 1)
    counts: Counter[str] = Counter()
    n_cpu = int(np.count_nonzero(total == 0))
    n_frac = int(np.count_nonzero(frac))
    whole = total[(total > 0) & ~frac]
    uniq, cnt = np.unique(whole, return_counts=True)
    out: list[tuple[str, int]] = []
    if n_cpu:
        out.append(("0 (CPU)", n_cpu))
    if n_frac:
        out.append(("<1 (shared)", n_frac))
    if len(uniq) <= 12:
        out.extend((str(int(u)), int(c)) for u, c in zip(uniq, cnt, strict=True))
        return out
    # power-of-two buckets: 1, 2, 3-4, 5-8, ...
    for u, c in zip(uniq.tolist(), cnt.tolist(), strict=True):
        hi = 1 << max(0, math.ceil(math.log2(u)))
        lo = hi // 2 + 1 if hi > 1 else 1
        counts[f"{lo}-{hi}" if lo != hi else str(hi)] += c
    out.extend(sorted(counts.items(), key=lambda kv: int(kv[0].split("-")[-1])))
    return out


def _job_info(jobs: JobTable) -> JobInfo:
    n = len(jobs)
    sub = jobs.submit
    first = float(sub.min()) if n else 0.0
    last = float(sub.max()) if n else 0.0
    span_h = (last - first) / 3600.0
    total = jobs.total_gpus
    types = Counter(jobs.gpu_type.tolist())
    gtypes = sorted(((("any" if c < 0 else jobs.gpu_type_names[c]), k) for c, k in types.items()),
                    key=lambda kv: -kv[1])
    tcount = np.bincount(jobs.tenant, minlength=len(jobs.tenant_names))
    order = np.argsort(-tcount, kind="stable")
    top = [(jobs.tenant_names[i], int(tcount[i])) for i in order[:8].tolist() if tcount[i] > 0]
    pr = Counter(jobs.priority.tolist())
    finite = np.isfinite(jobs.duration)
    spec = jobs.elastic
    el_rows = [] if spec is None else [i for i in range(n) if spec.is_elastic(i)]
    el_range = None if not el_rows or spec is None else (int(spec.min_workers[el_rows].min()),
                                                          int(spec.max_workers[el_rows].max()))
    return JobInfo(
        source=jobs.source,
        jobs=n,
        training=int(np.count_nonzero(jobs.kind == int(JobKind.TRAINING))),
        inference=int(np.count_nonzero(jobs.kind == int(JobKind.INFERENCE))),
        cpu_only=int(np.count_nonzero(total == 0)),
        fractional=int(np.count_nonzero((jobs.gpus_per_worker == 1) & (jobs.gpu_milli < FULL_GPU_MILLI))),
        elastic=len(el_rows),
        elastic_range=el_range,
        first_submit=first,
        last_submit=last,
        origin=_origin(jobs.origin_epoch),
        arrival_rate_per_h=(n / span_h) if span_h > 0 else 0.0,
        gang_sizes=_gang_buckets(jobs),
        mean_gpus_per_job=float(total[total > 0].mean()) if np.any(total > 0) else 0.0,
        gpu_hours=gpu_hours(jobs),
        never_ending=int(np.count_nonzero(~finite)),
        duration=_pcts(jobs.duration),
        gpu_types=gtypes,
        tenants=int(np.count_nonzero(tcount)),
        top_tenants=top,
        priorities=sorted(pr.items()),
    )


def _node_info(cluster: Cluster) -> NodeInfo:
    types = []
    for code, name in enumerate(cluster.gpu_type_names):
        sel = cluster.gpu_type == code
        if sel.any():
            types.append((name, int(sel.sum()), int(cluster.gpus[sel].sum())))
    per = Counter(cluster.gpus.tolist())
    leaf_sizes = np.bincount(cluster.leaf, minlength=cluster.n_leaves)
    return NodeInfo(
        nodes=cluster.n_nodes,
        gpus=cluster.total_gpus,
        gpu_types=types,
        gpus_per_node=sorted(per.items()),
        cpu_milli=int(cluster.cpu_milli.sum()),
        memory_mib=int(cluster.memory_mib.sum()),
        leaves=cluster.n_leaves,
        spines=cluster.n_spines,
        nodes_per_leaf=(int(leaf_sizes.min()), int(leaf_sizes.max())) if leaf_sizes.size else (0, 0),
    )


def _load_info(load: LoadSeries) -> LoadInfo:
    counts = np.bincount(load.stream, minlength=len(load.stream_names))
    order = np.argsort(-counts, kind="stable")
    top = [(load.stream_names[i], int(counts[i])) for i in order[:8].tolist() if counts[i] > 0]
    span = load.span
    total = load.total_requests()
    _, rps = load.rate_series(60.0) if len(load) else (None, np.zeros(0))

    def tok(a: np.ndarray[Any, Any]) -> dict[str, float]:
        return _pcts(a[a >= 0].astype(np.float64))

    return LoadInfo(
        source=load.source,
        series=load.kind,
        rows=len(load),
        streams=int(np.count_nonzero(counts)),
        top_streams=top,
        span=span,
        origin=_origin(load.origin_epoch),
        window=load.window,
        requests=total,
        mean_rps=total / span if span > 0 else 0.0,
        peak_rps_per_min=float(rps.max()) if rps.size else 0.0,
        input_tokens=tok(load.input_tokens),
        output_tokens=tok(load.output_tokens),
        duration=_pcts(load.duration),
        rate=_pcts(load.rate) if load.kind == "rate" else {},
    )


def trace_info(obj: JobTable | Cluster | LoadSeries) -> TraceInfo:
    """Statistics of a job table, cluster or load series."""
    if isinstance(obj, JobTable):
        return _job_info(obj)
    if isinstance(obj, Cluster):
        return _node_info(obj)
    return _load_info(obj)


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------
#: durations as `kant trace info` prints them (three significant digits under two minutes)
_duration = functools.partial(format_duration, style="fine")


def _num(x: float) -> str:
    if abs(x) >= 100 or x == int(x):
        return f"{x:,.0f}"
    return f"{x:,.3g}"


def _kv(title: str, rows: list[tuple[str, str]]) -> Table:
    t = Table(title=title, show_header=False, title_justify="left", box=None, pad_edge=False)
    t.add_column("what", style="bold")
    t.add_column("value")
    for k, v in rows:
        t.add_row(k, v)
    return t


def _counts(title: str, head: str, rows: list[tuple[str, int]], total: int) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column(head)
    t.add_column("jobs" if title != "streams" else "rows", justify="right")
    t.add_column("share", justify="right")
    for k, v in rows:
        t.add_row(k, f"{v:,}", f"{100 * v / total:.1f}%" if total else "-")
    return t


def _pct_row(d: dict[str, float], fmt: Any) -> str:
    if not d:
        return "-"
    return ", ".join(f"{k} {fmt(d[k])}" for k in ("p50", "p90", "p99", "max") if k in d)


def render_info(info: TraceInfo, title: str = "") -> RenderableType:
    """Rich renderables for an info object (a summary table plus histograms)."""
    if isinstance(info, JobInfo):
        rows = [
            ("source", info.source or "-"),
            ("jobs", f"{info.jobs:,} ({info.training:,} training, {info.inference:,} inference)"),
            ("time span", f"{_duration(info.span)} of submissions"
             + (f", from {info.origin}" if info.origin else " (relative times)")),
            ("arrival rate", f"{info.arrival_rate_per_h:,.1f} jobs/h"),
            ("GPU-hours", f"{info.gpu_hours:,.0f}" + (f" ({info.never_ending:,} never-ending jobs not counted)"
                                                      if info.never_ending else "")),
            ("mean GPUs / GPU job", f"{info.mean_gpus_per_job:.3g}"),
            ("CPU-only jobs", f"{info.cpu_only:,}"),
            ("fractional-GPU jobs", f"{info.fractional:,}"),
            *([("elastic jobs", f"{info.elastic:,} ({info.elastic_range[0]} to {info.elastic_range[1]} workers)")]
              if info.elastic and info.elastic_range else []),
            ("duration", _pct_row(info.duration, _duration)),
            ("tenants", f"{info.tenants:,}"),
            ("priorities", ", ".join(f"{p}: {c:,}" for p, c in info.priorities)),
        ]
        parts: list[RenderableType] = [_kv(title or "jobs", rows),
                                       _counts("gang sizes (GPUs per job)", "GPUs", info.gang_sizes, info.jobs)]
        parts.append(_counts("GPU types", "type", info.gpu_types, info.jobs))
        parts.append(_counts("top tenants", "tenant", info.top_tenants, info.jobs))
        return Group(*parts)
    if isinstance(info, NodeInfo):
        rows = [
            ("nodes", f"{info.nodes:,}"),
            ("GPUs", f"{info.gpus:,}"),
            ("CPU", f"{info.cpu_milli / 1000:,.0f} cores" if info.cpu_milli else "not modelled"),
            ("memory", f"{info.memory_mib / 1024:,.0f} GiB" if info.memory_mib else "not modelled"),
            ("topology", f"{info.leaves:,} lea{'f' if info.leaves == 1 else 'ves'} "
                         f"({info.nodes_per_leaf[0]}-{info.nodes_per_leaf[1]} nodes each), "
                         f"{info.spines:,} spine{'' if info.spines == 1 else 's'}"),
            ("GPUs per node", ", ".join(f"{g}: {c:,}" for g, c in info.gpus_per_node)),
        ]
        t = Table(title="GPU types", title_justify="left")
        t.add_column("type")
        t.add_column("nodes", justify="right")
        t.add_column("GPUs", justify="right")
        for name, nodes, gpus in info.gpu_types:
            t.add_row(name, f"{nodes:,}", f"{gpus:,}")
        return Group(_kv(title or "nodes", rows), t)
    rows = [
        ("source", info.source or "-"),
        ("kind", f"{info.series}" + (f" (window {info.window:g} s)" if info.series == "rate" and info.window else "")),
        ("rows", f"{info.rows:,}"),
        ("time span", _duration(info.span) + (f", from {info.origin}" if info.origin else " (relative times)")),
        ("requests", f"{_num(info.requests)}"),
        ("mean rate", f"{info.mean_rps:,.3g} req/s"),
        ("peak rate (1-min bins)", f"{info.peak_rps_per_min:,.3g} req/s"),
        ("streams", f"{info.streams:,}"),
    ]
    if info.rate:
        rows.append(("rate per sample", _pct_row(info.rate, lambda x: f"{x:,.3g}")))
    if info.input_tokens:
        rows.append(("input tokens", _pct_row(info.input_tokens, _num)))
    if info.output_tokens:
        rows.append(("output tokens", _pct_row(info.output_tokens, _num)))
    if info.duration:
        rows.append(("service time", _pct_row(info.duration, _duration)))
    return Group(_kv(title or "load", rows), _counts("streams", "stream", info.top_streams, info.rows))
