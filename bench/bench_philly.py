"""Full Philly replay speed: wall and CPU time of one replay, load included (median of N runs).

    python bench/bench_philly.py [--policy kant --policy volcano-binpack ...] [--runs 3]

One run = read the Philly trace (82,247 jobs), build the Philly-sized cluster, load the policy, and
replay the whole trace (``kant.sim.simulate``). The target (3 s wall, load included) is for the Kant
policy (``kant``: blocking allocate + EASY backfill + E-Binpack with soft topology); the other
policies are shown for comparison against the same target. CPU time (``time.process_time``) is
reported too: it is less sensitive to other load on the machine. Pin to one core with
``taskset -c 1 python bench/bench_philly.py``.

Prints a table (figure, target, ratio = figure / target; <= 1 meets it) and writes
bench/results/philly.json. Figures, never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from kant.config import load_policy
from kant.sim import simulate
from kant.traces import load_cluster, read_philly

TARGET_S = 3.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", action="append", default=None)
    ap.add_argument("--cluster", default="philly")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    policies = args.policy or ["kant", "kant-nobackfill", "volcano-binpack", "k8s-default", "fifo-strict",
                               "slurm-backfill"]
    rows = []
    for name in policies:
        walls, cpus, loads, sims = [], [], [], []
        for _ in range(args.runs):
            t0, c0 = time.perf_counter(), time.process_time()
            jobs = read_philly()
            cluster = load_cluster(args.cluster)
            policy = load_policy(name)
            t1 = time.perf_counter()
            res = simulate(cluster, jobs, policy)
            t2, c2 = time.perf_counter(), time.process_time()
            loads.append(t1 - t0)
            sims.append(t2 - t1)
            walls.append(t2 - t0)
            cpus.append(c2 - c0)
        wall = statistics.median(walls)
        rows.append({
            "policy": name, "jobs": len(jobs), "events": res.events, "cycles": res.cycles,
            "load_s": round(statistics.median(loads), 3), "simulate_s": round(statistics.median(sims), 3),
            "wall_s": round(wall, 3), "wall_all_s": [round(w, 3) for w in walls],
            "cpu_s": round(statistics.median(cpus), 3), "jobs_per_s": round(len(jobs) / wall),
            "ratio": round(wall / TARGET_S, 2),
        })
    print(f"Philly replay on cluster {args.cluster!r}, load included, median of {args.runs} run(s); "
          f"Python {platform.python_version()}, loadavg {os.getloadavg()[0]:.2f}")
    print(f"{'policy':<18}{'jobs':>7}{'cycles':>8}{'load s':>8}{'sim s':>8}{'cpu s':>8}{'wall s':>8}{'target':>8}"
          f"{'ratio':>7}")
    for r in rows:
        print(f"{r['policy']:<18}{r['jobs']:>7}{r['cycles']:>8}{r['load_s']:>8}{r['simulate_s']:>8}{r['cpu_s']:>8}"
              f"{r['wall_s']:>8}{TARGET_S:>8g}{r['ratio']:>7.2f}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "philly.json").write_text(json.dumps({
        "machine": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
        "loadavg": os.getloadavg(), "runs": args.runs, "target_s": TARGET_S, "rows": rows,
    }, indent=2) + "\n")


if __name__ == "__main__":
    main()
