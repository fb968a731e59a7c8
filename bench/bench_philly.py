"""Full Philly replay speed: simulated jobs per second, load included (median of N runs).

    python bench/bench_philly.py [--policy volcano-binpack --policy ...] [--runs 3]

Prints a table and writes bench/results/philly.json. Figures, never asserts.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from kant.config import load_policy
from kant.sim import simulate
from kant.traces import load_cluster, read_philly


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", action="append", default=None)
    ap.add_argument("--cluster", default="philly")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    policies = args.policy or ["volcano-binpack", "k8s-default", "fifo-strict"]
    rows = []
    for name in policies:
        walls, loads, sims = [], [], []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            jobs = read_philly()
            cluster = load_cluster(args.cluster)
            policy = load_policy(name)
            t1 = time.perf_counter()
            res = simulate(cluster, jobs, policy)
            t2 = time.perf_counter()
            loads.append(t1 - t0)
            sims.append(t2 - t1)
            walls.append(t2 - t0)
        wall = statistics.median(walls)
        rows.append(
            {
                "policy": name,
                "jobs": len(jobs),
                "events": res.events,
                "cycles": res.cycles,
                "load_s": round(statistics.median(loads), 3),
                "simulate_s": round(statistics.median(sims), 3),
                "wall_s": round(wall, 3),
                "jobs_per_s": round(len(jobs) / wall),
            }
        )
    print(f"Philly replay on cluster {args.cluster!r}, median of {args.runs} run(s), {platform.python_version()}")
    print(f"{'policy':<22}{'jobs':>8}{'cycles':>9}{'load s':>9}{'sim s':>9}{'wall s':>9}{'jobs/s':>9}")
    for r in rows:
        print(f"{r['policy']:<22}{r['jobs']:>8}{r['cycles']:>9}{r['load_s']:>9}{r['simulate_s']:>9}"
              f"{r['wall_s']:>9}{r['jobs_per_s']:>9}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "philly.json").write_text(json.dumps({"machine": platform.platform(), "runs": args.runs, "rows": rows},
                                                indent=2) + "\n")


if __name__ == "__main__":
    main()
