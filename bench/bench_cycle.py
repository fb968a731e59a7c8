"""One live scheduling cycle at scale: 10,000 pending jobs, 1,000 gangs placed on 80,000 GPUs.

    python bench/bench_cycle.py [--policy kant --policy ...] [--runs 5] [--seed 0]
    python bench/bench_cycle.py --deep [--cycles 300] [--pending 100000] [--max-jobs N] [--policy kant]

``--deep`` times a sequence of consecutive cycles on a deep queue that backfill must walk (see
:mod:`bench_cycle_deep`); the rest of this docstring is the default case.

The cluster: 10,000 nodes x 8 H100 (32 nodes per leaf, 8 leaves per spine). The queue: 10,000
gangs of whole 8-GPU nodes (1, 2, 4 or 8 workers with probabilities 0.55, 0.25, 0.15, 0.05, seeded),
FIFO. The first 1,000 gangs in queue order need N whole nodes (N = 2,165 for seed 0); exactly N
nodes, drawn at random (seeded) across the leaves, are empty and every other node is held by a
running 8-GPU job (estimated end 1-10 h, so backfill has a release profile to plan on). Every job
needs whole nodes and only whole nodes are free, so greedy placement never fragments: the first
1,000 gangs start and the cluster is then full (each later gang fails). Building this state is not
timed.

Timed: ``Scheduler.cycle(now)`` (median over runs, each on a freshly built state), and, in a separate
run per repetition, every ``Framework.place`` call inside the cycle (a wrapper around the method):
per-job placement latency P50/P99 over the 1,000 successful placements, and over all calls. Prints a
table (figure, target, ratio = figure / target; <= 1 meets it) and writes bench/results/cycle.json.
Figures, never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from kant.config import load_policy
from kant.framework.context import RunningJob
from kant.model.job import JobTableBuilder
from kant.model.state import Placement
from kant.scheduler import Scheduler
from kant.traces import load_cluster

TARGET_S = 1.0
N_NODES, GPUS, PENDING, PLACED = 10_000, 8, 10_000, 1_000
WORKERS, WORKER_P = (1, 2, 4, 8), (0.55, 0.25, 0.15, 0.05)
NOW = 100.0


def build(policy: str, seed: int = 0) -> tuple[Scheduler, int]:
    """The scheduler with the state described in the module docstring; returns it and N."""
    cluster = load_cluster(f"{N_NODES}x{GPUS}:H100,leaf=32,spine=8")
    rng = np.random.default_rng(seed)
    workers = rng.choice(WORKERS, size=PENDING, p=WORKER_P)
    need = int(workers[:PLACED].sum())
    free_nodes = rng.choice(N_NODES, size=need, replace=False)
    busy = np.setdiff1d(np.arange(N_NODES), free_nodes)
    ends = rng.uniform(3600.0, 36000.0, size=len(busy))
    b = JobTableBuilder(source="bench_cycle")
    for i, w in enumerate(workers.tolist()):
        b.add(f"pending-{i}", submit=float(i) * 1e-3, duration=3600.0, workers=w, gpus_per_worker=GPUS)
    for k, end in enumerate(ends.tolist()):
        b.add(f"running-{k}", submit=0.0, duration=end, gpus_per_worker=GPUS)
    jobs = b.build()
    sched = Scheduler(load_policy(policy), cluster, jobs)
    for k, node in enumerate(busy.tolist()):
        row = PENDING + k
        placement = Placement((node,), GPUS)
        sched.state.allocate(row, placement)
        sched.running[row] = RunningJob(0.0, float(ends[k]))
        sched.framework.job_started(row, 0.0, placement)
    for i in range(PENDING):
        sched.submit(i, float(jobs.submit[i]))
    return sched, need


def run(policy: str, seed: int, timed_places: bool) -> dict[str, Any]:
    sched, need = build(policy, seed)
    latencies: list[tuple[int, int, bool]] = []
    if timed_places:
        fw = sched.framework
        place = fw.place

        def timed(ctx, job):  # type: ignore[no-untyped-def]
            t0 = time.perf_counter_ns()
            result = place(ctx, job)
            latencies.append((job, time.perf_counter_ns() - t0, isinstance(result, Placement)))
            return result

        fw.place = timed  # type: ignore[method-assign]
    t0 = time.perf_counter()
    result = sched.cycle(NOW)
    cycle_s = time.perf_counter() - t0
    sched.state.check()
    return {"cycle_s": cycle_s, "started": len(result.started), "need_nodes": need,
            "gpus_started": sum(p.total_gpus for _, p in result.started), "latencies": latencies}


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", action="append", default=None)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--deep", action="store_true", help="consecutive cycles on a deep queue (bench_cycle_deep)")
    ap.add_argument("--cycles", type=int, default=300, help="--deep: cycles timed")
    ap.add_argument("--pending", type=int, default=100_000, help="--deep: jobs pending at the start")
    ap.add_argument("--max-jobs", type=int, default=None, help="--deep: backfill's max_jobs (default: the policy's)")
    args = ap.parse_args()
    if args.deep:
        import bench_cycle_deep

        bench_cycle_deep.main(args.policy or ["kant"], args.seed, args.cycles, args.pending, args.max_jobs)
        return
    rows = []
    for policy in args.policy or ["kant", "kant-nobackfill", "volcano-binpack"]:
        cycles, ok_lat, all_lat = [], [], []
        by_workers: dict[int, list[float]] = {}  # successful placements by gang size
        started = need = gpus = 0
        workers = build(policy, args.seed)[0].env.jobs.workers
        for _ in range(args.runs):
            r = run(policy, args.seed, timed_places=False)
            cycles.append(r["cycle_s"])
            started, need, gpus = r["started"], r["need_nodes"], r["gpus_started"]
            t = run(policy, args.seed, timed_places=True)
            ok_lat += [ns / 1e3 for _, ns, ok in t["latencies"] if ok]
            all_lat += [ns / 1e3 for _, ns, _ in t["latencies"]]
            for job, ns, ok in t["latencies"]:
                if ok:
                    by_workers.setdefault(int(workers[job]), []).append(ns / 1e3)
        rows.append({
            "policy": policy, "pending": PENDING, "started": started, "gpus_started": gpus, "free_nodes": need,
            "cycle_s": round(statistics.median(cycles), 4), "cycle_all_s": [round(c, 4) for c in cycles],
            "place_ok_p50_us": round(pct(ok_lat, 50), 1), "place_ok_p99_us": round(pct(ok_lat, 99), 1),
            "place_calls": len(all_lat) // args.runs, "place_all_p50_us": round(pct(all_lat, 50), 1),
            "place_all_p99_us": round(pct(all_lat, 99), 1),
            "place_ok_p50_us_by_workers": {w: round(pct(v, 50), 1) for w, v in sorted(by_workers.items())},
            "placed_by_workers": {w: len(v) // args.runs for w, v in sorted(by_workers.items())},
        })
    print(f"One cycle: {PENDING:,} pending gangs, {N_NODES * GPUS:,} GPUs ({N_NODES:,} nodes), median of "
          f"{args.runs} run(s); Python {platform.python_version()}, loadavg {os.getloadavg()[0]:.2f}")
    print(f"{'policy':<18}{'started':>8}{'cycle s':>9}{'target':>8}{'ratio':>7}{'place P50 us':>14}"
          f"{'P99 us':>9}{'calls':>7}{'all P50':>9}{'all P99':>9}")
    for r in rows:
        print(f"{r['policy']:<18}{r['started']:>8}{r['cycle_s']:>9}{TARGET_S:>8g}{r['cycle_s'] / TARGET_S:>7.2f}"
              f"{r['place_ok_p50_us']:>14}{r['place_ok_p99_us']:>9}{r['place_calls']:>7}{r['place_all_p50_us']:>9}"
              f"{r['place_all_p99_us']:>9}")
    print("placement P50 by gang size (workers: placements per run, P50 us)")
    for r in rows:
        split = ", ".join(f"{w}: {r['placed_by_workers'][w]}, {p}" for w, p in r["place_ok_p50_us_by_workers"].items())
        print(f"{r['policy']:<18}{split}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "cycle.json").write_text(json.dumps({
        "machine": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
        "loadavg": os.getloadavg(), "runs": args.runs, "seed": args.seed, "target_s": TARGET_S, "rows": rows,
    }, indent=2) + "\n")


if __name__ == "__main__":
    main()
