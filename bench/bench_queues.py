"""Sharing Philly between its virtual clusters: no quotas vs flat quotas vs a two-level tree of queues
vs the tree with fair share over time, under the default policy (``kant``), on the ``philly`` cluster
(64 x 8 V100, 512 GPUs).

    python bench/bench_queues.py [--limit N (default 20000; 0: all)] [--cluster philly] [--write-queues DIR]

The queues (numbers of our choosing, written out with ``--write-queues`` as files for
``kant simulate --queues``):

* every VC is a leaf queue whose guarantee is its share of the trace's GPU-time times 512
  (``kant.plugins.quota.derive_guarantees``, largest remainder: they add up to 512);
* **flat**: the 15 leaves side by side, no limits (one Kueue cohort: any leaf borrows any idle GPU);
* **tree**: three organisations (org-1: the two largest VCs; org-2: the next three; org-3: the other
  ten), each guaranteed the sum of its leaves, lending at most 75% of its guarantee (25% stays
  reserved for it) and borrowing at most 50% above it; leaves unlimited inside their organisation;
* **tree+fs**: the tree, and the fair-share order (Slurm's ``2^(-U/S)``, usage decayed with a 7-day
  half-life, each queue weighted by its guarantee (at least 1)).

Printed per configuration: GAR (time-weighted allocated / 512 GPUs over the run; with every job
finishing it is about the same for all), GAR busy (the same while some job waits), preemptions
(reclaim evictions), the finished jobs' mean wait, Jain's fairness index per day (mean and P10 over days), and
per tenant wait P50 / P90 (hours; started jobs). Jain's index of a day is over the tenants with a
guarantee that had a job waiting that day (they wanted more): ``x_t`` = the tenant's GPU-seconds that
day over its guaranteed GPU-seconds (G_t x 86,400); ``J = (sum x)^2 / (n sum x^2)``, 1 when every such
tenant got the same multiple of its entitlement. Days with fewer than two such tenants are left out.

Every run checkpoints every 600 s and pays 30 s to restart (as the preemption page's Philly table), so
a reclaimed job loses at most 10 minutes of work. The default run is the first 20,000 jobs (36
days); ``--limit 0`` replays all 82,247 (several minutes: the queue orders of the queues are dynamic,
see docs/policy-quotas.md). Figures, never asserts.
"""

from __future__ import annotations

import argparse
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from kant.config import load_policy
from kant.metrics.recorder import JobStatus
from kant.metrics.summary import summarize
from kant.model import JobTable
from kant.model.state import Placement
from kant.plugins.queues import Queues, QueuesArgs, with_queues
from kant.plugins.quota import derive_guarantees
from kant.sim import ExecutionModel, Simulator
from kant.traces import load_cluster
from kant.traces.registry import load_trace

DAY = 86400.0
CHECKPOINT_S, RESTART_S = 600.0, 30.0  # a preempted job resumes from its last checkpoint and pays 30 s
ORGS = {"org-1": 2, "org-2": 3}  # the largest VCs by GPU-time: two in org-1, the next three in org-2, the rest org-3


def queue_docs(jobs: JobTable, capacity: int) -> dict[str, dict[str, Any]]:
    """The queues files of the three configurations (see the module docstring)."""
    g = derive_guarantees(jobs, capacity)
    names = list(jobs.tenant_names)
    order = sorted(range(len(names)), key=lambda t: (-int(g[t]), names[t]))
    leaves = [{"name": names[t], "guaranteed": int(g[t])} for t in order]
    flat = {"queues": leaves}
    groups, at = [], 0
    for org, size in ORGS.items():
        groups.append((org, leaves[at : at + size]))
        at += size
    groups.append(("org-3", leaves[at:]))
    orgs = []
    for org, members in groups:
        total = sum(int(m["guaranteed"]) for m in members)
        orgs.append(
            {
                "name": org,
                "guaranteed": total,
                "lending_limit": (3 * total) // 4,
                "borrowing_limit": total // 2,
                "weight": max(total, 1),
                "children": [{**m, "weight": max(int(m["guaranteed"]), 1)} for m in members],
            }
        )
    tree = {"queues": orgs}
    fs = {"queues": orgs, "fair_share": {"half_life_s": 7 * DAY}}
    return {"flat": flat, "tree": tree, "tree+fs": fs}


