"""Scale: a seeded synthetic trace of 1,000,000 jobs on 10,000 nodes x 8 GPUs (32 nodes per leaf, 8
leaves per spine), and how replay time and memory grow with jobs and with GPUs.

    python bench/bench_scale.py [--policy volcano-binpack --policy kant-nobackfill] [--runs 3]
    python bench/bench_scale.py --growth [--runs 1]        # also the growth series
    python bench/bench_scale.py --kant [--kant-runs 1]       # also the Kant policy at 100k and 1M jobs
    python bench/bench_scale.py --one JOBS NODES POLICY    # one run in this process, one JSON line

Every run is a fresh subprocess (``--one``), so its peak memory is the child's own
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (the whole process: interpreter, NumPy, the trace, the
run). Wall time includes generating the trace and loading the policy. Pin to one core with
``taskset -c 1 python bench/bench_scale.py``; children inherit the CPU affinity.

The trace (:func:`scale_jobs`): Philly's gang-size mix with an LLM-era tail
(``SyntheticSpec(mean_gpus=5.7)``: random Philly jobs promoted by powers of two up to
``max_gpus = min(1024, GPUs // 8)``), Philly's log-normal run times, Poisson arrivals at an offered
rate :data:`RATE_PER_GPU_H` jobs per hour per GPU (16,000 jobs/h on 80,000 GPUs: over 100,000 jobs
the GPU allocation rate is about 0.8 and a queue forms in bursts; the run-time tail makes the nominal
offered load higher than what one trace window sees). The growth series keep that rate per GPU:
10k / 100k / 1M jobs on 80,000 GPUs, and 100k jobs on 1,000 / 10,000 / 80,000 GPUs.

Default policies: ``volcano-binpack`` and ``kant-nobackfill`` (E-Binpack). The full Kant policy (with
EASY backfill) is slower at this scale (see docs/performance.md): ``--kant`` runs it at 100k and 1M
jobs on the same cluster (the same rate per GPU, so the 1M trace is the same load over 10x the
time) and prints its growth against the issue's bounds: 120 s at 1M, and no worse than n log n
(``10 * log(1e6) / log(1e5) = 12x``).

Prints a table (figure, target, ratio = figure / target; <= 1 meets it) and writes
bench/results/scale.json (and scale_growth.json with ``--growth``). Figures, never asserts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
RESULTS = HERE / "results"

TARGET_S = 60.0
#: the Kant policy (EASY backfill) at 1M jobs, and its growth from 100k no worse than n log n
KANT_TARGET_S = 120.0
KANT_JOBS = (100_000, 1_000_000)
TARGET_MIB = 2048.0
#: jobs per hour per GPU (see the module docstring)
RATE_PER_GPU_H = 0.2
SEED = 1
GPUS_PER_NODE = 8
BIG_JOBS, BIG_NODES = 1_000_000, 10_000
GROWTH_JOBS = (10_000, 100_000, 1_000_000)  # on BIG_NODES
GROWTH_GPUS = (1_000, 10_000, 80_000)  # with 100k jobs


def scale_cluster(n_nodes: int):  # type: ignore[no-untyped-def]
    """``n_nodes`` x 8 H100, 32 nodes per leaf, 8 leaves per spine."""
    from kant.traces import load_cluster

    return load_cluster(f"{n_nodes}x{GPUS_PER_NODE}:H100,leaf=32,spine=8")


def scale_jobs(n_jobs: int, gpus: int = BIG_NODES * GPUS_PER_NODE, seed: int = SEED):  # type: ignore[no-untyped-def]
    """The seeded synthetic trace for a cluster of ``gpus`` GPUs (see the module docstring)."""
    from kant.traces.synthetic import SyntheticSpec, generate_jobs

    return generate_jobs(SyntheticSpec(jobs=n_jobs, seed=seed, rate_per_h=RATE_PER_GPU_H * gpus, mean_gpus=5.7,
                                       max_gpus=min(1024, gpus // 8)))


def run_one(n_jobs: int, n_nodes: int, policy_name: str) -> dict[str, Any]:
    """One replay in this process: wall and CPU time, load included, and the process's peak RSS."""
    t0, c0 = time.perf_counter(), time.process_time()
    from kant.config import load_policy
    from kant.sim import simulate

    cluster = scale_cluster(n_nodes)
    jobs = scale_jobs(n_jobs, n_nodes * GPUS_PER_NODE)
    policy = load_policy(policy_name)
    t1 = time.perf_counter()
    res = simulate(cluster, jobs, policy)
    t2, c2 = time.perf_counter(), time.process_time()
    import hashlib

    import numpy as np

    digest = hashlib.sha256(np.nan_to_num(res.first_start, nan=-1.0).tobytes()
                            + np.nan_to_num(res.end, nan=-1.0).tobytes()).hexdigest()[:16]
    maxrss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"jobs": n_jobs, "nodes": n_nodes, "gpus": n_nodes * GPUS_PER_NODE, "policy": policy_name,
            "load_s": round(t1 - t0, 3), "simulate_s": round(t2 - t1, 3), "wall_s": round(t2 - t0, 3),
            "cpu_s": round(c2 - c0, 3), "peak_mib": round(maxrss_kib / 1024, 1), "events": res.events,
            "cycles": res.cycles, "finished": int(np.count_nonzero(res.status == 1)), "digest": digest}


