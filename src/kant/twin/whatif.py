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
from kant.metrics.timeline import Timeline
from kant.model.cluster import Cluster, NodeSpec
from kant.plugins.quota import with_tenant_quotas
from kant.scheduler import CORDONED
from kant.twin.forward import run_forward
from kant.twin.predict import DEFAULT_RUNS, Prediction, sample_durations
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

    def to_dict(self, tenant: str | None = None) -> dict[str, Any]:
        """JSON-safe; ``tenant`` limits the per-job list to that tenant's jobs."""
        jobs = self.prediction.pending()
        if tenant is not None:
            jobs = [j for j in jobs if j["tenant"] == tenant]
        return {"name": self.name, "policy": self.policy, "changes": dict(self.changes), "gar": self.gar,
                "gfr_nodes": self.gfr_nodes, "waits": dict(self.waits), "jobs": jobs}


def _apply(snap: TwinSnapshot, sc: Scenario) -> tuple[Policy, Cluster, Any]:
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
    flags = dict(snap.sched.node_flags)
    for name in sc.drain:
        if name not in names:
            raise KantError(f"drain: no node {name!r} in the cluster")
        flags[name] = flags.get(name, 0) | CORDONED
    sched = replace(snap.sched, node_flags=flags)
    return policy, Cluster.from_nodes(nodes), sched


def _waits(snap: TwinSnapshot, starts: np.ndarray) -> dict[str, Any]:
    rows = list(snap.sched.pending)
    submit = np.asarray(snap.jobs["submit"], dtype=np.float64)[rows] if rows else np.zeros(0)
    s = starts[rows] if rows else np.zeros(0)
    started = ~np.isnan(s)
    w = s[started] - submit[started]

    def pct(q: float) -> float | None:
        return float(np.percentile(w, q)) if w.size else None

    return {"pending": len(rows), "started": int(started.sum()), "not_started": int((~started).sum()),
            "mean": float(w.mean()) if w.size else None, "p50": pct(50), "p90": pct(90), "p99": pct(99),
            "max": float(w.max()) if w.size else None}


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
            runs: int = DEFAULT_RUNS, seed: int | None = None) -> list[ScenarioResult]:
    """The snapshot as it is ("now") and under each scenario, over ``horizon_s`` seconds."""
    return compare_within(snap, scenarios, horizon_s=horizon_s, runs=runs, seed=seed).results


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
                   budget_s: float | None = None) -> Comparison:
    """:func:`compare`, run round by round (run ``k`` of every scenario, then run ``k + 1``) so that
    it can stop early with every scenario over the same runs: a round is not started when the time
    spent so far plus the longest round so far would pass ``budget_s`` wall seconds (None: no
    budget). The first round always runs. Run ``k`` draws the same numbers as :func:`predict`'s run
    ``k``: without a cut the results are :func:`compare`'s, bit for bit."""
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
    if not snap.ratios:  # no error distribution: one run is the answer (as predict does)
        runs = 1
    base = snap.seed if seed is None else seed
    done: list[list[SimResult]] = [[] for _ in applied]
    longest = 0.0
    for k in range(runs):
        spent = time.monotonic() - t0
        if k and budget_s is not None and spent + longest > budget_s:
            break
        r0 = time.monotonic()
        duration = sample_durations(snap, np.random.default_rng([base, k]))
        for (sc, policy, cluster, sched), out in zip(applied, done, strict=True):
            try:
                out.append(run_forward(snap, duration, policy=policy, cluster=cluster, sched=sched,
                                       horizon_s=horizon_s))
            except KantError as exc:
                raise KantError(f"scenario {sc.name!r}: {exc}") from None
        longest = max(longest, time.monotonic() - r0)
    results = []
    for (sc, policy, _, _), res in zip(applied, done, strict=True):
        starts = np.vstack([r.first_start for r in res])
        pred = Prediction(snap, starts, tuple(res), horizon_s)
        gar, gfr = _horizon_means(pred, lo, hi)
        results.append(ScenarioResult(sc.name, policy.name, sc.describe(), gar, gfr, _waits(snap, pred.p50), pred))
    return Comparison(results, len(done[0]), runs)
