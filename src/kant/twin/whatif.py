"""What-if comparisons: one snapshot run forward as it is and under changes, side by side.

A :class:`Scenario` changes what the forward run sees: another policy, N more nodes, nodes drained
(cordoned: their running jobs go on, nothing new lands), tenants' quotas. :func:`compare` runs the
snapshot as it is ("now") and under each scenario, with the same sampled run times for every
scenario (run ``k`` draws the same numbers in each), for ``horizon_s`` seconds, and reports per
scenario the GAR and GFR over the horizon (time-weighted, averaged over the runs), the predicted
waits of the jobs pending now (JWTD, from their P50 starts; a job that does not start within the
horizon counts in ``not_started``), and each pending job's predicted start.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from kant.config.policy import Policy
from kant.errors import KantError
from kant.metrics.recorder import SimResult
from kant.metrics.summary import BUCKETS, gang_bucket
from kant.metrics.timeline import Timeline
from kant.model.cluster import Cluster, NodeSpec
from kant.plugins.quota import with_tenant_quotas
from kant.scheduler import CORDONED
from kant.twin.forward import run_forward
from kant.twin.predict import DEFAULT_RUNS, Prediction, RatioModel, arrival_model, covers, draw_run
from kant.twin.snapshot import TwinSnapshot

__all__ = ["Comparison", "Scenario", "ScenarioResult", "compare", "compare_within", "NodeTemplate"]


@dataclass(frozen=True)
class NodeTemplate:
    """What an added node has (default: the snapshot's most common node)."""

    gpu_type: str
    gpus: int
    cpu_milli: int = 0
    memory_mib: int = 0


@dataclass(frozen=True)
class Scenario:
    """One change to try (see the module docstring). ``quotas`` maps a tenant to its new
    (guaranteed, max) GPUs (None: unchanged / no limit)."""

    name: str
    policy: Policy | None = None
    add_nodes: int = 0
    node: NodeTemplate | None = None
    drain: tuple[str, ...] = ()
    quotas: Mapping[str, tuple[int | None, int | None]] = field(default_factory=dict)

    def text(self, node: NodeTemplate | None = None) -> str:
        """The changes in words: ``+8 nodes of 8 x V100, policy slurm-backfill`` (``node``: the
        template the added nodes copy when the scenario names none); ``as it is`` for none."""
        parts = []
        if self.add_nodes:
            tpl = self.node or node
            parts.append(f"+{self.add_nodes} node{'s' if self.add_nodes != 1 else ''}"
                         + (f" of {tpl.gpus} x {tpl.gpu_type}" if tpl is not None else ""))
        if self.policy is not None:
            parts.append(f"policy {self.policy.name}")
        if self.drain:
            shown = ", ".join(self.drain[:3]) + (f" and {len(self.drain) - 3} more" if len(self.drain) > 3 else "")
            parts.append(f"drain {shown}")
        for t, (g, m) in self.quotas.items():
            parts.append(f"quota {t} {'-' if g is None else g}:{'-' if m is None else m} GPUs")
        return ", ".join(parts) or "as it is"

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.policy is not None:
            out["policy"] = self.policy.name
        if self.add_nodes:
            out["add_nodes"] = self.add_nodes
            if self.node is not None:
                out["node"] = {"gpu_type": self.node.gpu_type, "gpus": self.node.gpus}
        if self.drain:
            out["drain"] = list(self.drain)
        if self.quotas:
            out["quotas"] = {t: {"guaranteed": g, "max": m} for t, (g, m) in self.quotas.items()}
        return out


@dataclass(frozen=True)
class ScenarioResult:
    name: str
    policy: str
    changes: Mapping[str, Any]
    gar: float | None
    gfr_nodes: float | None
    waits: Mapping[str, Any]
    prediction: Prediction
    changes_text: str = "as it is"
    capacity: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self, tenant: str | None = None) -> dict[str, Any]:
        """JSON-safe; ``tenant`` limits the per-job list to that tenant's jobs."""
        jobs = self.prediction.pending()
        if tenant is not None:
            jobs = [j for j in jobs if j["tenant"] == tenant]
        return {"name": self.name, "policy": self.policy, "changes": dict(self.changes),
                "changes_text": self.changes_text, "gar": self.gar, "gfr_nodes": self.gfr_nodes,
                "waits": dict(self.waits), "jobs": jobs, "band_covers": self.prediction.covers,
                **dict(self.capacity)}