def run(jobs: JobTable, cluster_name: str, doc: dict[str, Any] | None) -> dict[str, Any]:
    cluster = load_cluster(cluster_name)
    policy = load_policy("kant")
    if doc is not None:
        policy = with_queues(policy, QueuesArgs.model_validate(doc))
    sim = Simulator(
        cluster, jobs, policy, execution=ExecutionModel(checkpoint_interval_s=CHECKPOINT_S, restart_cost_s=RESTART_S)
    )
    # GPU-seconds per (tenant, day), from every run's start and stop (the recorder sees them all)
    used: dict[tuple[int, int], float] = defaultdict(float)
    open_runs: dict[int, tuple[float, int]] = {}
    rec = sim.recorder
    started, stopped = rec.job_started, rec.job_stopped
    tenant = jobs.tenant

    def on_start(job: int, now: float, placement: Placement, cluster: Any) -> None:
        open_runs[job] = (now, placement.total_gpus)
        started(job, now, placement, cluster)

    def on_stop(job: int, now: float, placement: Placement, *, finished: bool) -> None:
        t0, gpus = open_runs.pop(job)
        t = int(tenant[job])
        while t0 < now:
            day = int(t0 // DAY)
            t1 = min(now, (day + 1) * DAY)
            used[(t, day)] += (t1 - t0) * gpus
            t0 = t1
        stopped(job, now, placement, finished=finished)

    rec.job_started = on_start  # type: ignore[method-assign]
    rec.job_stopped = on_stop  # type: ignore[method-assign]
    t0, c0 = time.perf_counter(), time.process_time()
    result = sim.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    metrics = summarize(result)
    plugin = sim.plugin(Queues)
    guaranteed = np.zeros(len(jobs.tenant_names))
    if plugin is not None:
        for t, name in enumerate(jobs.tenant_names):
            guaranteed[t] = plugin.tree.guaranteed[plugin.tree.index[name]]
    return {
        "result": result,
        "gar": metrics.gar.run,
        "busy": metrics.gar.busy,
        "wall": wall,
        "cpu": cpu,
        "used": used,
        "guaranteed": guaranteed,
    }


def jain_per_day(
    jobs: JobTable, result: Any, used: dict[tuple[int, int], float], guaranteed: np.ndarray
) -> list[float]:
    """Jain's index of each day over the tenants with a guarantee that had a job waiting that day."""
    started = result.status != int(JobStatus.UNSCHEDULABLE)
    first = np.where(np.isnan(result.first_start), result.end_time, result.first_start)
    waiting: dict[int, set[int]] = defaultdict(set)
    for job in np.flatnonzero(started & (first > jobs.submit)).tolist():
        t = int(jobs.tenant[job])
        for day in range(int(jobs.submit[job] // DAY), int(first[job] // DAY) + 1):
            waiting[day].add(t)
    out = []
    for day in sorted(waiting):
        ts = [t for t in waiting[day] if guaranteed[t] > 0]
        if len(ts) < 2:
            continue
        x = np.asarray([used.get((t, day), 0.0) / (guaranteed[t] * DAY) for t in ts])
        if x.sum() <= 0:
            continue
        out.append(float(x.sum() ** 2 / (len(x) * (x**2).sum())))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=20000, help="the first N jobs by submit time (0: all 82,247)")
    ap.add_argument("--cluster", default="philly")
    ap.add_argument("--write-queues", type=Path, default=None, help="write the queues files here")
    args = ap.parse_args()
    jobs = load_trace("philly", limit=args.limit or None)
    capacity = load_cluster(args.cluster).total_gpus
    docs = queue_docs(jobs, capacity)
    if args.write_queues is not None:
        args.write_queues.mkdir(parents=True, exist_ok=True)
        for name, doc in docs.items():
            path = args.write_queues / f"philly-{name.replace('+', '-')}.yaml"
            path.write_text(yaml.safe_dump(doc, sort_keys=False))
    configs: dict[str, dict[str, Any] | None] = {"none": None, **docs}
    runs = {name: run(jobs, args.cluster, doc) for name, doc in configs.items()}
    print(
        f"Philly, {len(jobs):,} jobs, cluster {args.cluster} ({capacity} GPUs), policy kant, checkpoints every "
        f"{CHECKPOINT_S:g} s, restart {RESTART_S:g} s"
    )
    print(
        f"{'config':<9} {'GAR':>6} {'GAR busy':>8} {'preempt':>8} {'wait mean h':>12} {'Jain/day mean':>14} "
        f"{'Jain P10':>9} {'days':>5} {'wall s':>7} {'CPU s':>6}"
    )
    guaranteed = runs["flat"]["guaranteed"]
    for name, r in runs.items():
        res = r["result"]
        ok = res.status == int(JobStatus.FINISHED)
        waits = (res.first_start[ok] - jobs.submit[ok]) / 3600.0
        jain = jain_per_day(jobs, res, r["used"], guaranteed)
        print(
            f"{name:<9} {r['gar']:>6.3f} {r['busy']:>8.3f} {int(res.preemptions.sum()):>8d} {waits.mean():>12.2f} "
            f"{np.mean(jain):>14.3f} {np.percentile(jain, 10):>9.3f} {len(jain):>5d} {r['wall']:>7.1f} "
            f"{r['cpu']:>6.1f}"
        )
    print()
    print("wait P50 / P90 (hours) per tenant (guarantee in GPUs; jobs)")
    header = f"{'tenant':<8} {'G':>4} {'jobs':>6} " + " ".join(f"{n:>15}" for n in runs)
    print(header)
    order = sorted(range(len(jobs.tenant_names)), key=lambda t: -guaranteed[t])
    for t in order:
        sel = jobs.tenant == t
        cells = []
        for r in runs.values():
            res = r["result"]
            ok = sel & (res.status == int(JobStatus.FINISHED))
            w = (res.first_start[ok] - jobs.submit[ok]) / 3600.0
            cells.append(f"{np.percentile(w, 50):>7.2f}/{np.percentile(w, 90):<7.2f}" if len(w) else f"{'-':>15}")
        print(f"{jobs.tenant_names[t]:<8} {int(guaranteed[t]):>4} {int(sel.sum()):>6} " + " ".join(cells))
    if any(math.isnan(r["gar"] or math.nan) for r in runs.values()):
        print("(GAR undefined for some run)")


if __name__ == "__main__":
    main()
