"""Workload transforms: every function takes a table and returns a new one; random ones take a seed.

* :func:`window` — keep the jobs submitted in ``[start, end)``, optionally re-based to start at 0;
* :func:`scale_load` — compress (``factor > 1``) or stretch (``< 1``) arrivals: submit / factor;
* :func:`sample` — a seeded random subset (a fraction or a count), order kept;
* :func:`tenants_from_vcs` — tenants from virtual clusters: rename, or keep the ``top`` VCs by
  GPU-hours and merge the rest; :func:`assign_tenants` draws tenants for traces without VCs;
  :func:`tenant_quotas` splits a cluster's GPUs among tenants by their GPU-hours;
* :func:`resize_gangs` — re-size gangs toward a target mean GPUs per job (LLM-era mixes: the
  AcmeTrace summary averages :data:`ACME_SEREN_MEAN_GPUS` and :data:`ACME_KALOS_MEAN_GPUS`);
* :func:`require_gpu_types` — check (or drop) jobs asking for a GPU type no node has;
* :func:`with_topology` — regroup a cluster's nodes into leaves and spines.

Bad parameters raise :class:`~kant.errors.ConfigError` naming the function and parameter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from kant.errors import ConfigError, InputError
from kant.model.cluster import Cluster, NodeSpec
from kant.model.job import FULL_GPU_MILLI, JOB_COLUMNS, JobTable
from kant.traces._csv import Problems, split_gangs
from kant.traces.schema import Coded, build_job_table, gpu_type_compatibility

__all__ = [
    "ACME_KALOS_MEAN_GPUS",
    "ACME_SEREN_MEAN_GPUS",
    "assign_tenants",
    "gpu_hours",
    "mean_gpus_per_job",
    "require_gpu_types",
    "resize_gangs",
    "sample",
    "scale_load",
    "tenant_quotas",
    "tenants_from_vcs",
    "window",
    "with_topology",
]

IntArray = npt.NDArray[np.int64]

#: mean GPUs per GPU job in AcmeTrace's Seren cluster (acmetrace-summary/cluster_summary.csv, avg_gpu_num)
ACME_SEREN_MEAN_GPUS = 5.68
#: the same for AcmeTrace's Kalos cluster
ACME_KALOS_MEAN_GPUS = 26.77


def _rebuild(jobs: JobTable, **changes: object) -> JobTable:
    """A copy of ``jobs`` with some columns replaced (same rows, same vocabularies)."""
    cols = {c: getattr(jobs, c).copy() for c in JOB_COLUMNS}
    meta: dict[str, object] = {
        "names": jobs.names,
        "gpu_type_names": jobs.gpu_type_names,
        "tenant_names": jobs.tenant_names,
        "user_names": jobs.user_names,
        "source": jobs.source,
        "origin_epoch": jobs.origin_epoch,
    }
    for k, v in changes.items():
        if k in cols:
            cols[k] = np.asarray(v)
        else:
            meta[k] = v
    return JobTable(**cols, **meta)  # type: ignore[arg-type]


def _bad(func: str, param: str, message: str) -> ConfigError:
    return ConfigError(func, param, message)


def gpu_hours(jobs: JobTable) -> float:
    """GPU-hours of the jobs with a finite duration (fractional GPUs count their share)."""
    finite = np.isfinite(jobs.duration)
    share = np.where((jobs.gpus_per_worker == 1) & (jobs.gpu_milli < FULL_GPU_MILLI), jobs.gpu_milli / 1000.0,
                     jobs.total_gpus.astype(np.float64))
    return float(np.sum(share[finite] * jobs.duration[finite]) / 3600.0)


def mean_gpus_per_job(jobs: JobTable) -> float:
    """Mean GPUs per GPU job (jobs with at least one GPU), as the AcmeTrace summary counts it."""
    g = jobs.total_gpus[jobs.total_gpus > 0]
    return float(g.mean()) if g.size else 0.0


def window(jobs: JobTable, start: float | None = None, end: float | None = None, *, rebase: bool = True) -> JobTable:
    """Jobs submitted in ``[start, end)`` (seconds from the origin; None = open).

    With ``rebase`` the window's start becomes time 0 (and ``origin_epoch`` moves with it).
    Durations are kept, so jobs may run past ``end``.
    """
    lo = -math.inf if start is None else float(start)
    hi = math.inf if end is None else float(end)
    if not lo < hi:
        raise _bad("window", "end", f"must be after start ({lo:g} .. {hi:g})")
    rows = np.flatnonzero((jobs.submit >= lo) & (jobs.submit < hi))
    out = jobs.take(rows)
    if rebase and start is not None:
        origin = None if jobs.origin_epoch is None else jobs.origin_epoch + lo
        out = _rebuild(out, submit=out.submit - lo, origin_epoch=origin)
    return out


def scale_load(jobs: JobTable, factor: float) -> JobTable:
    """Compress (``factor > 1``: arrivals ``factor`` times as dense) or stretch arrivals.

    Submit times are divided by ``factor`` (about the origin); durations are unchanged, so the
    offered load scales by ``factor``.
    """
    if not (factor > 0 and math.isfinite(factor)):
        raise _bad("scale_load", "factor", f"must be a positive number, got {factor!r}")
    return _rebuild(jobs, submit=jobs.submit / factor)


def sample(jobs: JobTable, *, fraction: float | None = None, n: int | None = None, seed: int = 0) -> JobTable:
    """A seeded random subset of ``fraction`` of the jobs or ``n`` jobs, in the original order."""
    if (fraction is None) == (n is None):
        raise _bad("sample", "fraction", "give exactly one of fraction or n")
    total = len(jobs)
    if fraction is not None:
        if not 0 < fraction <= 1:
            raise _bad("sample", "fraction", f"must be in (0, 1], got {fraction!r}")
        k = round(total * fraction)
    else:
        assert n is not None
        if not 0 <= n <= total:
            raise _bad("sample", "n", f"must be between 0 and {total}, got {n!r}")
        k = n
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(total, size=k, replace=False)) if k < total else np.arange(total)
    return jobs.take(rows)


def _tenant_hours(jobs: JobTable) -> npt.NDArray[np.float64]:
    finite = np.isfinite(jobs.duration)
    w = np.where(finite, jobs.duration, 0.0) * jobs.total_gpus
    return np.asarray(np.bincount(jobs.tenant, weights=w, minlength=len(jobs.tenant_names)), dtype=np.float64)


def tenants_from_vcs(
    jobs: JobTable,
    *,
    mapping: Mapping[str, str] | None = None,
    top: int | None = None,
    other: str = "other",
) -> JobTable:
    """Tenants from the trace's virtual clusters.

    ``mapping`` renames VCs (several may map to one tenant; unmapped names are kept); ``top``
    then keeps the ``top`` tenants with the most GPU-hours and merges the rest into ``other``.
    Users are left as they are.
    """
    names = list(jobs.tenant_names)
    if mapping:
        unknown = [k for k in mapping if k not in names]
        if unknown:
            raise _bad("tenants_from_vcs", "mapping", f"unknown virtual cluster(s) {', '.join(unknown)}")
        names = [mapping.get(nm, nm) for nm in names]
    if top is not None:
        if top < 1:
            raise _bad("tenants_from_vcs", "top", "must be >= 1")
        hours = _tenant_hours(jobs)
        merged: dict[str, float] = {}
        for nm, h in zip(names, hours.tolist(), strict=True):
            merged[nm] = merged.get(nm, 0.0) + h
        keep = set(sorted(merged, key=lambda k: (-merged[k], k))[:top])
        names = [nm if nm in keep else other for nm in names]
    per_code = np.asarray(names, dtype=object)
    new = per_code[jobs.tenant] if len(jobs) else np.zeros(0, dtype=object)
    return build_job_table(
        names=jobs.names, submit=jobs.submit, duration=jobs.duration, workers=jobs.workers,
        gpus_per_worker=jobs.gpus_per_worker, gpu_milli=jobs.gpu_milli, cpu_milli=jobs.cpu_milli,
        memory_mib=jobs.memory_mib, gpu_type=Coded(jobs.gpu_type, jobs.gpu_type_names), priority=jobs.priority,
        tenant=new, user=Coded(jobs.user, jobs.user_names), estimate=jobs.estimate, kind=jobs.kind,
        source=jobs.source, origin_epoch=jobs.origin_epoch, sort=False,
    )


def assign_tenants(jobs: JobTable, n_tenants: int, *, seed: int = 0, zipf: float = 1.0,
                   prefix: str = "tenant") -> JobTable:
    """Draw a tenant per job (``tenant-0`` ... ``tenant-<n-1>``), tenant ``k`` with weight
    ``1 / (k+1) ** zipf`` (``zipf=0``: all equal). Users become the tenants too."""
    if n_tenants < 1:
        raise _bad("assign_tenants", "n_tenants", "must be >= 1")
    if zipf < 0:
        raise _bad("assign_tenants", "zipf", "must be >= 0")
    w = 1.0 / np.arange(1, n_tenants + 1, dtype=np.float64) ** zipf
    rng = np.random.default_rng(seed)
    codes = rng.choice(n_tenants, size=len(jobs), p=w / w.sum()).astype(np.int64)
    names = tuple(f"{prefix}-{k}" for k in range(n_tenants))
    return _rebuild(jobs, tenant=codes, user=codes.copy(), tenant_names=names, user_names=names)


def tenant_quotas(jobs: JobTable, total_gpus: int) -> dict[str, int]:
    """Split ``total_gpus`` among the tenants in proportion to their GPU-hours (largest remainder)."""
    if total_gpus < 0:
        raise _bad("tenant_quotas", "total_gpus", "must be >= 0")
    hours = _tenant_hours(jobs)
    if hours.sum() <= 0:
        hours = np.ones_like(hours)
    exact = hours / hours.sum() * total_gpus
    base = np.floor(exact).astype(np.int64)
    left = total_gpus - int(base.sum())
    order = np.argsort(-(exact - base), kind="stable")
    base[order[:left]] += 1
    return {nm: int(q) for nm, q in zip(jobs.tenant_names, base.tolist(), strict=True)}


def resize_gangs(
    jobs: JobTable,
    target_mean: float,
    *,
    seed: int = 0,
    max_gpus: int = 1024,
    max_gpus_per_worker: int = 8,
    preserve_gpu_time: bool = False,
) -> JobTable:
    """Re-size gangs so the mean GPUs per GPU job becomes ``target_mean``.

    LLM-era clusters keep many small jobs (AcmeTrace's median is still 1 GPU) but add a heavy tail
    of large ones, so instead of scaling every job this *promotes* a random subset: jobs asking for
    whole GPUs are visited in a seeded random order, each with a random factor ``2**k`` (``k``
    uniform in ``1 .. log2(max_gpus / size)``), and promoted until the mean reaches the target
    (it lands within one job's change of it). A target below the current mean demotes instead
    (``size // 2**k``, ``k`` uniform in ``1 .. log2(size)``). Re-sized gangs are split into workers
    of at most ``max_gpus_per_worker``. With ``preserve_gpu_time`` a re-sized job's duration is
    scaled so it keeps its GPU-time (perfect scaling); by default durations are kept.
    """
    if not (target_mean >= 1 and math.isfinite(target_mean)):
        raise _bad("resize_gangs", "target_mean", f"must be a number >= 1, got {target_mean!r}")
    if max_gpus < 1 or max_gpus_per_worker < 1:
        raise _bad("resize_gangs", "max_gpus", "max_gpus and max_gpus_per_worker must be >= 1")
    size = jobs.total_gpus.astype(np.int64)
    gpu_jobs = size > 0
    n_gpu = int(gpu_jobs.sum())
    if n_gpu == 0:
        raise _bad("resize_gangs", "jobs", "the trace has no GPU jobs to re-size")
    current = float(size[gpu_jobs].mean())
    eligible = gpu_jobs & ~((jobs.gpus_per_worker == 1) & (jobs.gpu_milli < FULL_GPU_MILLI))
    need = (target_mean - current) * n_gpu  # GPUs to add (or, if negative, remove) in total
    if abs(need) < 0.5:
        return jobs
    rng = np.random.default_rng(seed)
    up = need > 0
    with np.errstate(divide="ignore"):
        if up:
            k_max = np.where(eligible & (size <= max_gpus), np.floor(np.log2(max_gpus / np.maximum(size, 1))), 0)
        else:
            k_max = np.where(eligible & (size >= 2), np.floor(np.log2(np.maximum(size, 1))), 0)
    k_max = k_max.astype(np.int64)
    order = rng.permutation(np.flatnonzero(k_max >= 1))
    k = np.floor(rng.random(order.size) * k_max[order]).astype(np.int64) + 1

    def change(kk: IntArray) -> npt.NDArray[np.int64]:
        s = size[order]
        out = (s << kk) - s if up else s - np.maximum(s >> kk, 1)
        return np.asarray(out, dtype=np.int64)

    gains = change(k)
    if gains.sum() < abs(need):  # the random factors fall short: use the largest ones
        k = k_max[order]
        gains = change(k)
        if gains.sum() < abs(need):
            best = current + (1 if up else -1) * float(gains.sum()) / n_gpu
            raise _bad("resize_gangs", "target_mean", f"{target_mean:g} is out of reach with max_gpus={max_gpus} "
                       f"(at {'most' if up else 'least'} {best:.3g})")
    cum = np.cumsum(gains)
    m = int(np.searchsorted(cum, abs(need)))  # the first prefix that reaches the target
    if m > 0 and abs(cum[m - 1] - abs(need)) < abs(cum[m] - abs(need)):
        m -= 1
    picked = order[: m + 1]
    new = size.copy()
    new[picked] = (size[picked] << k[: m + 1]) if up else np.maximum(size[picked] >> k[: m + 1], 1)
    changed = new != size
    workers, per = split_gangs(new, max_gpus_per_worker)
    workers = np.where(changed, workers, jobs.workers)
    per = np.where(changed, per, jobs.gpus_per_worker)
    duration = jobs.duration
    if preserve_gpu_time:
        duration = np.where(changed, jobs.duration * size / np.maximum(new, 1), jobs.duration)
    return _rebuild(jobs, workers=workers, gpus_per_worker=per, duration=duration)


def require_gpu_types(jobs: JobTable, cluster: Cluster, *, problems: Problems | None = None) -> JobTable:
    """Jobs whose GPU type (or every alternative of a ``A|B`` set) no node has: an error naming
    the job, or with ``Problems(skip=True)`` dropped and recorded. Returns the jobs kept."""
    problems = problems if problems is not None else Problems()
    compat = gpu_type_compatibility(jobs.gpu_type_names, cluster.gpu_type_names)
    ok_code = np.asarray(compat.any(axis=1), dtype=bool)
    bad = ~ok_code[jobs.gpu_type] & (jobs.total_gpus > 0)
    if not bad.any():
        return jobs
    have = ", ".join(cluster.gpu_type_names)
    for i in np.flatnonzero(bad).tolist():
        wanted = jobs.gpu_type_names[int(jobs.gpu_type[i])]
        problems.add(InputError(jobs.source or "jobs", f"job {jobs.names[i]!r} needs a GPU type no node has "
                                f"(cluster has {have})", column="gpu_type", value=wanted))
    return jobs.take(np.flatnonzero(~bad))


def with_topology(cluster: Cluster, *, nodes_per_leaf: int, leaves_per_spine: int) -> Cluster:
    """The same nodes regrouped in order: ``nodes_per_leaf`` per leaf, ``leaves_per_spine`` per spine."""
    if nodes_per_leaf < 1 or leaves_per_spine < 1:
        raise _bad("with_topology", "nodes_per_leaf", "nodes_per_leaf and leaves_per_spine must be >= 1")
    nodes = [
        NodeSpec(cluster.names[i], cluster.gpu_type_names[int(cluster.gpu_type[i])], int(cluster.gpus[i]),
                 int(cluster.cpu_milli[i]), int(cluster.memory_mib[i]))
        for i in range(cluster.n_nodes)
    ]
    return Cluster.from_nodes(nodes, nodes_per_leaf=nodes_per_leaf, leaves_per_spine=leaves_per_spine)