def _apply(snap: TwinSnapshot, sc: Scenario) -> tuple[Policy, Cluster, Any, NodeTemplate | None]:
    policy = sc.policy or snap.policy
    if sc.quotas:
        policy = with_tenant_quotas(policy, sc.quotas, hold_over_max=True)  # (as live: the job waits)
    nodes = list(snap.nodes)
    names = {n.name for n in nodes}
    if sc.add_nodes:
        tpl = sc.node
        if tpl is None:
            if not nodes:
                raise KantError("add_nodes: the cluster has no node to copy; give the node to add")
            common, _ = Counter((n.gpu_type, n.gpus, n.cpu_milli, n.memory_mib) for n in nodes).most_common(1)[0]
            tpl = NodeTemplate(*common)
        for k in range(sc.add_nodes):
            name = f"whatif-{k}"
            while name in names:
                name += "+"
            names.add(name)
            nodes.append(NodeSpec(name, tpl.gpu_type, tpl.gpus, tpl.cpu_milli, tpl.memory_mib, "whatif", "whatif"))
    else:
        tpl = None
    flags = dict(snap.sched.node_flags)
    for name in sc.drain:
        if name not in names:
            raise KantError(f"drain: no node {name!r} in the cluster")
        flags[name] = flags.get(name, 0) | CORDONED
    sched = replace(snap.sched, node_flags=flags)
    return policy, Cluster.from_nodes(nodes), sched, tpl


def _waits(snap: TwinSnapshot, starts: np.ndarray) -> dict[str, Any]:
    rows = list(snap.sched.pending)
    submit = np.asarray(snap.jobs["submit"], dtype=np.float64)[rows] if rows else np.zeros(0)
    s = starts[rows] if rows else np.zeros(0)
    started = ~np.isnan(s)
    w = s[started] - submit[started]

    def pct(q: float) -> float | None:
        return float(np.percentile(w, q)) if w.size else None

    ahead = s[started] - snap.now

    def ahead_pct(q: float) -> float | None:
        return float(np.percentile(ahead, q)) if ahead.size else None

    return {"pending": len(rows), "started": int(started.sum()), "not_started": int((~started).sum()),
            "mean": float(w.mean()) if w.size else None, "p50": pct(50), "p90": pct(90), "p99": pct(99),
            "max": float(w.max()) if w.size else None,
            # the same predicted starts counted from now (the time base of the per-job list)
            "from_now_p50": ahead_pct(50), "from_now_p90": ahead_pct(90),
            "from_now_max": float(ahead.max()) if ahead.size else None}



def _capacity(snap: TwinSnapshot, runs: Sequence[SimResult], lo: float, hi: float,
              sampled: bool) -> dict[str, Any]:
    """Capacity-planning figures over ``[lo, hi]``, pooled over the runs: the wait (start - submit)
    of every job that waited during the horizon (pending now, or sampled to arrive in it), P50 and
    P90 by gang size (GPUs asked, docs/metrics.md's buckets; nearest rank; a job not started by
    ``hi`` counts as later than any time: a quantile that lands on one is None, "> horizon"), and
    the queue length (time-weighted mean over the horizon, and at its end), averaged over the runs, and
    the sampled arrivals: how many, and their planned GPU-hours (GPUs times the estimate), per run."""
    waits: dict[str, list[float]] = {g: [] for g in BUCKETS}
    queue_mean, queue_end, arrived, planned = [], [], [], []
    n = len(snap)
    pending = np.zeros(n, dtype=bool)
    pending[list(snap.sched.pending)] = True
    for run in runs:
        jobs = run.jobs
        gpus = np.asarray(jobs.workers, dtype=np.int64) * np.asarray(jobs.gpus_per_worker, dtype=np.int64)
        submit = np.asarray(jobs.submit, dtype=np.float64)
        counted = np.concatenate([pending, (submit[n:] >= lo) & (submit[n:] < hi)])
        arrived.append(int(counted[n:].sum()))
        came = np.flatnonzero(counted[n:]) + n
        planned.append(float(np.dot(gpus[came], np.asarray(jobs.estimate, dtype=np.float64)[came])) / 3600.0)
        start = np.asarray(run.first_start, dtype=np.float64)
        wait = np.where(np.isnan(start) | (start > hi), np.inf, start - submit)
        bucket = gang_bucket(gpus)
        for k, label in enumerate(BUCKETS):
            waits[label].extend(wait[counted & (bucket == k)].tolist())
        tl = Timeline(run, start=lo)
        w = tl.weights(lo, hi)
        q = tl.series.get("queue_len")
        if q is not None and hi > lo:
            queue_mean.append(float(np.dot(q, w) / (hi - lo)))
            inside = np.flatnonzero(tl.edges[:-1] <= hi)
            queue_end.append(float(q[inside[-1]]) if inside.size and tl.end >= hi else 0.0)

    def rank(x: np.ndarray, qq: float) -> float | None:
        if not x.size:
            return None
        v = float(np.sort(x)[min(max(math.ceil(qq * x.size) - 1, 0), x.size - 1)])
        return None if math.isinf(v) else v

    by_gang = []
    for label in BUCKETS:
        x = np.asarray(waits[label], dtype=np.float64)
        if not x.size:
            continue
        by_gang.append({"gang": label, "jobs": round(x.size / max(len(runs), 1), 1),
                        "not_started": round(float(np.isinf(x).sum()) / max(len(runs), 1), 1),
                        "p50": rank(x, 0.5), "p90": rank(x, 0.9)})
    every = np.concatenate([np.asarray(v, dtype=np.float64) for v in waits.values()]) if waits else np.zeros(0)
    return {"wait_by_gang": by_gang,
            "wait_all": {"jobs": round(every.size / max(len(runs), 1), 1), "p50": rank(every, 0.5),
                         "p90": rank(every, 0.9)},
            "queue_mean": float(np.mean(queue_mean)) if queue_mean else None,
            "queue_end": float(np.mean(queue_end)) if queue_end else None,
            "arrivals_sampled": float(np.mean(arrived)) if sampled and arrived else 0.0,
            "arrivals_gpu_hours": float(np.mean(planned)) if sampled and planned else 0.0}


