"""The FGD paper's allocation experiment (Weng et al., ATC'23, Fig. 9 and the bar charts after it)
on the Alibaba openb trace, for any set of placement policies and pod-list variants.

What one run does (:func:`kant.experiments.fgd.core.run_core`, which drives the core scheduler), for
a pod list, a policy and a seed:

1. **Arrivals.** The pods of the list arrive one by one in creation order (stable sort on
   ``creation_time``; the ``multigpu*`` lists have no times, so file order), or in a seeded random
   order with ``order="shuffle"`` (what the FGD artifact does, ``--shuffle-pod=true``). Pods never
   leave. **Inflation** (as the artifact's ``workloadTuningConfig``, ratio 1.3): after the list,
   pods drawn uniformly with replacement from the list keep arriving until the next one would push
   the arrived GPU demand above ``inflate`` x the cluster's GPU capacity; a list whose own demand
   is larger is cut at that point instead. With ``shuffle`` the list and the drawn pods are shuffled
   together. Arrived demand counts every arrived pod, placed or not, in GPUs (ngpu x milli / 1000).
2. **Placement.** Each arriving pod is offered once to the core scheduler
   (``Framework.place`` on a ``ClusterState`` with GPU shares), whose policy plugin puts it on a node
   that fits it now; a pod that fits nowhere fails and is dropped, and later pods still arrive (as in
   the artifact). Nothing is ever preempted.
3. **Measures.** ``allocated`` = GPU shares held by placed pods. The *unallocated GPU share* is
   (capacity - allocated) / capacity. Reported: at the **first failure** (the first arriving pod
   that fits no node, not counting pods that fit no node even of the empty cluster, which are
   reported apart), at **100 % arrived** (after every pod whose arrival keeps the arrived demand
   within the capacity: the paper's headline point, where the ideal is 0 %), and at the **end**
   (inflate x capacity arrived); and the curve allocated % vs arrived % at every integer percent.

Seeds: one :class:`numpy.random.SeedSequence` per seed, spawned into an arrivals stream (the same
for every policy, so policies see identical workloads) and a policy stream (random placement and
tie-breaks). Results over seeds are reported as mean and sample standard deviation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from kant.errors import InputError
from kant.experiments.fgd.model import IntArray, Inventory, Workload

__all__ = [
    "OPENB_DIR_NAME",
    "SUMMARY_METRICS",
    "Arrivals",
    "Order",
    "RunResult",
    "aggregate",
    "curve",
    "load_inventory",
    "load_workload",
    "make_arrivals",
    "never_fits",
    "openb_dir",
    "resolve_pods",
    "summarize_run",
]

OPENB_DIR_NAME = "alibaba-openb-gpu-v2023"
Order = Literal["creation", "shuffle"]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


# ---------------------------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------------------------
def openb_dir(trace_dir: str | Path | None = None) -> Path:
    """The openb trace folder: ``trace_dir`` if given, else ``<shared traces>/alibaba-openb-gpu-v2023``."""
    if trace_dir is not None:
        return Path(trace_dir)
    from kant.traces.registry import shared_traces_dir

    base = shared_traces_dir()
    if base is None:
        raise InputError("openb trace", "shared traces folder not found; pass --trace-dir or set KANT_TRACES_DIR")
    return base / OPENB_DIR_NAME


def resolve_pods(names: Sequence[str], trace_dir: str | Path | None = None) -> list[tuple[str, Path]]:
    """``(label, path)`` per pod list: a variant name (``default``, ``gpushare40``, ...), ``all``
    (every variant), or a CSV path (label = file stem)."""
    from kant.traces.openb import OPENB_VARIANTS

    out: list[tuple[str, Path]] = []
    for name in names:
        if name == "all":
            out.extend((v, openb_dir(trace_dir) / f"openb_pod_list_{v}.csv") for v in OPENB_VARIANTS)
        elif name in OPENB_VARIANTS:
            out.append((name, openb_dir(trace_dir) / f"openb_pod_list_{name}.csv"))
        elif name.endswith((".csv", ".csv.gz")):
            p = Path(name)
            out.append((p.name.split(".")[0].removeprefix("openb_pod_list_"), p))
        else:
            raise InputError(name, f"unknown pod list; expected all, a CSV path or one of {', '.join(OPENB_VARIANTS)}")
    seen: set[str] = set()
    dedup = []
    for label, p in out:
        if label not in seen:
            seen.add(label)
            dedup.append((label, p))
    return dedup


@lru_cache(maxsize=4)
def load_inventory(path: str) -> Inventory:
    """An openb node list (GPU nodes) as an :class:`Inventory`."""
    from kant.traces.openb import read_openb_nodes

    return Inventory.from_cluster(read_openb_nodes(path))


@lru_cache(maxsize=32)
def load_workload(path: str, nodes: str, limit: int | None = None) -> Workload:
    """An openb pod list (sorted by creation time, stable) as a :class:`Workload`; ``limit`` keeps
    the first pods only."""
    from kant.traces.openb import read_openb_pods

    inv = load_inventory(nodes)
    jobs = read_openb_pods(path, gpu_types=inv.model_names)
    if limit is not None:
        jobs = jobs.take(np.arange(min(limit, len(jobs))))
    return Workload.from_jobs(jobs, inv)


# ---------------------------------------------------------------------------------------------
# arrivals
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Arrivals:
    """Rows of the workload in arrival order; ``sampled[i]`` is True for a pod drawn by inflation."""

    rows: IntArray
    sampled: BoolArray


def make_arrivals(
    workload: Workload, capacity_milli: int, inflate: float, order: Order, rng: np.random.Generator
) -> Arrivals:
    """The arrival sequence (see the module docstring). ``inflate`` <= 0 means the list as is."""
    n = len(workload)
    gm = workload.gpu_milli
    base = np.arange(n, dtype=np.int64)
    if order == "shuffle":
        base = rng.permutation(base)
    if inflate <= 0 or n == 0:
        return Arrivals(base, np.zeros(base.size, dtype=bool))
    target = inflate * capacity_milli
    cum = np.cumsum(gm[base])
    if cum.size and cum[-1] > target:
        k = int(np.searchsorted(cum, target, side="right"))
        return Arrivals(base[:k], np.zeros(k, dtype=bool))
    total = int(cum[-1]) if cum.size else 0
    mean = max(float(gm.mean()), 1.0)
    drawn: list[IntArray] = []
    while True:
        chunk = rng.integers(0, n, size=max(256, int((target - total) / mean * 1.1) + 16))
        c = total + np.cumsum(gm[chunk])
        stop = int(np.searchsorted(c, target, side="right"))
        drawn.append(chunk[:stop])
        if stop < chunk.size or not (gm > 0).any():
            break
        total = int(c[-1])
    extra = np.concatenate(drawn) if drawn else np.zeros(0, dtype=np.int64)
    rows = np.concatenate([base, extra])
    sampled = np.concatenate([np.zeros(base.size, dtype=bool), np.ones(extra.size, dtype=bool)])
    if order == "shuffle":
        perm = rng.permutation(rows.size)
        rows, sampled = rows[perm], sampled[perm]
    return Arrivals(rows, sampled)


def never_fits(inventory: Inventory, workload: Workload) -> BoolArray:
    """Pods of ``workload`` that fit no node even of the empty cluster (CPU, memory, GPU count, GPU
    model; a share needs one GPU)."""
    n = len(workload)
    out = np.zeros(n, dtype=bool)
    if not n:
        return out
    key = np.stack([workload.cpu, workload.mem, workload.ngpu, workload.spec], axis=1)
    uniq, inv = np.unique(key, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    for u, (cpu, mem, ngpu, spec) in enumerate(uniq.tolist()):
        ok = (inventory.cpu >= cpu) & (inventory.mem >= mem)
        if ngpu:
            ok &= inventory.ngpu >= ngpu
            if spec >= 0:
                ok &= workload.allowed[spec][inventory.model]
        if not ok.any():
            out[inv == u] = True
    return out


# ---------------------------------------------------------------------------------------------
# one run
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class RunResult:
    """One (pod list, policy, seed) run: per arrival, its GPU demand, whether it was placed and on
    which node (-1 if not), whether it could never fit, and whether it was drawn by inflation; plus
    the wall time of the placement loop."""

    pods: str
    policy: str
    seed: int
    capacity_milli: int
    gpu_milli: IntArray
    placed: BoolArray
    node: IntArray
    never: BoolArray
    sampled: BoolArray
    time_s: float
    n_list: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n_arrivals(self) -> int:
        return int(self.gpu_milli.size)


# ---------------------------------------------------------------------------------------------
# measures
# ---------------------------------------------------------------------------------------------
#: per-run scalar measures, in report order: (key, label)
SUMMARY_METRICS: tuple[tuple[str, str], ...] = (
    ("first_fail_arrived_pct", "arrived % at first failure"),
    ("first_fail_unalloc_pct", "unallocated GPU % at first failure"),
    ("unalloc_at_100_pct", "unallocated GPU % at 100% arrived"),
    ("arrived_end_pct", "arrived % at end"),
    ("unalloc_end_pct", "unallocated GPU % at end"),
    ("failed_pods", "failed pods"),
    ("failed_gpu_pct", "failed GPU demand (% of capacity)"),
    ("time_s", "placement time (s)"),
)


def curve(result: RunResult) -> tuple[IntArray, FloatArray]:
    """Allocated GPU % of capacity after every arrival that keeps the arrived demand within x % of
    the capacity, for x = 0, 1, ..., floor(final arrived %)."""
    cap = result.capacity_milli
    arrived = np.cumsum(result.gpu_milli)
    alloc = np.cumsum(np.where(result.placed, result.gpu_milli, 0))
    top = math.floor(100.0 * arrived[-1] / cap + 1e-9) if arrived.size else 0
    xs = np.arange(top + 1, dtype=np.int64)
    k = np.searchsorted(arrived, xs * cap / 100.0 + 1e-6, side="right")
    vals = np.where(k > 0, alloc[np.maximum(k - 1, 0)], 0) if arrived.size else np.zeros(xs.size)
    return xs, 100.0 * vals / cap


def summarize_run(result: RunResult) -> dict[str, Any]:
    """Scalar measures of one run (keys of :data:`SUMMARY_METRICS` plus counts)."""
    cap = result.capacity_milli
    gm = result.gpu_milli
    arrived = np.cumsum(gm)
    alloc = np.cumsum(np.where(result.placed, gm, 0))
    failed = ~result.placed
    real_fail = failed & ~result.never
    out: dict[str, Any] = {
        "pods": result.pods,
        "policy": result.policy,
        "seed": result.seed,
        "arrivals": result.n_arrivals,
        "list_pods": result.n_list,
        "sampled_pods": int(result.sampled.sum()),
        "placed_pods": int(result.placed.sum()),
        "failed_pods": int(real_fail.sum()),
        "never_fit_pods": int(result.never.sum()),
        "failed_gpu_pct": 100.0 * float(gm[real_fail].sum()) / cap,
        "time_s": result.time_s,
    }
    if real_fail.any():
        i = int(np.flatnonzero(real_fail)[0])
        out["first_fail_arrival"] = i + 1
        out["first_fail_arrived_pct"] = 100.0 * float(arrived[i]) / cap
        out["first_fail_alloc_pct"] = 100.0 * float(alloc[i]) / cap
        out["first_fail_unalloc_pct"] = 100.0 - out["first_fail_alloc_pct"]
    else:
        out["first_fail_arrival"] = 0
        out["first_fail_arrived_pct"] = math.nan
        out["first_fail_alloc_pct"] = math.nan
        out["first_fail_unalloc_pct"] = math.nan
    end_arr = float(arrived[-1]) if arrived.size else 0.0
    end_alloc = float(alloc[-1]) if alloc.size else 0.0
    out["arrived_end_pct"] = 100.0 * end_arr / cap
    out["alloc_end_pct"] = 100.0 * end_alloc / cap
    out["unalloc_end_pct"] = 100.0 - out["alloc_end_pct"]
    out["capacity_gpus"] = cap / 1000.0
    out["arrived_end_gpus"] = end_arr / 1000.0
    out["alloc_end_gpus"] = end_alloc / 1000.0
    if end_arr >= cap:
        k = int(np.searchsorted(arrived, cap, side="right"))
        a100 = float(alloc[k - 1]) if k else 0.0
        out["alloc_at_100_pct"] = 100.0 * a100 / cap
        out["unalloc_at_100_pct"] = 100.0 - out["alloc_at_100_pct"]
    else:
        out["alloc_at_100_pct"] = math.nan
        out["unalloc_at_100_pct"] = math.nan
    return out


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    v = np.array([x for x in values if not math.isnan(x)], dtype=float)
    if not v.size:
        return math.nan, math.nan
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def aggregate(results: Sequence[RunResult]) -> dict[str, Any]:
    """Mean and sd over seeds per (pod list, policy): ``{"rows": [...], "curves": [...],
    "reduction": [...]}``. ``reduction`` is FGD's relative reduction of the unallocated GPU share at
    100 % arrived vs each other policy, 1 - U_fgd / U_other (the paper's "up to 49 % fewer")."""
    groups: dict[tuple[str, str], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.pods, r.policy), []).append(r)
    rows: list[dict[str, Any]] = []
    curves: list[dict[str, Any]] = []
    for (pods, policy), rs in groups.items():
        sums = [summarize_run(r) for r in rs]
        row: dict[str, Any] = {"pods": pods, "policy": policy, "seeds": len(rs)}
        for key, _ in SUMMARY_METRICS:
            m, s = _mean_sd([float(x[key]) for x in sums])
            row[f"{key}_mean"], row[f"{key}_sd"] = m, s
        row["never_fit_pods"] = sums[0]["never_fit_pods"]
        rows.append(row)
        cs = [curve(r) for r in rs]
        top = min(len(c[0]) for c in cs)
        mat = np.stack([c[1][:top] for c in cs])
        for x in range(top):
            col = mat[:, x]
            cap_gpus = rs[0].capacity_milli / 1000.0
            curves.append({
                "pods": pods, "policy": policy, "arrived_pct": x,
                "alloc_pct_mean": float(col.mean()),
                "alloc_pct_sd": float(col.std(ddof=1)) if col.size > 1 else 0.0,
                "arrived_gpus": x * cap_gpus / 100.0,
                "alloc_gpus_mean": float(col.mean()) * cap_gpus / 100.0,
            })
    reduction: list[dict[str, Any]] = []
    by = {(r["pods"], r["policy"]): r for r in rows}
    for (pods, policy), row in by.items():
        if policy == "fgd":
            continue
        f = by.get((pods, "fgd"))
        if f is None:
            continue
        for key in ("unalloc_at_100_pct", "unalloc_end_pct", "first_fail_unalloc_pct"):
            other, mine = row[f"{key}_mean"], f[f"{key}_mean"]
            red = 1.0 - mine / other if other and not math.isnan(other) and not math.isnan(mine) else math.nan
            reduction.append({"pods": pods, "baseline": policy, "measure": key, "fgd": mine, "baseline_value": other,
                              "reduction_pct": 100.0 * red})
    return {"rows": rows, "curves": curves, "reduction": reduction}