def spawn(n_jobs: int, n_nodes: int, policy: str) -> dict[str, Any]:
    """:func:`run_one` in a fresh interpreter (so peak memory is this run's alone)."""
    out = subprocess.run([sys.executable, __file__, "--one", str(n_jobs), str(n_nodes), policy],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    row = dict(runs[0])
    for k in ("load_s", "simulate_s", "wall_s", "cpu_s", "peak_mib"):
        row[k] = round(statistics.median(r[k] for r in runs), 3)
    row["wall_all_s"] = [r["wall_s"] for r in runs]
    if len({r["digest"] for r in runs}) != 1:  # pragma: no cover - determinism check
        row["digest"] = "NONDETERMINISTIC"
    return row


def measure(n_jobs: int, n_nodes: int, policy: str, runs: int) -> dict[str, Any]:
    rows = []
    for _ in range(runs):
        rows.append(spawn(n_jobs, n_nodes, policy))
        print(f"  {policy} {n_jobs} jobs / {n_nodes * GPUS_PER_NODE} GPUs: {rows[-1]['wall_s']} s, "
              f"{rows[-1]['peak_mib']} MiB", file=sys.stderr, flush=True)
    return median_of(rows)


def machine() -> dict[str, Any]:
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
            "affinity": affinity, "loadavg": os.getloadavg()}