def _horizon_means(pred: Prediction, lo: float, hi: float) -> tuple[float | None, float | None]:
    gars, gfrs = [], []
    for run in pred.runs:
        tl = Timeline(run, start=lo)
        w = tl.weights(lo, hi)
        if w.sum() <= 0:
            continue
        gars.append(float(np.dot(tl.gar(), w) / w.sum()))
        gfr, mask = tl.gfr_nodes()
        wm = np.where(mask, w, 0.0)
        if wm.sum() > 0:
            gfrs.append(float(np.dot(gfr, wm) / wm.sum()))
    return (float(np.mean(gars)) if gars else None, float(np.mean(gfrs)) if gfrs else None)


def compare(snap: TwinSnapshot, scenarios: Sequence[Scenario] = (), *, horizon_s: float = 86_400.0,
            runs: int = DEFAULT_RUNS, seed: int | None = None, arrivals: bool = False) -> list[ScenarioResult]:
    """The snapshot as it is ("now") and under each scenario, over ``horizon_s`` seconds."""
    return compare_within(snap, scenarios, horizon_s=horizon_s, runs=runs, seed=seed, arrivals=arrivals).results


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare_within` did: the results (each over ``runs_done`` runs) and, when it
    stopped before ``runs_asked`` runs to stay within its budget, ``cut`` (True)."""

    results: list[ScenarioResult]
    runs_done: int
    runs_asked: int

    @property
    def cut(self) -> bool:
        return self.runs_done < self.runs_asked


def compare_within(snap: TwinSnapshot, scenarios: Sequence[Scenario] = (), *, horizon_s: float = 86_400.0,
                   runs: int = DEFAULT_RUNS, seed: int | None = None,
                   budget_s: float | None = None, arrivals: bool = False) -> Comparison:
    """:func:`compare`, run round by round (run ``k`` of every scenario, then run ``k + 1``) so that
    it can stop early with every scenario over the same runs: a round is not started when the time
    spent so far plus the longest round so far would pass ``budget_s`` wall seconds (None: no
    budget). The first round always runs. Run ``k`` draws the same numbers as :func:`predict`'s run
    ``k``: without a cut the results are :func:`compare`'s, bit for bit. ``arrivals``: every
    scenario's run ``k`` also gets the same sampled future arrivals (the snapshot's arrival model,
    :mod:`kant.twin.arrivals`, over the horizon), as :func:`predict` samples them."""
    if not horizon_s > 0 or not math.isfinite(horizon_s):
        raise KantError(f"horizon: must be a positive number of seconds, got {horizon_s}")
    if runs < 1:
        raise ValueError("runs must be >= 1")
    t0 = time.monotonic()
    lo = snap.now
    hi = lo + horizon_s
    applied = []
    for sc in (Scenario("now"), *scenarios):
        try:
            applied.append((sc, *_apply(snap, sc)))
        except KantError as exc:
            raise KantError(f"scenario {sc.name!r}: {exc}") from None
    model = arrival_model(snap, arrivals)
    if not snap.ratios and model is None:  # nothing uncertain: one run is the answer (as predict does)
        runs = 1
    ratio_model = RatioModel.fit(snap) if snap.ratios else None
    base = snap.seed if seed is None else seed
    done: list[list[SimResult]] = [[] for _ in applied]
    longest = 0.0
    for k in range(runs):
        spent = time.monotonic() - t0
        if k and budget_s is not None and spent + longest > budget_s:
            break
        r0 = time.monotonic()
        duration, drawn = draw_run(snap, base, k, ratio_model, model, horizon_s)
        for (sc, policy, cluster, sched, _), out in zip(applied, done, strict=True):
            try:
                out.append(run_forward(snap, duration, policy=policy, cluster=cluster, sched=sched,
                                       horizon_s=horizon_s,
                                       arrivals=drawn))
            except KantError as exc:
                raise KantError(f"scenario {sc.name!r}: {exc}") from None
        longest = max(longest, time.monotonic() - r0)
    results = []
    n = len(snap)
    for (sc, policy, _, _, tpl), res in zip(applied, done, strict=True):
        starts = np.vstack([r.first_start[:n] for r in res])
        pred = Prediction(snap, starts, tuple(res), horizon_s, covers(snap, model), res[0].reasons)
        gar, gfr = _horizon_means(pred, lo, hi)
        cap = _capacity(snap, res, lo, hi, model is not None)
        if model is not None:
            cap["arrival_model"] = model.describe()
        results.append(ScenarioResult(sc.name, policy.name, sc.describe(), gar, gfr, _waits(snap, pred.p50), pred,
                                      sc.text(tpl), cap))
    return Comparison(results, len(done[0]), runs)