def kant_growth(runs: int) -> None:
    """The Kant policy at 100k and 1M jobs on the big cluster; prints the figures and the growth."""
    small, big = (measure(n, BIG_NODES, "kant", runs) for n in KANT_JOBS)
    growth = big["simulate_s"] / small["simulate_s"]
    growth_cpu = big["cpu_s"] / small["cpu_s"]  # less affected by other load on the machine
    bound = (KANT_JOBS[1] * math.log(KANT_JOBS[1])) / (KANT_JOBS[0] * math.log(KANT_JOBS[0]))
    print(f"\nKant policy (EASY backfill) on {BIG_NODES:,} nodes x {GPUS_PER_NODE} GPUs, median of {runs} run(s); "
          f"loadavg {os.getloadavg()[0]:.2f}")
    print(f"{'jobs':>10}{'wall s':>9}{'CPU s':>9}{'sim s':>9}{'peak MiB':>10}{'cycles':>9}  digest")
    for r in (small, big):
        print(f"{r['jobs']:>10}{r['wall_s']:>9}{r['cpu_s']:>9}{r['simulate_s']:>9}{r['peak_mib']:>10}{r['cycles']:>9}"
              f"  {r['digest']}")
    print(f"1M wall {big['wall_s']} s / CPU {big['cpu_s']} s, target {KANT_TARGET_S:g} s, ratio "
          f"{big['wall_s'] / KANT_TARGET_S:.2f} / {big['cpu_s'] / KANT_TARGET_S:.2f}; growth 100k -> 1M: simulation "
          f"wall x{growth:.1f}, process CPU x{growth_cpu:.1f}, n log n bound x{bound:.1f}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "scale_kant.json").write_text(json.dumps({
        "machine": machine(), "runs": runs, "target_s": KANT_TARGET_S, "rows": [small, big],
        "growth": round(growth, 2), "growth_cpu": round(growth_cpu, 2), "nlogn_bound": round(bound, 2),
    }, indent=2) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", action="append", default=None)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--growth", action="store_true", help="also the growth series (jobs and GPUs)")
    ap.add_argument("--growth-policy", default="volcano-binpack")
    ap.add_argument("--growth-runs", type=int, default=1)
    ap.add_argument("--kant", action="store_true", help="also the Kant policy at 100k and 1M jobs, and its growth")
    ap.add_argument("--kant-runs", type=int, default=1)
    ap.add_argument("--only-kant", action="store_true", help="only the Kant policy's growth (implies --kant)")
    ap.add_argument("--one", nargs=3, metavar=("JOBS", "NODES", "POLICY"))
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(int(args.one[0]), int(args.one[1]), args.one[2])))
        return
    if args.only_kant:
        kant_growth(args.kant_runs)
        return
    policies = args.policy or ["volcano-binpack", "kant-nobackfill"]
    rows = [measure(BIG_JOBS, BIG_NODES, p, args.runs) for p in policies]
    print(f"Synthetic {BIG_JOBS:,} jobs on {BIG_NODES:,} nodes x {GPUS_PER_NODE} GPUs, median of {args.runs} "
          f"run(s), load included; Python {platform.python_version()}, loadavg {os.getloadavg()[0]:.2f}")
    print(f"{'figure':<44}{'value':>10}{'target':>10}{'ratio':>8}")
    for r in rows:
        print(f"{r['policy'] + ' wall s':<44}{r['wall_s']:>10}{TARGET_S:>10g}{r['wall_s'] / TARGET_S:>8.2f}")
        print(f"{r['policy'] + ' CPU s':<44}{r['cpu_s']:>10}{TARGET_S:>10g}{r['cpu_s'] / TARGET_S:>8.2f}")
        print(f"{r['policy'] + ' peak MiB':<44}{r['peak_mib']:>10}{TARGET_MIB:>10g}{r['peak_mib'] / TARGET_MIB:>8.2f}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "scale.json").write_text(json.dumps({
        "machine": machine(), "runs": args.runs, "target_s": TARGET_S, "target_mib": TARGET_MIB, "rows": rows,
    }, indent=2) + "\n")
    if args.kant:
        kant_growth(args.kant_runs)
    if not args.growth:
        return
    growth = []
    for n in GROWTH_JOBS:
        growth.append({"series": "jobs", **measure(n, BIG_NODES, args.growth_policy, args.growth_runs)})
    for g in GROWTH_GPUS:
        growth.append({"series": "gpus", **measure(100_000, g // GPUS_PER_NODE, args.growth_policy, args.growth_runs)})
    print(f"\nGrowth ({args.growth_policy}, median of {args.growth_runs} run(s))")
    print(f"{'series':<8}{'jobs':>10}{'GPUs':>8}{'wall s':>9}{'sim s':>9}{'peak MiB':>10}{'cycles':>9}")
    for r in growth:
        print(f"{r['series']:<8}{r['jobs']:>10}{r['gpus']:>8}{r['wall_s']:>9}{r['simulate_s']:>9}{r['peak_mib']:>10}"
              f"{r['cycles']:>9}")
    (RESULTS / "scale_growth.json").write_text(json.dumps({
        "machine": machine(), "policy": args.growth_policy, "runs": args.growth_runs, "rows": growth,
    }, indent=2) + "\n")


if __name__ == "__main__":
    main()
